"""The reference backend against onnxruntime on seeded random single-layer models
(and small models for the forms that need a context: 1-D, float heads).

Each model is quantized by onnxruntime's own quantizer (QDQ and QOperator,
int8 and uint8 activations, per-channel int8 weights), imported with
load_onnx and run on the reference; every output must be within 1 LSB of
onnxruntime's and at least 99% exactly equal (DESIGN.md s.2: the reference's
16-bit multiplier and half-up rounding differ from onnxruntime's float
requantization only on near-ties).
"""

import logging

import numpy as np
import pytest

from onnx_model_builders import (add_model, avgpool_ties, calibration_data, concat_model,
                                 conv1d_model, conv_model, gemm_model, global_pool_model,
                                 head_model, layer_by_layer, ort_int8_output, ort_int8_tensors,
                                 ort_session, pool_model, quantize, resize_model)
from fpgacnn.host.layers import AveragePool, Conv, DilatedConv, GroupedConv
from fpgacnn.host.onnx_import import load_onnx
from fpgacnn.host.reference import ReferenceBackend

logging.getLogger().setLevel(logging.ERROR)  # onnxruntime's quantizer warns about pre-processing

FORMATS = [("qdq", "int8"), ("qdq", "uint8"), ("qoperator", "int8"), ("qoperator", "uint8")]
N_IMAGES = 64
MIN_EXACT = 0.99


def run_both(model, tmp_path, fmt, act, seed, n=N_IMAGES):
    """Quantize ``model`` with onnxruntime; return (imported model, x, reference int8, ort int8)."""
    path = quantize(model, tmp_path / f"{fmt}_{act}.onnx", fmt=fmt, activation=act, seed=seed)
    qm = load_onnx(path)
    x = calibration_data(model, n, seed=seed + 1000)
    ref = ReferenceBackend().run_int8(qm, qm.quantize_input(x))
    return qm, x, ref, ort_int8_output(path, x)


def assert_close(ref, ort, ignore=None):
    """Within 1 LSB everywhere; >= 99% exactly equal (outside ``ignore``)."""
    assert ref.shape == ort.shape
    diff = np.abs(ref.astype(np.int64) - ort.astype(np.int64))
    assert diff.max() <= 1, f"max difference {diff.max()} LSB"
    counted = diff if ignore is None else diff[~ignore]
    exact = float(np.mean(counted == 0))
    assert exact >= MIN_EXACT, f"only {exact:.4%} exactly equal"


CONV_CASES = [
    # cin, cout, kernel, stride, pads, hw, relu
    (1, 1, 1, 1, 0, (6, 6), False),
    (1, 8, 3, 1, 1, (8, 8), True),
    (3, 16, 3, 2, 1, (9, 9), False),
    (8, 4, 5, 1, 2, (8, 8), True),
    (4, 8, 5, 2, (2, 1, 0, 2), (10, 9), "clip"),
    (3, 6, 7, 1, 3, (8, 8), True),
    (5, 3, 7, 2, (3, 3, 2, 2), (12, 11), False),
    (16, 32, 1, 1, 0, (5, 5), True),
    (32, 16, 1, 2, 0, (7, 7), False),
    (64, 8, 3, 1, 1, (4, 4), False),
    (8, 64, 3, 2, 0, (7, 7), True),
    (2, 5, (3, 1), (1, 2), (1, 0, 1, 0), (6, 7), False),
]


@pytest.mark.parametrize("fmt,act", FORMATS)
@pytest.mark.parametrize("case", range(len(CONV_CASES)))
def test_conv_matches_onnxruntime(tmp_path, case, fmt, act):
    cin, cout, kernel, stride, pads, hw, relu = CONV_CASES[case]
    model = conv_model(cin, cout, kernel, stride, pads, hw, relu=relu, seed=case)
    qm, _, ref, ort = run_both(model, tmp_path, fmt, act, seed=case)
    assert [layer.op for layer in qm.layers] == ["Conv"]
    conv = qm.layers[0]
    if relu is True:  # Relu folded into the output range: the output zero point is its floor
        assert conv.y_zero_point == -128
    assert_close(ref, ort)


@pytest.mark.parametrize("fmt,act", FORMATS)
def test_conv_without_bias_matches_onnxruntime(tmp_path, fmt, act):
    model = conv_model(6, 5, 3, stride=2, pads=1, hw=(9, 9), bias=False, seed=11)
    qm, _, ref, ort = run_both(model, tmp_path, fmt, act, seed=11)
    assert not qm.layers[0].bias.any()
    assert_close(ref, ort)


@pytest.mark.parametrize("fmt,act", FORMATS)
@pytest.mark.parametrize("cin,cout,matmul,bias,relu", [
    (16, 10, False, True, False),
    (64, 32, False, True, True),
    (8, 3, True, False, False),
    (40, 12, True, True, False),
])
def test_gemm_matches_onnxruntime(tmp_path, cin, cout, matmul, bias, relu, fmt, act):
    model = gemm_model(cin, cout, matmul=matmul, relu=relu, bias=bias, seed=cin)
    qm, _, ref, ort = run_both(model, tmp_path, fmt, act, seed=cin)
    assert qm.layers[0].op == "Gemm" and qm.layers[0].weight.shape == (cout, cin)
    # onnxruntime quantizes MatMul + bias as two ops: the bias becomes an Add of a constant.
    assert [layer.op for layer in qm.layers] == ["Gemm"] + (["Add"] if matmul and bias else [])
    assert_close(ref, ort)


def test_gemm_with_untransposed_weights(tmp_path):
    model = gemm_model(12, 7, trans_b=False, seed=3)
    qm, _, ref, ort = run_both(model, tmp_path, "qdq", "int8", seed=3)
    assert qm.layers[0].weight.shape == (7, 12)
    assert_close(ref, ort)


POOL_CASES = [
    ("MaxPool", 4, (8, 8), 2, 2, 0, 0),
    ("MaxPool", 3, (7, 7), 3, 2, 1, 0),
    ("AveragePool", 4, (8, 8), 2, 2, 0, 0),
    ("AveragePool", 5, (8, 8), 2, 2, 1, 0),
    ("AveragePool", 3, (7, 7), 3, 1, 1, 1),
    ("AveragePool", 6, (9, 9), 3, 2, 1, 0),
    ("GlobalAveragePool", 8, (6, 6), None, None, 0, 0),
    ("GlobalAveragePool", 16, (4, 4), None, None, 0, 0),
]


@pytest.mark.parametrize("fmt,act", FORMATS)
@pytest.mark.parametrize("case", range(len(POOL_CASES)))
def test_pool_matches_onnxruntime(tmp_path, case, fmt, act):
    kind, c, hw, kernel, stride, pads, cip = POOL_CASES[case]
    model = pool_model(kind, c, hw, kernel or 2, stride or 2, pads, cip, seed=case)
    qm, x, ref, ort = run_both(model, tmp_path, fmt, act, seed=case)
    assert [layer.op for layer in qm.layers] == ["Conv", kind]
    pool = qm.layers[1]
    ignore = None
    if isinstance(pool, AveragePool):
        # Exact halves are frequent when the pool keeps its input scale (QDQ); the
        # reference rounds them to even, onnxruntime's float32 noise either way.
        pre = ReferenceBackend().trace_int8(qm, qm.quantize_input(x))[qm.layers[0].name]
        ignore = avgpool_ties(pool, pre)
    assert_close(ref, ort, ignore)


@pytest.mark.parametrize("fmt,act", FORMATS)
@pytest.mark.parametrize("c,hw,relu", [(4, (6, 6), False), (16, (4, 5), True), (1, (3, 3), False)])
def test_add_matches_onnxruntime(tmp_path, c, hw, relu, fmt, act):
    """The Add layer alone, fed onnxruntime's own int8 conv outputs (an error of
    1 LSB in a conv output would otherwise be scaled up by the Add)."""
    model = add_model(c, hw, relu=relu, seed=c)
    qm, x, _, _ = run_both(model, tmp_path, fmt, act, seed=c)
    assert [layer.op for layer in qm.layers] == ["Conv", "Conv", "Add"]
    add = qm.layers[2]
    t = ort_int8_tensors(tmp_path / f"{fmt}_{act}.onnx", x, [*add.inputs, add.output])
    assert_close(add.evaluate(*(t[i] for i in add.inputs)), t[add.output])


@pytest.mark.parametrize("fmt,act", FORMATS)
def test_float_io_round_trip_matches_onnxruntime(tmp_path, fmt, act):
    """ReferenceBackend.run takes and returns the graph's own float32 tensors."""
    from onnx_model_builders import ort_session
    model = conv_model(3, 4, 3, pads=1, relu=True, seed=7)
    path = quantize(model, tmp_path / "m.onnx", fmt=fmt, activation=act, seed=7)
    qm = load_onnx(path)
    x = calibration_data(model, 5, seed=8)
    y = ReferenceBackend().run(qm, x)
    sess = ort_session(path)
    y_ort = sess.run(None, {"x": x})[0]
    assert y.dtype == np.float32 and y.shape == y_ort.shape == (5, 4, 8, 8)
    np.testing.assert_allclose(y, y_ort, rtol=0, atol=qm.output.scale * 1.0001)
    assert qm.input.dtype == np.float32 and qm.input.shape == (3, 8, 8)


@pytest.mark.parametrize("fmt", ["qdq", "qoperator"])
@pytest.mark.parametrize("extra", [{"QDQKeepRemovableActivations": True}, {"ActivationSymmetric": True}],
                         ids=["kept", "symmetric"])
@pytest.mark.parametrize("relu", [True, "clip"])
def test_kept_activation_fuses_into_clamp(tmp_path, extra, fmt, relu):
    """Relu/Clip that onnxruntime keeps (own Q/DQ pair, or float at the graph
    output) fuse into the conv's clamp."""
    model = conv_model(3, 8, 3, pads=1, relu=relu, seed=2)
    path = quantize(model, tmp_path / "m.onnx", fmt=fmt, extra_options=extra, seed=2)
    qm = load_onnx(path)
    assert [layer.op for layer in qm.layers] == ["Conv"]
    assert qm.layers[0].lo == qm.layers[0].y_zero_point
    x = calibration_data(model, 64, seed=3)
    assert_close(ReferenceBackend().run_int8(qm, qm.quantize_input(x)), ort_int8_output(path, x))


@pytest.mark.parametrize("act", ["int8", "uint8"])
def test_integer_graph_io(tmp_path, act):
    """A model whose graph input and output are the int8/uint8 tensors themselves
    (the QDQ model without its first QuantizeLinear and last DequantizeLinear)."""
    import onnx
    from onnx import helper
    from onnx_model_builders import ort_session
    model = conv_model(4, 6, 3, stride=2, pads=1, relu=True, seed=4)
    path = quantize(model, tmp_path / "m.onnx", activation=act, seed=4)
    m = onnx.load(str(path))
    q_in = next(n for n in m.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "x")
    dq_out = next(n for n in m.graph.node if n.output[0] == m.graph.output[0].name)
    elem = onnx.TensorProto.INT8 if act == "int8" else onnx.TensorProto.UINT8
    m.graph.node.remove(q_in)
    m.graph.node.remove(dq_out)
    del m.graph.input[:]
    del m.graph.output[:]
    m.graph.input.append(helper.make_tensor_value_info(q_in.output[0], elem, ["N", 4, 8, 8]))
    m.graph.output.append(helper.make_tensor_value_info(dq_out.input[0], elem, ["N", 6, 4, 4]))
    onnx.save(m, str(tmp_path / "int.onnx"))
    qm = load_onnx(tmp_path / "int.onnx")
    dtype = np.int8 if act == "int8" else np.uint8
    assert qm.input.dtype == dtype and qm.output.dtype == dtype
    x = np.random.default_rng(5).integers(np.iinfo(dtype).min, np.iinfo(dtype).max + 1,
                                          size=(9, 4, 8, 8)).astype(dtype)
    y = ReferenceBackend().run(qm, x)
    sess = ort_session(tmp_path / "int.onnx")
    y_ort = sess.run(None, {q_in.output[0]: x})[0]
    assert y.dtype == y_ort.dtype == dtype
    assert_close(y.astype(np.int16), y_ort.astype(np.int16))


GROUPED_CASES = [
    # cin, cout, kernel, stride, pads, hw, group, dilation, relu
    (8, 8, 3, 1, 1, (8, 8), 8, 1, True),                    # depthwise
    (8, 8, 3, 2, 1, (9, 9), 8, 1, "clip"),                  # depthwise, stride 2, ReLU6
    (6, 12, 3, 1, 1, (7, 7), 3, 1, False),                  # 3 groups of 2 -> 4
    (4, 8, 3, 1, 2, (9, 9), 1, 2, True),                    # dilated
    (8, 16, 3, 1, 2, (8, 8), 8, 2, False),                  # depthwise x2 channels, dilated
    (3, 6, (3, 1), 1, (2, 0, 2, 0), (8, 6), 1, (2, 1), False),  # dilated along H only
]


@pytest.mark.parametrize("fmt,act", FORMATS)
@pytest.mark.parametrize("case", range(len(GROUPED_CASES)))
def test_grouped_and_dilated_conv_match_onnxruntime(tmp_path, case, fmt, act):
    cin, cout, kernel, stride, pads, hw, group, dilation, relu = GROUPED_CASES[case]
    model = conv_model(cin, cout, kernel, stride, pads, hw, relu=relu, seed=case, group=group,
                       dilation=dilation)
    qm, _, ref, ort = run_both(model, tmp_path, fmt, act, seed=case)
    layer, = qm.layers
    # never a Conv: the compiler sends only dense convolutions to the engine
    assert not isinstance(layer, Conv)
    assert isinstance(layer, GroupedConv if group > 1 else DilatedConv)
    assert layer.group == group
    assert layer.macs == cout * ref.shape[2] * ref.shape[3] * (cin // group) * np.prod(layer.kernel)
    assert_close(ref, ort)


@pytest.mark.parametrize("fmt,act", FORMATS)
@pytest.mark.parametrize("auto_pad,stride,hw", [("SAME_UPPER", 2, (9, 8)), ("SAME_LOWER", 2, (8, 9)),
                                                ("SAME_UPPER", 1, (6, 6)), ("VALID", 2, (9, 9))])
def test_conv_auto_pad_matches_onnxruntime(tmp_path, auto_pad, stride, hw, fmt, act):
    model = conv_model(3, 5, 4 if auto_pad != "VALID" else 3, stride, hw=hw, auto_pad=auto_pad,
                       seed=stride)
    qm, _, ref, ort = run_both(model, tmp_path, fmt, act, seed=stride)
    assert type(qm.layers[0]) is Conv
    assert_close(ref, ort)


CEIL_AUTO_POOL_CASES = [
    # kind, c, hw, kernel, stride, pads, count_include_pad, ceil_mode, auto_pad
    ("MaxPool", 4, (7, 7), 2, 2, 0, 0, 1, None),
    ("MaxPool", 3, (6, 5), 3, 2, 1, 0, 1, None),
    ("AveragePool", 4, (7, 7), 2, 2, 0, 0, 1, None),
    ("AveragePool", 4, (5, 6), 3, 2, 1, 1, 1, None),
    ("AveragePool", 3, (6, 6), 3, 2, 1, 0, 1, None),
    ("MaxPool", 4, (7, 8), 3, 2, 0, 0, 0, "SAME_UPPER"),
    ("AveragePool", 4, (8, 7), 3, 2, 0, 0, 0, "SAME_LOWER"),
    ("MaxPool", 3, (7, 7), 2, 2, 0, 0, 0, "VALID"),
]


@pytest.mark.parametrize("fmt,act", FORMATS)
@pytest.mark.parametrize("case", range(len(CEIL_AUTO_POOL_CASES)))
def test_ceil_mode_and_auto_pad_pools_match_onnxruntime(tmp_path, case, fmt, act):
    kind, c, hw, kernel, stride, pads, cip, ceil, auto_pad = CEIL_AUTO_POOL_CASES[case]
    model = pool_model(kind, c, hw, kernel, stride, pads, cip, seed=case, ceil_mode=ceil,
                       auto_pad=auto_pad)
    qm, x, ref, ort = run_both(model, tmp_path, fmt, act, seed=case)
    assert [layer.op for layer in qm.layers] == ["Conv", kind]
    pool = qm.layers[1]
    ignore = None
    if isinstance(pool, AveragePool):
        pre = ReferenceBackend().trace_int8(qm, qm.quantize_input(x))[qm.layers[0].name]
        ignore = avgpool_ties(pool, pre)
    assert_close(ref, ort, ignore)


@pytest.mark.parametrize("fmt,act", FORMATS)
@pytest.mark.parametrize("axis", [1, -3])
def test_concat_matches_onnxruntime(tmp_path, axis, fmt, act):
    model = concat_model(3, 5, axis=axis, seed=7)
    qm, _, ref, ort = run_both(model, tmp_path, fmt, act, seed=7)
    assert [layer.op for layer in qm.layers] == ["Conv", "Conv", "Concat"]
    assert qm.layers[2].output_shape == (8, 6, 6)
    assert_close(ref, ort)


RESIZE_CASES = [
    dict(scales=(2, 2)),                                                    # nn.Upsample(2)
    dict(scales=(2, 3), coordinate_transformation_mode="half_pixel",
         nearest_mode="round_prefer_floor"),
    dict(sizes=(7, 9), coordinate_transformation_mode="half_pixel",
         nearest_mode="round_prefer_floor"),
    dict(sizes=(3, 2), coordinate_transformation_mode="align_corners",
         nearest_mode="round_prefer_ceil"),
    dict(scales=(1.5, 2), coordinate_transformation_mode="pytorch_half_pixel",
         nearest_mode="floor"),
    dict(scales=(2, 2), coordinate_transformation_mode="tf_half_pixel_for_nn",
         nearest_mode="ceil"),
]


@pytest.mark.parametrize("fmt,act", FORMATS)
@pytest.mark.parametrize("case", range(len(RESIZE_CASES)))
def test_resize_nearest_matches_onnxruntime(tmp_path, case, fmt, act):
    model = resize_model(3, (5, 4), **RESIZE_CASES[case], seed=case)
    qm, _, ref, ort = run_both(model, tmp_path, fmt, act, seed=case)
    assert [layer.op for layer in qm.layers] == ["Conv", "Resize"]
    assert_close(ref, ort)


@pytest.mark.parametrize("fmt,act", FORMATS)
@pytest.mark.parametrize("kind,keepdims,axes", [("GlobalMaxPool", 1, None),
                                                ("ReduceMean", 1, (2, 3)),
                                                ("ReduceMean", 0, (-2, -1)),
                                                ("ReduceMax", 0, (3, 2))])
def test_global_pools_match_onnxruntime(tmp_path, kind, keepdims, axes, fmt, act):
    """onnxruntime leaves these in float between DequantizeLinear and the next
    QuantizeLinear: a global pool layer, compared on onnxruntime's own input."""
    model = global_pool_model(kind, keepdims=keepdims, axes=axes or (2, 3), seed=3)
    path = quantize(model, tmp_path / "m.onnx", fmt=fmt, activation=act, seed=3)
    qm = load_onnx(path)
    op = "GlobalAveragePool" if kind == "ReduceMean" else "GlobalMaxPool"
    assert [layer.op for layer in qm.layers] == \
        ["Conv", op] + (["Flatten"] if keepdims else []) + ["Gemm"]
    assert qm.layers[1].output_shape == ((6, 1, 1) if keepdims else (6,))
    x = calibration_data(model, N_IMAGES, seed=4)
    stats = layer_by_layer(qm, path, x)
    # a pool followed by Flatten has no int8 tensor of its own in onnxruntime:
    # it is checked through the Flatten's
    assert [layer.op for layer, *_ in stats][-2:] == [qm.layers[-2].op, "Gemm"]
    for layer, worst, exact, _ in stats:
        assert worst <= 1 and exact >= MIN_EXACT, f"{layer.name}: {worst} LSB, {exact:.4%} exact"


@pytest.mark.parametrize("fmt,act", FORMATS)
@pytest.mark.parametrize("kind,axis", [("Softmax", 1), ("Softmax", -1), ("Sigmoid", None)])
def test_quantized_softmax_and_sigmoid_match_onnxruntime(tmp_path, kind, axis, fmt, act):
    """onnxruntime's default quantizer quantizes a final Softmax / Sigmoid too
    (QDQ, QLinearSoftmax, QLinearSigmoid): an int8 layer."""
    model = head_model(kind, axis=axis or 1, seed=5)
    qm, _, ref, ort = run_both(model, tmp_path, fmt, act, seed=5)
    assert [layer.op for layer in qm.layers] == ["Gemm", kind] and qm.head is None
    assert_close(ref, ort)


@pytest.mark.parametrize("fmt,act", FORMATS)
@pytest.mark.parametrize("kind", ["Softmax", "Sigmoid"])
def test_float_head_matches_onnxruntime(tmp_path, kind, fmt, act):
    """A Softmax / Sigmoid left in float after the last DequantizeLinear (as
    ``fpgacnn quantize`` leaves it) is the model's float head: the float output
    equals onnxruntime's wherever the int8 logits agree."""
    model = head_model(kind, seed=6)
    path = quantize(model, tmp_path / "m.onnx", fmt=fmt, activation=act, seed=6,
                    nodes_to_exclude=["head"])
    qm = load_onnx(path)
    assert [layer.op for layer in qm.layers] == ["Gemm"] and qm.head.op == kind
    x = calibration_data(model, N_IMAGES, seed=7)
    logits = ReferenceBackend().run_int8(qm, qm.quantize_input(x))
    ort_logits = ort_int8_tensors(path, x, [qm.output_tensor])[qm.output_tensor]
    assert_close(logits, ort_logits)
    same = (logits == ort_logits).all(axis=1)
    y = ReferenceBackend().run(qm, x)
    y_ort = ort_session(path).run(None, {"x": x})[0]
    assert y.dtype == np.float32 and y.shape == y_ort.shape == (N_IMAGES, 10)
    np.testing.assert_allclose(y[same], y_ort[same], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("fmt,act", FORMATS)
@pytest.mark.parametrize("pool", ["MaxPool", "AveragePool", None])
def test_1d_model_matches_onnxruntime(tmp_path, pool, fmt, act):
    """Conv1d and its pools run as 2-D layers with H = 1; the graph input and
    output keep their ONNX shapes."""
    model = conv1d_model(pool=pool, seed=8)
    path = quantize(model, tmp_path / "m.onnx", fmt=fmt, activation=act, seed=8)
    qm = load_onnx(path)
    assert qm.input.shape == (3, 24) and qm.output.shape == (5,)
    ops = [layer.op for layer in qm.layers]
    assert ops == ["Reshape", "Conv"] + ([pool] if pool else []) + \
        ["Conv", "GlobalAveragePool", "Flatten", "Gemm"]
    assert qm.layers[1].input_shape == (3, 1, 24) and qm.layers[1].kernel == (1, 5)
    x = calibration_data(model, N_IMAGES, seed=9)
    for layer, worst, exact, _ in layer_by_layer(qm, path, x):
        assert worst <= 1 and exact >= MIN_EXACT, f"{layer.name}: {worst} LSB, {exact:.4%} exact"
    assert_close(ReferenceBackend().run_int8(qm, qm.quantize_input(x)), ort_int8_output(path, x))
