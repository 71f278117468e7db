"""The integer semantics of every layer kind, in vectorised numpy (DESIGN.md s.2).

These functions are the single definition the reference backend runs and the
RTL must match bit for bit. Tensors are NCHW, activations int8, accumulators
int64 (they fit int32 for every legal layer; int64 keeps numpy from wrapping).
"""

import numpy as np

from .requant import requant_params, requantize

__all__ = ["pad_nchw", "conv_acc", "conv2d", "maxpool2d", "rescale", "avgpool2d",
           "global_avgpool", "gemm", "add", "add_params"]


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


def rescale(x, x_zero_point, mult, shift, y_zero_point, lo=-128, hi=127):
    """Move int8 values to another scale: ``clamp(round((x - zx) * M) + zy, lo, hi)``.

    Used after max-pool (and by a Flatten) when the output is quantized
    differently from the input; max commutes with this monotone map, so
    ``max`` then ``rescale`` equals ``rescale`` then ``max``.
    """
    acc = np.asarray(x, dtype=np.int64) - int(x_zero_point)
    return requantize(acc, mult, shift, y_zero_point, lo, hi)


def avgpool2d(x, x_zero_point, scale, y_zero_point, kernel, stride=None, pads=(0, 0, 0, 0),
              count_include_pad=False, lo=-128, hi=127):
    """Average pooling: ``y = clamp(round(sum(x - zx) * M / count) + zy, lo, hi)``.

    The window sum is exact (``x - zx`` summed in int64); padded taps hold
    ``zx`` and contribute 0 to it. ``count`` is ``KH*KW`` when
    ``count_include_pad`` else the number of taps inside the image, so edge
    windows get their own multiplier. ``M = x_scale / y_scale`` (``scale``);
    each distinct ``M / count`` is split by :func:`~fpgacnn.host.requant.requant_params`.
    Exact halves round to even, like onnxruntime: with equal input and output
    scales (onnxruntime's QDQ AveragePool) ``sum / 4`` is a half one time in four.

    Parameters
    ----------
    x : numpy.ndarray of int8, shape (N, C, H, W)
    kernel, stride : tuple of int
        ``(kh, kw)``, ``(sy, sx)``; stride defaults to the kernel.
    pads : tuple of int
        ``(top, left, bottom, right)``.
    """
    kh, kw = kernel
    stride = tuple(stride) if stride is not None else (kh, kw)
    xs = pad_nchw(x.astype(np.int64) - int(x_zero_point), pads, 0)
    acc = _windows(xs, kh, kw, stride).sum(axis=(4, 5))  # N, C, OH, OW
    if count_include_pad:
        count = np.full(acc.shape[2:], kh * kw, dtype=np.int64)
    else:
        inside = pad_nchw(np.ones((1, 1) + x.shape[2:], dtype=np.int64), pads, 0)
        count = _windows(inside, kh, kw, stride).sum(axis=(4, 5))[0, 0]
    mult, shift = requant_params(float(scale) / count)
    return requantize(acc, mult[None, None], shift[None, None], y_zero_point, lo, hi,
                      ties_to_even=True)


def global_avgpool(x, x_zero_point, scale, y_zero_point, lo=-128, hi=127):
    """Global average pooling to ``(N, C, 1, 1)``:
    ``y = clamp(round(sum_hw(x - zx) * M / (H*W)) + zy, lo, hi)``, ``M = x_scale / y_scale``,
    halves rounded to even as in :func:`avgpool2d`."""
    n, c, h, w = x.shape
    acc = (x.astype(np.int64) - int(x_zero_point)).sum(axis=(2, 3), keepdims=True)
    mult, shift = requant_params(float(scale) / (h * w))
    return requantize(acc, mult, shift, y_zero_point, lo, hi, ties_to_even=True)


def gemm(x, w, bias, x_zero_point, mult, shift, y_zero_point, lo=-128, hi=127):
    """Fully connected layer, the 1x1 convolution of a 1x1 image:
    ``acc[n, c] = sum_k (x[n, k] - zx) * w[c, k] + b[c]``, requantized per output
    channel exactly like :func:`conv2d`.

    Parameters
    ----------
    x : numpy.ndarray of int8, shape (N, Cin)
    w : numpy.ndarray of int8, shape (Cout, Cin)
    bias : numpy.ndarray of int32, shape (Cout,), or None
    """
    if x.shape[1] != w.shape[1]:
        raise ValueError(f"input has {x.shape[1]} features, weights expect {w.shape[1]}")
    acc = (x.astype(np.int64) - int(x_zero_point)) @ w.astype(np.int64).T
    if bias is not None:
        acc += np.asarray(bias, dtype=np.int64)[None, :]
    return requantize(acc, np.asarray(mult)[None, :], np.asarray(shift)[None, :],
                      y_zero_point, lo, hi)


def add_params(a_scale, b_scale):
    """Integer multipliers of a residual Add: ``(ma, mb, shift)`` with
    ``ma / 2**shift ~= a_scale`` and ``mb / 2**shift ~= b_scale`` (both already
    divided by the output scale). The shift is that of the larger scale, whose
    multiplier gets the full :data:`~fpgacnn.host.requant.MULT_BITS` bits; the
    other shares the shift (a shared shift lets one adder sum both products)."""
    big = max(float(a_scale), float(b_scale))
    _, shift = requant_params(big)
    shift = int(shift)
    ma = int(np.round(float(a_scale) * 2.0**shift))
    mb = int(np.round(float(b_scale) * 2.0**shift))
    return ma, mb, shift


def add(a, a_zero_point, b, b_zero_point, ma, mb, shift, y_zero_point, lo=-128, hi=127):
    """Residual Add of two int8 tensors on different scales:
    ``y = clamp(round(((a - za) * ma + (b - zb) * mb) / 2**shift) + zy, lo, hi)``.

    ``(ma, mb, shift)`` from :func:`add_params` (``a_scale / y_scale``,
    ``b_scale / y_scale``). ``b`` broadcasts against ``a`` (a constant operand).
    """
    acc = ((np.asarray(a, dtype=np.int64) - int(a_zero_point)) * int(ma)
           + (np.asarray(b, dtype=np.int64) - int(b_zero_point)) * int(mb))
    return requantize(acc, 1, shift, y_zero_point, lo, hi)
