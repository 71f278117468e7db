"""fpgacnn.hdl.link"""
