"""fpgacnn.core"""
