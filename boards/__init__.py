"""fpgacnn.boards"""
