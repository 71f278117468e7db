"""The arena's activation layout, defined once (docs/program.md, "Activation layout").

A tensor ``(C, H, W)`` is stored per image as NHWC with its channels padded
to :func:`pixel_bytes` ``= ceil(C / L) * L`` bytes, ``L = lcm(pin, pout)``:
a pixel is a whole number of the engine's input words and of its output
words, so one layer's output stream is the next layer's input with no
repacking. The program image (:mod:`fpgacnn.host.program_image`) places
tensors so, and the compiler's NHWC flatten
(:mod:`fpgacnn.host.nhwc_flatten`) orders a Gemm's weights so.

A tensor that the host writes and only the engine's convolutions read (the
network's input and its folds, where nothing else reads them) needs whole
input words only: :func:`input_pixel_bytes` ``= ceil(C / pin) * pin``. Where
``pout`` does not divide ``pin`` (the ZCU104's engine: pin 8, pout 16) that
keeps its pixels' words side by side, so the reader takes them a beat a
cycle instead of one word of every ``L / pin``.
"""

import math

from .config import require_config

__all__ = ["channel_lanes", "input_pixel_bytes", "pixel_bytes"]


def channel_lanes(config):
    """``L = lcm(pin, pout)``: the arena pads a pixel's channels to a multiple of it."""
    require_config(config)
    return math.lcm(config.pin, config.pout)


def pixel_bytes(config, channels):
    """Bytes of one pixel of ``channels`` channels in the arena (``Cp``)."""
    lanes = channel_lanes(config)
    return -(-int(channels) // lanes) * lanes


def input_pixel_bytes(config, channels):
    """Bytes of one pixel of ``channels`` channels in a tensor the host writes and
    only the engine's convolutions read: ``ceil(C / pin) * pin``, whole input
    words (no output word of ``pout`` lanes is ever written into it)."""
    require_config(config)
    return -(-int(channels) // config.pin) * config.pin
