"""fpgacnn.hdl.bus"""
