"""The arena's activation layout, defined once (docs/program.md, "Activation layout").

A tensor ``(C, H, W)`` is stored per image as NHWC with its channels padded
to :func:`pixel_bytes` ``= ceil(C / L) * L`` bytes, ``L = lcm(pin, pout)``:
a pixel is a whole number of the engine's input words and of its output
words, so one layer's output stream is the next layer's input with no
repacking. The program image (:mod:`fpgacnn.host.program_image`) places
tensors so, and the compiler's NHWC flatten
(:mod:`fpgacnn.host.nhwc_flatten`) orders a Gemm's weights so.
"""

import math

from .config import require_config

__all__ = ["channel_lanes", "pixel_bytes"]


def channel_lanes(config):
    """``L = lcm(pin, pout)``: the arena pads a pixel's channels to a multiple of it."""
    require_config(config)
    return math.lcm(config.pin, config.pout)


def pixel_bytes(config, channels):
    """Bytes of one pixel of ``channels`` channels in the arena (``Cp``)."""
    lanes = channel_lanes(config)
    return -(-int(channels) // lanes) * lanes
