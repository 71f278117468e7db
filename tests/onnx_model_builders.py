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
    "conv1d_model", "concat_model", "resize_model", "global_pool_model", "head_model",
    "make_model", "calibration_data", "quantize", "ort_session", "ort_int8_output",
    "output_quant_params", "ort_int8_tensors",
]

OPSET = 13


def _rng(seed):
    return np.random.default_rng(seed)


def _init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def make_model(nodes, inputs, outputs, initializers, name="model", opset=OPSET):
    """Wrap nodes into a checked model (opset 13 unless given).

    ``inputs`` and ``outputs`` are ``(name, shape)`` pairs of float32 tensors;
    a ``None`` dimension becomes the symbolic batch ``"N"``, a string another
    symbolic dimension.
    """
    def vi(n, shape):
        return helper.make_tensor_value_info(
            n, TensorProto.FLOAT, ["N" if d is None else d for d in shape])
    graph = helper.make_graph(nodes, name, [vi(*i) for i in inputs], [vi(*o) for o in outputs],
                              initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
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


def _conv_nodes(nodes, inits, src, name, cin, cout, kernel, stride, pads, bias, relu, rng,
                group=1, dilation=1, auto_pad=None):
    kh, kw = (kernel, kernel) if np.isscalar(kernel) else kernel
    w = rng.normal(0, 1 / np.sqrt(cin // group * kh * kw),
                   size=(cout, cin // group, kh, kw)).astype(np.float32)
    inits.append(_init(f"{name}_W", w))
    ins = [src, f"{name}_W"]
    if bias:
        inits.append(_init(f"{name}_B", rng.normal(0, 0.2, size=cout).astype(np.float32)))
        ins.append(f"{name}_B")
    s = [stride] * 2 if np.isscalar(stride) else list(stride)
    attrs = dict(kernel_shape=[kh, kw], strides=s)
    if auto_pad:
        attrs["auto_pad"] = auto_pad
    else:
        attrs["pads"] = [pads] * 4 if np.isscalar(pads) else list(pads)
    if group != 1:
        attrs["group"] = group
    if dilation != 1:
        attrs["dilations"] = [dilation] * 2 if np.isscalar(dilation) else list(dilation)
    nodes.append(helper.make_node("Conv", ins, [f"{name}_out"], name=name, **attrs))
    return _activation(nodes, inits, f"{name}_out", relu, name)


def _conv_out(h, k, s, p0, p1, d=1, ceil=False, auto_pad=None):
    """One output dimension of a conv or pool (ONNX, with ``ceil_mode`` and ``auto_pad``)."""
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        return -(-h // s)
    if auto_pad == "VALID":
        p0 = p1 = 0
    span = h + p0 + p1 - ((k - 1) * d + 1)
    if not ceil:
        return span // s + 1
    out = -(-span // s) + 1
    return out - 1 if (out - 1) * s >= h + p0 else out


def conv_model(cin, cout, kernel=3, stride=1, pads=0, hw=(8, 8), relu=False, bias=True, seed=0,
               group=1, dilation=1, auto_pad=None):
    """One Conv (optionally followed by Relu or Clip(0, 6)).

    ``pads`` is an int or ONNX ``(top, left, bottom, right)``; ``stride`` and
    ``dilation`` an int or pair; ``group`` splits the channels (depthwise when
    it equals ``cin``); ``auto_pad`` replaces ``pads``.
    """
    rng = _rng(seed)
    nodes, inits = [], []
    out = _conv_nodes(nodes, inits, "x", "conv", cin, cout, kernel, stride, pads, bias, relu, rng,
                      group, dilation, auto_pad)
    kh, kw = (kernel, kernel) if np.isscalar(kernel) else kernel
    p = [pads] * 4 if np.isscalar(pads) else list(pads)
    s = [stride] * 2 if np.isscalar(stride) else list(stride)
    d = [dilation] * 2 if np.isscalar(dilation) else list(dilation)
    oh = _conv_out(hw[0], kh, s[0], p[0], p[2], d[0], auto_pad=auto_pad)
    ow = _conv_out(hw[1], kw, s[1], p[1], p[3], d[1], auto_pad=auto_pad)
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


def pool_model(kind, c=4, hw=(8, 8), kernel=2, stride=2, pads=0, count_include_pad=0, seed=0,
               ceil_mode=0, auto_pad=None):
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
        attrs = dict(kernel_shape=[kernel, kernel], strides=[stride, stride])
        if auto_pad:
            attrs["auto_pad"] = auto_pad
        else:
            attrs["pads"] = p
        if ceil_mode:
            attrs["ceil_mode"] = 1
        if kind == "AveragePool":
            attrs["count_include_pad"] = count_include_pad
        nodes.append(helper.make_node(kind, [src], ["pool_out"], name="pool", **attrs))
        oshape = [None, c,
                  _conv_out(hw[0], kernel, stride, p[0], p[2], ceil=ceil_mode, auto_pad=auto_pad),
                  _conv_out(hw[1], kernel, stride, p[1], p[3], ceil=ceil_mode, auto_pad=auto_pad)]
    return make_model(nodes, [("x", [None, c, *hw])], [("pool_out", oshape)], inits,
                      name=kind.lower())


def conv1d_model(cin=3, cout=8, length=24, kernel=5, stride=1, pads=2, pool="MaxPool",
                 classes=5, seed=0):
    """A 1-D model ``(N, C, L)``: Conv1d + Relu, a 1-D pool (``pool``), a second
    Conv1d, GlobalAveragePool, Flatten, Gemm (a keyword-spotting front end)."""
    rng = _rng(seed)
    nodes, inits = [], []
    w1 = rng.normal(0, 1 / np.sqrt(cin * kernel), (cout, cin, kernel)).astype(np.float32)
    w2 = rng.normal(0, 1 / np.sqrt(cout * 3), (cout, cout, 3)).astype(np.float32)
    inits += [_init("c1_W", w1), _init("c1_B", rng.normal(0, 0.2, cout).astype(np.float32)),
              _init("c2_W", w2), _init("c2_B", rng.normal(0, 0.2, cout).astype(np.float32))]
    nodes.append(helper.make_node("Conv", ["x", "c1_W", "c1_B"], ["c1"], name="conv1",
                                  kernel_shape=[kernel], strides=[stride], pads=[pads, pads]))
    nodes.append(helper.make_node("Relu", ["c1"], ["r1"], name="relu1"))
    src = "r1"
    if pool:
        attrs = dict(kernel_shape=[3], strides=[2], pads=[1, 1])
        if pool == "AveragePool":
            attrs["count_include_pad"] = 0
        nodes.append(helper.make_node(pool, ["r1"], ["p1"], name="pool1", **attrs))
        src = "p1"
    nodes.append(helper.make_node("Conv", [src, "c2_W", "c2_B"], ["c2"], name="conv2",
                                  kernel_shape=[3], pads=[1, 1]))
    nodes.append(helper.make_node("Relu", ["c2"], ["r2"], name="relu2"))
    nodes.append(helper.make_node("GlobalAveragePool", ["r2"], ["gap"], name="gap"))
    nodes.append(helper.make_node("Flatten", ["gap"], ["flat"], name="flatten", axis=1))
    inits += [_init("fc_W", rng.normal(0, 1 / np.sqrt(cout), (classes, cout)).astype(np.float32)),
              _init("fc_B", rng.normal(0, 0.2, classes).astype(np.float32))]
    nodes.append(helper.make_node("Gemm", ["flat", "fc_W", "fc_B"], ["logits"], name="fc",
                                  transB=1))
    return make_model(nodes, [("x", [None, cin, length])], [("logits", [None, classes])], inits,
                      name="conv1d")


def concat_model(ca=3, cb=5, hw=(6, 6), axis=1, seed=0):
    """Two conv branches of the input (different scales) concatenated along ``axis``."""
    rng = _rng(seed)
    nodes, inits = [], []
    a = _conv_nodes(nodes, inits, "x", "a", 4, ca, 1, 1, 0, True, False, rng)
    b = _conv_nodes(nodes, inits, "x", "b", 4, cb, 3, 1, 1, True, "relu", rng)
    inits[-2] = _init("b_W", numpy_helper.to_array(inits[-2]) * 3)  # a different scale
    nodes.append(helper.make_node("Concat", [a, b], ["cat"], name="concat", axis=axis))
    return make_model(nodes, [("x", [None, 4, *hw])], [("cat", [None, ca + cb, *hw])], inits,
                      name="concat")


def resize_model(c=3, hw=(5, 4), scales=(2, 2), sizes=None, mode="nearest",
                 coordinate_transformation_mode="asymmetric", nearest_mode="floor", seed=0):
    """A 1x1 conv, then Resize by ``scales`` (H, W) or to ``sizes`` (H, W)."""
    rng = _rng(seed)
    nodes, inits = [], []
    src = _conv_nodes(nodes, inits, "x", "pre", c, c, 1, 1, 0, True, False, rng)
    inits.append(_init("roi", np.zeros(0, np.float32)))
    if sizes is None:
        inits.append(_init("scales", np.array([1, 1, *scales], np.float32)))
        ins = [src, "roi", "scales"]
        out_hw = [int(np.floor(n * s)) for n, s in zip(hw, scales)]
    else:
        # F.interpolate(x, size=...): the batch and channels from Shape(x)[0:2]
        inits += [_init("scales", np.zeros(0, np.float32)), _init("s0", np.array([0], np.int64)),
                  _init("s2", np.array([2], np.int64)),
                  _init("hw_size", np.array(sizes, np.int64))]
        nodes += [helper.make_node("Shape", [src], ["shape"], name="shape"),
                  helper.make_node("Slice", ["shape", "s0", "s2"], ["nc"], name="slice"),
                  helper.make_node("Concat", ["nc", "hw_size"], ["sizes"], name="sizes", axis=0)]
        ins = [src, "roi", "scales", "sizes"]
        out_hw = list(sizes)
    nodes.append(helper.make_node(
        "Resize", ins, ["up"], name="resize", mode=mode,
        coordinate_transformation_mode=coordinate_transformation_mode, nearest_mode=nearest_mode))
    return make_model(nodes, [("x", [None, c, *hw])], [("up", [None, c, *out_hw])], inits,
                      name="resize")


def global_pool_model(kind="GlobalMaxPool", c=6, hw=(5, 7), keepdims=1, axes=(2, 3), seed=0):
    """A 3x3 conv, then ``kind`` (GlobalMaxPool, or ReduceMean / ReduceMax over
    ``axes``), Flatten where the axes are kept, and a Gemm: onnxruntime leaves
    these pools in float, quantized by the Gemm's input."""
    rng = _rng(seed)
    nodes, inits = [], []
    src = _conv_nodes(nodes, inits, "x", "pre", 3, c, 3, 1, 1, True, False, rng)
    attrs = {} if kind == "GlobalMaxPool" else dict(axes=list(axes), keepdims=keepdims)
    nodes.append(helper.make_node(kind, [src], ["pool_out"], name="pool", **attrs))
    src = "pool_out"
    if kind == "GlobalMaxPool" or keepdims:
        nodes.append(helper.make_node("Flatten", [src], ["flat"], name="flatten"))
        src = "flat"
    inits += [_init("fc_W", rng.normal(0, 1 / np.sqrt(c), (4, c)).astype(np.float32)),
              _init("fc_B", rng.normal(0, 0.2, 4).astype(np.float32))]
    nodes.append(helper.make_node("Gemm", [src, "fc_W", "fc_B"], ["y"], name="fc", transB=1))
    return make_model(nodes, [("x", [None, 3, *hw])], [("y", [None, 4])], inits,
                      name=kind.lower())


def head_model(kind="Softmax", cin=16, classes=10, axis=1, seed=0):
    """A Gemm whose result goes through ``kind`` (Softmax or Sigmoid) to the graph output."""
    rng = _rng(seed)
    w = rng.normal(0, 2 / np.sqrt(cin), size=(classes, cin)).astype(np.float32)
    inits = [_init("fc_W", w), _init("fc_B", rng.normal(0, 0.5, classes).astype(np.float32))]
    nodes = [helper.make_node("Gemm", ["x", "fc_W", "fc_B"], ["logits"], name="fc", transB=1)]
    attrs = dict(axis=axis) if kind == "Softmax" else {}
    nodes.append(helper.make_node(kind, ["logits"], ["prob"], name="head", **attrs))
    return make_model(nodes, [("x", [None, cin])], [("prob", [None, classes])], inits,
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
             reduce_range=None, nodes_to_exclude=None):
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
        nodes_to_exclude=list(nodes_to_exclude or []),
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
    opts.log_severity_level = 3  # no warnings about initializers the quantizer left unused
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


def ort_int8_tensors(path, x, names, skip_float=False):
    """onnxruntime's values of inner int8/uint8 tensors (``names``), as int8.

    The tensors are exposed as extra graph outputs of a copy of the model
    (written beside ``path``); uint8 values are moved to the int8 domain.
    With ``skip_float``, float tensors among ``names`` are left out of the
    result instead of raising.
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
        elif v.dtype != np.int8 and skip_float:
            continue
        elif v.dtype != np.int8:
            raise ValueError(f"tensor {name!r} is {v.dtype}, not int8/uint8")
        out[name] = v.astype(np.int8)
    return out


def avgpool_ties(layer, x):
    """Outputs of an AveragePool layer whose exact value
    ``sum(x - zx) * x_scale / (y_scale * count)`` is a half: onnxruntime's float
    pipeline breaks such ties by float32 noise, the reference to even."""
    from fpgacnn.host.integer_ops import pad_nchw
    kh, kw = layer.kernel
    sy, sx = layer.stride
    extra = getattr(layer, "extra", (0, 0))
    full = (layer.pads[0], layer.pads[1], layer.pads[2] + extra[0], layer.pads[3] + extra[1])

    def window_sum(t):
        win = np.lib.stride_tricks.sliding_window_view(t, (kh, kw), axis=(2, 3))
        return win[:, :, ::sy, ::sx].sum(axis=(4, 5))
    acc = window_sum(pad_nchw(x.astype(np.int64) - layer.x_zero_point, full, 0))
    ones = np.ones((1, 1) + x.shape[2:], np.int64)
    if layer.count_include_pad:
        inside = pad_nchw(pad_nchw(ones, layer.pads, 1), (0, 0) + tuple(extra), 0)
    else:
        inside = pad_nchw(ones, full, 0)
    count = window_sum(inside)
    v = acc * (layer.x_scale / layer.y_scale) / count
    return np.abs(v - np.floor(v) - 0.5) < 1e-6


def layer_by_layer(qm, path, x):
    """Every layer of ``qm`` (imported from ``path``) fed onnxruntime's own int8
    inputs and compared with onnxruntime's own int8 output.

    Tensors the importer adds (the ``(C, 1, L)`` view of a 1-D tensor) are
    taken from the reference. Returns ``[(layer, max_diff, exact_fraction,
    n_compared)]``; AveragePool ties (see :func:`avgpool_ties`) are left out
    of the exact fraction, and layers without an onnxruntime tensor to
    compare are left out of the list.
    """
    m = onnx.load(str(path))
    known = {o for n in m.graph.node for o in n.output} | {i.name for i in m.graph.input}
    names = sorted({t for layer in qm.layers for t in (*layer.inputs, layer.output)} & known)
    ort = ort_int8_tensors(path, x, names, skip_float=True)
    n = len(x)
    values = {qm.input_tensor: qm.quantize_input(x)} if qm.input_tensor not in ort else {}
    stats = []
    for layer in qm.layers:
        shapes = getattr(layer, "input_shapes", [layer.input_shape] * len(layer.inputs))
        ins = [ort[t].reshape(n, *s) if t in ort else values[t]
               for t, s in zip(layer.inputs, shapes)]
        y = layer.evaluate(*ins)
        if layer.output in ort:
            want = ort[layer.output].reshape(y.shape)
            diff = np.abs(y.astype(np.int64) - want.astype(np.int64))
            counted = diff
            if layer.op == "AveragePool":
                counted = diff[~avgpool_ties(layer, ins[0])]
            stats.append((layer, int(diff.max(initial=0)), float(np.mean(counted == 0)),
                          int(diff.size)))
            y = want
        values[layer.output] = y
    return stats
