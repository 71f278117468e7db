"""fpgacnn.sim"""
