"""fpgacnn.hdl"""
