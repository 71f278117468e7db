"""ONNX's own operator conformance cases as int8 models fpgacnn can import (issue 14).

The installed ``onnx`` wheel ships the case generators
(``onnx.backend.test.case.node.<op>``: classes whose ``export*`` static methods
call ``expect(node, inputs=..., outputs=..., name=...)``), not the data
folders. :func:`harvest` runs the generators of the operators fpgacnn's
importer handles (and a few it refuses) with ``expect`` replaced by a
collector, and :func:`build` turns each case into a model:

- **float cases** (float32 data into a float operator): wrapped in
  ``QuantizeLinear`` / ``DequantizeLinear`` as ``quantize_static`` writes a QDQ
  model. The first input is the graph input (``QuantizeLinear`` ->
  ``DequantizeLinear`` -> the node); the node's result goes through a
  ``QuantizeLinear`` whose int8 output is the graph output. Scales and zero
  points come from the case's own data (the range of the input, of the
  expected output, of each constant, widened to include 0). Weights (Conv,
  Gemm, MatMul) become symmetric int8 constants (per output channel for Conv,
  per tensor for Gemm / MatMul), a bias int32 at ``x_scale * w_scale``, a
  second Add / Concat operand an int8 constant with its own quantization,
  and everything else (shapes, axes, Clip bounds, Resize scales, ...) a plain
  initializer holding the case's values.
- **integer cases** (QLinearConv, QLinearMatMul, ConvInteger, MatMulInteger,
  QuantizeLinear, DequantizeLinear, and integer data into a float operator):
  the node as it is, its first input the graph input and every other input
  (scales, zero points, weights) an initializer holding the case's values.

Variants of a case (test id ``<case>-<variant>``) add the quantized forms:

- ``uint8``: the float case wrapped with uint8 activations (weights stay int8);
- ``qop``: the float case in QOperator form (int8 activations, the same
  data-derived quantization): ``QLinearConv``, ``QLinearMatMul``, and
  onnxruntime's (com.microsoft) ``QGemm``, ``QLinearAdd``,
  ``QLinearAveragePool``, ``QLinearGlobalAveragePool``, ``QLinearSigmoid``,
  ``QLinearSoftmax``; ``MaxPool``, ``Resize``, ``Flatten``, ``Reshape``,
  ``Squeeze``, ``Unsqueeze`` directly on the int8 tensor. Only where the
  QOperator form takes all of the case's attributes (no QGemm ``beta``, no
  QLinearAveragePool ``dilations``);
- ``qop_uint8``: the same with uint8 activations, except the operators with
  weights (onnxruntime's u8s8 kernels may saturate on CPUs without VNNI,
  see ``onnx_model_builders.quantize``);
- ``inputs``: a QLinear case with its scales, zero points and weights left
  as graph inputs (fpgacnn needs them as initializers: refused).

The generator modules are imported once per process with ``expect``
replaced; onnx's own ``collect_testcases()`` would no longer see their cases
in the same process (nothing in this repository calls it).

Example::

    cases = harvest()
    built = build(cases["test_basic_conv_with_padding"], "qop")
    onnx.save(built.model, "m.onnx")   # then load_onnx, onnxruntime, compare
"""

import contextlib
import importlib
import sys
import warnings
from copy import deepcopy
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["MODULES", "FLOAT_OPS", "QOP", "Case", "Built", "harvest", "case_ids", "build",
           "quant_params"]

#: The generator modules harvested: every operator the importer handles, the
#: integer forms of convolution and MatMul, and BatchNormalization / Upsample,
#: whose refusals are part of the contract.
MODULES = (
    "conv", "qlinearconv", "convinteger", "gemm", "matmul", "qlinearmatmul", "matmulinteger",
    "maxpool", "averagepool", "globalaveragepool", "globalmaxpool", "add", "relu", "clip",
    "flatten", "reshape", "squeeze", "unsqueeze", "concat", "resize", "softmax", "sigmoid",
    "quantizelinear", "dequantizelinear", "reducemean", "reducemax", "identity", "dropout",
    "batch_normalization", "upsample",
)

#: Float operators: float32 cases of these are wrapped in QDQ.
FLOAT_OPS = {
    "Conv", "Gemm", "MatMul", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool",
    "Add", "Relu", "Clip", "Flatten", "Reshape", "Squeeze", "Unsqueeze", "Concat", "Resize",
    "Softmax", "Sigmoid", "ReduceMean", "ReduceMax", "Identity", "Dropout",
    "BatchNormalization", "Upsample",
}

#: QOperator forms of the float operators: ``op -> (QOperator op, domain,
#: attributes it takes (None: the same operator, all of them))``. The
#: com.microsoft operators are the ones onnxruntime's quantizer writes.
_POOL = {"auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides"}
QOP = {
    "Conv": ("QLinearConv", "", {"auto_pad", "dilations", "group", "kernel_shape", "pads",
                                 "strides"}),
    "MatMul": ("QLinearMatMul", "", set()),
    "Gemm": ("QGemm", "com.microsoft", {"alpha", "transA", "transB"}),
    "Add": ("QLinearAdd", "com.microsoft", set()),
    "AveragePool": ("QLinearAveragePool", "com.microsoft", _POOL),
    "GlobalAveragePool": ("QLinearGlobalAveragePool", "com.microsoft", set()),
    "Sigmoid": ("QLinearSigmoid", "com.microsoft", set()),
    "Softmax": ("QLinearSoftmax", "com.microsoft", {"axis"}),
    # directly on the int8 tensor, keeping its quantization
    "MaxPool": ("MaxPool", "", None),
    "Resize": ("Resize", "", None),
    "Flatten": ("Flatten", "", None),
    "Reshape": ("Reshape", "", None),
    "Squeeze": ("Squeeze", "", None),
    "Unsqueeze": ("Unsqueeze", "", None),
}


_WEIGHTED = ("QLinearConv", "QLinearMatMul", "QGemm")


@dataclass
class Case:
    """One ``expect`` call: the node, its input and output values, the case name."""

    name: str
    node: onnx.NodeProto
    inputs: list
    outputs: list
    opset_imports: list = field(default_factory=list)
    input_types: list = field(default_factory=list)

    @property
    def op(self):
        return self.node.op_type

    @property
    def opset(self):
        return next((o.version for o in self.opset_imports if o.domain in ("", "ai.onnx")), 1)

    @property
    def is_float(self):
        """A float case: float32 data into a float operator (wrapped in QDQ)."""
        x = self.inputs[0] if self.inputs else None
        return (self.op in FLOAT_OPS and isinstance(x, np.ndarray) and x.dtype == np.float32
                and self.opset >= 10)   # QuantizeLinear exists from opset 10

    def variants(self):
        """The variants this case has, besides the base form ``""``."""
        out = [""]
        if self.is_float and self.op not in ("BatchNormalization",):
            out.append("uint8")
        if self.is_float and self.op in QOP:
            _, _, allowed = QOP[self.op]
            attrs = {a.name for a in self.node.attribute}
            if (allowed is None or attrs <= allowed) and len(self.node.output) == 1:
                out.append("qop")
                if QOP[self.op][0] not in _WEIGHTED:
                    out.append("qop_uint8")
        if not self.is_float and self.op.startswith("QLinear"):
            out.append("inputs")
        return out


@dataclass
class Built:
    """A model ready to run: the graph input's values and the model."""

    model: onnx.ModelProto
    feed: np.ndarray
    input_name: str


# -- harvesting --------------------------------------------------------------

_CACHE = {}


def harvest():
    """``{case name: Case}`` of the operators in :data:`MODULES`, in generator order."""
    if _CACHE:
        return _CACHE
    import onnx.backend.test.case.node as pkg
    original = pkg.expect
    collected = []

    def collect(node, inputs, outputs, name, **kwargs):
        opsets = kwargs.get("opset_imports")
        if not opsets:   # as expect() does: the operator's newest version
            opsets = [helper.make_operatorsetid(
                node.domain, onnx.defs.get_schema(node.op_type, domain=node.domain).since_version)]
        collected.append(Case(name, deepcopy(node), list(inputs), list(outputs), list(opsets),
                              list(kwargs.get("input_type_protos") or [])))

    for mod_name in MODULES:
        full = f"{pkg.__name__}.{mod_name}"
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            if full not in sys.modules:
                # The generators run at import (a metaclass calls every export*),
                # with the `expect` the module imports from the package.
                pkg.expect = collect
                try:
                    module = importlib.import_module(full)
                finally:
                    pkg.expect = original
                module.expect = original
            else:   # imported before (by onnx's own test runner): call the exports again
                module = sys.modules[full]
                with _patched(module, "expect", collect):
                    for cls in vars(module).values():
                        if isinstance(cls, type) and cls.__module__ == full:
                            for key, fn in vars(cls).items():
                                if key.startswith("export") and isinstance(fn, staticmethod):
                                    np.random.seed(0)
                                    getattr(cls, key)()
    for case in collected:
        _CACHE.setdefault(case.name, case)
    return _CACHE


@contextlib.contextmanager
def _patched(obj, name, value):
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


def case_ids():
    """Every test id: ``<case>`` and ``<case>-<variant>``."""
    return [name + (f"-{v}" if v else "") for name, case in harvest().items()
            for v in case.variants()]


# -- quantization from the case's data -----------------------------------------

def quant_params(values, dtype=np.int8):
    """Per-tensor ``(scale, zero_point)`` covering the finite values and 0 with
    the 256 codes of ``dtype`` (int8 or uint8)."""
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    v = v[np.isfinite(v)]
    lo, hi = min(v.min(initial=0.0), 0.0), max(v.max(initial=0.0), 0.0)
    scale = (hi - lo) / 255.0
    if not scale > 0:
        scale = 1.0
    qmin = -128 if dtype == np.int8 else 0
    zp = int(np.clip(np.rint(qmin - lo / scale), qmin, qmin + 255))
    return np.float32(scale), dtype(zp)


def _quantize(values, scale, zp, dtype):
    info = np.iinfo(dtype)
    q = np.rint(np.asarray(values, np.float64) / np.float64(scale)) + int(zp)
    return np.clip(q, info.min, info.max).astype(dtype)


def _symmetric(w, axis=None):
    """int8 symmetric weights, scale per tensor (``axis`` None) or along ``axis``."""
    w = np.asarray(w, np.float64)
    if axis is None:
        m = np.abs(w).max(initial=0.0)
        scale = np.float32(m / 127 if m > 0 else 1.0)
        return _quantize(w, scale, 0, np.int8), scale
    other = tuple(i for i in range(w.ndim) if i != axis)
    m = np.abs(w).max(axis=other, initial=0.0)
    scale = np.where(m > 0, m / 127, 1.0).astype(np.float32)
    shape = [1] * w.ndim
    shape[axis] = -1
    q = np.clip(np.rint(w / scale.astype(np.float64).reshape(shape)), -127, 127).astype(np.int8)
    return q, scale


# -- model building -----------------------------------------------------------

def _vi(name, value, type_proto=None):
    """A value info of a case value (numpy array, TensorProto, or a sequence given
    as a list; ``type_proto`` when the case states the type)."""
    if type_proto is not None:
        return helper.make_value_info(name, type_proto)
    if isinstance(value, list):
        elem = helper.np_dtype_to_tensor_dtype(np.asarray(value[0]).dtype)
        return helper.make_value_info(
            name, helper.make_sequence_type_proto(helper.make_tensor_type_proto(elem, None)))
    if isinstance(value, TensorProto):
        return helper.make_tensor_value_info(name, value.data_type, list(value.dims))
    value = np.asarray(value)
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(value.dtype),
                                         list(value.shape))


def _tensor(name, value):
    if isinstance(value, TensorProto):
        t = deepcopy(value)
        t.name = name
        return t
    return numpy_helper.from_array(np.asarray(value), name)


def _model(case, nodes, inputs, outputs, inits, extra_opsets=()):
    """The graph with the case's opsets (plus ``extra_opsets``), at the IR version
    those opsets need (as ``expect`` writes it)."""
    graph = helper.make_graph(nodes, case.name, inputs, outputs, inits)
    opsets = [deepcopy(o) for o in case.opset_imports]
    ir = helper.make_model_gen_version(graph, opset_imports=opsets).ir_version
    for domain, version in extra_opsets:
        if not any(o.domain == domain for o in opsets):
            opsets.append(helper.make_operatorsetid(domain, version))
    model = helper.make_model(graph, opset_imports=opsets, producer_name="fpgacnn-conformance")
    model.ir_version = ir
    return model


def _present(case):
    """``[(input name, value)]`` of the inputs the case gives (optional ones left out)."""
    return list(zip([n for n in case.node.input if n], case.inputs))


def build(case, variant=""):
    """The model of ``case`` in form ``variant`` (see the module docstring)."""
    if variant == "" and not case.is_float:
        return _as_is(case, params_as_inputs=False)
    if variant == "inputs":
        return _as_is(case, params_as_inputs=True)
    if variant in ("", "uint8"):
        return _qdq(case, np.uint8 if variant == "uint8" else np.int8)
    if variant in ("qop", "qop_uint8"):
        return _qop(case, np.uint8 if variant == "qop_uint8" else np.int8)
    raise ValueError(f"unknown variant {variant!r}")


def _as_is(case, params_as_inputs):
    """The node as the case has it: input 0 the graph input, the others initializers
    (or graph inputs too, ``params_as_inputs``); output 0 the graph output."""
    node = deepcopy(case.node)
    node.name = case.name
    present = _present(case)
    types = case.input_types or [None] * len(present)
    name0, x = present[0]
    inputs = [_vi(name0, x, types[0])]
    inits = []
    for (name, value), type_proto in zip(present[1:], types[1:]):
        if params_as_inputs:
            inputs.append(_vi(name, value, type_proto))
        else:
            inits.append(_tensor(name, value))
    outputs = [_vi(case.node.output[0], case.outputs[0])]
    model = _model(case, [node], inputs, outputs, inits)
    feed = numpy_helper.to_array(x) if isinstance(x, TensorProto) else x
    return Built(model, feed, name0)


class _Wrap:
    """The pieces of a wrapped float case: nodes, initializers, quantizations."""

    def __init__(self, case, act_dtype):
        self.case, self.act = case, act_dtype
        self.nodes, self.inits = [], []

    def const(self, name, value):
        self.inits.append(_tensor(name, value))
        return name

    def qparams(self, prefix, values, dtype=None):
        scale, zp = quant_params(values, dtype or self.act)
        return (self.const(f"{prefix}_scale", scale), self.const(f"{prefix}_zero_point", zp),
                scale, zp)

    def dq(self, name, q_values, scale, zp, axis=None):
        """``name`` = DequantizeLinear of an integer constant."""
        attrs = {} if axis is None else {"axis": axis}
        self.nodes.append(helper.make_node(
            "DequantizeLinear",
            [self.const(f"{name}_quantized", q_values), self.const(f"{name}_scale", scale),
             self.const(f"{name}_zero_point", zp)],
            [name], name=f"{name}_DequantizeLinear", **attrs))

    def weights(self, name, w, axis):
        """Symmetric int8 weights; returns their scale (per channel for Conv)."""
        q, scale = _symmetric(w, axis)
        zp = np.zeros(np.shape(scale), np.int8)
        return q, scale, zp

    def bias_values(self, b, x_scale, w_scale):
        b_scale = (np.float64(x_scale) * np.asarray(w_scale, np.float64)).astype(np.float32)
        q = np.clip(np.rint(np.asarray(b, np.float64) / b_scale.astype(np.float64)),
                    -2**31, 2**31 - 1).astype(np.int32)
        return q, b_scale

    def input(self):
        """Graph input -> QuantizeLinear -> (name of the int8 tensor, scale, zp)."""
        name0, x = _present(self.case)[0]
        s_name, z_name, scale, zp = self.qparams(f"{name0}_in", x)
        self.nodes.append(helper.make_node("QuantizeLinear", [name0, s_name, z_name],
                                           [f"{name0}_quantized"], name=f"{name0}_QuantizeLinear"))
        return f"{name0}_quantized", s_name, z_name, scale, zp


def _qdq(case, act):
    """A float case between QuantizeLinear / DequantizeLinear (QDQ, ``act`` activations)."""
    w = _Wrap(case, act)
    present = _present(case)
    name0, x = present[0]
    xq, xs_name, xz_name, x_scale, _ = w.input()
    w.nodes.append(helper.make_node("DequantizeLinear", [xq, xs_name, xz_name], [f"{name0}_dq"],
                                    name=f"{name0}_DequantizeLinear"))
    rename = {name0: f"{name0}_dq"}
    w_scale = None
    for i, (name, value) in enumerate(present[1:], start=1):
        role = _role(case.op, i)
        if role == "weights" and isinstance(value, np.ndarray) and value.dtype == np.float32:
            axis = 0 if case.op == "Conv" and value.ndim >= 2 else None
            q, w_scale, zp = w.weights(name, value, axis)
            w.dq(name, q, w_scale, zp, axis=axis)
        elif role == "bias" and w_scale is not None and value.dtype == np.float32:
            q, b_scale = w.bias_values(value, x_scale, w_scale)
            axis = 0 if np.ndim(b_scale) else None
            w.dq(name, q, b_scale, np.zeros(np.shape(b_scale), np.int32), axis=axis)
        elif role == "operand" and isinstance(value, np.ndarray) and value.dtype == np.float32:
            scale, zp = quant_params(value, act)
            w.dq(name, _quantize(value, scale, zp, act), scale, zp)
        else:
            w.const(name, value)
    node = deepcopy(case.node)
    node.name = case.name
    out = node.output[0]
    node.input[:] = [rename.get(n, n) for n in node.input]
    node.output[0] = f"{out}_float"
    w.nodes.append(node)
    ys_name, yz_name, _, _ = w.qparams(f"{out}_out", case.outputs[0])
    w.nodes.append(helper.make_node("QuantizeLinear", [f"{out}_float", ys_name, yz_name], [out],
                                    name=f"{out}_QuantizeLinear"))
    y_vi = helper.make_tensor_value_info(out, helper.np_dtype_to_tensor_dtype(np.dtype(act)),
                                         list(np.shape(case.outputs[0])))
    model = _model(case, w.nodes, [_vi(name0, x)], [y_vi], w.inits)
    return Built(model, x, name0)


def _role(op, i):
    """How a float case's input ``i`` > 0 is made constant."""
    if op in ("Conv", "Gemm", "MatMul"):
        return {1: "weights", 2: "bias"}.get(i, "const")
    if op in ("Add", "Concat"):
        return "operand"
    return "const"


def _qop(case, act):
    """A float case in QOperator form with ``act`` activations: the graph input
    quantized by QuantizeLinear, the operator's integer result the graph output."""
    op, domain, allowed = QOP[case.op]
    w = _Wrap(case, act)
    present = _present(case)
    name0, x = present[0]
    out = case.node.output[0]
    xq, xs_name, xz_name, x_scale, x_zp = w.input()
    if allowed is None:   # the same operator on the int8 tensor: constants stay as they are
        node = deepcopy(case.node)
        node.name = case.name
        node.input[:] = [xq if n == name0 else n for n in node.input]
        for name, value in present[1:]:
            w.const(name, value)
        w.nodes.append(node)
    else:
        attrs = {a.name: helper.get_attribute_value(a) for a in case.node.attribute}
        ys_name, yz_name, _, _ = w.qparams(f"{out}_out", case.outputs[0])
        if op in ("QLinearConv", "QLinearMatMul", "QGemm"):
            wname, wvalue = present[1]
            axis = 0 if op == "QLinearConv" else None
            q, w_scale, w_zp = w.weights(wname, wvalue, axis)
            weights = [w.const(f"{wname}_quantized", q), w.const(f"{wname}_scale", w_scale),
                       w.const(f"{wname}_zero_point", w_zp)]
            bias = ""
            if len(present) > 2:
                bname, bvalue = present[2]
                qb, _ = w.bias_values(bvalue, x_scale, w_scale)
                bias = w.const(f"{bname}_quantized", qb)
            if op == "QGemm":
                ins = [xq, xs_name, xz_name, *weights, bias, ys_name, yz_name]
            else:
                ins = [xq, xs_name, xz_name, *weights, ys_name, yz_name] + ([bias] if bias else [])
        elif op == "QLinearAdd":
            bname, bvalue = present[1]
            bs, bz = quant_params(bvalue, act)
            qb = _quantize(bvalue, bs, bz, act)
            ins = [xq, xs_name, xz_name, w.const(f"{bname}_quantized", qb),
                   w.const(f"{bname}_scale", bs), w.const(f"{bname}_zero_point", bz),
                   ys_name, yz_name]
        else:
            ins = [xq, xs_name, xz_name, ys_name, yz_name]
            if op == "QLinearSoftmax":
                attrs["opset"] = case.opset
        w.nodes.append(helper.make_node(op, ins, [out], name=case.name, domain=domain, **attrs))
    y_vi = helper.make_tensor_value_info(out, helper.np_dtype_to_tensor_dtype(np.dtype(act)),
                                         list(np.shape(case.outputs[0])))
    model = _model(case, w.nodes, [_vi(name0, x)], [y_vi], w.inits,
                   extra_opsets=[("com.microsoft", 1)] if domain else ())
    return Built(model, x, name0)
