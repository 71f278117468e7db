"""Float ONNX model builders and onnxruntime quantization helpers for the tests.

Every builder returns a float32 :class:`onnx.ModelProto` with seeded random
weights, batch axis symbolic (``"N"``), opset 13. :func:`quantize` turns it into
an int8 model with onnxruntime's own quantizer (the oracle's quantizer, never a
hand-written one) and :func:`ort_int8_output` runs a quantized model in
onnxruntime and returns its output in the int8 domain used by the reference
(DESIGN.md section 2: uint8 values are shifted by -128).

Example::

    m = conv_model(cin=3, cout=8, kernel=3, pads=1, relu=True, seed=1)
    path = quantize(m, tmp_path / "q.onnx", fmt="qdq", activation="uint8", seed=1)
    y_int8 = ort_int8_output(path, x)
"""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = [
    "OPSET", "conv_model", "gemm_model", "pool_model", "add_model", "residual_model",
    "make_model", "calibration_data", "quantize", "ort_session", "ort_int8_output",
    "output_quant_params", "ort_int8_tensors",
]

OPSET = 13


def _rng(seed):
    return np.random.default_rng(seed)


def _init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def make_model(nodes, inputs, outputs, initializers, name="model"):
    """Wrap nodes into a checked opset-13 model.

    ``inputs`` and ``outputs`` are ``(name, shape)`` pairs of float32 tensors;
    a ``None`` dimension becomes the symbolic batch ``"N"``.
    """
    def vi(n, shape):
        return helper.make_tensor_value_info(
            n, TensorProto.FLOAT, ["N" if d is None else d for d in shape])
    graph = helper.make_graph(nodes, name, [vi(*i) for i in inputs], [vi(*o) for o in outputs],
                              initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="fpgacnn-tests")
    model.ir_version = 8  # readable by every onnxruntime we support
    onnx.checker.check_model(model)
    return model


def _activation(nodes, inits, src, relu, name):
    """Append ``relu`` (False, True/"relu", or "clip" = Clip(0, 6)) after ``src``."""
    if not relu:
        return src
    out = f"{name}_act"
    if relu == "clip":
        inits += [_init(f"{name}_lo", np.float32(0.0)), _init(f"{name}_hi", np.float32(6.0))]
        nodes.append(helper.make_node("Clip", [src, f"{name}_lo", f"{name}_hi"], [out],
                                      name=f"{name}_clip"))
    else:
        nodes.append(helper.make_node("Relu", [src], [out], name=f"{name}_relu"))
    return out


def _conv_nodes(nodes, inits, src, name, cin, cout, kernel, stride, pads, bias, relu, rng):
    kh, kw = (kernel, kernel) if np.isscalar(kernel) else kernel
    w = rng.normal(0, 1 / np.sqrt(cin * kh * kw), size=(cout, cin, kh, kw)).astype(np.float32)
    inits.append(_init(f"{name}_W", w))
    ins = [src, f"{name}_W"]
    if bias:
        inits.append(_init(f"{name}_B", rng.normal(0, 0.2, size=cout).astype(np.float32)))
        ins.append(f"{name}_B")
    p = [pads] * 4 if np.isscalar(pads) else list(pads)
    s = [stride] * 2 if np.isscalar(stride) else list(stride)
    nodes.append(helper.make_node("Conv", ins, [f"{name}_out"], name=name, kernel_shape=[kh, kw],
                                  strides=s, pads=p))
    return _activation(nodes, inits, f"{name}_out", relu, name)


def _conv_out(h, k, s, p0, p1):
    return (h + p0 + p1 - k) // s + 1


def conv_model(cin, cout, kernel=3, stride=1, pads=0, hw=(8, 8), relu=False, bias=True, seed=0):
    """One Conv (optionally followed by Relu or Clip(0, 6)).

    ``pads`` is an int or ONNX ``(top, left, bottom, right)``; ``stride`` an int or pair.
    """
    rng = _rng(seed)
    nodes, inits = [], []
    out = _conv_nodes(nodes, inits, "x", "conv", cin, cout, kernel, stride, pads, bias, relu, rng)
    kh, kw = (kernel, kernel) if np.isscalar(kernel) else kernel
    p = [pads] * 4 if np.isscalar(pads) else list(pads)
    s = [stride] * 2 if np.isscalar(stride) else list(stride)
    oh = _conv_out(hw[0], kh, s[0], p[0], p[2])
    ow = _conv_out(hw[1], kw, s[1], p[1], p[3])
    return make_model(nodes, [("x", [None, cin, *hw])], [(out, [None, cout, oh, ow])], inits,
                      name=f"conv{kh}x{kw}")


def gemm_model(cin, cout, matmul=False, relu=False, bias=True, trans_b=True, seed=0):
    """A Gemm (``transB`` as given) or a MatMul (+ Add of the bias) on ``(N, cin)``."""
    rng = _rng(seed)
    w = rng.normal(0, 1 / np.sqrt(cin), size=(cout, cin)).astype(np.float32)
    b = rng.normal(0, 0.2, size=cout).astype(np.float32)
    nodes, inits = [], []
    if matmul:
        inits.append(_init("fc_W", w.T.copy()))
        nodes.append(helper.make_node("MatMul", ["x", "fc_W"], ["fc_mm"], name="fc"))
        src = "fc_mm"
        if bias:
            inits.append(_init("fc_B", b))
            nodes.append(helper.make_node("Add", ["fc_mm", "fc_B"], ["fc_out"], name="fc_bias"))
            src = "fc_out"
    else:
        inits.append(_init("fc_W", w if trans_b else w.T.copy()))
        ins = ["x", "fc_W"]
        if bias:
            inits.append(_init("fc_B", b))
            ins.append("fc_B")
        nodes.append(helper.make_node("Gemm", ins, ["fc_out"], name="fc", transB=int(trans_b)))
        src = "fc_out"
    out = _activation(nodes, inits, src, relu, "fc")
    return make_model(nodes, [("x", [None, cin])], [(out, [None, cout])], inits, name="gemm")


def pool_model(kind, c=4, hw=(8, 8), kernel=2, stride=2, pads=0, count_include_pad=0, seed=0):
    """One MaxPool, AveragePool or GlobalAveragePool behind a 1x1 conv.

    The conv gives the pool a quantized int8 input in every quantization
    format (a pool straight on the graph input is left in float by some of
    onnxruntime's quantizers).
    """
    rng = _rng(seed)
    nodes, inits = [], []
    src = _conv_nodes(nodes, inits, "x", "pre", c, c, 1, 1, 0, True, False, rng)
    p = [pads] * 4 if np.isscalar(pads) else list(pads)
    if kind == "GlobalAveragePool":
        nodes.append(helper.make_node("GlobalAveragePool", [src], ["pool_out"], name="pool"))
        oshape = [None, c, 1, 1]
    else:
        attrs = dict(kernel_shape=[kernel, kernel], strides=[stride, stride], pads=p)
        if kind == "AveragePool":
            attrs["count_include_pad"] = count_include_pad
        nodes.append(helper.make_node(kind, [src], ["pool_out"], name="pool", **attrs))
        oshape = [None, c, _conv_out(hw[0], kernel, stride, p[0], p[2]),
                  _conv_out(hw[1], kernel, stride, p[1], p[3])]
    return make_model(nodes, [("x", [None, c, *hw])], [("pool_out", oshape)], inits,
                      name=kind.lower())


def add_model(c=4, hw=(6, 6), relu=False, seed=0):
    """Residual Add of two 1x1 conv branches of the input (differently scaled), + Relu."""
    rng = _rng(seed)
    nodes, inits = [], []
    a = _conv_nodes(nodes, inits, "x", "a", c, c, 1, 1, 0, True, False, rng)
    b = _conv_nodes(nodes, inits, "x", "b", c, c, 3, 1, 1, True, False, rng)
    inits[-2] = _init("b_W", numpy_helper.to_array(inits[-2]) * 3)  # different scale
    nodes.append(helper.make_node("Add", [a, b], ["add_out"], name="add"))
    out = _activation(nodes, inits, "add_out", relu, "add")
    return make_model(nodes, [("x", [None, c, *hw])], [(out, [None, c, *hw])], inits, name="add")


def residual_model(cin=3, hw=(8, 8), width=8, classes=10, seed=0):
    """A small ResNet-style CNN: stem conv, a residual block with a 1x1 stride-2
    projection shortcut, GlobalAveragePool, Flatten, Gemm."""
    rng = _rng(seed)
    nodes, inits = [], []
    stem = _conv_nodes(nodes, inits, "x", "stem", cin, width, 3, 1, 1, True, True, rng)
    c1 = _conv_nodes(nodes, inits, stem, "b1", width, 2 * width, 3, 2, 1, True, True, rng)
    c2 = _conv_nodes(nodes, inits, c1, "b2", 2 * width, 2 * width, 3, 1, 1, True, False, rng)
    sc = _conv_nodes(nodes, inits, stem, "proj", width, 2 * width, 1, 2, 0, True, False, rng)
    nodes.append(helper.make_node("Add", [c2, sc], ["res"], name="res_add"))
    nodes.append(helper.make_node("Relu", ["res"], ["res_act"], name="res_relu"))
    c3 = _conv_nodes(nodes, inits, "res_act", "b3", 2 * width, 2 * width, 1, 1, 0, True, True, rng)
    nodes.append(helper.make_node("GlobalAveragePool", [c3], ["gap"], name="gap"))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"], name="flat", axis=1))
    w = rng.normal(0, 1 / np.sqrt(2 * width), size=(classes, 2 * width)).astype(np.float32)
    inits += [_init("fc_W", w), _init("fc_B", rng.normal(0, 0.2, classes).astype(np.float32))]
    nodes.append(helper.make_node("Gemm", ["flat", "fc_W", "fc_B"], ["logits"], name="fc",
                                  transB=1))
    return make_model(nodes, [("x", [None, cin, *hw])], [("logits", [None, classes])], inits,
                      name="residual")


def calibration_data(model, n=32, seed=0, scale=1.0):
    """Seeded random float32 input for ``model``'s (single) graph input, shape ``(n, ...)``."""
    inp = model.graph.input[0]
    shape = [d.dim_value for d in inp.type.tensor_type.shape.dim][1:]
    return (_rng(seed).normal(0, scale, size=(n, *shape))).astype(np.float32)


def quantize(model, path, fmt="qdq", activation="int8", seed=0, n_calib=32, extra_options=None,
             reduce_range=None):
    """Quantize a float model with ``onnxruntime.quantization.quantize_static``.

    Per-channel int8 weights, ``activation`` "int8" or "uint8", ``fmt`` "qdq" or
    "qoperator", calibrated (MinMax) on :func:`calibration_data`. Returns ``path``.

    ``reduce_range`` (7-bit weights) defaults to True for QOperator models with
    uint8 activations only: onnxruntime runs their QLinearConv with the u8s8
    kernel, which on AVX2 CPUs without VNNI saturates int16 pair sums
    (``vpmaddubsw``) and so is not an exact oracle for full-range weights
    (onnxruntime documents this as the "saturation issue").
    """
    if reduce_range is None:
        reduce_range = fmt == "qoperator" and activation == "uint8"
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)

    data = calibration_data(model, n_calib, seed)
    name = model.graph.input[0].name

    class Reader(CalibrationDataReader):
        def __init__(self):
            self._it = iter([{name: data[i:i + 8]} for i in range(0, len(data), 8)])

        def get_next(self):
            return next(self._it, None)

    # quantize_static may rewrite the ModelProto it is given (external data);
    # hand it a copy so the caller's model can be quantized again.
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    quantize_static(
        copy, str(path), Reader(),
        quant_format={"qdq": QuantFormat.QDQ, "qoperator": QuantFormat.QOperator}[fmt],
        per_channel=True,
        activation_type={"int8": QuantType.QInt8, "uint8": QuantType.QUInt8}[activation],
        weight_type=QuantType.QInt8,
        reduce_range=reduce_range,
        extra_options=dict(extra_options or {}),
    )
    return path


def ort_session(path):
    """A single-threaded onnxruntime CPU session with graph optimizations off.

    Without optimizations onnxruntime runs a QDQ model as written:
    DequantizeLinear, the float operator, QuantizeLinear, i.e. the exact
    semantics of the file. With them it fuses QDQ groups into QLinear kernels
    and converts int8 activations to uint8, and the u8s8 kernels saturate on
    AVX2 CPUs without VNNI (see :func:`quantize`). QOperator models run their
    QLinear kernels either way.
    """
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def output_quant_params(path):
    """Scale and zero point of the graph output's quantization, read from the
    ONNX file itself: the DequantizeLinear producing a float output (possibly
    through a kept Relu/Clip), or the QuantizeLinear producing an integer one.
    Returns ``(scale, zp, dtype)``."""
    m = onnx.load(str(path))
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    out = m.graph.output[0].name
    node = next(n for n in m.graph.node if out in n.output)
    while node.op_type in ("Relu", "Clip"):  # a float activation kept after the last DequantizeLinear
        node = next(n for n in m.graph.node if node.input[0] in n.output)
    if node.op_type not in ("DequantizeLinear", "QuantizeLinear"):
        raise ValueError(f"graph output {out!r} comes from {node.op_type}, not a (De)QuantizeLinear")
    zp = inits[node.input[2]]
    return float(inits[node.input[1]]), int(zp), zp.dtype


def ort_int8_output(path, x):
    """Run the quantized model in onnxruntime; return its output as int8.

    A float output ``y`` is mapped back with ``round(y / scale) + zp``, which
    recovers the integer onnxruntime computed exactly; uint8 values are moved
    into the int8 domain (``value - 128``).
    """
    sess = ort_session(path)
    y = sess.run(None, {sess.get_inputs()[0].name: x})[0]
    scale, zp, dtype = output_quant_params(path)
    if y.dtype == np.float32:
        q = np.rint(y.astype(np.float64) / scale).astype(np.int64) + zp
    else:
        q = y.astype(np.int64)
    if dtype == np.uint8:
        q = q - 128
    if q.min() < -128 or q.max() > 127:
        raise ValueError("onnxruntime output does not map back onto int8")
    return q.astype(np.int8)


def ort_int8_tensors(path, x, names):
    """onnxruntime's values of inner int8/uint8 tensors (``names``), as int8.

    The tensors are exposed as extra graph outputs of a copy of the model
    (written beside ``path``); uint8 values are moved to the int8 domain.
    """
    m = onnx.load(str(path))
    for name in names:
        m.graph.output.append(helper.make_empty_tensor_value_info(name))
    probe = f"{path}.probe.onnx"
    onnx.save(m, probe)
    sess = ort_session(probe)
    values = sess.run(list(names), {sess.get_inputs()[0].name: x})
    out = {}
    for name, v in zip(names, values):
        if v.dtype == np.uint8:
            v = v.astype(np.int16) - 128
        elif v.dtype != np.int8:
            raise ValueError(f"tensor {name!r} is {v.dtype}, not int8/uint8")
        out[name] = v.astype(np.int8)
    return out
