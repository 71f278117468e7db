"""The integer semantics of every layer kind, in vectorised numpy (DESIGN.md s.2).

These functions are the single definition the reference backend runs and the
RTL must match bit for bit. Tensors are NCHW, activations int8, accumulators
int64 (they fit int32 for every legal layer; int64 keeps numpy from wrapping).
The multiply-accumulate sums are computed in float64 where that is exact
(every partial sum an integer below 2**53), which lets numpy use BLAS.
"""

import numpy as np

from .requant import requant_params, requantize

__all__ = ["pad_nchw", "conv_acc", "conv2d", "maxpool2d", "rescale", "average_params",
           "avgpool2d", "avgpool_counts", "global_avgpool", "global_maxpool", "gemm", "add", "add_params", "concat",
           "resize_nearest", "sigmoid_table", "softmax"]


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


def _exact_dtype(taps):
    """float64 when every sum of ``taps`` products of (x - zx) (at most 255 in
    magnitude) and an int8 weight stays below 2**53, where float64 holds each
    integer exactly, so the sums are exact and run on BLAS; int64 otherwise."""
    return np.float64 if taps * 255 * 128 < 2**53 else np.int64


def _windows(x, kh, kw, stride, dilation=(1, 1)):
    """View of all ``kh x kw`` windows (taps ``dilation`` apart): shape ``(N, C, OH, OW, kh, kw)``."""
    sy, sx = stride
    dy, dx = dilation
    win = np.lib.stride_tricks.sliding_window_view(x, ((kh - 1) * dy + 1, (kw - 1) * dx + 1),
                                                   axis=(2, 3))
    return win[:, :, ::sy, ::sx, ::dy, ::dx]


def conv_acc(x, w, bias, x_zero_point, stride=(1, 1), pads=(0, 0, 0, 0), dilation=(1, 1),
             group=1):
    """Convolution accumulators ``acc[c] = sum((x - zx) * w[c]) + b[c]``.

    Padding uses the value ``zx``, so padded taps contribute nothing. With
    ``group = g`` the input channels are split into ``g`` consecutive groups and
    output channel ``c`` reads only group ``c // (Cout / g)`` (depthwise:
    ``g = Cin``); ``dilation`` spaces the kernel taps.

    Parameters
    ----------
    x : numpy.ndarray of int8, shape (N, Cin, H, W)
    w : numpy.ndarray of int8, shape (Cout, Cin / group, KH, KW)
    bias : numpy.ndarray of int32, shape (Cout,), or None
    x_zero_point : int
    stride : tuple of int
        ``(sy, sx)``.
    pads : tuple of int
        ``(top, left, bottom, right)``.
    dilation : tuple of int
        ``(dy, dx)``.
    group : int

    Returns
    -------
    numpy.ndarray of int64, shape (N, Cout, OH, OW)
    """
    cout, cin_g, kh, kw = w.shape
    if x.shape[1] != cin_g * group or cout % group:
        raise ValueError(f"input has {x.shape[1]} channels, weights expect {cin_g * group}")
    dtype = _exact_dtype(cin_g * kh * kw)
    xs = pad_nchw(x.astype(dtype) - int(x_zero_point), pads, 0)
    win = _windows(xs, kh, kw, stride, dilation)  # N, Cin, OH, OW, KH, KW
    if group == 1:
        acc = np.einsum("nchwij,ocij->nohw", win, w.astype(dtype), optimize=True)
    else:
        n, _, oh, ow = win.shape[:4]
        wg = w.astype(dtype).reshape(group, cout // group, cin_g, kh, kw)
        if cin_g == 1 and cout == group:  # depthwise: one tap product per channel
            acc = np.einsum("nchwij,cij->nchw", win, wg[:, 0, 0], optimize=True)
        else:
            acc = np.einsum("ngchwij,gocij->ngohw", win.reshape(n, group, cin_g, oh, ow, kh, kw),
                            wg, optimize=True).reshape(n, cout, oh, ow)
    acc = acc.astype(np.int64)
    if bias is not None:
        acc += np.asarray(bias, dtype=np.int64)[None, :, None, None]
    return acc


def conv2d(x, w, bias, x_zero_point, mult, shift, y_zero_point, lo=-128, hi=127,
           stride=(1, 1), pads=(0, 0, 0, 0), dilation=(1, 1), group=1):
    """Quantized convolution: :func:`conv_acc` then per-channel requantization.

    ``mult`` and ``shift`` are per output channel (shape ``(Cout,)``), from
    :func:`fpgacnn.host.requant.requant_params`. Returns int8 NCHW.
    """
    acc = conv_acc(x, w, bias, x_zero_point, stride, pads, dilation, group)
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


def average_params(scale, count):
    """The requantization of an average of ``count`` taps: ``requant_params(M / count)``
    (``M = x_scale / y_scale``); ``count`` an int or an array of them."""
    return requant_params(float(scale) / np.asarray(count, dtype=np.float64))


def avgpool2d(x, x_zero_point, scale, y_zero_point, kernel, stride=None, pads=(0, 0, 0, 0),
              count_include_pad=False, lo=-128, hi=127, extra=(0, 0)):
    """Average pooling: ``y = clamp(round(sum(x - zx) * M / count) + zy, lo, hi)``.

    The window sum is exact (``x - zx`` summed in int64); padded taps hold
    ``zx`` and contribute 0 to it. ``count`` is ``KH*KW`` when
    ``count_include_pad`` else the number of taps inside the image, so edge
    windows get their own multiplier. ``extra`` (bottom, right) are the taps a
    ``ceil_mode`` window hangs over the padded input: they contribute 0 and
    are never counted. ``M = x_scale / y_scale`` (``scale``);
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
    top, left, bottom, right = pads
    full = (top, left, bottom + extra[0], right + extra[1])
    xs = pad_nchw(x.astype(np.int64) - int(x_zero_point), full, 0)
    acc = _windows(xs, kh, kw, stride).sum(axis=(4, 5))  # N, C, OH, OW
    count = avgpool_counts(x.shape[2:], kernel, stride, pads, count_include_pad, extra)
    mult, shift = average_params(scale, count)
    return requantize(acc, mult[None, None], shift[None, None], y_zero_point, lo, hi,
                      ties_to_even=True)


def avgpool_counts(size, kernel, stride, pads, count_include_pad=False, extra=(0, 0)):
    """The divisor of each window of :func:`avgpool2d` over an input of ``size = (H,
    W)``: an ``(OH, OW)`` int64 array (the taps inside the explicitly padded input with
    ``count_include_pad``, else inside the image; the ``ceil_mode`` overhang ``extra``
    never)."""
    kh, kw = kernel
    top, left, bottom, right = pads
    ones = np.ones((1, 1) + tuple(size), dtype=np.int64)
    if count_include_pad:  # the taps inside the explicitly padded input
        inside = pad_nchw(pad_nchw(ones, pads, 1), (0, 0) + tuple(extra), 0)
    else:
        inside = pad_nchw(ones, (top, left, bottom + extra[0], right + extra[1]), 0)
    return _windows(inside, kh, kw, tuple(stride)).sum(axis=(4, 5))[0, 0]


def global_avgpool(x, x_zero_point, scale, y_zero_point, lo=-128, hi=127):
    """Global average pooling to ``(N, C, 1, 1)``:
    ``y = clamp(round(sum_hw(x - zx) * M / (H*W)) + zy, lo, hi)``, ``M = x_scale / y_scale``,
    halves rounded to even as in :func:`avgpool2d`."""
    n, c, h, w = x.shape
    acc = (x.astype(np.int64) - int(x_zero_point)).sum(axis=(2, 3), keepdims=True)
    mult, shift = average_params(scale, h * w)
    return requantize(acc, mult, shift, y_zero_point, lo, hi, ties_to_even=True)


def global_maxpool(x):
    """Maximum over H and W on int8: ``(N, C, H, W) -> (N, C, 1, 1)``."""
    return x.max(axis=(2, 3), keepdims=True).astype(np.int8)


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
    dtype = _exact_dtype(w.shape[1])
    acc = ((x.astype(dtype) - int(x_zero_point)) @ w.astype(dtype).T).astype(np.int64)
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


def concat(xs, x_zero_points, mults, shifts, y_zero_point, lo=-128, hi=127, axis=1):
    """Concatenate int8 tensors along ``axis`` (the channel axis), each moved onto
    the output quantization with :func:`rescale` (``M = x_scale[i] / y_scale``).
    An input whose ``mult`` is None already has the output's quantization and is
    only clamped."""
    parts = []
    for x, zx, m, s in zip(xs, x_zero_points, mults, shifts):
        if m is None:
            parts.append(np.clip(x, lo, hi).astype(np.int8))
        else:
            parts.append(rescale(x, zx, m, s, y_zero_point, lo, hi))
    return np.concatenate(parts, axis=axis)


def resize_nearest(x, rows, cols):
    """Nearest-neighbour resize of NCHW: ``y[..., i, j] = x[..., rows[i], cols[j]]``.

    ``rows`` and ``cols`` are the source index of every output row and column,
    worked out once from the ONNX coordinate transformation and rounding mode.
    """
    return x[:, :, np.asarray(rows)[:, None], np.asarray(cols)[None, :]]


def sigmoid_table(x_scale, x_zero_point, y_scale, y_zero_point, lo=-128, hi=127):
    """The int8 -> int8 table of a quantized sigmoid, indexed by ``q + 128``:
    ``clamp(rint(sigmoid((q - zx) * x_scale) / y_scale) + zy, lo, hi)``, worked
    out in float64 (ties to even, as onnxruntime's QuantizeLinear)."""
    q = np.arange(-128, 128, dtype=np.float64)
    y = 1.0 / (1.0 + np.exp(-(q - int(x_zero_point)) * float(x_scale)))
    return np.clip(np.rint(y / float(y_scale)) + int(y_zero_point), lo, hi).astype(np.int8)


def softmax(x, axis, x_scale, x_zero_point, y_scale, y_zero_point, lo=-128, hi=127):
    """Quantized softmax along ``axis``: with ``d = max(x) - x`` (an integer in
    0..255), ``e = exp(-d * x_scale)`` (a 256-entry table) and
    ``y = clamp(rint(e / sum(e) / y_scale) + zy, lo, hi)`` in float64, ties to
    even. The zero point cancels; subtracting the maximum keeps ``e <= 1``."""
    x = np.asarray(x, dtype=np.int64)
    d = x.max(axis=axis, keepdims=True) - x
    table = np.exp(-np.arange(256, dtype=np.float64) * float(x_scale))
    e = table[d]
    p = e / e.sum(axis=axis, keepdims=True)
    return np.clip(np.rint(p / float(y_scale)) + int(y_zero_point), lo, hi).astype(np.int8)
