"""The integer semantics of every layer kind, in vectorised numpy (DESIGN.md s.2).

These functions are the single definition the reference backend runs and the
RTL must match bit for bit. Tensors are NCHW, activations int8, accumulators
int64 (they fit int32 for every legal layer; int64 keeps numpy from wrapping).
"""

import numpy as np

from .requant import requantize

__all__ = ["pad_nchw", "conv_acc", "conv2d", "maxpool2d"]


def pad_nchw(x, pads, value):
    """Pad the spatial axes of an NCHW tensor.

    Parameters
    ----------
    x : numpy.ndarray
        Tensor of shape ``(N, C, H, W)``.
    pads : tuple of int
        ``(top, left, bottom, right)``, the ONNX order ``(y0, x0, y1, x1)``.
    value : int
        Fill value (the input zero point for convolution, -128 for max-pool).
    """
    top, left, bottom, right = (int(p) for p in pads)
    return np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)), constant_values=value)


def _windows(x, kh, kw, stride):
    """View of all ``kh x kw`` windows: shape ``(N, C, OH, OW, kh, kw)``."""
    sy, sx = stride
    win = np.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(2, 3))
    return win[:, :, ::sy, ::sx]


def conv_acc(x, w, bias, x_zero_point, stride=(1, 1), pads=(0, 0, 0, 0)):
    """Convolution accumulators ``acc[c] = sum((x - zx) * w[c]) + b[c]``.

    Padding uses the value ``zx``, so padded taps contribute nothing.

    Parameters
    ----------
    x : numpy.ndarray of int8, shape (N, Cin, H, W)
    w : numpy.ndarray of int8, shape (Cout, Cin, KH, KW)
    bias : numpy.ndarray of int32, shape (Cout,), or None
    x_zero_point : int
    stride : tuple of int
        ``(sy, sx)``.
    pads : tuple of int
        ``(top, left, bottom, right)``.

    Returns
    -------
    numpy.ndarray of int64, shape (N, Cout, OH, OW)
    """
    cout, cin, kh, kw = w.shape
    if x.shape[1] != cin:
        raise ValueError(f"input has {x.shape[1]} channels, weights expect {cin}")
    xs = pad_nchw(x.astype(np.int64) - int(x_zero_point), pads, 0)
    win = _windows(xs, kh, kw, stride)  # N, Cin, OH, OW, KH, KW
    acc = np.einsum("nchwij,ocij->nohw", win, w.astype(np.int64), optimize=True)
    if bias is not None:
        acc += np.asarray(bias, dtype=np.int64)[None, :, None, None]
    return acc


def conv2d(x, w, bias, x_zero_point, mult, shift, y_zero_point, lo=-128, hi=127,
           stride=(1, 1), pads=(0, 0, 0, 0)):
    """Quantized convolution: :func:`conv_acc` then per-channel requantization.

    ``mult`` and ``shift`` are per output channel (shape ``(Cout,)``), from
    :func:`fpgacnn.host.requant.requant_params`. Returns int8 NCHW.
    """
    acc = conv_acc(x, w, bias, x_zero_point, stride, pads)
    m = np.asarray(mult, dtype=np.int64)[None, :, None, None]
    s = np.asarray(shift, dtype=np.int64)[None, :, None, None]
    return requantize(acc, m, s, y_zero_point, lo, hi)


def maxpool2d(x, kernel=(2, 2), stride=(2, 2), pads=(0, 0, 0, 0)):
    """Max-pool on int8 directly; padded positions hold -128 (never the max)."""
    xp = pad_nchw(x, pads, -128)
    return _windows(xp, kernel[0], kernel[1], stride).max(axis=(4, 5)).astype(np.int8)
