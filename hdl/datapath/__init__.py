"""fpgacnn.hdl.datapath"""
