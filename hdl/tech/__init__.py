"""fpgacnn.hdl.tech"""
