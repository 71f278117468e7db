"""What exporters write around the layers: each form imports, and the result
matches onnxruntime (QDQ and QOperator, int8 and uint8 activations).

Forms: opset domains declared but unused, the ``x.view(x.size(0), -1)``
shape chain, negative axes, Dropout, integer graph inputs read first by a
shape-only operator (QOperator), a Gemm bias as a ``(1, C)`` row. (auto_pad,
ceil_mode, 1-D models, ReduceMean and the layer kinds are in
test_reference_onnxruntime.py; BatchNormalization folding in
test_onnx_quantize_prep.py.)
"""

import logging

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_model_builders import (_conv_nodes, _init, _rng, calibration_data, make_model,
                                 ort_int8_output, ort_session, quantize)
from fpgacnn.host.onnx_import import load_onnx
from fpgacnn.host.reference import ReferenceBackend

logging.getLogger().setLevel(logging.ERROR)

FORMATS = [("qdq", "int8"), ("qdq", "uint8"), ("qoperator", "int8"), ("qoperator", "uint8")]


def assert_matches(qm, path, x):
    ref = ReferenceBackend().run_int8(qm, qm.quantize_input(x))
    ort = ort_int8_output(path, x)
    diff = np.abs(ref.astype(np.int64) - ort.astype(np.int64))
    assert diff.max() <= 1 and np.mean(diff == 0) >= 0.99, \
        f"{diff.max()} LSB, {np.mean(diff == 0):.4%} exact"


def _view_model(seed=0, classes=6, flatten_axis=None):
    """conv -> Relu -> ``x.view(x.size(0), -1)`` (or Flatten(axis)) -> Gemm."""
    rng = _rng(seed)
    nodes, inits = [], []
    src = _conv_nodes(nodes, inits, "x", "conv", 3, 4, 3, 2, 1, True, True, rng)
    if flatten_axis is None:
        inits += [_init("zero", np.array(0, np.int64)), _init("axes0", np.array([0], np.int64)),
                  _init("minus1", np.array([-1], np.int64))]
        nodes += [helper.make_node("Shape", [src], ["shape"], name="shape"),
                  helper.make_node("Gather", ["shape", "zero"], ["n"], name="gather", axis=0),
                  helper.make_node("Unsqueeze", ["n", "axes0"], ["n1"], name="unsqueeze"),
                  helper.make_node("Concat", ["n1", "minus1"], ["target"], name="concat", axis=0),
                  helper.make_node("Reshape", [src, "target"], ["flat"], name="view")]
    else:
        nodes.append(helper.make_node("Flatten", [src], ["flat"], name="view", axis=flatten_axis))
    w = rng.normal(0, 0.2, (classes, 4 * 4 * 4)).astype(np.float32)
    inits += [_init("fc_W", w), _init("fc_B", rng.normal(0, 0.2, classes).astype(np.float32))]
    nodes.append(helper.make_node("Gemm", ["flat", "fc_W", "fc_B"], ["y"], name="fc", transB=1))
    return make_model(nodes, [("x", [None, 3, 8, 8])], [("y", [None, classes])], inits)


@pytest.mark.parametrize("fmt,act", FORMATS)
@pytest.mark.parametrize("flatten_axis", [None, -3], ids=["view-chain", "flatten-axis-minus-3"])
def test_view_chain_and_negative_flatten_axis(tmp_path, flatten_axis, fmt, act):
    model = _view_model(seed=1, flatten_axis=flatten_axis)
    path = quantize(model, tmp_path / "m.onnx", fmt=fmt, activation=act, seed=1)
    qm = load_onnx(path)
    assert [layer.op for layer in qm.layers] == ["Conv", "Flatten", "Gemm"]
    assert qm.layers[1].output_shape == (64,)
    assert_matches(qm, path, calibration_data(model, 64, seed=2))


def test_unused_opset_domains_are_ignored(tmp_path):
    """onnxruntime's quant_pre_process declares every domain it knows; only the
    domains nodes use count."""
    model = _view_model(seed=3)
    path = quantize(model, tmp_path / "m.onnx", seed=3)
    m = onnx.load(str(path))
    for domain in ("ai.onnx.ml", "com.microsoft.nchwc", "ai.onnx.training", "org.pytorch.aten"):
        m.opset_import.append(helper.make_opsetid(domain, 1))
    onnx.save(m, str(path))
    qm = load_onnx(path)
    assert_matches(qm, path, calibration_data(model, 16, seed=4))


def test_dropout_is_an_identity(tmp_path):
    rng = _rng(5)
    nodes, inits = [], []
    src = _conv_nodes(nodes, inits, "x", "conv", 3, 4, 3, 1, 1, True, True, rng)
    nodes.append(helper.make_node("Dropout", [src], ["d"], name="dropout"))
    src = _conv_nodes(nodes, inits, "d", "conv2", 4, 4, 1, 1, 0, True, False, rng)
    model = make_model(nodes, [("x", [None, 3, 6, 6])], [(src, [None, 4, 6, 6])], inits)
    path = quantize(model, tmp_path / "m.onnx", seed=5)
    qm = load_onnx(path)
    assert [layer.op for layer in qm.layers] == ["Conv", "Conv"]
    assert_matches(qm, path, calibration_data(model, 16, seed=6))


def _integer_input_model(path, first_op, act):
    """A QOperator model whose int8/uint8 graph input is read first by
    ``first_op`` (a shape-only operator that states no quantization): the
    quantized model's own QuantizeLinear is cut and ``first_op`` inserted
    between the new integer input ``xi`` (N, 3, 8, 8) and the QLinear operator."""
    m = onnx.load(str(path))
    q_in = next(n for n in m.graph.node if n.op_type == "QuantizeLinear" and n.input[0] == "x")
    m.graph.node.remove(q_in)
    if first_op == "MaxPool":
        node = helper.make_node("MaxPool", ["xi"], [q_in.output[0]], name="first",
                                kernel_shape=[2, 2], strides=[2, 2])
    elif first_op == "Flatten":
        node = helper.make_node("Flatten", ["xi"], [q_in.output[0]], name="first", axis=1)
    else:
        m.graph.initializer.append(numpy_helper.from_array(np.array([0, -1], np.int64), "target"))
        node = helper.make_node("Reshape", ["xi", "target"], [q_in.output[0]], name="first")
    m.graph.node.insert(0, node)
    del m.graph.input[:]
    elem = TensorProto.INT8 if act == "int8" else TensorProto.UINT8
    m.graph.input.append(helper.make_tensor_value_info("xi", elem, ["N", 3, 8, 8]))
    onnx.save(m, str(path))


@pytest.mark.parametrize("act", ["int8", "uint8"])
@pytest.mark.parametrize("first_op", ["MaxPool", "Flatten", "Reshape"])
def test_integer_input_read_first_by_a_shape_only_operator(tmp_path, first_op, act):
    """QOperator: MaxPool, Flatten or Reshape straight on the integer graph
    input keep its quantization, which the QLinear operator after them states."""
    rng = _rng(7)
    nodes, inits = [], []
    if first_op == "MaxPool":
        out = _conv_nodes(nodes, inits, "x", "conv", 3, 4, 3, 1, 1, True, False, rng)
        model = make_model(nodes, [("x", [None, 3, 4, 4])], [(out, [None, 4, 4, 4])], inits)
    else:
        inits += [_init("fc_W", rng.normal(0, 0.1, (5, 192)).astype(np.float32)),
                  _init("fc_B", rng.normal(0, 0.1, 5).astype(np.float32))]
        nodes.append(helper.make_node("Gemm", ["x", "fc_W", "fc_B"], ["y"], name="fc", transB=1))
        model = make_model(nodes, [("x", [None, 192])], [("y", [None, 5])], inits)
    path = quantize(model, tmp_path / "m.onnx", fmt="qoperator", activation=act, seed=7)
    _integer_input_model(path, first_op, act)
    qm = load_onnx(path)
    dtype = np.int8 if act == "int8" else np.uint8
    assert qm.input.dtype == dtype and qm.input.shape == (3, 8, 8)
    assert qm.layers[0].op == ("MaxPool" if first_op == "MaxPool" else "Flatten")
    assert qm.input.scale == qm.layers[1].x_scale
    x = _rng(8).integers(np.iinfo(dtype).min, np.iinfo(dtype).max + 1, (32, 3, 8, 8)).astype(dtype)
    y = ReferenceBackend().run(qm, x)
    y_ort = ort_session(path).run(None, {"xi": x})[0]
    diff = np.abs(y.astype(np.float64) - y_ort) / qm.output.scale
    assert diff.max() < 1.001 and np.mean(diff < 1e-3) >= 0.99


@pytest.mark.parametrize("fmt,act", FORMATS)
def test_gemm_bias_as_a_row(tmp_path, fmt, act):
    """A Gemm bias of shape (1, C) (one row, broadcast over the batch) in a
    quantized model. (onnxruntime's quantizer cannot quantize a float model
    with one; ``fpgacnn quantize`` reshapes it to (C,) first.)"""
    rng = _rng(9)
    inits = [_init("W", rng.normal(0, 0.3, (7, 12)).astype(np.float32)),
             _init("B", rng.normal(0, 0.3, 7).astype(np.float32))]
    nodes = [helper.make_node("Gemm", ["x", "W", "B"], ["y"], name="fc", transB=1)]
    model = make_model(nodes, [("x", [None, 12])], [("y", [None, 7])], inits)
    path = quantize(model, tmp_path / "m.onnx", fmt=fmt, activation=act, seed=9)
    m = onnx.load(str(path))
    bias = next(i for i in m.graph.initializer if i.name.startswith("B") and i.data_type ==
                TensorProto.INT32)
    bias.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(bias).reshape(1, 7), bias.name))
    if fmt == "qdq":  # the bias DequantizeLinear is per channel along axis 1 of (1, C) now
        dq = next(n for n in m.graph.node if n.input[0] == bias.name)
        for a in dq.attribute:
            if a.name == "axis":
                a.i = 1
    onnx.save(m, str(path))
    qm = load_onnx(path)
    assert qm.layers[0].bias.shape == (7,)
    assert_matches(qm, path, calibration_data(model, 64, seed=10))
