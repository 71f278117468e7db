"""Import int8 ONNX models into the quantized IR (:mod:`fpgacnn.host.layers`).

Two formats, as ``onnxruntime.quantization.quantize_static`` writes them, and
mixtures of both:

- QDQ: float operators between ``DequantizeLinear`` (of int8 activations and
  constant int8/int32 weights and biases) and ``QuantizeLinear``. Each float
  operator becomes one layer whose output quantization is that of the
  ``QuantizeLinear`` that follows it.
- QOperator: ``QLinearConv``, ``QLinearMatMul``, ``QGemm``, ``QLinearAdd``,
  ``QLinearAveragePool``, ``QLinearGlobalAveragePool``, and ``MaxPool``,
  ``Flatten``, ``Reshape`` directly on int8 tensors.

Relu and Clip fuse into the clamp of the layer before them: between a float
operator and its ``QuantizeLinear`` (the bounds are quantized with the
output's scale), or, when kept with their own ``DequantizeLinear`` /
``QuantizeLinear`` pair, by giving the layer before them the activation's
output quantization. Where onnxruntime drops them, the range of the output
quantization already clips.

uint8 tensors become int8 exactly (value - 128, zero point - 128;
DESIGN.md s.2). Everything that cannot be represented raises
:class:`~fpgacnn.core.errors.ModelError` with one line naming the node (name
and operator) or the file, and the reason. See docs/semantics.md.

Example::

    from fpgacnn.host.onnx_import import load_onnx
    model = load_onnx("model_int8.onnx")
"""

import math
import os

import numpy as np
import onnx
from onnx import helper, numpy_helper

from . import layers as L
from ..core.errors import ModelError
from .model import QuantizedModel, TensorSpec

__all__ = ["load_onnx"]

_DOMAINS = ("", "ai.onnx", "com.microsoft")
_INT_DTYPES = {np.dtype(np.int8), np.dtype(np.uint8)}


def load_onnx(path):
    """Load a quantized ONNX file (never with pickle) into a :class:`QuantizedModel`.

    Parameters
    ----------
    path : str or os.PathLike

    Raises
    ------
    fpgacnn.core.errors.ModelError
        If the file is missing, unreadable, corrupt or truncated, or uses an
        operator or attribute that fpgacnn does not support.
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise ModelError(f"{path}: no such file")
    if os.path.isdir(path):
        raise ModelError(f"{path}: is a directory, not an ONNX file")
    try:
        proto = onnx.load(path)
    except Exception as e:  # protobuf DecodeError, RuntimeWarning, OSError, ...
        raise ModelError(f"{path}: not a valid ONNX file (corrupt or truncated): {_one_line(e)}") from None
    if not proto.HasField("graph") or len(proto.graph.node) == 0:
        raise ModelError(f"{path}: not a valid ONNX file (corrupt or truncated): it holds no graph")
    try:
        onnx.checker.check_model(proto)
    except Exception as e:
        raise ModelError(f"{path}: not a valid ONNX model (corrupt or truncated): {_one_line(e)}") from None
    name = proto.graph.name or os.path.splitext(os.path.basename(path))[0]
    return _Importer(proto, name, path).run()


def _one_line(e):
    text = str(e).strip().splitlines()
    return (text[0] if text else type(e).__name__)[:200]


class _NodeError(Exception):
    """Raised inside a node handler; the importer adds the node's name and op."""


def _fail(reason):
    raise _NodeError(reason)


def _int_zp(zp, what):
    """A zero point in the int8 domain (uint8 - 128)."""
    zp = np.asarray(zp)
    if zp.dtype == np.uint8:
        return zp.astype(np.int64) - 128
    if zp.dtype == np.int8:
        return zp.astype(np.int64)
    _fail(f"{what} has type {zp.dtype}; only int8 and uint8 tensors are supported")


def _scalar(a, what):
    a = np.asarray(a)
    if a.size != 1:
        _fail(f"{what} must be per-tensor (one value), it has shape {a.shape}")
    return a.reshape(()).item()


class _QTensor:
    """An int8 activation tensor: scale, int8-domain zero point, per-image shape."""

    def __init__(self, scale, zp, shape):
        self.scale, self.zp, self.shape = scale, zp, tuple(shape)


class _QConst:
    """A DequantizeLinear of a constant: integer values, scales, zero points, axis."""

    def __init__(self, values, scale, zp, axis):
        self.values, self.scale, self.zp, self.axis = values, scale, zp, axis


class _Recipe:
    """How to build a layer once its output quantization is known.

    ``make(y_scale, y_zp, lo, hi, out)`` builds it; ``lo_f``/``hi_f`` are the
    float clamp bounds of fused Relu/Clip, quantized with the output scale.
    """

    def __init__(self, node, make, lo_f=-math.inf, hi_f=math.inf):
        self.node, self.make, self.lo_f, self.hi_f = node, make, lo_f, hi_f

    def with_bounds(self, lo_f, hi_f):
        return _Recipe(self.node, self.make, max(self.lo_f, lo_f), min(self.hi_f, hi_f))

    def build(self, scale, zp, out):
        def q(v):
            return int(np.clip(np.rint(v / scale) + zp, -128, 127))
        lo = -128 if self.lo_f == -math.inf else q(self.lo_f)
        hi = 127 if self.hi_f == math.inf else q(self.hi_f)
        if lo > hi:
            _fail(f"clamp range [{self.lo_f}, {self.hi_f}] is empty after quantization")
        return self.make(scale, zp, lo, hi, out)


class _Importer:
    def __init__(self, proto, name, path):
        self.graph = proto.graph
        self.name = name
        self.path = path
        for op in proto.opset_import:
            if op.domain not in _DOMAINS:
                raise ModelError(f"{path}: operator set domain {op.domain!r} is not supported")
        self.consts = {i.name: numpy_helper.to_array(i) for i in self.graph.initializer}
        self.uses = {}
        for node in self.graph.node:
            for t in node.input:
                if t:
                    self.uses[t] = self.uses.get(t, 0) + 1
        for o in self.graph.output:
            self.uses[o.name] = self.uses.get(o.name, 0) + 1
        self.qt = {}        # int8 tensor name -> _QTensor
        self.fview = {}     # float tensor name -> int8 tensor it dequantizes
        self.qconst = {}    # float tensor name -> _QConst
        self.pending = {}   # float tensor name -> _Recipe (waits for its QuantizeLinear)
        self.recipes = {}   # int8 tensor name -> _Recipe that produced it
        self.alias = {}     # int8 tensor name -> int8 tensor it equals
        self.kept = {}      # float output of a kept Relu/Clip -> quantization of its input
        self.layers = {}    # int8 tensor name -> layer producing it
        self.order = []     # int8 tensor names in production order
        self.input_tensor = None

    # -- driver ------------------------------------------------------------

    def run(self):
        inputs = [i for i in self.graph.input if i.name not in self.consts]
        if len(inputs) != 1:
            raise ModelError(f"{self.path}: the graph has {len(inputs)} inputs; fpgacnn supports exactly one")
        if len(self.graph.output) != 1:
            raise ModelError(f"{self.path}: the graph has {len(self.graph.output)} outputs; "
                             "fpgacnn supports exactly one")
        self._graph_input(inputs[0])
        for node in self.graph.node:
            if node.domain not in _DOMAINS:
                self._node_error(node, f"operator domain {node.domain!r} is not supported")
            handler = getattr(self, f"_op_{node.op_type}", None)
            if handler is None:
                self._node_error(node, f"operator {node.op_type} is not supported")
            try:
                handler(node)
            except _NodeError as e:
                self._node_error(node, str(e))
            except ValueError as e:  # a layer constructor refusing the parameters
                self._node_error(node, _one_line(e))
        return self._finish()

    def _node_error(self, node, reason):
        raise ModelError(f"node {node.name or node.output[0]!r} ({node.op_type}): {reason}")

    def _graph_input(self, vi):
        t = vi.type.tensor_type
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(t.elem_type)) if t.elem_type else None
        if dtype not in (np.dtype(np.float32), np.dtype(np.int8), np.dtype(np.uint8)):
            raise ModelError(f"{self.path}: graph input {vi.name!r} has type {dtype}; "
                             "fpgacnn takes float32, int8 or uint8")
        dims = list(t.shape.dim)
        if len(dims) not in (2, 4) or any(not d.HasField("dim_value") for d in dims[1:]):
            raise ModelError(f"{self.path}: graph input {vi.name!r} must be (N, C, H, W) or (N, C) "
                             "with fixed C, H, W")
        self.in_name, self.in_dtype = vi.name, dtype
        self.in_shape = tuple(d.dim_value for d in dims[1:])
        if dtype != np.float32:
            # An integer graph input is itself the int8 tensor; its quantization
            # comes from its first consumer.
            self.qt[vi.name] = _QTensor(None, None, self.in_shape)
            self.input_tensor = vi.name

    def _finish(self):
        out = self.graph.output[0].name
        if out in self.fview:
            tensor = self._resolve(self.fview[out])
            dtype = np.dtype(np.float32)
        elif out in self.qt or out in self.alias:
            tensor = self._resolve(out)
            vi = self.graph.output[0].type.tensor_type
            dtype = np.dtype(helper.tensor_dtype_to_np_dtype(vi.elem_type))
        elif out in self.kept:
            # A float Relu/Clip on a dequantized tensor as the graph output: the clamp
            # fuses exactly (max(q, zp) dequantizes to relu of the dequantized q).
            scale, zp = self.kept[out]
            tensor = out + "/int8"
            recipe = self.pending[out]
            try:
                self._emit(recipe.node, recipe, scale, zp, tensor)
            except _NodeError as e:
                self._node_error(recipe.node, str(e))
            self.fview[out] = tensor
            dtype = np.dtype(np.float32)
        elif out in self.pending:
            self._node_error(self.pending[out].node,
                             f"output {out!r} is not quantized (no QuantizeLinear follows it)")
        else:
            raise ModelError(f"{self.path}: graph output {out!r} is not an int8 tensor "
                             "(DequantizeLinear of one) that fpgacnn computes")
        if self.input_tensor is None:
            raise ModelError(f"{self.path}: graph input {self.in_name!r} is never quantized")
        qin = self.qt[self.input_tensor]
        if qin.scale is None:
            raise ModelError(f"{self.path}: graph input {self.in_name!r} is never read with a scale")
        qout = self.qt[tensor]
        # Keep only the layers the output depends on, in production order.
        needed, stack = set(), [tensor]
        while stack:
            t = stack.pop()
            if t in needed or t not in self.layers:
                continue
            needed.add(t)
            stack.extend(self.layers[t].inputs)
        layers = [self.layers[t] for t in self.order if t in needed]
        return QuantizedModel(
            self.name, layers,
            TensorSpec(self.in_name, self.in_shape, self.in_dtype, float(qin.scale), int(qin.zp)),
            TensorSpec(out, qout.shape, dtype, float(qout.scale), int(qout.zp)),
            self.input_tensor, tensor)

    # -- tensor helpers ----------------------------------------------------

    def _resolve(self, t):
        while t in self.alias:
            t = self.alias[t]
        return t

    def _const(self, name, what):
        if name not in self.consts:
            _fail(f"{what} {name!r} must be a constant initializer")
        return self.consts[name]

    def _qparams(self, node, i_scale, i_zp, what):
        """Per-tensor (scale, int8 zero point) from constant inputs of a node."""
        scale = float(_scalar(self._const(node.input[i_scale], f"{what} scale"), f"{what} scale"))
        if len(node.input) > i_zp and node.input[i_zp]:
            zp = int(_scalar(_int_zp(self._const(node.input[i_zp], f"{what} zero point"),
                                     f"{what} zero point"), f"{what} zero point"))
        else:
            _fail(f"{what} zero point input is missing; fpgacnn needs it explicit")
        if not (np.isfinite(scale) and scale > 0):
            _fail(f"{what} scale {scale!r} must be finite and positive")
        return scale, zp

    def _activation(self, name, what="input"):
        """The int8 tensor behind an activation input (float view or int8 tensor)."""
        if name in self.fview:
            return self._resolve(self.fview[name])
        name = self._resolve(name)
        if name in self.qt:
            return name
        if name == self.in_name:
            _fail(f"{what} {name!r} is the float graph input, not quantized by a QuantizeLinear")
        if name in self.pending:
            _fail(f"{what} {name!r} is a float result without QuantizeLinear")
        if name in self.consts or name in self.qconst:
            _fail(f"{what} {name!r} is a constant; fpgacnn expects an activation here")
        _fail(f"{what} {name!r} is not an int8 tensor fpgacnn computes")

    def _bind_qparams(self, t, scale, zp):
        """Check (or, for an integer graph input, set) an int8 tensor's quantization."""
        q = self.qt[t]
        if q.scale is None:
            q.scale, q.zp = scale, zp
        elif not (np.isclose(q.scale, scale, rtol=1e-6, atol=0) and q.zp == zp):
            _fail(f"tensor {t!r} is read with scale {scale}, zero point {zp} but was written with "
                  f"scale {q.scale}, zero point {q.zp}")

    def _produce(self, out, layer, recipe):
        if out in self.qt:
            _fail(f"tensor {out!r} is written twice")
        self.qt[out] = _QTensor(layer.y_scale, layer.y_zero_point, layer.output_shape)
        self.layers[out] = layer
        self.recipes[out] = recipe
        self.order.append(out)

    def _emit(self, node, recipe, scale, zp, out):
        self._produce(out, recipe.build(scale, zp, out), recipe)

    # -- weights -----------------------------------------------------------

    def _weight(self, name, cout_axis, what="weights"):
        """int8 weights, per-output-channel scales (symmetric) from a DequantizeLinear'd constant."""
        if name not in self.qconst:
            if name in self.consts:
                _fail(f"{what} {name!r} are float; quantize the model first (fpgacnn quantize)")
            _fail(f"{what} {name!r} must be a constant (DequantizeLinear of an initializer)")
        c = self.qconst[name]
        return self._weight_arrays(c.values, c.scale, c.zp, c.axis, cout_axis, what)

    def _weight_arrays(self, values, scale, zp, axis, cout_axis, what="weights"):
        values = np.asarray(values)
        if values.dtype != np.int8:
            _fail(f"{what} have type {values.dtype}; fpgacnn needs int8 weights")
        if np.any(np.asarray(zp) != 0):
            _fail(f"{what} have a non-zero zero point; fpgacnn needs symmetric weights (zero point 0)")
        scale = np.asarray(scale, dtype=np.float64)
        cout = values.shape[cout_axis]
        per_channel = scale.size == cout and (axis is None or axis % values.ndim == cout_axis)
        if scale.size != 1 and not per_channel:
            _fail(f"{what} scales (shape {scale.shape}) must be per tensor or per output channel")
        return values, np.broadcast_to(scale.reshape(-1), (cout,)).copy()

    def _bias(self, name, x_scale, w_scale, cout):
        """int32 bias at scale ``x_scale * w_scale``; a float or differently
        scaled bias is rounded onto that scale."""
        if not name:
            return None
        target = x_scale * w_scale
        if name in self.qconst:
            c = self.qconst[name]
            if np.any(np.asarray(c.zp) != 0):
                _fail(f"bias {name!r} has a non-zero zero point")
            values = np.asarray(c.values).astype(np.int64).reshape(-1)
            bscale = np.broadcast_to(np.asarray(c.scale, np.float64).reshape(-1), values.shape)
            if not np.allclose(bscale, target, rtol=1e-5, atol=0):
                values = np.rint(values * bscale / target).astype(np.int64)
        elif name in self.consts:
            raw = np.asarray(self.consts[name]).reshape(-1)
            values = (np.rint(raw.astype(np.float64) / target).astype(np.int64)
                      if raw.dtype.kind == "f" else raw.astype(np.int64))
        else:
            _fail(f"bias {name!r} must be a constant")
        if values.size != cout:
            _fail(f"bias has {values.size} values for {cout} output channels")
        if values.min(initial=0) < -2**31 or values.max(initial=0) >= 2**31:
            _fail("bias does not fit int32")
        return values.astype(np.int32)

    # -- boundary operators -----------------------------------------------

    def _op_Constant(self, node):
        attr = {a.name: a for a in node.attribute}
        if "value" not in attr:
            _fail("only Constant with a tensor 'value' is supported")
        self.consts[node.output[0]] = numpy_helper.to_array(attr["value"].t)

    def _op_Identity(self, node):
        src, out = node.input[0], node.output[0]
        if src in self.fview:
            self.fview[out] = self.fview[src]
        elif src in self.pending:
            self.pending[out] = self.pending[src]
        elif src in self.consts:
            self.consts[out] = self.consts[src]
        elif src in self.qconst:
            self.qconst[out] = self.qconst[src]
        else:
            self.alias[out] = self._activation(src)

    def _op_QuantizeLinear(self, node):
        if _attr(node, "axis", None) is not None and np.asarray(
                self._const(node.input[1], "scale")).size > 1:
            _fail("per-axis activation quantization is not supported")
        scale, zp = self._qparams(node, 1, 2, "output")
        src, out = node.input[0], node.output[0]
        if src == self.in_name and self.in_dtype == np.float32:
            if self.input_tensor is None:
                self.qt[out] = _QTensor(scale, zp, self.in_shape)
                self.input_tensor = out
            else:
                self.alias[out] = self.input_tensor
                self._bind_qparams(self.input_tensor, scale, zp)
        elif src in self.pending:
            self._emit(node, self.pending[src], scale, zp, out)
        elif src in self.fview:
            # Q(DQ(t)) with the same parameters is t itself.
            t = self._resolve(self.fview[src])
            q = self.qt[t]
            if not (np.isclose(q.scale, scale, rtol=1e-6, atol=0) and q.zp == zp):
                _fail(f"requantizing {t!r} without an operator in between is not supported")
            self.alias[out] = t
        else:
            _fail(f"input {src!r} is not produced by an operator fpgacnn supports")

    def _op_DequantizeLinear(self, node):
        src, out = node.input[0], node.output[0]
        if src in self.consts:
            values = self.consts[src]
            scale = np.asarray(self._const(node.input[1], "scale"), dtype=np.float64)
            zp = (np.asarray(self._const(node.input[2], "zero point"))
                  if len(node.input) > 2 and node.input[2] else np.zeros((), values.dtype))
            self.qconst[out] = _QConst(values, scale, zp, _attr(node, "axis", 1))
            return
        t = self._activation(src)
        scale, zp = self._qparams(node, 1, 2, "input")
        self._bind_qparams(t, scale, zp)
        self.fview[out] = t

    # -- float operators (QDQ): recipes that wait for their QuantizeLinear --

    def _defer(self, node, make):
        self.pending[node.output[0]] = _Recipe(node, make)

    def _op_Relu(self, node):
        self._activation_op(node, 0.0, math.inf)

    def _op_Clip(self, node):
        lo, hi = -math.inf, math.inf
        if len(node.input) > 1 and node.input[1]:
            lo = float(_scalar(self._const(node.input[1], "Clip min"), "Clip min"))
        if len(node.input) > 2 and node.input[2]:
            hi = float(_scalar(self._const(node.input[2], "Clip max"), "Clip max"))
        lo = float(_attr(node, "min", lo))
        hi = float(_attr(node, "max", hi))
        self._activation_op(node, lo, hi)

    def _activation_op(self, node, lo_f, hi_f):
        src, out = node.input[0], node.output[0]
        if src in self.pending:
            if self.uses.get(src, 0) != 1:
                _fail(f"its input {src!r} is also read by other nodes; cannot fuse the activation")
            self.pending[out] = self.pending[src].with_bounds(lo_f, hi_f)
            return
        if src not in self.fview:
            _fail(f"input {src!r} must be a float result or a dequantized int8 tensor")
        # A kept activation between DequantizeLinear and QuantizeLinear: fuse it into
        # the layer that wrote the int8 tensor, which must have no other reader.
        t = self._resolve(self.fview[src])
        if t not in self.recipes or self.uses.get(t, 0) != 1 or self.uses.get(src, 0) != 1:
            _fail(f"its input {t!r} is also read by other nodes (or is the graph input); "
                  "cannot fuse the activation into the layer that writes it")
        # Rebuilt with the activation's output quantization when its QuantizeLinear
        # comes, or with the input's when the float activation is the graph output.
        self.pending[out] = self.recipes.pop(t).with_bounds(lo_f, hi_f)
        self.kept[out] = (self.qt[t].scale, self.qt[t].zp)
        self.layers.pop(t)
        self.order.remove(t)
        del self.qt[t]

    def _op_Conv(self, node):
        if len(node.input) < 2:
            _fail("Conv needs weights")
        x = self._activation(node.input[0])
        w, w_scale = self._weight(node.input[1], 0)
        bias_name = node.input[2] if len(node.input) > 2 else ""
        self._defer(node, self._conv_maker(node, x, w, w_scale, bias_name))

    def _conv_maker(self, node, x, w, w_scale, bias_name):
        qx = self.qt[x]
        if w.ndim != 4:
            _fail(f"only 2-D convolution is supported (weights have {w.ndim} axes)")
        _check_conv_attrs(node, w.shape)
        if len(qx.shape) != 3:
            _fail(f"input {x!r} must be CHW, it has per-image shape {qx.shape}")
        bias = self._bias(bias_name, qx.scale, w_scale, w.shape[0])
        stride = tuple(_attr(node, "strides", [1, 1]))
        pads = _onnx_pads(_attr(node, "pads", [0, 0, 0, 0]))
        name = node.name or node.output[0]

        def make(scale, zp, lo, hi, out):
            return L.Conv(name, [x], out, qx.shape, w, bias, qx.scale, qx.zp, w_scale, scale, zp,
                          stride=stride, pads=pads, lo=lo, hi=hi)
        return make

    def _gemm_maker(self, node, x, w, w_scale, bias):
        qx = self.qt[x]
        if len(qx.shape) != 1:
            _fail(f"input {x!r} must be flat (N, C), it has per-image shape {qx.shape}; "
                  "add a Flatten")
        name = node.name or node.output[0]

        def make(scale, zp, lo, hi, out):
            return L.Gemm(name, [x], out, qx.shape, w, bias, qx.scale, qx.zp, w_scale, scale, zp,
                          lo=lo, hi=hi)
        return make

    def _op_MatMul(self, node):
        x = self._activation(node.input[0])
        if node.input[1] not in self.qconst:
            _fail("the second MatMul operand must be constant int8 weights")
        w, w_scale = self._weight(node.input[1], 1)   # (Cin, Cout), per column
        if w.ndim != 2:
            _fail(f"MatMul weights must be 2-D, not {w.ndim}-D")
        self._defer(node, self._gemm_maker(node, x, np.ascontiguousarray(w.T), w_scale, None))

    def _op_Gemm(self, node):
        _check_gemm_attrs(node)
        x = self._activation(node.input[0])
        trans_b = _attr(node, "transB", 0)
        w, w_scale = self._weight(node.input[1], 0 if trans_b else 1)
        if w.ndim != 2:
            _fail(f"Gemm weights must be 2-D, not {w.ndim}-D")
        w = w if trans_b else np.ascontiguousarray(w.T)
        bias = self._bias(node.input[2] if len(node.input) > 2 else "", self.qt[x].scale, w_scale,
                          w.shape[0])
        self._defer(node, self._gemm_maker(node, x, w, w_scale, bias))

    def _op_Add(self, node):
        ops = []
        for i, name in enumerate(node.input[:2]):
            if name in self.qconst:
                c = self.qconst[name]
                values = np.asarray(c.values)
                if values.dtype not in _INT_DTYPES:
                    _fail(f"constant operand {name!r} has type {values.dtype}, not int8/uint8")
                scale = float(_scalar(c.scale, "constant operand scale"))
                zp = int(_scalar(_int_zp(c.zp, "constant operand zero point"), "zero point"))
                ops.append(("const", _to_int8(values), scale, zp))
            elif name in self.consts:
                _fail(f"operand {name!r} is a float constant; it must be quantized")
            else:
                t = self._activation(name, f"operand {i}")
                ops.append(("tensor", t, self.qt[t].scale, self.qt[t].zp))
        self._defer(node, self._add_maker(node, ops))

    def _add_maker(self, node, ops):
        if all(k == "const" for k, *_ in ops):
            _fail("both operands are constants")
        if ops[0][0] == "const":
            ops = [ops[1], ops[0]]  # addition commutes; the tensor goes first
        (ka, a, sa, za), (kb, b, sb, zb) = ops
        shape = self.qt[a].shape
        inputs = [a]
        constant = None
        if kb == "tensor":
            if self.qt[b].shape != shape:
                _fail(f"operands have per-image shapes {shape} and {self.qt[b].shape}; "
                      "broadcasting is not supported")
            inputs.append(b)
        else:
            constant = b
            if constant.ndim == len(shape) + 1 and constant.shape[0] == 1:
                constant = constant[0]  # a batch axis of 1
            try:
                if np.broadcast_shapes(constant.shape, shape) != shape:
                    raise ValueError
            except ValueError:
                _fail(f"constant operand of shape {b.shape} does not broadcast to {shape}")
        name = node.name or node.output[0]

        def make(scale, zp, lo, hi, out):
            return L.Add(name, inputs, out, shape, sa, za, sb, zb, scale, zp, lo=lo, hi=hi,
                         constant=constant)
        return make

    def _pool_maker(self, node, x, kind, y=None):
        qx = self.qt[x]
        if len(qx.shape) != 3:
            _fail(f"input {x!r} must be CHW, it has per-image shape {qx.shape}")
        name = node.name or node.output[0]
        if kind == "GlobalAveragePool":
            if _attr(node, "channels_last", 0):
                _fail("channels_last=1 is not supported")

            def make(scale, zp, lo, hi, out):
                return L.GlobalAveragePool(name, [x], out, qx.shape, qx.scale, qx.zp, scale, zp,
                                           lo=lo, hi=hi)
            return make
        _check_pool_attrs(node)
        kernel = _attr(node, "kernel_shape", None)
        if kernel is None or len(kernel) != 2:
            _fail("kernel_shape must give two dimensions")
        stride = _attr(node, "strides", [1, 1])
        pads = _onnx_pads(_attr(node, "pads", [0, 0, 0, 0]))
        if kind == "MaxPool":
            if _attr(node, "storage_order", 0):
                _fail("storage_order=1 is not supported")
            if len(node.output) > 1 and node.output[1]:
                _fail("the Indices output is not supported")

            def make(scale, zp, lo, hi, out):
                return L.MaxPool(name, [x], out, qx.shape, kernel, stride, pads, qx.scale, qx.zp,
                                 scale, zp, lo=lo, hi=hi)
            return make
        cip = _attr(node, "count_include_pad", 0)

        def make(scale, zp, lo, hi, out):
            return L.AveragePool(name, [x], out, qx.shape, kernel, stride, pads, cip, qx.scale,
                                 qx.zp, scale, zp, lo=lo, hi=hi)
        return make

    def _op_MaxPool(self, node):
        src = node.input[0]
        x = self._activation(src)
        make = self._pool_maker(node, x, "MaxPool")
        if src in self.fview:
            self._defer(node, make)
        else:  # QOperator: MaxPool on the int8 tensor keeps its quantization
            self._emit(node, _Recipe(node, make), self.qt[x].scale, self.qt[x].zp, node.output[0])

    def _op_AveragePool(self, node):
        self._defer(node, self._pool_maker(node, self._float_input(node), "AveragePool"))

    def _op_GlobalAveragePool(self, node):
        self._defer(node, self._pool_maker(node, self._float_input(node), "GlobalAveragePool"))

    def _float_input(self, node):
        if node.input[0] not in self.fview:
            _fail(f"input {node.input[0]!r} must be dequantized int8 (DequantizeLinear)")
        return self._activation(node.input[0])

    def _flatten_maker(self, node, x):
        qx = self.qt[x]
        name = node.name or node.output[0]

        def make(scale, zp, lo, hi, out):
            if not (np.isclose(scale, qx.scale, rtol=1e-6, atol=0) and zp == qx.zp) or \
                    (lo, hi) != (-128, 127):
                _fail("a Flatten/Reshape that changes the quantization or clamps is not supported")
            return L.Flatten(name, [x], out, qx.shape, qx.scale, qx.zp)
        return make

    def _op_Flatten(self, node):
        if _attr(node, "axis", 1) != 1:
            _fail(f"axis={_attr(node, 'axis', 1)} is not supported (only 1: keep the batch axis)")
        self._reshape_like(node)

    def _op_Reshape(self, node):
        target = [int(d) for d in np.asarray(self._const(node.input[1], "Reshape shape")).reshape(-1)]
        x = self._activation(node.input[0])
        flat = int(np.prod(self.qt[x].shape))
        if not (len(target) == 2 and target[0] in (0, 1, -1) and target[1] in (-1, flat)
                and not (target[0] == -1 and target[1] == -1)):
            _fail(f"Reshape to {target} is not supported (only flattening to (N, {flat}))")
        self._reshape_like(node)

    def _reshape_like(self, node):
        src = node.input[0]
        x = self._activation(src)
        make = self._flatten_maker(node, x)
        if src in self.fview:
            self._defer(node, make)
        else:
            self._emit(node, _Recipe(node, make), self.qt[x].scale, self.qt[x].zp, node.output[0])

    # -- QOperator operators ------------------------------------------------

    def _qinput(self, node, i):
        """Activation input ``i`` with its scale/zp at ``i+1``, ``i+2``; checked against the tensor."""
        x = self._activation(node.input[i])
        scale, zp = self._qparams(node, i + 1, i + 2, "input")
        self._bind_qparams(x, scale, zp)
        return x

    def _qweight(self, node, i, cout_axis):
        values = self._const(node.input[i], "weights")
        scale = self._const(node.input[i + 1], "weight scale")
        zp = (self._const(node.input[i + 2], "weight zero point")
              if len(node.input) > i + 2 and node.input[i + 2] else np.zeros((), values.dtype))
        return self._weight_arrays(values, scale, zp, cout_axis, cout_axis)

    def _op_QLinearConv(self, node):
        x = self._qinput(node, 0)
        w, w_scale = self._qweight(node, 3, 0)
        scale, zp = self._qparams(node, 6, 7, "output")
        bias_name = node.input[8] if len(node.input) > 8 else ""
        make = self._conv_maker(node, x, w, w_scale, bias_name)
        self._emit(node, _Recipe(node, make), scale, zp, node.output[0])

    def _op_QLinearMatMul(self, node):
        x = self._qinput(node, 0)
        w, w_scale = self._qweight(node, 3, 1)
        if w.ndim != 2:
            _fail(f"MatMul weights must be 2-D, not {w.ndim}-D")
        scale, zp = self._qparams(node, 6, 7, "output")
        make = self._gemm_maker(node, x, np.ascontiguousarray(w.T), w_scale, None)
        self._emit(node, _Recipe(node, make), scale, zp, node.output[0])

    def _op_QGemm(self, node):
        _check_gemm_attrs(node)
        if len(node.input) < 8 or not node.input[7]:
            _fail("QGemm with a float output (no output scale) is not supported")
        x = self._qinput(node, 0)
        trans_b = _attr(node, "transB", 0)
        w, w_scale = self._qweight(node, 3, 0 if trans_b else 1)
        w = w if trans_b else np.ascontiguousarray(w.T)
        bias = self._bias(node.input[6], self.qt[x].scale, w_scale, w.shape[0])
        scale, zp = self._qparams(node, 7, 8, "output")
        make = self._gemm_maker(node, x, w, w_scale, bias)
        self._emit(node, _Recipe(node, make), scale, zp, node.output[0])

    def _op_QLinearAdd(self, node):
        ops = []
        for i in (0, 3):
            name = node.input[i]
            if name in self.consts:
                values = np.asarray(self.consts[name])
                if values.dtype not in _INT_DTYPES:
                    _fail(f"constant operand {name!r} has type {values.dtype}, not int8/uint8")
                scale, zp = self._qparams(node, i + 1, i + 2, "operand")
                ops.append(("const", _to_int8(values), scale, zp))
            else:
                t = self._qinput(node, i)
                ops.append(("tensor", t, self.qt[t].scale, self.qt[t].zp))
        scale, zp = self._qparams(node, 6, 7, "output")
        self._emit(node, _Recipe(node, self._add_maker(node, ops)), scale, zp, node.output[0])

    def _op_QLinearGlobalAveragePool(self, node):
        x = self._qinput(node, 0)
        scale, zp = self._qparams(node, 3, 4, "output")
        make = self._pool_maker(node, x, "GlobalAveragePool")
        self._emit(node, _Recipe(node, make), scale, zp, node.output[0])

    def _op_QLinearAveragePool(self, node):
        x = self._qinput(node, 0)
        scale, zp = self._qparams(node, 3, 4, "output")
        if _attr(node, "channels_last", 0):
            _fail("channels_last=1 is not supported")
        make = self._pool_maker(node, x, "AveragePool")
        self._emit(node, _Recipe(node, make), scale, zp, node.output[0])


def _attr(node, name, default):
    for a in node.attribute:
        if a.name == name:
            v = helper.get_attribute_value(a)
            return v.decode() if isinstance(v, bytes) else v
    return default


def _onnx_pads(pads):
    """ONNX ``(y0, x0, y1, x1)`` is already ``(top, left, bottom, right)``."""
    pads = [int(p) for p in pads]
    if len(pads) != 4:
        _fail(f"pads {pads} must have 4 values")
    if min(pads) < 0:
        _fail(f"negative pads {pads} are not supported")
    return tuple(pads)


def _check_auto_pad(node):
    auto_pad = _attr(node, "auto_pad", "NOTSET")
    if auto_pad != "NOTSET":
        _fail(f"auto_pad={auto_pad} is not supported (only explicit pads)")


def _check_conv_attrs(node, wshape):
    group = _attr(node, "group", 1)
    if group != 1:
        _fail(f"grouped convolution (group={group}) is not supported")
    dil = list(_attr(node, "dilations", [1, 1]))
    if any(d != 1 for d in dil):
        _fail(f"dilated convolution (dilations={dil}) is not supported")
    _check_auto_pad(node)
    ks = _attr(node, "kernel_shape", None)
    if ks is not None and tuple(ks) != tuple(wshape[2:]):
        _fail(f"kernel_shape {list(ks)} does not match the weights {list(wshape[2:])}")
    strides = list(_attr(node, "strides", [1, 1]))
    if len(strides) != 2 or min(strides) < 1:
        _fail(f"strides {strides} are not supported")


def _check_pool_attrs(node):
    _check_auto_pad(node)
    if _attr(node, "ceil_mode", 0):
        _fail("ceil_mode=1 is not supported")
    dil = list(_attr(node, "dilations", [1, 1]))
    if any(d != 1 for d in dil):
        _fail(f"dilations={dil} are not supported")


def _check_gemm_attrs(node):
    if _attr(node, "transA", 0):
        _fail("transA=1 is not supported")
    for name in ("alpha", "beta"):
        v = _attr(node, name, 1.0)
        if v != 1.0:
            _fail(f"{name}={v} is not supported (only 1)")


def _to_int8(values):
    values = np.asarray(values)
    if values.dtype == np.uint8:
        return (values.astype(np.int16) - 128).astype(np.int8)
    return values.astype(np.int8)
