"""The quantized IR: one class per layer kind (DESIGN.md sections 2 and 4).

Each layer holds its parameters, its per-image input and output shapes (CHW,
or ``(C,)`` for flat tensors), its quantization (int8 domain: uint8 models are
already shifted by -128), its MAC count per image and its integer semantics
:meth:`Layer.evaluate`, which calls :mod:`fpgacnn.host.integer_ops`.

Layers are wired by tensor name: ``inputs`` names the int8 tensors a layer
reads, ``output`` the one it writes (see :class:`fpgacnn.host.model.QuantizedModel`).
A fused Relu or Clip is the clamp ``(lo, hi)`` on the layer's int8 output.

Example::

    conv = model.layers[0]
    if isinstance(conv, Conv):
        conv.weight, conv.bias, conv.mult, conv.shift, conv.lo, conv.hi
"""

import numpy as np

from . import integer_ops
from .requant import requant_params

__all__ = ["Layer", "Conv", "Gemm", "MaxPool", "AveragePool", "GlobalAveragePool", "Add",
           "Flatten", "LAYER_KINDS"]


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


class Conv(_Requantized):
    """2-D convolution, group 1, no dilation (DESIGN.md s.2).

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
                         w_scale, y_scale, y_zero_point, lo, hi)
        if self.weight.ndim != 4 or len(self.input_shape) != 3:
            raise ValueError(f"layer {self.name!r}: Conv needs 4-D weights and a CHW input")
        cout, cin, kh, kw = self.weight.shape
        if cin != self.input_shape[0]:
            raise ValueError(f"layer {self.name!r}: weights expect {cin} input channels, "
                             f"input has {self.input_shape[0]}")
        self.stride = _pair(stride, "stride")
        self.pads = _pads(pads)
        self.kernel = (kh, kw)
        _, h, w = self.input_shape
        oh = _out_size(h, kh, self.stride[0], self.pads[0], self.pads[2])
        ow = _out_size(w, kw, self.stride[1], self.pads[1], self.pads[3])
        if oh < 1 or ow < 1:
            raise ValueError(f"layer {self.name!r}: kernel {kh}x{kw} does not fit the padded input")
        self.output_shape = (cout, oh, ow)

    @property
    def macs(self):
        cout, cin, kh, kw = self.weight.shape
        return cout * self.output_shape[1] * self.output_shape[2] * cin * kh * kw

    def evaluate(self, x):
        return integer_ops.conv2d(x, self.weight, self.bias, self.x_zero_point, self.mult,
                                  self.shift, self.y_zero_point, self.lo, self.hi,
                                  self.stride, self.pads)


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
                 x_zero_point, y_scale, y_zero_point, lo, hi):
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
        c, h, w = self.input_shape
        oh = _out_size(h, self.kernel[0], self.stride[0], self.pads[0], self.pads[2])
        ow = _out_size(w, self.kernel[1], self.stride[1], self.pads[1], self.pads[3])
        if oh < 1 or ow < 1:
            raise ValueError(f"layer {self.name!r}: kernel {self.kernel} does not fit the input")
        self.output_shape = (c, oh, ow)


class MaxPool(_Pool):
    """Max-pool on int8 (padding never wins). When the output is quantized
    differently from the input (not the case for onnxruntime's quantizer) or
    clamped, the maximum is then moved with :func:`~fpgacnn.host.integer_ops.rescale`."""

    op = "MaxPool"

    def __init__(self, name, inputs, output, input_shape, kernel, stride=None, pads=(0, 0, 0, 0),
                 x_scale=1.0, x_zero_point=0, y_scale=None, y_zero_point=None, lo=-128, hi=127):
        y_scale = x_scale if y_scale is None else y_scale
        y_zero_point = x_zero_point if y_zero_point is None else y_zero_point
        super().__init__(name, inputs, output, input_shape, kernel, stride, pads, x_scale,
                         x_zero_point, y_scale, y_zero_point, lo, hi)
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
    """Average pool, ``ceil_mode`` 0; see :func:`~fpgacnn.host.integer_ops.avgpool2d`."""

    op = "AveragePool"

    def __init__(self, name, inputs, output, input_shape, kernel, stride=None, pads=(0, 0, 0, 0),
                 count_include_pad=False, x_scale=1.0, x_zero_point=0, y_scale=1.0,
                 y_zero_point=0, lo=-128, hi=127):
        super().__init__(name, inputs, output, input_shape, kernel, stride, pads, x_scale,
                         x_zero_point, y_scale, y_zero_point, lo, hi)
        self.count_include_pad = bool(count_include_pad)

    @property
    def macs(self):
        # one accumulation per tap, as on the engine's adder trees
        c, oh, ow = self.output_shape
        return c * oh * ow * self.kernel[0] * self.kernel[1]

    def evaluate(self, x):
        return integer_ops.avgpool2d(x, self.x_zero_point, self.x_scale / self.y_scale,
                                     self.y_zero_point, self.kernel, self.stride, self.pads,
                                     self.count_include_pad, self.lo, self.hi)


class GlobalAveragePool(Layer):
    """Mean over H and W to ``(C, 1, 1)``; see :func:`~fpgacnn.host.integer_ops.global_avgpool`."""

    op = "GlobalAveragePool"

    def __init__(self, name, inputs, output, input_shape, x_scale, x_zero_point, y_scale,
                 y_zero_point, lo=-128, hi=127):
        super().__init__(name, inputs, output, input_shape, y_scale, y_zero_point, lo, hi)
        if len(self.input_shape) != 3:
            raise ValueError(f"layer {self.name!r}: GlobalAveragePool needs a CHW input")
        self.x_scale = _scale(x_scale, "input scale")
        self.x_zero_point = _zp(x_zero_point, "input zero point")
        self.output_shape = (self.input_shape[0], 1, 1)

    @property
    def macs(self):
        return int(np.prod(self.input_shape))

    def evaluate(self, x):
        return integer_ops.global_avgpool(x, self.x_zero_point, self.x_scale / self.y_scale,
                                          self.y_zero_point, self.lo, self.hi)


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


class Flatten(Layer):
    """Flatten (or Reshape) CHW to ``(C*H*W,)``: values and quantization unchanged."""

    op = "Flatten"

    def __init__(self, name, inputs, output, input_shape, y_scale, y_zero_point):
        super().__init__(name, inputs, output, input_shape, y_scale, y_zero_point)
        self.output_shape = (int(np.prod(self.input_shape)),)

    def evaluate(self, x):
        return x.reshape(x.shape[0], -1)


#: Every layer kind, by its ``op`` string (for reports; dispatch is by class).
LAYER_KINDS = {cls.op: cls for cls in (Conv, Gemm, MaxPool, AveragePool, GlobalAveragePool, Add,
                                       Flatten)}
