"""fpgacnn.hdl.program"""
