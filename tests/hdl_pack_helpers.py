"""Pack numpy lanes into the raw integers of Amaranth ``ArrayLayout`` signals and back."""

import numpy as np


def pack(values, width):
    """Little-endian two's complement packing of an integer array (flattened, element 0 lowest)."""
    mask = (1 << width) - 1
    raw = 0
    for i, v in enumerate(np.asarray(values).ravel()):
        raw |= (int(v) & mask) << (i * width)
    return raw


def unpack(raw, width, count, *, signed=True):
    """Inverse of :func:`pack`: ``count`` elements of ``width`` bits as int64."""
    out = np.empty(count, dtype=np.int64)
    for i in range(count):
        v = (raw >> (i * width)) & ((1 << width) - 1)
        out[i] = v - (1 << width) if signed and v >> (width - 1) else v
    return out


def wrap(x, width):
    """Two's complement wrap-around of int64 values to ``width`` bits."""
    x = np.asarray(x, dtype=np.int64)
    return ((x + (1 << (width - 1))) % (1 << width)) - (1 << (width - 1))
