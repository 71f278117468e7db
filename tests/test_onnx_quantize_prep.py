"""``fpgacnn quantize`` on models as exporters write them: BatchNormalization
is folded before onnxruntime's quantizer (exactly, in float), a final
Softmax / Sigmoid stays float (the float head), bad calibration data is
refused with one line."""

import logging
import re

import numpy as np
import onnx
import pytest
from onnx import helper

from onnx_model_builders import (_conv_nodes, _init, _rng, calibration_data, head_model,
                                 make_model, ort_int8_output, ort_session)
from fpgacnn.core.errors import InputError
from fpgacnn.host.onnx_import import load_onnx
from fpgacnn.host.quantize import prepare_float_model, quantize_model
from fpgacnn.host.reference import ReferenceBackend

logging.getLogger().setLevel(logging.ERROR)


def _bn(nodes, inits, src, name, c, rng):
    inits += [_init(f"{name}_scale", rng.uniform(0.5, 1.5, c).astype(np.float32)),
              _init(f"{name}_bias", rng.normal(0, 0.3, c).astype(np.float32)),
              _init(f"{name}_mean", rng.normal(0, 0.3, c).astype(np.float32)),
              _init(f"{name}_var", rng.uniform(0.5, 1.5, c).astype(np.float32))]
    nodes.append(helper.make_node(
        "BatchNormalization", [src, *(f"{name}_{p}" for p in ("scale", "bias", "mean", "var"))],
        [f"{name}_out"], name=name, epsilon=1e-3))
    return f"{name}_out"


def conv_bn_model(seed=0):
    """conv (no bias) -> BN -> Relu; conv (bias) -> BN; Add of the two; BN of
    the sum (after an Add: not foldable, a depthwise 1x1 Conv); Relu."""
    rng = _rng(seed)
    nodes, inits = [], []
    a = _conv_nodes(nodes, inits, "x", "c1", 3, 6, 3, 1, 1, False, False, rng)
    a = _bn(nodes, inits, a, "bn1", 6, rng)
    nodes.append(helper.make_node("Relu", [a], ["a_act"], name="relu1"))
    b = _conv_nodes(nodes, inits, "x", "c2", 3, 6, 1, 1, 0, True, False, rng)
    b = _bn(nodes, inits, b, "bn2", 6, rng)
    nodes.append(helper.make_node("Add", ["a_act", b], ["sum"], name="add"))
    s = _bn(nodes, inits, "sum", "bn3", 6, rng)
    nodes.append(helper.make_node("Relu", [s], ["y"], name="relu2"))
    return make_model(nodes, [("x", [None, 3, 6, 6])], [("y", [None, 6, 6, 6])], inits)


def fc_bn_model(seed=0, trans_b=1):
    """BN on the input (N, C) (a diagonal Gemm), Gemm -> BN -> Relu -> Gemm (BatchNorm1d)."""
    rng = _rng(seed)
    nodes, inits = [], []
    x = _bn(nodes, inits, "x", "bn0", 10, rng)
    w = rng.normal(0, 0.3, (8, 10)).astype(np.float32)
    inits += [_init("fc1_W", w if trans_b else w.T.copy()),
              _init("fc1_B", rng.normal(0, 0.1, 8).astype(np.float32))]
    nodes.append(helper.make_node("Gemm", [x, "fc1_W", "fc1_B"], ["h"], name="fc1",
                                  transB=trans_b))
    h = _bn(nodes, inits, "h", "bn1", 8, rng)
    nodes.append(helper.make_node("Relu", [h], ["h_act"], name="relu"))
    inits += [_init("fc2_W", rng.normal(0, 0.3, (4, 8)).astype(np.float32))]
    nodes.append(helper.make_node("Gemm", ["h_act", "fc2_W"], ["h2"], name="fc2", transB=1))
    y = _bn(nodes, inits, "h2", "bn2", 4, rng)
    return make_model(nodes, [("x", [None, 10])], [(y, [None, 4])], inits)


def _float_run(model, x):
    return ort_session_bytes(model).run(None, {"x": x})[0]


def ort_session_bytes(model):
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("builder,ops", [
    (conv_bn_model, ["Conv", "Relu", "Conv", "Add", "Conv", "Relu"]),
    (lambda seed: fc_bn_model(seed, trans_b=1), ["Gemm", "Gemm", "Relu", "Gemm"]),
    (lambda seed: fc_bn_model(seed, trans_b=0), ["Gemm", "Gemm", "Relu", "Gemm"]),
], ids=["conv", "gemm-transB1", "gemm-transB0"])
def test_batch_normalization_folds_exactly(builder, ops):
    model = builder(seed=1)
    x = calibration_data(model, 16, seed=2)
    before = _float_run(model, x)
    folded, heads = prepare_float_model(model)
    assert folded == 3 and heads == []
    assert [n.op_type for n in model.graph.node] == ops
    onnx.checker.check_model(model)
    np.testing.assert_allclose(_float_run(model, x), before, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("builder,layers", [
    (conv_bn_model, ["Conv", "Conv", "Add", "GroupedConv"]),
    (fc_bn_model, ["Gemm", "Gemm", "Gemm"]),
], ids=["conv", "gemm"])
@pytest.mark.parametrize("fmt", ["qdq", "qoperator"])
def test_quantize_model_folds_and_the_result_runs(tmp_path, builder, layers, fmt):
    model = builder(seed=3)
    onnx.save(model, str(tmp_path / "f.onnx"))
    x = calibration_data(model, 64, seed=4)
    path = quantize_model(tmp_path / "f.onnx", x, tmp_path / "q.onnx", quant_format=fmt)
    assert "BatchNormalization" not in {n.op_type for n in onnx.load(str(path)).graph.node}
    qm = load_onnx(path)
    assert [layer.op for layer in qm.layers] == layers
    ref = ReferenceBackend().run_int8(qm, qm.quantize_input(x))
    diff = np.abs(ref.astype(np.int64) - ort_int8_output(path, x))
    assert diff.max() <= 1 and np.mean(diff == 0) >= 0.99


def test_conv_output_read_twice_is_not_folded_into_it():
    """A Conv whose result also goes elsewhere keeps its weights; the BN after
    it becomes a depthwise 1x1 Conv."""
    rng = _rng(5)
    nodes, inits = [], []
    a = _conv_nodes(nodes, inits, "x", "c1", 3, 4, 3, 1, 1, True, False, rng)
    b = _bn(nodes, inits, a, "bn", 4, rng)
    nodes.append(helper.make_node("Add", [a, b], ["y"], name="add"))
    model = make_model(nodes, [("x", [None, 3, 5, 5])], [("y", [None, 4, 5, 5])], inits)
    x = calibration_data(model, 4, seed=6)
    before = _float_run(model, x)
    assert prepare_float_model(model) == (1, [])
    conv, dw, add = model.graph.node
    assert dw.op_type == "Conv" and [a.i for a in dw.attribute if a.name == "group"] == [4]
    np.testing.assert_allclose(_float_run(model, x), before, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["Softmax", "Sigmoid"])
def test_final_softmax_or_sigmoid_stays_float(tmp_path, kind):
    model = head_model(kind, seed=7)
    onnx.save(model, str(tmp_path / "f.onnx"))
    x = calibration_data(model, 64, seed=8)
    path = quantize_model(tmp_path / "f.onnx", x, tmp_path / "q.onnx")
    qm = load_onnx(path)
    assert [layer.op for layer in qm.layers] == ["Gemm"]
    assert qm.head.op == kind and qm.head.name == "head"
    y, y_ort = ReferenceBackend().run(qm, x), ort_session(path).run(None, {"x": x})[0]
    assert np.mean(y.argmax(1) == y_ort.argmax(1)) >= 0.98
    np.testing.assert_allclose(y.sum(1) if kind == "Softmax" else y.min(), 1 if kind == "Softmax"
                               else y_ort.min(), rtol=1e-5, atol=1e-2)


def test_gemm_bias_row_is_reshaped_for_the_quantizer(tmp_path):
    rng = _rng(9)
    inits = [_init("W", rng.normal(0, 0.3, (7, 12)).astype(np.float32)),
             _init("B", rng.normal(0, 0.3, (1, 7)).astype(np.float32))]
    model = make_model([helper.make_node("Gemm", ["x", "W", "B"], ["y"], name="fc", transB=1)],
                       [("x", [None, 12])], [("y", [None, 7])], inits)
    onnx.save(model, str(tmp_path / "f.onnx"))
    x = calibration_data(model, 32, seed=10)
    qm = load_onnx(quantize_model(tmp_path / "f.onnx", x, tmp_path / "q.onnx"))
    assert qm.layers[0].bias.shape == (7,)


@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_non_finite_calibration_data_is_refused(tmp_path, value):
    model = head_model("Softmax", seed=11)
    onnx.save(model, str(tmp_path / "f.onnx"))
    x = calibration_data(model, 8, seed=12)
    x[3, 5] = value
    x[6, 1] = value
    np.save(tmp_path / "calib.npy", x)
    with pytest.raises(InputError) as info:
        quantize_model(tmp_path / "f.onnx", tmp_path / "calib.npy", tmp_path / "q.onnx",
                       calibration_argument="--calibration")
    assert re.fullmatch(rf"--calibration {re.escape(str(tmp_path / 'calib.npy'))}: holds 2 NaN or "
                        r"infinite value\(s\), the first at index \(3, 5\)", str(info.value))
