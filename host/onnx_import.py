"""Import int8 ONNX models into the quantized IR (:mod:`fpgacnn.host.layers`).

Two formats, as ``onnxruntime.quantization.quantize_static`` writes them, and
mixtures of both:

- QDQ: float operators between ``DequantizeLinear`` (of int8 activations and
  constant int8/int32 weights and biases) and ``QuantizeLinear``. Each float
  operator becomes one layer whose output quantization is that of the
  ``QuantizeLinear`` that follows it (shape-only operators between them,
  Reshape, Flatten, Squeeze, Unsqueeze, add a Reshape layer).
- QOperator: ``QLinearConv``, ``QLinearMatMul``, ``QGemm``, ``QLinearAdd``,
  ``QLinearAveragePool``, ``QLinearGlobalAveragePool``, ``QLinearConcat``,
  ``QLinearSigmoid``, ``QLinearSoftmax``, and ``MaxPool``, ``Resize``,
  ``Flatten``, ``Reshape``, ``Squeeze``, ``Unsqueeze`` directly on int8
  tensors (which keep their quantization).

What exporters write around that is resolved at import: ``auto_pad``,
``ceil_mode``, negative axes, the ``Shape -> Gather -> Unsqueeze -> Concat ->
Reshape`` chain of ``x.view(x.size(0), -1)`` (evaluated on the static
shapes), 1-D models ``(N, C, L)`` (run as 2-D with ``H = 1``), ``ReduceMean``
/ ``ReduceMax`` over H and W (global pools), and a float Softmax or Sigmoid
after the last ``DequantizeLinear`` (the model's
:class:`~fpgacnn.host.model.FloatHead`).

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
from .model import FloatHead, QuantizedModel, TensorSpec

__all__ = ["load_onnx"]

_DOMAINS = ("", "ai.onnx", "com.microsoft")
_INT_DTYPES = {np.dtype(np.int8), np.dtype(np.uint8)}
_FOLD_BN = ("quantize the float model with `fpgacnn quantize`, which folds it into the Conv or "
            "Gemm before it (onnxruntime's quant_pre_process folds it after a Conv only)")


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


def _node_name(node):
    return node.name or node.output[0]


class _QTensor:
    """An int8 activation tensor: scale, int8-domain zero point, per-image IR shape.

    ``one_d``: the ONNX tensor is ``(N, C, L)`` and the IR holds it as
    ``(C, 1, L)``. ``source``: for a tensor whose quantization is not known yet
    (an integer graph input, and what shape-only operators make of it), the
    tensor it shares its quantization with.
    """

    def __init__(self, scale, zp, shape, one_d=False, source=None):
        self.scale, self.zp, self.shape = scale, zp, tuple(shape)
        self.one_d, self.source = one_d, source

    @property
    def onnx_shape(self):
        """Per-image shape as the ONNX graph sees it."""
        return (self.shape[0], self.shape[2]) if self.one_d else self.shape


def _ir_shape(onnx_shape):
    """Per-image ONNX shape -> (IR shape, one_d)."""
    shape = tuple(int(d) for d in onnx_shape)
    if len(shape) == 1 or len(shape) == 3:
        return shape, False
    if len(shape) == 2:
        return (shape[0], 1, shape[1]), True
    _fail(f"a tensor of per-image shape {shape} is not supported (only (C,), (C, L), (C, H, W))")


class _QConst:
    """A DequantizeLinear of a constant: integer values, scales, zero points, axis."""

    def __init__(self, values, scale, zp, axis):
        self.values, self.scale, self.zp, self.axis = values, scale, zp, axis


class _Recipe:
    """How to build a layer once its output quantization is known.

    ``make(y_scale, y_zp, lo, hi, out)`` builds it; ``lo_f``/``hi_f`` are the
    float clamp bounds of fused Relu/Clip, quantized with the output scale.
    ``shape``/``one_d`` describe its output; ``reshapes`` are shape-only
    operators between the float operator and its QuantizeLinear, each
    ``(node, ir_shape, one_d)``.
    """

    def __init__(self, node, make, shape, one_d, lo_f=-math.inf, hi_f=math.inf, reshapes=()):
        self.node, self.make, self.lo_f, self.hi_f = node, make, lo_f, hi_f
        self.main_shape, self.main_one_d = tuple(shape), one_d
        self.reshapes = tuple(reshapes)

    @property
    def shape(self):
        return self.reshapes[-1][1] if self.reshapes else self.main_shape

    @property
    def one_d(self):
        return self.reshapes[-1][2] if self.reshapes else self.main_one_d

    @property
    def onnx_shape(self):
        s = self.shape
        return (s[0], s[2]) if self.one_d else s

    def _copy(self, **kw):
        args = dict(node=self.node, make=self.make, shape=self.main_shape, one_d=self.main_one_d,
                    lo_f=self.lo_f, hi_f=self.hi_f, reshapes=self.reshapes)
        args.update(kw)
        return _Recipe(**args)

    def with_bounds(self, lo_f, hi_f):
        return self._copy(lo_f=max(self.lo_f, lo_f), hi_f=min(self.hi_f, hi_f))

    def then_reshape(self, node, shape, one_d):
        return self._copy(reshapes=self.reshapes + ((node, tuple(shape), one_d),))

    def build(self, scale, zp, out):
        """The layers, in order, the last writing ``out``: ``[(layer, one_d), ...]``."""
        def q(v):
            return int(np.clip(np.rint(v / scale) + zp, -128, 127))
        lo = -128 if self.lo_f == -math.inf else q(self.lo_f)
        hi = 127 if self.hi_f == math.inf else q(self.hi_f)
        if lo > hi:
            _fail(f"clamp range [{self.lo_f}, {self.hi_f}] is empty after quantization")
        main_out = self.node.output[0] if self.reshapes else out
        built = [(self.make(scale, zp, lo, hi, main_out), self.main_one_d)]
        for i, (node, shape, one_d) in enumerate(self.reshapes):
            src = built[-1][0]
            dst = out if i == len(self.reshapes) - 1 else node.output[0]
            built.append((_reshape_layer(_node_name(node), src.output, dst, src.output_shape, shape,
                                         scale, zp), one_d))
        return built


def _reshape_layer(name, src, out, in_shape, shape, scale, zp):
    if len(shape) == 1 and len(in_shape) != 1:
        return L.Flatten(name, [src], out, in_shape, scale, zp)
    return L.Reshape(name, [src], out, in_shape, shape, scale, zp)


class _Importer:
    def __init__(self, proto, name, path):
        self.graph = proto.graph
        self.name = name
        self.path = path
        # Exporters and onnxruntime's pre-processing declare domains no node
        # uses (ai.onnx.ml, com.microsoft.nchwc, ...): only the nodes count.
        self.opset = max([op.version for op in proto.opset_import if op.domain in ("", "ai.onnx")],
                         default=1)
        self.consts = {i.name: numpy_helper.to_array(i) for i in self.graph.initializer}
        self.uses = {}      # readers of each tensor's values (Shape reads only its shape)
        for node in self.graph.node:
            if node.op_type == "Shape":
                continue
            for t in node.input:
                if t:
                    self.uses[t] = self.uses.get(t, 0) + 1
        for o in self.graph.output:
            self.uses[o.name] = self.uses.get(o.name, 0) + 1
        self.qt = {}        # int8 tensor name -> _QTensor
        self.fview = {}     # float tensor name -> int8 tensor it dequantizes
        self.qconst = {}    # float tensor name -> _QConst
        self.pending = {}   # float tensor name -> _Recipe (waits for its QuantizeLinear)
        self.recipes = {}   # int8 tensor name -> (_Recipe, tensors it produced)
        self.alias = {}     # int8 tensor name -> int8 tensor it equals
        self.kept = {}      # float output of a kept Relu/Clip -> quantization of its input
        self.layers = {}    # int8 tensor name -> layer producing it
        self.order = []     # int8 tensor names in production order
        self.waiting = []   # (recipe, out): layers that wait for their input's quantization
        self.svals = {}     # shape values: name -> 1-D or 0-D object array, None = the batch
        self.heads = {}     # float graph output -> (int8 tensor, FloatHead)
        self.input_tensor = None

    # -- driver ------------------------------------------------------------

    def run(self):
        inputs = [i for i in self.graph.input if i.name not in self.consts]
        if len(inputs) != 1:
            self._parameter_inputs({i.name for i in inputs})
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
            except (IndexError, KeyError, TypeError, AttributeError) as e:
                # a form no handler foresaw: still one line that names the node
                self._node_error(node, f"cannot be imported ({type(e).__name__}: {_one_line(e)}); "
                                       "please report this model")
        return self._finish()

    def _parameter_inputs(self, names):
        """Refuse, naming the node, a graph input read as a scale, zero point,
        weights or bias: fpgacnn needs those as constant initializers."""
        for node in self.graph.node:
            for i, t in enumerate(node.input):
                role = _constant_role(node, i) if t in names else None
                if role:
                    self._node_error(node, f"{role} {t!r} is a graph input; fpgacnn needs it as a "
                                           "constant initializer")

    def _node_error(self, node, reason):
        raise ModelError(f"node {_node_name(node)!r} ({node.op_type}): {reason}")

    def _graph_input(self, vi):
        kind = vi.type.WhichOneof("value")
        if kind != "tensor_type":
            what = {"sequence_type": "a sequence", "optional_type": "an optional",
                    "map_type": "a map"}.get(kind, "not typed as a tensor")
            raise ModelError(f"{self.path}: graph input {vi.name!r} is {what}; fpgacnn takes "
                             "one tensor")
        t = vi.type.tensor_type
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(t.elem_type)) if t.elem_type else None
        if dtype not in (np.dtype(np.float32), np.dtype(np.int8), np.dtype(np.uint8)):
            raise ModelError(f"{self.path}: graph input {vi.name!r} has type {dtype}; "
                             "fpgacnn takes float32, int8 or uint8")
        dims = list(t.shape.dim)
        if len(dims) not in (2, 3, 4) or any(not d.HasField("dim_value") or d.dim_value < 1
                                             for d in dims[1:]):
            raise ModelError(f"{self.path}: graph input {vi.name!r} must be (N, C, H, W), (N, C, L) "
                             "or (N, C) with fixed C, H, W, L")
        self.in_name, self.in_dtype = vi.name, dtype
        self.in_shape = tuple(d.dim_value for d in dims[1:])
        # A fixed batch size in the file (an export without a dynamic batch axis):
        # a Reshape target may state it instead of 0 / -1.
        self.in_batch = dims[0].dim_value if dims[0].HasField("dim_value") else None
        if dtype != np.float32:
            # An integer graph input is itself the int8 tensor; its quantization
            # comes from its first consumer that states one.
            self._input_tensor(vi.name, None, None)

    def _input_tensor(self, name, scale, zp):
        """The int8 tensor behind the graph input; a 1-D input (C, L) is read
        by the layers as (C, 1, L) through a Reshape layer."""
        self.qt[name] = _QTensor(scale, zp, self.in_shape)
        self.input_tensor = name
        if len(self.in_shape) == 2:
            ir, _ = _ir_shape(self.in_shape)
            view = f"{name}/2d"

            def make(y_scale, y_zp, lo, hi, out):
                return L.Reshape(f"{name}/2d", [name], out, self.in_shape, ir, y_scale, y_zp)
            self._passthrough(_Recipe(None, make, ir, True), name, view)
            self.alias[name] = view

    def _finish(self):
        out = self.graph.output[0].name
        head = None
        if out in self.heads:
            tensor, head = self.heads[out]
            dtype = np.dtype(np.float32)
        elif out in self.fview:
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
                self._emit(recipe, scale, zp, tensor)
            except _NodeError as e:
                self._node_error(recipe.node, str(e))
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
            raise ModelError(f"{self.path}: graph input {self.in_name!r} is never read with a scale "
                             "(no QuantizeLinear, DequantizeLinear or QLinear operator states its "
                             "quantization)")
        qout = self.qt[tensor]
        if qout.one_d:  # back to the (C, L) of the ONNX graph
            flat = f"{tensor}/1d"
            self._produce(flat, L.Reshape(flat, [tensor], flat, qout.shape, qout.onnx_shape,
                                          qout.scale, qout.zp), False)
            tensor, qout = flat, self.qt[flat]
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
            self.input_tensor, tensor, head=head)

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
        if name in self.consts or name in self.qconst or name in self.svals:
            _fail(f"{what} {name!r} is a constant; fpgacnn expects an activation here")
        _fail(f"{what} {name!r} is not an int8 tensor fpgacnn computes")

    def _is_activation(self, name):
        return (name in self.fview or name in self.pending or self._resolve(name) in self.qt
                or name == self.in_name)

    def _onnx_shape(self, name):
        """Per-image ONNX shape of an activation (float view, int8 tensor, float
        result waiting for its QuantizeLinear, or the float graph input)."""
        if name in self.pending:
            return self.pending[name].onnx_shape
        if name == self.in_name and name not in self.qt:
            return self.in_shape
        return self.qt[self._activation(name)].onnx_shape

    def _bind_qparams(self, t, scale, zp):
        """Check (or, for an integer graph input, set) an int8 tensor's quantization."""
        q = self.qt[t]
        if q.scale is None:
            root = t
            while self.qt[root].source is not None:
                root = self.qt[root].source
            self.qt[root].scale, self.qt[root].zp = scale, zp
            self._release()
        elif not (np.isclose(q.scale, scale, rtol=1e-6, atol=0) and q.zp == zp):
            _fail(f"tensor {t!r} is read with scale {scale}, zero point {zp} but was written with "
                  f"scale {q.scale}, zero point {q.zp}")

    def _release(self):
        """Build the layers whose input quantization has become known."""
        progress = True
        while progress:
            progress = False
            for item in list(self.waiting):
                recipe, out = item
                src = self.qt[self.qt[out].source]
                if src.scale is not None:
                    self.waiting.remove(item)
                    self._emit(recipe, src.scale, src.zp, out)
                    progress = True

    def _produce(self, out, layer, one_d):
        if out in self.layers:
            _fail(f"tensor {out!r} is written twice")
        q = self.qt.get(out)
        if q is not None and q.scale is not None:
            _fail(f"tensor {out!r} is written twice")
        self.qt[out] = _QTensor(layer.y_scale, layer.y_zero_point, layer.output_shape, one_d)
        self.layers[out] = layer
        self.order.append(out)

    def _emit(self, recipe, scale, zp, out):
        built = recipe.build(scale, zp, out)
        for layer, one_d in built:
            self._produce(layer.output, layer, one_d)
        self.recipes[out] = (recipe, [layer.output for layer, _ in built])

    def _passthrough(self, recipe, x, out):
        """A layer that keeps the quantization of its input ``x`` (an int8 tensor):
        built now, or when ``x``'s quantization becomes known."""
        q = self.qt[x]
        if q.scale is not None:
            self._emit(recipe, q.scale, q.zp, out)
        else:
            self.qt[out] = _QTensor(None, None, recipe.shape, recipe.one_d, source=x)
            self.waiting.append((recipe, out))

    def _recipe(self, node, make, x):
        """A recipe for ``make``; its output shape comes from building it once with
        the input's quantization (or a placeholder while that is unknown)."""
        q = self.qt[x]
        probe = make(q.scale or 1.0, q.zp or 0, -128, 127, node.output[0])
        return _Recipe(node, make, probe.output_shape, self._out_one_d(probe, q))

    @staticmethod
    def _out_one_d(layer, q):
        """A 1-D (C, 1, L) input gives a 1-D output, unless the layer flattened it."""
        return q.one_d and len(layer.output_shape) == 3

    def _defer(self, node, make, x):
        self.pending[node.output[0]] = self._recipe(node, make, x)

    def _float_or_int8(self, node, make, x):
        """A QDQ float operator waits for its QuantizeLinear; the same operator on
        an int8 tensor (QOperator) keeps that tensor's quantization."""
        src = node.input[0]
        if src in self.fview:
            self._defer(node, make, x)
        else:
            self._passthrough(self._recipe(node, make, x), x, node.output[0])

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
        if values.ndim <= cout_axis:
            _fail(f"{what} of shape {values.shape} have no output-channel axis {cout_axis}")
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
            values = _per_channel(c.values, cout, "bias").astype(np.int64)
            bscale = np.asarray(c.scale, np.float64).reshape(-1)
            if bscale.size not in (1, cout):
                _fail(f"bias scales (shape {np.shape(c.scale)}) must be per tensor or per channel")
            bscale = np.broadcast_to(bscale, (cout,))
            if not np.allclose(bscale, target, rtol=1e-5, atol=0):
                values = np.rint(values * bscale / target).astype(np.int64)
        elif name in self.consts:
            raw = _per_channel(self.consts[name], cout, "bias")
            values = (np.rint(raw.astype(np.float64) / target).astype(np.int64)
                      if raw.dtype.kind == "f" else raw.astype(np.int64))
        else:
            _fail(f"bias {name!r} must be a constant")
        if values.min(initial=0) < -2**31 or values.max(initial=0) >= 2**31:
            _fail("bias does not fit int32")
        return values.astype(np.int32)

    # -- boundary operators -----------------------------------------------

    def _op_Constant(self, node):
        attr = {a.name: a for a in node.attribute}
        if "value" in attr:
            self.consts[node.output[0]] = numpy_helper.to_array(attr["value"].t)
        elif "value_int" in attr or "value_ints" in attr:
            self.consts[node.output[0]] = np.asarray(_attr(node, "value_int", None) if "value_int" in attr
                                                     else _attr(node, "value_ints", None), np.int64)
        elif "value_float" in attr or "value_floats" in attr:
            self.consts[node.output[0]] = np.asarray(
                _attr(node, "value_float", None) if "value_float" in attr
                else _attr(node, "value_floats", None), np.float32)
        else:
            _fail("only Constant with a tensor, integer or float 'value' is supported")

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
        elif src in self.svals:
            self.svals[out] = self.svals[src]
        else:
            self.alias[out] = self._activation(src)

    def _op_Dropout(self, node):
        if len(node.output) > 1 and node.output[1] and self.uses.get(node.output[1]):
            _fail("the mask output is not supported (inference has none)")
        if len(node.input) > 2 and node.input[2]:
            if bool(np.asarray(self._const(node.input[2], "training_mode")).reshape(())):
                _fail("training_mode=1 is not supported")
        self._op_Identity(node)

    def _op_QuantizeLinear(self, node):
        if np.asarray(self._const(node.input[1], "output scale")).size > 1:
            _fail("per-axis activation quantization is not supported")
        scale, zp = self._qparams(node, 1, 2, "output")
        src, out = node.input[0], node.output[0]
        if src == self.in_name and self.in_dtype == np.float32:
            if self.input_tensor is None:
                self._input_tensor(out, scale, zp)
            else:
                self.alias[out] = self.input_tensor
                self._bind_qparams(self.input_tensor, scale, zp)
        elif src in self.pending:
            self._emit(self.pending[src], scale, zp, out)
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
        if np.asarray(self._const(node.input[1], "input scale")).size > 1:
            _fail("per-axis activation quantization is not supported")
        scale, zp = self._qparams(node, 1, 2, "input")
        self._bind_qparams(t, scale, zp)
        self.fview[out] = t

    # -- float operators (QDQ): recipes that wait for their QuantizeLinear --

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
            what = ("is the (dequantized) graph input"
                    if t == self._resolve(self.input_tensor or "") else "is also read by other nodes")
            _fail(f"its input {src!r} {what}; fpgacnn fuses a Relu / Clip into the "
                  "layer that writes its input and has no standalone activation layer")
        # Rebuilt with the activation's output quantization when its QuantizeLinear
        # comes, or with the input's when the float activation is the graph output.
        recipe, produced = self.recipes.pop(t)
        self.pending[out] = recipe.with_bounds(lo_f, hi_f)
        self.kept[out] = (self.qt[t].scale, self.qt[t].zp)
        for p in produced:
            self.layers.pop(p)
            self.order.remove(p)
            del self.qt[p]

    def _op_BatchNormalization(self, node):
        _fail(f"a BatchNormalization left in a quantized model is not supported; {_FOLD_BN}")

    def _op_Conv(self, node):
        if len(node.input) < 2:
            _fail("Conv needs weights")
        x = self._activation(node.input[0])
        w, w_scale = self._weight(node.input[1], 0)
        bias_name = node.input[2] if len(node.input) > 2 else ""
        self._defer(node, self._conv_maker(node, x, w, w_scale, bias_name), x)

    def _conv_maker(self, node, x, w, w_scale, bias_name):
        qx = self.qt[x]
        if w.ndim == 3:
            if not qx.one_d:
                _fail(f"1-D weights need a (N, C, L) input; {x!r} has per-image shape {qx.onnx_shape}")
            w = w[:, :, None, :]
        elif w.ndim != 4:
            _fail(f"only 1-D and 2-D convolution is supported (weights have {w.ndim} axes)")
        elif len(qx.shape) != 3 or qx.one_d:
            _fail(f"input {x!r} must be CHW, it has per-image shape {qx.onnx_shape}")
        group = int(_attr(node, "group", 1))
        cout, cin_g = w.shape[:2]
        if group < 1 or cin_g * group != qx.shape[0] or cout % group:
            _fail(f"group={group} does not fit {qx.shape[0]} input and {cout} output channels "
                  f"(weights {list(w.shape)})")
        ks = _attr(node, "kernel_shape", None)
        kernel = w.shape[2:] if not qx.one_d else w.shape[3:]
        if ks is not None and tuple(ks) != tuple(kernel):
            _fail(f"kernel_shape {list(ks)} does not match the weights {list(kernel)}")
        dilation = _spatial(node, "dilations", 1, qx.one_d)
        stride = _spatial(node, "strides", 1, qx.one_d)
        pads = _resolve_pads(node, qx.shape[1:], w.shape[2:], stride, dilation, qx.one_d)
        bias = self._bias(bias_name, _xq(qx)[0], w_scale, cout)
        name = _node_name(node)

        def make(scale, zp, lo, hi, out):
            xs, xz = _xq(qx)
            if group == 1 and dilation == (1, 1):
                return L.Conv(name, [x], out, qx.shape, w, bias, xs, xz, w_scale, scale, zp,
                              stride=stride, pads=pads, lo=lo, hi=hi)
            if group == 1:
                return L.DilatedConv(name, [x], out, qx.shape, w, bias, xs, xz, w_scale, scale,
                                     zp, stride=stride, pads=pads, lo=lo, hi=hi, dilation=dilation)
            return L.GroupedConv(name, [x], out, qx.shape, w, bias, xs, xz, w_scale, scale, zp,
                                 stride=stride, pads=pads, lo=lo, hi=hi, group=group,
                                 dilation=dilation)
        return make

    def _gemm_maker(self, node, x, w, w_scale, bias):
        qx = self.qt[x]
        if len(qx.shape) != 1:
            _fail(f"input {x!r} must be flat (N, C), it has per-image shape {qx.onnx_shape}; "
                  "add a Flatten")
        name = _node_name(node)

        def make(scale, zp, lo, hi, out):
            xs, xz = _xq(qx)
            return L.Gemm(name, [x], out, qx.shape, w, bias, xs, xz, w_scale, scale, zp,
                          lo=lo, hi=hi)
        return make

    def _op_MatMul(self, node):
        x = self._activation(node.input[0])
        if node.input[1] not in self.qconst:
            _fail("the second MatMul operand must be constant int8 weights")
        w, w_scale = self._weight(node.input[1], 1)   # (Cin, Cout), per column
        if w.ndim != 2:
            _fail(f"MatMul weights must be 2-D, not {w.ndim}-D")
        self._defer(node, self._gemm_maker(node, x, np.ascontiguousarray(w.T), w_scale, None), x)

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
        self._defer(node, self._gemm_maker(node, x, w, w_scale, bias), x)

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
                dtype = np.asarray(self.consts[name]).dtype
                _fail(f"operand {name!r} is a constant ({dtype}) without DequantizeLinear; it must "
                      "be a quantized constant (DequantizeLinear of an int8 initializer)")
            else:
                t = self._activation(name, f"operand {i}")
                ops.append(("tensor", t, self.qt[t].scale, self.qt[t].zp))
        make, x = self._add_maker(node, ops)
        self._defer(node, make, x)

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
                _fail(f"operands have per-image shapes {self.qt[a].onnx_shape} and "
                      f"{self.qt[b].onnx_shape}; broadcasting is not supported")
            inputs.append(b)
        else:
            constant = b
            if constant.ndim == len(self.qt[a].onnx_shape) + 1 and constant.shape[0] == 1:
                constant = constant[0]  # a batch axis of 1
            if self.qt[a].one_d and constant.ndim == 2:
                constant = constant[:, None, :]
            try:
                if np.broadcast_shapes(constant.shape, shape) != shape:
                    raise ValueError
            except ValueError:
                _fail(f"constant operand of shape {b.shape} does not broadcast to "
                      f"{self.qt[a].onnx_shape}")
        name = _node_name(node)

        def make(scale, zp, lo, hi, out):
            return L.Add(name, inputs, out, shape, sa, za, sb, zb, scale, zp, lo=lo, hi=hi,
                         constant=constant)
        return make, a

    # -- pooling -----------------------------------------------------------

    def _pool_maker(self, node, x, kind):
        qx = self.qt[x]
        if len(qx.shape) != 3:
            _fail(f"input {x!r} must be CHW or (C, L), it has per-image shape {qx.onnx_shape}")
        name = _node_name(node)
        if kind in ("GlobalAveragePool", "GlobalMaxPool"):
            if _attr(node, "channels_last", 0):
                _fail("channels_last=1 is not supported")
            return self._global_pool_maker(node, x, kind, keepdims=True)
        if _attr(node, "channels_last", 0):
            _fail("channels_last=1 is not supported")
        kernel = _attr(node, "kernel_shape", None)
        if kernel is None or len(kernel) != (1 if qx.one_d else 2):
            _fail(f"kernel_shape {kernel} must give {'one dimension' if qx.one_d else 'two dimensions'}")
        kernel = (1, *kernel) if qx.one_d else tuple(kernel)
        dil = _spatial(node, "dilations", 1, qx.one_d)
        if dil != (1, 1):
            _fail(f"dilations={list(_attr(node, 'dilations', []))} are not supported")
        stride = _spatial(node, "strides", 1, qx.one_d)
        pads = _resolve_pads(node, qx.shape[1:], kernel, stride, (1, 1), qx.one_d)
        auto = _attr(node, "auto_pad", "NOTSET")
        ceil = bool(_attr(node, "ceil_mode", 0)) and auto in ("NOTSET", "VALID")
        if kind == "MaxPool":
            if _attr(node, "storage_order", 0):
                _fail("storage_order=1 is not supported")
            if len(node.output) > 1 and node.output[1]:
                _fail("the Indices output is not supported")

            def make(scale, zp, lo, hi, out):
                xs, xz = _xq(qx)
                return L.MaxPool(name, [x], out, qx.shape, kernel, stride, pads, xs, xz,
                                 scale, zp, lo=lo, hi=hi, ceil_mode=ceil)
            return make
        cip = _attr(node, "count_include_pad", 0)
        # onnxruntime's QLinearAveragePool counts the ceil_mode overhang as padding
        # (count_include_pad then divides by the whole kernel); its float AveragePool,
        # like ONNX and PyTorch, does not.
        overhang_is_pad = node.op_type == "QLinearAveragePool"

        def make(scale, zp, lo, hi, out):
            xs, xz = _xq(qx)
            layer = L.AveragePool(name, [x], out, qx.shape, kernel, stride, pads, cip, xs, xz,
                                  scale, zp, lo=lo, hi=hi, ceil_mode=ceil)
            if overhang_is_pad and layer.extra != (0, 0):
                t, left, b, r = pads
                layer = L.AveragePool(name, [x], out, qx.shape, kernel, stride,
                                      (t, left, b + layer.extra[0], r + layer.extra[1]), cip, xs,
                                      xz, scale, zp, lo=lo, hi=hi)
            return layer
        return make

    def _global_pool_maker(self, node, x, kind, keepdims):
        qx = self.qt[x]
        if len(qx.shape) != 3:
            _fail(f"input {x!r} must be CHW or (C, L), it has per-image shape {qx.onnx_shape}")
        name = _node_name(node)
        cls = L.GlobalAveragePool if kind == "GlobalAveragePool" else L.GlobalMaxPool

        def make(scale, zp, lo, hi, out):
            xs, xz = _xq(qx)
            return cls(name, [x], out, qx.shape, xs, xz, scale, zp, lo=lo, hi=hi,
                       keepdims=keepdims)
        return make

    def _op_MaxPool(self, node):
        x = self._activation(node.input[0])
        self._float_or_int8(node, self._pool_maker(node, x, "MaxPool"), x)

    def _op_AveragePool(self, node):
        x = self._float_input(node)
        self._defer(node, self._pool_maker(node, x, "AveragePool"), x)

    def _op_GlobalAveragePool(self, node):
        x = self._float_input(node)
        self._defer(node, self._pool_maker(node, x, "GlobalAveragePool"), x)

    def _op_GlobalMaxPool(self, node):
        x = self._activation(node.input[0])
        self._float_or_int8(node, self._pool_maker(node, x, "GlobalMaxPool"), x)

    def _reduce(self, node, kind):
        x = self._float_input(node)
        qx = self.qt[x]
        rank = len(qx.onnx_shape) + 1
        if self.opset >= 18 and len(node.input) > 1 and node.input[1]:
            axes = self._int_values(node.input[1], "axes")
        else:
            axes = _attr(node, "axes", None)
        if axes is None or len(axes) == 0:
            if _attr(node, "noop_with_empty_axes", 0):
                _fail("noop_with_empty_axes=1 without axes is not supported")
            axes = list(range(rank))
        axes = sorted(_norm_axis(a, rank) for a in np.asarray(axes).reshape(-1))
        spatial = list(range(2, rank))
        if axes != spatial or len(qx.shape) != 3:
            _fail(f"{node.op_type} over axes {axes} is not supported (only the spatial axes "
                  f"{spatial} of an (N, C, ...) tensor: a global pool)")
        keepdims = bool(_attr(node, "keepdims", 1))
        self._defer(node, self._global_pool_maker(node, x, kind, keepdims), x)

    def _op_ReduceMean(self, node):
        self._reduce(node, "GlobalAveragePool")

    def _op_ReduceMax(self, node):
        self._reduce(node, "GlobalMaxPool")

    def _float_input(self, node):
        if node.input[0] not in self.fview:
            _fail(f"input {node.input[0]!r} must be dequantized int8 (DequantizeLinear)")
        return self._activation(node.input[0])

    # -- shape-only operators -------------------------------------------------

    def _reshape_to(self, node, new_onnx_shape):
        """Reshape the activation ``node.input[0]`` to a per-image ONNX shape: a
        Reshape/Flatten layer, after a float operator (QDQ), on a dequantized
        tensor, or on an int8 tensor (QOperator)."""
        src, out = node.input[0], node.output[0]
        shape, one_d = _ir_shape(new_onnx_shape)
        if src in self.pending:
            if self.uses.get(src, 0) != 1:
                _fail(f"its input {src!r} is also read by other nodes")
            self.pending[out] = self.pending[src].then_reshape(node, shape, one_d)
            return
        x = self._activation(src)
        qx = self.qt[x]
        name = _node_name(node)

        def make(scale, zp, lo, hi, out):
            xs, xz = _xq(qx)
            if not (np.isclose(scale, xs, rtol=1e-6, atol=0) and zp == xz) or (lo, hi) != (-128, 127):
                _fail(f"a {node.op_type} that changes the quantization or clamps is not supported")
            return _reshape_layer(name, x, out, qx.shape, shape, xs, xz)
        recipe = _Recipe(node, make, shape, one_d)
        if src in self.fview:
            self.pending[out] = recipe
        else:
            self._passthrough(recipe, x, out)

    def _op_Flatten(self, node):
        if not self._is_activation(node.input[0]):
            _fail(f"input {node.input[0]!r} is not an activation")
        shape = self._onnx_shape(node.input[0])
        rank = len(shape) + 1
        axis = _norm_axis(_attr(node, "axis", 1), rank)
        if axis != 1:
            _fail(f"axis={_attr(node, 'axis', 1)} is not supported on a rank-{rank} tensor "
                  f"(only 1 or {1 - rank}: flatten each image, keep the batch axis)")
        self._reshape_to(node, (int(np.prod(shape)),))

    def _op_Reshape(self, node):
        src = node.input[0]
        if not self._is_activation(src):
            return self._shape_op(node, lambda v, t: v.reshape([int(d) for d in t]), 2)
        target = list(self._int_values(node.input[1], "Reshape shape").reshape(-1))
        shape = self._onnx_shape(src)
        if _attr(node, "allowzero", 0) and 0 in target:
            _fail("allowzero=1 with a zero in the shape is not supported")
        self._reshape_to(node, _reshape_target(target, shape, self.in_batch))

    def _op_Squeeze(self, node):
        src = node.input[0]
        axes = self._axes(node)
        if not self._is_activation(src):
            return self._shape_op(node, lambda v: np.squeeze(v, axis=tuple(axes)) if axes
                                  else np.squeeze(v), 1)
        shape = self._onnx_shape(src)
        rank = len(shape) + 1
        if axes is None:
            axes = [i + 1 for i, d in enumerate(shape) if d == 1]
        axes = sorted({_norm_axis(a, rank) for a in axes})
        if 0 in axes:
            _fail("squeezing the batch axis is not supported")
        if any(shape[a - 1] != 1 for a in axes):
            _fail(f"axes {axes} of a tensor of shape (N, {', '.join(map(str, shape))}) are not all 1")
        self._reshape_to(node, tuple(d for i, d in enumerate(shape) if i + 1 not in axes))

    def _op_Unsqueeze(self, node):
        src = node.input[0]
        axes = self._axes(node)
        if axes is None:
            _fail("axes are missing")
        if not self._is_activation(src):
            return self._shape_op(node, lambda v: _unsqueeze(v, axes), 1)
        shape = list(self._onnx_shape(src))
        rank = len(shape) + 1 + len(axes)
        axes = sorted({_norm_axis(a, rank) for a in axes})
        if 0 in axes:
            _fail("a new batch axis is not supported")
        for a in axes:
            shape.insert(a - 1, 1)
        self._reshape_to(node, tuple(shape))

    def _axes(self, node):
        if self.opset >= 13:
            return (list(self._int_values(node.input[1], "axes").reshape(-1))
                    if len(node.input) > 1 and node.input[1] else None)
        axes = _attr(node, "axes", None)
        return None if axes is None else list(axes)

    # -- shape values: Shape -> Gather -> Unsqueeze -> Concat -> Reshape ------

    def _op_Shape(self, node):
        shape = (None, *self._onnx_shape(node.input[0]))
        start, end = _attr(node, "start", 0), _attr(node, "end", None)
        self._set_value(node.output[0], np.asarray(shape, dtype=object)[slice(start, end)])

    def _op_Gather(self, node):
        if self._is_activation(node.input[0]):
            _fail("Gather of an activation is not supported")
        axis = _attr(node, "axis", 0)
        self._shape_op(node, lambda v, i: np.take(v, i.astype(np.int64), axis=axis), 2)

    def _op_Concat(self, node):
        if not any(self._is_activation(t) for t in node.input):
            axis = _attr(node, "axis", 0)
            return self._shape_op(node, lambda *vs: np.concatenate(
                [np.atleast_1d(v) for v in vs], axis=axis), len(node.input))
        xs = [self._activation(t, f"input {i}") for i, t in enumerate(node.input)]
        make = self._concat_maker(node, xs, [(self.qt[x].scale, self.qt[x].zp) for x in xs])
        self._defer(node, make, xs[0])

    def _concat_maker(self, node, xs, quants):
        qs = [self.qt[x] for x in xs]
        rank = len(qs[0].onnx_shape) + 1
        axis = _norm_axis(_attr(node, "axis", 1), rank)
        if axis != 1:
            _fail(f"concatenation along axis {axis} is not supported (only the channels, axis 1)")
        if any(q.one_d != qs[0].one_d or len(q.shape) != len(qs[0].shape) for q in qs):
            _fail("inputs of different ranks")
        name = _node_name(node)

        def make(scale, zp, lo, hi, out):
            return L.Concat(name, xs, out, [q.shape for q in qs], [s for s, _ in quants],
                            [z for _, z in quants], scale, zp, lo=lo, hi=hi)
        return make

    def _op_Slice(self, node):
        if self._is_activation(node.input[0]):
            _fail("Slice of an activation is not supported")
        if self.opset < 10:
            _fail("Slice before opset 10 is not supported")
        n = len(node.input)

        def slice_(v, starts, ends, axes=None, steps=None):
            axes = range(len(starts)) if axes is None else axes
            steps = [1] * len(starts) if steps is None else steps
            index = [slice(None)] * v.ndim
            for a, s, e, k in zip(axes, starts, ends, steps):
                index[int(a)] = slice(int(s), int(e), int(k))
            return v[tuple(index)]
        self._shape_op(node, slice_, n)

    def _op_Cast(self, node):
        if self._is_activation(node.input[0]):
            _fail("Cast of an activation is not supported")
        to = np.dtype(helper.tensor_dtype_to_np_dtype(_attr(node, "to", 1)))
        self._shape_op(node, lambda v: v if v.dtype == object else v.astype(to), 1)

    def _shape_op(self, node, fn, n_inputs):
        """Evaluate an operator on shape values and constants (None = the batch)."""
        args = [self._value(t) if t else None for t in node.input[:n_inputs]]
        while args and args[-1] is None:
            args.pop()
        try:
            result = fn(*args)
        except (ValueError, IndexError, TypeError) as e:
            _fail(f"cannot evaluate it on {[None if a is None else a.tolist() for a in args]}: "
                  f"{_one_line(e)}")
        self._set_value(node.output[0], np.asarray(result))

    def _value(self, name):
        if name in self.svals:
            return self.svals[name]
        if name in self.consts:
            return np.asarray(self.consts[name])
        _fail(f"input {name!r} is neither a constant nor a shape")

    def _set_value(self, name, value):
        if value.dtype == object and not any(v is None for v in value.reshape(-1)):
            value = value.astype(np.int64)
        if value.dtype == object:
            self.svals[name] = value
        else:
            self.consts[name] = value

    def _int_values(self, name, what):
        if name in self.svals:
            return self.svals[name]
        if name not in self.consts:
            _fail(f"{what} {name!r} must be a constant or computed from static shapes")
        v = np.asarray(self.consts[name])
        if v.dtype.kind not in "iu":
            _fail(f"{what} {name!r} must be integers, not {v.dtype}")
        return v.astype(np.int64)

    # -- resize ---------------------------------------------------------------

    def _op_Resize(self, node):
        self._resize(node, scales_name=node.input[1] if self.opset < 11 else
                     (node.input[2] if len(node.input) > 2 else ""),
                     sizes_name=node.input[3] if len(node.input) > 3 else "")

    def _resize(self, node, scales_name, sizes_name):
        x = self._activation(node.input[0])
        qx = self.qt[x]
        if len(qx.shape) != 3:
            _fail(f"input {x!r} must be CHW or (C, L), it has per-image shape {qx.onnx_shape}")
        mode = _attr(node, "mode", "nearest")
        if mode != "nearest":
            _fail(f"mode={mode} is not supported (only nearest)")
        ctm = _attr(node, "coordinate_transformation_mode", "half_pixel")
        rounding = _attr(node, "nearest_mode", "round_prefer_floor")
        if _attr(node, "keep_aspect_ratio_policy", "stretch") != "stretch":
            _fail("keep_aspect_ratio_policy other than stretch is not supported")
        in_shape = (1, *qx.onnx_shape)   # with the batch
        rank = len(in_shape)
        axes = [_norm_axis(a, rank) for a in _attr(node, "axes", list(range(rank)))]
        scales = None
        if scales_name and self._value_size(scales_name):
            scales = [float(v) for v in np.asarray(self._value(scales_name)).reshape(-1)]
        sizes = None
        if sizes_name and self._value_size(sizes_name):
            sizes = list(np.asarray(self._int_values(sizes_name, "sizes")).reshape(-1))
        full_scale, full_size = [1.0] * rank, list(in_shape)
        if sizes is not None:
            if len(sizes) != len(axes):
                _fail(f"sizes {sizes} do not match the axes {axes}")
            for a, s in zip(axes, sizes):
                if a != 0:  # the batch size (often a shape value) stays
                    full_size[a] = int(s)
                    full_scale[a] = int(s) / in_shape[a]
        elif scales is not None:
            if len(scales) != len(axes):
                _fail(f"scales {scales} do not match the axes {axes}")
            for a, s in zip(axes, scales):
                full_scale[a] = s
                full_size[a] = int(math.floor(in_shape[a] * s))
        else:
            _fail("neither scales nor sizes are given")
        if full_scale[0] != 1 or full_size[1] != in_shape[1] or min(full_size[2:]) < 1:
            _fail(f"resizing the batch or channel axes, or to nothing, is not supported "
                  f"(scales {full_scale})")
        if ctm == "tf_crop_and_resize":
            _fail("coordinate_transformation_mode=tf_crop_and_resize is not supported")
        index = [_nearest_indices(in_shape[a], full_size[a], full_scale[a], ctm, rounding)
                 for a in range(2, rank)]
        rows, cols = ([np.zeros(1, np.int64)] + index) if qx.one_d else index
        name = _node_name(node)

        def make(scale, zp, lo, hi, out):
            xs, xz = _xq(qx)
            return L.Resize(name, [x], out, qx.shape, rows, cols, xs, xz, scale, zp, lo=lo, hi=hi)
        self._float_or_int8(node, make, x)

    def _value_size(self, name):
        return np.asarray(self._value(name)).size

    # -- softmax, sigmoid (quantized, or a float head) -------------------------

    def _softmax_axes(self, node, onnx_shape, axis_attr):
        rank = len(onnx_shape) + 1
        default = -1 if self.opset >= 13 else 1
        axis = _norm_axis(_attr(node, axis_attr, default), rank)
        if axis == 0:
            _fail("softmax over the batch axis is not supported")
        opset = _attr(node, "opset", self.opset) if node.op_type == "QLinearSoftmax" else self.opset
        return (axis,) if opset >= 13 else tuple(range(axis, rank))

    def _head(self, node, kind, axes=(1,)):
        """Softmax/Sigmoid of a dequantized tensor straight into the graph output:
        a float head on the model output."""
        out = node.output[0]
        if node.input[0] in self.fview and out == self.graph.output[0].name:
            self.heads[out] = (self._activation(node.input[0]),
                               FloatHead(kind, _node_name(node), tuple(axes)))

    def _op_Softmax(self, node):
        x = self._activation(node.input[0])
        qx = self.qt[x]
        axes = self._softmax_axes(node, qx.onnx_shape, "axis")
        self._head(node, "Softmax", axes)
        self._defer(node, self._softmax_maker(node, x, axes), x)

    def _softmax_maker(self, node, x, axes):
        qx = self.qt[x]
        ir_axes = [_ir_axis(qx, a - 1) for a in axes]
        name = _node_name(node)

        def make(scale, zp, lo, hi, out):
            xs, xz = _xq(qx)
            return L.Softmax(name, [x], out, qx.shape, ir_axes, xs, xz, scale, zp, lo=lo, hi=hi)
        return make

    def _op_Sigmoid(self, node):
        x = self._activation(node.input[0])
        self._head(node, "Sigmoid")
        self._defer(node, self._sigmoid_maker(node, x), x)

    def _sigmoid_maker(self, node, x):
        qx = self.qt[x]
        name = _node_name(node)

        def make(scale, zp, lo, hi, out):
            xs, xz = _xq(qx)
            return L.Sigmoid(name, [x], out, qx.shape, xs, xz, scale, zp, lo=lo, hi=hi)
        return make

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

    def _qemit(self, node, make, x, i_scale):
        scale, zp = self._qparams(node, i_scale, i_scale + 1, "output")
        self._emit(self._recipe(node, make, x), scale, zp, node.output[0])

    def _op_QLinearConv(self, node):
        x = self._qinput(node, 0)
        w, w_scale = self._qweight(node, 3, 0)
        bias_name = node.input[8] if len(node.input) > 8 else ""
        self._qemit(node, self._conv_maker(node, x, w, w_scale, bias_name), x, 6)

    def _op_QLinearMatMul(self, node):
        x = self._qinput(node, 0)
        w, w_scale = self._qweight(node, 3, 1)
        if w.ndim != 2:
            _fail(f"MatMul weights must be 2-D, not {w.ndim}-D")
        self._qemit(node, self._gemm_maker(node, x, np.ascontiguousarray(w.T), w_scale, None), x, 6)

    def _op_QGemm(self, node):
        _check_gemm_attrs(node)
        if len(node.input) < 8 or not node.input[7]:
            _fail("QGemm with a float output (no output scale) is not supported")
        x = self._qinput(node, 0)
        trans_b = _attr(node, "transB", 0)
        w, w_scale = self._qweight(node, 3, 0 if trans_b else 1)
        w = w if trans_b else np.ascontiguousarray(w.T)
        bias = self._bias(node.input[6], self.qt[x].scale, w_scale, w.shape[0])
        self._qemit(node, self._gemm_maker(node, x, w, w_scale, bias), x, 7)

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
        make, x = self._add_maker(node, ops)
        self._qemit(node, make, x, 6)

    def _op_QLinearGlobalAveragePool(self, node):
        x = self._qinput(node, 0)
        self._qemit(node, self._pool_maker(node, x, "GlobalAveragePool"), x, 3)

    def _op_QLinearAveragePool(self, node):
        x = self._qinput(node, 0)
        self._qemit(node, self._pool_maker(node, x, "AveragePool"), x, 3)

    def _op_QLinearConcat(self, node):
        if (len(node.input) - 2) % 3 or len(node.input) < 8:
            _fail("expected Y_scale, Y_zero_point and (X, X_scale, X_zero_point) for each input")
        xs = [self._qinput(node, i) for i in range(2, len(node.input), 3)]
        make = self._concat_maker(node, xs, [(self.qt[x].scale, self.qt[x].zp) for x in xs])
        self._qemit(node, make, xs[0], 0)

    def _op_QLinearSigmoid(self, node):
        x = self._qinput(node, 0)
        self._qemit(node, self._sigmoid_maker(node, x), x, 3)

    def _op_QLinearSoftmax(self, node):
        x = self._qinput(node, 0)
        axes = self._softmax_axes(node, self.qt[x].onnx_shape, "axis")
        self._qemit(node, self._softmax_maker(node, x, axes), x, 3)


def _constant_role(node, i):
    """What input ``i`` of ``node`` is when fpgacnn needs it constant (None: an
    activation, or an input the operator's handler checks itself)."""
    op = node.op_type
    qparams = {1: "input scale", 2: "input zero point"}
    out = {}
    if op in ("QuantizeLinear", "DequantizeLinear"):
        return {1: "scale", 2: "zero point"}.get(i)
    if op in ("QLinearConv", "QLinearMatMul"):
        out = {**qparams, 3: "weights", 4: "weight scale", 5: "weight zero point",
               6: "output scale", 7: "output zero point", 8: "bias"}
    elif op == "QGemm":
        out = {**qparams, 3: "weights", 4: "weight scale", 5: "weight zero point", 6: "bias",
               7: "output scale", 8: "output zero point"}
    elif op in ("QLinearAdd", "QLinearMul"):
        out = {**qparams, 4: "input scale", 5: "input zero point", 6: "output scale",
               7: "output zero point"}
    elif op in ("QLinearAveragePool", "QLinearGlobalAveragePool", "QLinearSigmoid",
                "QLinearSoftmax"):
        out = {**qparams, 3: "output scale", 4: "output zero point"}
    elif op == "QLinearConcat":
        if i < 2:
            return ("output scale", "output zero point")[i]
        return {1: "input scale", 2: "input zero point"}.get((i - 2) % 3)
    elif op in ("Conv", "Gemm", "MatMul"):
        out = {1: "weights", 2: "bias"}
    return out.get(i)


def _xq(q):
    """The quantization of an input tensor; a placeholder while it is not known
    (the layer is then only built to learn its output shape)."""
    return (q.scale if q.scale is not None else 1.0), (q.zp if q.zp is not None else 0)


def _ir_axis(q, axis):
    """Per-image ONNX axis -> per-image IR axis ((C, L) is held as (C, 1, L))."""
    return {0: 0, 1: 2}[axis] if q.one_d else axis


def _norm_axis(axis, rank):
    axis = int(axis)
    if not -rank <= axis < rank:
        _fail(f"axis {axis} is outside a rank-{rank} tensor")
    return axis + rank if axis < 0 else axis


def _unsqueeze(v, axes):
    rank = v.ndim + len(axes)
    for a in sorted(_norm_axis(a, rank) for a in axes):
        v = np.expand_dims(v, a)
    return v


def _reshape_target(target, shape, batch=None):
    """The per-image shape a Reshape ``target`` (None = the batch) gives a tensor
    of per-image ``shape``; the batch axis must stay first. ``batch``: the graph
    input's fixed batch size, if it has one (a target may then state it)."""
    size = int(np.prod(shape))
    text = [("N" if t is None else int(t)) for t in target]
    first, rest = target[0], list(target[1:])
    if not (first is None or int(first) in (0, 1, -1) or (batch and int(first) == batch)):
        _fail(f"Reshape to {text} changes the batch axis")
    if any(t is None for t in rest):
        _fail(f"Reshape to {text} moves the batch axis")
    out = []
    for i, t in enumerate(rest):
        t = int(t)
        if t == 0:
            if i >= len(shape):
                _fail(f"Reshape to {text}: a 0 copies a dimension that does not exist")
            t = shape[i]
        out.append(t)
    if first is not None and int(first) == -1:
        if -1 in out or int(np.prod(out)) != size:
            _fail(f"Reshape to {text} does not keep the batch axis (N, {size} values per image)")
        return tuple(out)
    if out.count(-1) > 1 or any(t < -1 for t in out):
        _fail(f"Reshape to {text} is not a valid shape")
    if -1 in out:
        known = int(np.prod([t for t in out if t != -1]))
        if known == 0 or size % known:
            _fail(f"Reshape to {text} does not fit {size} values per image")
        out[out.index(-1)] = size // known
    if int(np.prod(out)) != size:
        _fail(f"Reshape to {text} does not fit {size} values per image")
    return tuple(out)


def _nearest_indices(n_in, n_out, scale, ctm, rounding):
    """Source index of each output position of a nearest-neighbour resize (ONNX Resize)."""
    i = np.arange(n_out, dtype=np.float64)
    if ctm == "half_pixel":
        x = (i + 0.5) / scale - 0.5
    elif ctm == "pytorch_half_pixel":
        x = (i + 0.5) / scale - 0.5 if n_out > 1 else np.zeros_like(i)
    elif ctm == "align_corners":
        x = i * (n_in - 1) / (n_out - 1) if n_out > 1 else np.zeros_like(i)
    elif ctm == "asymmetric":
        x = i / scale
    elif ctm == "tf_half_pixel_for_nn":
        x = (i + 0.5) / scale
    elif ctm == "half_pixel_symmetric":
        adjust = n_out / (scale * n_in)
        x = n_in / 2 * (1 - adjust) + (i + 0.5) / scale - 0.5
    else:
        _fail(f"coordinate_transformation_mode={ctm} is not supported")
    if rounding == "round_prefer_floor":
        idx = np.where(x - np.floor(x) == 0.5, np.floor(x), np.floor(x + 0.5))
    elif rounding == "round_prefer_ceil":
        idx = np.floor(x + 0.5)
    elif rounding == "floor":
        idx = np.floor(x)
    elif rounding == "ceil":
        idx = np.ceil(x)
    else:
        _fail(f"nearest_mode={rounding} is not supported")
    return np.clip(idx, 0, n_in - 1).astype(np.int64)


def _per_channel(values, cout, what):
    """A bias as one value per output channel: shape (C,), (1, C), or a scalar
    (broadcast); a matrix (one row per batch row) is refused."""
    values = np.asarray(values)
    squeezed = values.reshape([d for d in values.shape if d != 1] or [1])
    if squeezed.size == 1:
        return np.broadcast_to(squeezed.reshape(-1), (cout,)).copy()
    if squeezed.ndim != 1 or squeezed.size != cout or (values.ndim == 2 and values.shape[1] != cout):
        _fail(f"{what} of shape {list(values.shape)} is not one value per output channel "
              f"(({cout},) or (1, {cout})); fpgacnn does not support a per-row {what}")
    return squeezed


def _attr(node, name, default):
    for a in node.attribute:
        if a.name == name:
            v = helper.get_attribute_value(a)
            return v.decode() if isinstance(v, bytes) else v
    return default


def _spatial(node, name, default, one_d):
    """A per-spatial-axis attribute (strides, dilations) as an IR pair ``(y, x)``."""
    v = _attr(node, name, None)
    n = 1 if one_d else 2
    if v is None:
        v = [default] * n
    v = [int(i) for i in v]
    if len(v) != n or min(v) < 1:
        _fail(f"{name} {v} must be {n} positive integer(s)")
    return (1, v[0]) if one_d else tuple(v)


def _resolve_pads(node, in_hw, kernel, stride, dilation, one_d):
    """IR pads ``(top, left, bottom, right)`` from explicit ``pads`` or ``auto_pad``."""
    auto = _attr(node, "auto_pad", "NOTSET") or "NOTSET"
    explicit = _attr(node, "pads", None)
    if auto == "NOTSET":
        pads = [int(p) for p in (explicit if explicit is not None else [0] * (2 if one_d else 4))]
        if len(pads) != (2 if one_d else 4):
            _fail(f"pads {pads} must have {2 if one_d else 4} values")
        if min(pads) < 0:
            _fail(f"negative pads {pads} are not supported")
        return (0, pads[0], 0, pads[1]) if one_d else tuple(pads)
    if explicit is not None and any(explicit):
        _fail(f"auto_pad={auto} together with explicit pads {list(explicit)}")
    if auto == "VALID":
        return (0, 0, 0, 0)
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        _fail(f"auto_pad={auto} is not supported")
    begin, end = [], []
    for size, k, s, d in zip(in_hw, kernel, stride, dilation):
        out = -(-size // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
        small, big = total // 2, total - total // 2
        begin.append(small if auto == "SAME_UPPER" else big)
        end.append(big if auto == "SAME_UPPER" else small)
    return (begin[0], begin[1], end[0], end[1])


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
