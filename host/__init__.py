"""fpgacnn.host"""
