"""The quantized IR: one class per layer kind (DESIGN.md sections 2 and 4).

Each layer holds its parameters, its per-image input and output shapes (CHW,
or ``(C,)`` for flat tensors), its quantization (int8 domain: uint8 models are
already shifted by -128), its MAC count per image and its integer semantics
:meth:`Layer.evaluate`, which calls :mod:`fpgacnn.host.integer_ops`.

Layers are wired by tensor name: ``inputs`` names the int8 tensors a layer
reads, ``output`` the one it writes (see :class:`fpgacnn.host.model.QuantizedModel`).
A fused Relu or Clip is the clamp ``(lo, hi)`` on the layer's int8 output.

:class:`Conv` is the dense convolution (group 1, no dilation) that the engine
runs; grouped, depthwise and dilated convolutions are the separate kinds
:class:`GroupedConv` and :class:`DilatedConv` (host work), so that
``isinstance(layer, Conv)`` never catches them.

Example::

    conv = model.layers[0]
    if isinstance(conv, Conv):
        conv.weight, conv.bias, conv.mult, conv.shift, conv.lo, conv.hi
"""

import numpy as np

from . import integer_ops
from .requant import requant_params

__all__ = ["Layer", "Conv", "GroupedConv", "DilatedConv", "Gemm", "MaxPool", "AveragePool",
           "GlobalAveragePool", "GlobalMaxPool", "Add", "Concat", "Resize", "Sigmoid", "Softmax",
           "Reshape", "Flatten", "LAYER_KINDS"]


def _pair(v, what):
    t = tuple(int(i) for i in (v if np.ndim(v) else (v, v)))
    if len(t) != 2 or min(t) < 1:
        raise ValueError(f"{what} must be two positive integers, not {v!r}")
    return t


def _pads(v):
    t = tuple(int(i) for i in v)
    if len(t) != 4 or min(t) < 0:
        raise ValueError(f"pads must be four non-negative integers (top, left, bottom, right), not {v!r}")
    return t


def _zp(v, what):
    v = int(v)
    if not -128 <= v <= 127:
        raise ValueError(f"{what} {v} is outside int8")
    return v


def _scale(v, what):
    v = float(v)
    if not np.isfinite(v) or v <= 0:
        raise ValueError(f"{what} must be finite and positive, not {v!r}")
    return v


def _out_size(size, k, s, p0, p1):
    return (size + p0 + p1 - k) // s + 1


class Layer:
    """Base of every layer kind.

    Members
    -------
    op : str
        The layer kind (``"Conv"``, ``"Gemm"``, ...), for reports.
    name : str
        The ONNX node name it came from.
    inputs : tuple of str
        Names of the int8 tensors it reads.
    output : str
        Name of the int8 tensor it writes.
    input_shape, output_shape : tuple of int
        Per image (no batch axis).
    y_scale : float
        Output scale. ``y_zero_point`` the output zero point (int8).
    lo, hi : int
        Output clamp (a fused Relu raises ``lo`` to ``y_zero_point``).
    macs : int
        Multiply-accumulates per image (0 for layers without multipliers).
    """

    op = "Layer"

    def __init__(self, name, inputs, output, input_shape, y_scale, y_zero_point, lo=-128, hi=127):
        self.name = str(name)
        self.inputs = tuple(str(i) for i in inputs)
        self.output = str(output)
        self.input_shape = tuple(int(d) for d in input_shape)
        if min(self.input_shape, default=1) < 1:
            raise ValueError(f"layer {self.name!r}: input shape {self.input_shape} has an empty axis")
        self.y_scale = _scale(y_scale, "output scale")
        self.y_zero_point = _zp(y_zero_point, "output zero point")
        self.lo, self.hi = _zp(lo, "clamp low"), _zp(hi, "clamp high")
        if self.lo > self.hi:
            raise ValueError(f"layer {self.name!r}: empty clamp range [{self.lo}, {self.hi}]")

    @property
    def macs(self):
        return 0

    def evaluate(self, *xs):
        """Integer semantics: int8 inputs with a leading batch axis -> int8 output."""
        raise NotImplementedError

    def __repr__(self):
        return f"<{type(self).__name__} {self.name!r} {self.input_shape}->{self.output_shape}>"


class _Requantized(Layer):
    """A layer with int8 weights, int32 bias and per-channel requantization."""

    def __init__(self, name, inputs, output, input_shape, weight, bias, x_scale, x_zero_point,
                 w_scale, y_scale, y_zero_point, lo=-128, hi=127):
        super().__init__(name, inputs, output, input_shape, y_scale, y_zero_point, lo, hi)
        self.weight = np.asarray(weight)
        if self.weight.dtype != np.int8:
            raise TypeError(f"layer {self.name!r}: weights must be int8, not {self.weight.dtype}")
        cout = self.weight.shape[0]
        self.bias = (np.zeros(cout, np.int32) if bias is None
                     else np.asarray(bias).astype(np.int32).reshape(cout))
        self.x_scale = _scale(x_scale, "input scale")
        self.x_zero_point = _zp(x_zero_point, "input zero point")
        self.w_scale = np.broadcast_to(np.asarray(w_scale, dtype=np.float64), (cout,)).copy()
        #: Per-channel real multiplier ``x_scale * w_scale[c] / y_scale``.
        self.scale = self.x_scale * self.w_scale / self.y_scale
        self.mult, self.shift = requant_params(self.scale)

    def folded_bias(self):
        """``b[c] - zx * sum(w[c])`` (int64): the bias when the MACs multiply raw ``x``."""
        wsum = self.weight.reshape(self.weight.shape[0], -1).astype(np.int64).sum(axis=1)
        return self.bias.astype(np.int64) - self.x_zero_point * wsum


class _Convolution(_Requantized):
    """A 2-D convolution of any group and dilation; the kinds below fix which."""

    def __init__(self, name, inputs, output, input_shape, weight, bias, x_scale, x_zero_point,
                 w_scale, y_scale, y_zero_point, stride=(1, 1), pads=(0, 0, 0, 0), lo=-128,
                 hi=127, group=1, dilation=(1, 1)):
        super().__init__(name, inputs, output, input_shape, weight, bias, x_scale, x_zero_point,
                         w_scale, y_scale, y_zero_point, lo, hi)
        if self.weight.ndim != 4 or len(self.input_shape) != 3:
            raise ValueError(f"layer {self.name!r}: {self.op} needs 4-D weights and a CHW input")
        cout, cin_g, kh, kw = self.weight.shape
        self.group = int(group)
        if self.group < 1 or cout % self.group:
            raise ValueError(f"layer {self.name!r}: {cout} output channels do not split into "
                             f"{self.group} groups")
        if cin_g * self.group != self.input_shape[0]:
            raise ValueError(f"layer {self.name!r}: weights expect {cin_g * self.group} input "
                             f"channels, input has {self.input_shape[0]}")
        self.stride = _pair(stride, "stride")
        self.dilation = _pair(dilation, "dilation")
        self.pads = _pads(pads)
        self.kernel = (kh, kw)
        _, h, w = self.input_shape
        dy, dx = self.dilation
        oh = _out_size(h, (kh - 1) * dy + 1, self.stride[0], self.pads[0], self.pads[2])
        ow = _out_size(w, (kw - 1) * dx + 1, self.stride[1], self.pads[1], self.pads[3])
        if oh < 1 or ow < 1:
            raise ValueError(f"layer {self.name!r}: kernel {kh}x{kw} does not fit the padded input")
        self.output_shape = (cout, oh, ow)

    @property
    def macs(self):
        cout, cin_g, kh, kw = self.weight.shape
        return cout * self.output_shape[1] * self.output_shape[2] * cin_g * kh * kw

    def evaluate(self, x):
        return integer_ops.conv2d(x, self.weight, self.bias, self.x_zero_point, self.mult,
                                  self.shift, self.y_zero_point, self.lo, self.hi,
                                  self.stride, self.pads, self.dilation, self.group)


class Conv(_Convolution):
    """2-D convolution, group 1, no dilation (DESIGN.md s.2): what the engine runs.

    Parameters
    ----------
    weight : numpy.ndarray of int8, shape (Cout, Cin, KH, KW)
    bias : numpy.ndarray of int32, shape (Cout,), or None
        At scale ``x_scale * w_scale[c]``, not folded.
    stride : tuple of int
        ``(sy, sx)``.
    pads : tuple of int
        ``(top, left, bottom, right)``; padded taps hold ``x_zero_point``.

    Members
    -------
    mult, shift : numpy.ndarray of int64, shape (Cout,)
        :func:`~fpgacnn.host.requant.requant_params` of ``x_scale*w_scale[c]/y_scale``.
    """

    op = "Conv"

    def __init__(self, name, inputs, output, input_shape, weight, bias, x_scale, x_zero_point,
                 w_scale, y_scale, y_zero_point, stride=(1, 1), pads=(0, 0, 0, 0), lo=-128, hi=127):
        super().__init__(name, inputs, output, input_shape, weight, bias, x_scale, x_zero_point,
                         w_scale, y_scale, y_zero_point, stride, pads, lo, hi)


class GroupedConv(_Convolution):
    """Grouped convolution (``group > 1``; depthwise when ``group`` equals the
    input channels), possibly dilated: the semantics of :class:`Conv` within
    each group. Not a :class:`Conv`, so that nothing sends it to the dense
    datapath as it is: the compiler runs it as block-diagonal dense views
    (:mod:`fpgacnn.host.conv_views`).

    Parameters
    ----------
    weight : numpy.ndarray of int8, shape (Cout, Cin / group, KH, KW)
    group : int
    dilation : tuple of int
        ``(dy, dx)``.
    """

    op = "GroupedConv"

    def __init__(self, name, inputs, output, input_shape, weight, bias, x_scale, x_zero_point,
                 w_scale, y_scale, y_zero_point, stride=(1, 1), pads=(0, 0, 0, 0), lo=-128,
                 hi=127, group=2, dilation=(1, 1)):
        super().__init__(name, inputs, output, input_shape, weight, bias, x_scale, x_zero_point,
                         w_scale, y_scale, y_zero_point, stride, pads, lo, hi, group, dilation)
        if self.group < 2:
            raise ValueError(f"layer {self.name!r}: a GroupedConv has group >= 2 (use Conv)")

    @property
    def depthwise(self):
        """One input channel per group."""
        return self.weight.shape[1] == 1


class DilatedConv(_Convolution):
    """Dilated convolution (group 1, ``dilation`` above 1): taps ``dilation``
    apart, otherwise :class:`Conv`. Not a :class:`Conv`: the compiler runs it as a
    dense view (zeros between the taps, or the taps folded into channels)."""

    op = "DilatedConv"

    def __init__(self, name, inputs, output, input_shape, weight, bias, x_scale, x_zero_point,
                 w_scale, y_scale, y_zero_point, stride=(1, 1), pads=(0, 0, 0, 0), lo=-128,
                 hi=127, dilation=(2, 2)):
        super().__init__(name, inputs, output, input_shape, weight, bias, x_scale, x_zero_point,
                         w_scale, y_scale, y_zero_point, stride, pads, lo, hi, 1, dilation)
        if self.dilation == (1, 1):
            raise ValueError(f"layer {self.name!r}: a DilatedConv has a dilation above 1 (use Conv)")


class Gemm(_Requantized):
    """Fully connected layer (ONNX Gemm, QGemm, MatMul, QLinearMatMul): a 1x1
    convolution on a 1x1 image.

    Parameters
    ----------
    weight : numpy.ndarray of int8, shape (Cout, Cin)
    bias : numpy.ndarray of int32, shape (Cout,), or None
    """

    op = "Gemm"

    def __init__(self, name, inputs, output, input_shape, weight, bias, x_scale, x_zero_point,
                 w_scale, y_scale, y_zero_point, lo=-128, hi=127):
        super().__init__(name, inputs, output, input_shape, weight, bias, x_scale, x_zero_point,
                         w_scale, y_scale, y_zero_point, lo, hi)
        if self.weight.ndim != 2 or self.input_shape != (self.weight.shape[1],):
            raise ValueError(f"layer {self.name!r}: Gemm weights {self.weight.shape} do not fit "
                             f"input {self.input_shape}")
        self.output_shape = (self.weight.shape[0],)

    @property
    def macs(self):
        return int(self.weight.size)

    def evaluate(self, x):
        return integer_ops.gemm(x, self.weight, self.bias, self.x_zero_point, self.mult,
                                self.shift, self.y_zero_point, self.lo, self.hi)


class _Pool(Layer):
    def __init__(self, name, inputs, output, input_shape, kernel, stride, pads, x_scale,
                 x_zero_point, y_scale, y_zero_point, lo, hi, ceil_mode=False):
        super().__init__(name, inputs, output, input_shape, y_scale, y_zero_point, lo, hi)
        if len(self.input_shape) != 3:
            raise ValueError(f"layer {self.name!r}: {self.op} needs a CHW input")
        self.kernel = _pair(kernel, "kernel")
        self.stride = _pair(stride if stride is not None else self.kernel, "stride")
        self.pads = _pads(pads)
        if max(self.pads[0], self.pads[2]) >= self.kernel[0] or \
                max(self.pads[1], self.pads[3]) >= self.kernel[1]:
            raise ValueError(f"layer {self.name!r}: pads {self.pads} must be smaller than the kernel")
        self.x_scale = _scale(x_scale, "input scale")
        self.x_zero_point = _zp(x_zero_point, "input zero point")
        self.ceil_mode = bool(ceil_mode)
        c, h, w = self.input_shape
        (oh, eb), (ow, er) = (
            _pool_size(size, k, s, p0, p1, self.ceil_mode)
            for size, k, s, p0, p1 in ((h, self.kernel[0], self.stride[0], self.pads[0], self.pads[2]),
                                       (w, self.kernel[1], self.stride[1], self.pads[1], self.pads[3])))
        if oh < 1 or ow < 1:
            raise ValueError(f"layer {self.name!r}: kernel {self.kernel} does not fit the input")
        #: ``(bottom, right)`` taps a ``ceil_mode`` window hangs over the padded input.
        self.extra = (eb, er)
        self.output_shape = (c, oh, ow)


def _pool_size(size, k, s, p0, p1, ceil_mode):
    """Output size and ``ceil_mode`` overhang of a pool along one axis (ONNX,
    onnxruntime and PyTorch: the last window must start inside the input or
    its leading padding)."""
    span = size + p0 + p1 - k
    if not ceil_mode or span < 0:
        return span // s + 1, 0
    out = -(-span // s) + 1
    if (out - 1) * s >= size + p0:
        out -= 1
    return out, max(0, (out - 1) * s + k - (size + p0 + p1))


class MaxPool(_Pool):
    """Max-pool on int8 (padding never wins). When the output is quantized
    differently from the input (not the case for onnxruntime's quantizer) or
    clamped, the maximum is then moved with :func:`~fpgacnn.host.integer_ops.rescale`.

    With ``ceil_mode`` the overhang of the last windows is more padding
    (it never wins either): :attr:`pads` includes it, ``ceil_mode`` stays set
    for the record.
    """

    op = "MaxPool"

    def __init__(self, name, inputs, output, input_shape, kernel, stride=None, pads=(0, 0, 0, 0),
                 x_scale=1.0, x_zero_point=0, y_scale=None, y_zero_point=None, lo=-128, hi=127,
                 ceil_mode=False):
        y_scale = x_scale if y_scale is None else y_scale
        y_zero_point = x_zero_point if y_zero_point is None else y_zero_point
        super().__init__(name, inputs, output, input_shape, kernel, stride, pads, x_scale,
                         x_zero_point, y_scale, y_zero_point, lo, hi, ceil_mode)
        if self.extra != (0, 0):
            t, left, b, r = self.pads
            self.pads = (t, left, b + self.extra[0], r + self.extra[1])
            self.extra = (0, 0)
        self.identity_scale = (self.x_scale == self.y_scale and self.x_zero_point == self.y_zero_point)
        if not self.identity_scale:
            self.mult, self.shift = requant_params(self.x_scale / self.y_scale)

    def evaluate(self, x):
        y = integer_ops.maxpool2d(x, self.kernel, self.stride, self.pads)
        if self.identity_scale:
            return np.clip(y, self.lo, self.hi).astype(np.int8)
        return integer_ops.rescale(y, self.x_zero_point, self.mult, self.shift,
                                   self.y_zero_point, self.lo, self.hi)


class AveragePool(_Pool):
    """Average pool; see :func:`~fpgacnn.host.integer_ops.avgpool2d`. With
    ``ceil_mode`` the overhang :attr:`extra` of the last windows is never counted."""

    op = "AveragePool"

    def __init__(self, name, inputs, output, input_shape, kernel, stride=None, pads=(0, 0, 0, 0),
                 count_include_pad=False, x_scale=1.0, x_zero_point=0, y_scale=1.0,
                 y_zero_point=0, lo=-128, hi=127, ceil_mode=False):
        super().__init__(name, inputs, output, input_shape, kernel, stride, pads, x_scale,
                         x_zero_point, y_scale, y_zero_point, lo, hi, ceil_mode)
        self.count_include_pad = bool(count_include_pad)

    @property
    def macs(self):
        # one accumulation per tap, as on the engine's adder trees
        c, oh, ow = self.output_shape
        return c * oh * ow * self.kernel[0] * self.kernel[1]

    def evaluate(self, x):
        return integer_ops.avgpool2d(x, self.x_zero_point, self.x_scale / self.y_scale,
                                     self.y_zero_point, self.kernel, self.stride, self.pads,
                                     self.count_include_pad, self.lo, self.hi, self.extra)


class _GlobalPool(Layer):
    def __init__(self, name, inputs, output, input_shape, x_scale, x_zero_point, y_scale,
                 y_zero_point, lo=-128, hi=127, keepdims=True):
        super().__init__(name, inputs, output, input_shape, y_scale, y_zero_point, lo, hi)
        if len(self.input_shape) != 3:
            raise ValueError(f"layer {self.name!r}: {self.op} needs a CHW input")
        self.x_scale = _scale(x_scale, "input scale")
        self.x_zero_point = _zp(x_zero_point, "input zero point")
        self.keepdims = bool(keepdims)
        c = self.input_shape[0]
        self.output_shape = (c, 1, 1) if self.keepdims else (c,)

    def _shape(self, y):
        return y if self.keepdims else y.reshape(y.shape[0], -1)


class GlobalAveragePool(_GlobalPool):
    """Mean over H and W to ``(C, 1, 1)`` (``(C,)`` without ``keepdims``: a
    ReduceMean that drops the axes); see
    :func:`~fpgacnn.host.integer_ops.global_avgpool`."""

    op = "GlobalAveragePool"

    @property
    def macs(self):
        return int(np.prod(self.input_shape))

    def evaluate(self, x):
        return self._shape(integer_ops.global_avgpool(x, self.x_zero_point,
                                                      self.x_scale / self.y_scale,
                                                      self.y_zero_point, self.lo, self.hi))


class GlobalMaxPool(_GlobalPool):
    """Maximum over H and W to ``(C, 1, 1)`` (or ``(C,)``), then, like
    :class:`MaxPool`, :func:`~fpgacnn.host.integer_ops.rescale` onto the
    output quantization when it differs from the input's."""

    op = "GlobalMaxPool"

    def __init__(self, name, inputs, output, input_shape, x_scale, x_zero_point, y_scale,
                 y_zero_point, lo=-128, hi=127, keepdims=True):
        super().__init__(name, inputs, output, input_shape, x_scale, x_zero_point, y_scale,
                         y_zero_point, lo, hi, keepdims)
        self.identity_scale = (self.x_scale == self.y_scale and self.x_zero_point == self.y_zero_point)
        if not self.identity_scale:
            self.mult, self.shift = requant_params(self.x_scale / self.y_scale)

    def evaluate(self, x):
        y = integer_ops.global_maxpool(x)
        if self.identity_scale:
            y = np.clip(y, self.lo, self.hi).astype(np.int8)
        else:
            y = integer_ops.rescale(y, self.x_zero_point, self.mult, self.shift,
                                    self.y_zero_point, self.lo, self.hi)
        return self._shape(y)


class Add(Layer):
    """Element-wise Add of two int8 tensors on their own scales (a residual
    connection), or of one tensor and an int8 constant (a MatMul's bias as
    onnxruntime quantizes it); see :func:`~fpgacnn.host.integer_ops.add`.

    Parameters
    ----------
    inputs : tuple of str
        Two tensor names, or one when ``constant`` is given.
    constant : numpy.ndarray of int8, optional
        Second operand, broadcast against the per-image shape.

    Members
    -------
    ma, mb, shift : int
        From :func:`~fpgacnn.host.integer_ops.add_params`.
    """

    op = "Add"

    def __init__(self, name, inputs, output, input_shape, a_scale, a_zero_point, b_scale,
                 b_zero_point, y_scale, y_zero_point, lo=-128, hi=127, constant=None):
        super().__init__(name, inputs, output, input_shape, y_scale, y_zero_point, lo, hi)
        self.constant = None if constant is None else np.asarray(constant)
        want = 1 if self.constant is not None else 2
        if len(self.inputs) != want:
            raise ValueError(f"layer {self.name!r}: Add needs {want} tensor input(s)")
        if self.constant is not None:
            if self.constant.dtype != np.int8:
                raise TypeError(f"layer {self.name!r}: Add constant must be int8")
            np.broadcast_shapes(self.constant.shape, self.input_shape)
        self.a_scale = _scale(a_scale, "input scale")
        self.b_scale = _scale(b_scale, "input scale")
        self.a_zero_point = _zp(a_zero_point, "input zero point")
        self.b_zero_point = _zp(b_zero_point, "input zero point")
        self.ma, self.mb, self.shift = integer_ops.add_params(self.a_scale / self.y_scale,
                                                              self.b_scale / self.y_scale)
        self.output_shape = self.input_shape

    def evaluate(self, a, b=None):
        if self.constant is not None:
            b = self.constant[None]
        return integer_ops.add(a, self.a_zero_point, b, self.b_zero_point, self.ma, self.mb,
                               self.shift, self.y_zero_point, self.lo, self.hi)


class Concat(Layer):
    """Concatenation of int8 tensors along the channel axis (per image: axis 0),
    each moved onto the output quantization; see
    :func:`~fpgacnn.host.integer_ops.concat`.

    Parameters
    ----------
    inputs : tuple of str
        Two or more tensors.
    input_shapes : list of tuple
        Per image, equal but for the channels.
    x_scales, x_zero_points : list
        Quantization of each input.

    Members
    -------
    mults, shifts : list
        Per input :func:`~fpgacnn.host.requant.requant_params` of
        ``x_scale[i] / y_scale``; None where the input already has the output
        quantization (a copy).
    """

    op = "Concat"

    def __init__(self, name, inputs, output, input_shapes, x_scales, x_zero_points, y_scale,
                 y_zero_point, lo=-128, hi=127):
        shapes = [tuple(int(d) for d in s) for s in input_shapes]
        super().__init__(name, inputs, output, shapes[0], y_scale, y_zero_point, lo, hi)
        if not (len(self.inputs) == len(shapes) == len(x_scales) == len(x_zero_points) >= 2):
            raise ValueError(f"layer {self.name!r}: Concat needs two or more inputs, each with "
                             "a shape and a quantization")
        if any(s[1:] != shapes[0][1:] for s in shapes):
            raise ValueError(f"layer {self.name!r}: inputs {shapes} differ in more than the channels")
        self.input_shapes = shapes
        self.x_scales = [_scale(v, "input scale") for v in x_scales]
        self.x_zero_points = [_zp(v, "input zero point") for v in x_zero_points]
        self.mults, self.shifts = [], []
        for sx, zx in zip(self.x_scales, self.x_zero_points):
            if sx == self.y_scale and zx == self.y_zero_point:
                self.mults.append(None)
                self.shifts.append(None)
            else:
                m, s = requant_params(sx / self.y_scale)
                self.mults.append(int(m))
                self.shifts.append(int(s))
        self.output_shape = (sum(s[0] for s in shapes), *shapes[0][1:])

    def evaluate(self, *xs):
        return integer_ops.concat(xs, self.x_zero_points, self.mults, self.shifts,
                                  self.y_zero_point, self.lo, self.hi, axis=1)


class Resize(Layer):
    """Nearest-neighbour resize of CHW (ONNX Resize, mode nearest; nn.Upsample exports as Resize):
    ``y[c, i, j] = x[c, rows[i], cols[j]]``, then, like :class:`MaxPool`,
    :func:`~fpgacnn.host.integer_ops.rescale` when the output quantization differs.

    Parameters
    ----------
    rows, cols : sequence of int
        Source row of every output row, source column of every output column
        (from the coordinate transformation and rounding mode of the node).
    """

    op = "Resize"

    def __init__(self, name, inputs, output, input_shape, rows, cols, x_scale, x_zero_point,
                 y_scale, y_zero_point, lo=-128, hi=127):
        super().__init__(name, inputs, output, input_shape, y_scale, y_zero_point, lo, hi)
        if len(self.input_shape) != 3:
            raise ValueError(f"layer {self.name!r}: Resize needs a CHW input")
        self.rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        self.cols = np.asarray(cols, dtype=np.int64).reshape(-1)
        c, h, w = self.input_shape
        if not (self.rows.size and self.cols.size and 0 <= self.rows.min() <= self.rows.max() < h
                and 0 <= self.cols.min() <= self.cols.max() < w):
            raise ValueError(f"layer {self.name!r}: resize indices outside the {h}x{w} input")
        self.x_scale = _scale(x_scale, "input scale")
        self.x_zero_point = _zp(x_zero_point, "input zero point")
        self.identity_scale = (self.x_scale == self.y_scale and self.x_zero_point == self.y_zero_point)
        if not self.identity_scale:
            self.mult, self.shift = requant_params(self.x_scale / self.y_scale)
        self.output_shape = (c, self.rows.size, self.cols.size)

    def evaluate(self, x):
        y = integer_ops.resize_nearest(x, self.rows, self.cols)
        if self.identity_scale:
            return np.clip(y, self.lo, self.hi).astype(np.int8)
        return integer_ops.rescale(y, self.x_zero_point, self.mult, self.shift,
                                   self.y_zero_point, self.lo, self.hi)


class Sigmoid(Layer):
    """Quantized logistic function, element-wise: a 256-entry int8 table
    (:func:`~fpgacnn.host.integer_ops.sigmoid_table`) indexed by the input."""

    op = "Sigmoid"

    def __init__(self, name, inputs, output, input_shape, x_scale, x_zero_point, y_scale,
                 y_zero_point, lo=-128, hi=127):
        super().__init__(name, inputs, output, input_shape, y_scale, y_zero_point, lo, hi)
        self.x_scale = _scale(x_scale, "input scale")
        self.x_zero_point = _zp(x_zero_point, "input zero point")
        self.table = integer_ops.sigmoid_table(self.x_scale, self.x_zero_point, self.y_scale,
                                               self.y_zero_point, self.lo, self.hi)
        self.output_shape = self.input_shape

    def evaluate(self, x):
        return self.table[x.astype(np.int64) + 128]


class Softmax(Layer):
    """Quantized softmax over one or more per-image axes; see
    :func:`~fpgacnn.host.integer_ops.softmax`.

    Parameters
    ----------
    axes : tuple of int
        Per-image axes (0 = channels): one axis (ONNX opset 13 and later), or
        all axes from one on (the 2-D coercion of earlier opsets).
    """

    op = "Softmax"

    def __init__(self, name, inputs, output, input_shape, axes, x_scale, x_zero_point, y_scale,
                 y_zero_point, lo=-128, hi=127):
        super().__init__(name, inputs, output, input_shape, y_scale, y_zero_point, lo, hi)
        self.axes = tuple(sorted(int(a) for a in np.atleast_1d(axes)))
        if not self.axes or not all(0 <= a < len(self.input_shape) for a in self.axes):
            raise ValueError(f"layer {self.name!r}: axes {axes} are outside the per-image shape "
                             f"{self.input_shape}")
        self.x_scale = _scale(x_scale, "input scale")
        self.x_zero_point = _zp(x_zero_point, "input zero point")
        self.output_shape = self.input_shape

    def evaluate(self, x):
        return integer_ops.softmax(x, tuple(a + 1 for a in self.axes), self.x_scale,
                                   self.x_zero_point, self.y_scale, self.y_zero_point,
                                   self.lo, self.hi)


class Reshape(Layer):
    """A new per-image shape with the same number of values, in the same order
    (ONNX Reshape, Squeeze, Unsqueeze; a 1-D ``(C, L)`` tensor to and from the
    ``(C, 1, L)`` of the 2-D layers). Values and quantization unchanged."""

    op = "Reshape"

    def __init__(self, name, inputs, output, input_shape, output_shape, y_scale, y_zero_point):
        super().__init__(name, inputs, output, input_shape, y_scale, y_zero_point)
        self.output_shape = tuple(int(d) for d in output_shape)
        if min(self.output_shape, default=1) < 1 or \
                int(np.prod(self.output_shape)) != int(np.prod(self.input_shape)):
            raise ValueError(f"layer {self.name!r}: cannot reshape {self.input_shape} to "
                             f"{self.output_shape}")

    def evaluate(self, x):
        return x.reshape(x.shape[0], *self.output_shape)


class Flatten(Reshape):
    """Flatten (or Reshape) CHW to ``(C*H*W,)``: values and quantization unchanged."""

    op = "Flatten"

    def __init__(self, name, inputs, output, input_shape, y_scale, y_zero_point):
        super().__init__(name, inputs, output, input_shape,
                         (int(np.prod([int(d) for d in input_shape])),), y_scale, y_zero_point)


#: Every layer kind, by its ``op`` string (for reports; dispatch is by class).
LAYER_KINDS = {cls.op: cls for cls in (Conv, GroupedConv, DilatedConv, Gemm, MaxPool, AveragePool,
                                       GlobalAveragePool, GlobalMaxPool, Add, Concat, Resize,
                                       Sigmoid, Softmax, Reshape, Flatten)}
