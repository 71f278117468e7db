"""Bad models give one ModelError line naming the node (or file) and the reason."""

import logging
import re

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from onnx_model_builders import (_conv_nodes, _init, _rng, concat_model, conv_model,
                                 global_pool_model, make_model, quantize, resize_model)
from fpgacnn.core.errors import ModelError
from fpgacnn.host.onnx_import import load_onnx

logging.getLogger().setLevel(logging.ERROR)

FORMATS = ["qdq", "qoperator"]
NODE = {"qdq": "conv", "qoperator": "conv_quant"}  # onnxruntime renames QOperator nodes


def _conv_attrs_model(**attrs):
    """One float Conv (4 -> 4 channels, 3x3) with extra attributes."""
    rng = np.random.default_rng(0)
    group = attrs.get("group", 1)
    w = rng.normal(0, 0.3, size=(4, 4 // group, 3, 3)).astype(np.float32)
    inits = [numpy_helper.from_array(w, "conv_W"),
             numpy_helper.from_array(rng.normal(0, 0.1, 4).astype(np.float32), "conv_B")]
    node = helper.make_node("Conv", ["x", "conv_W", "conv_B"], ["y"], name="conv", **attrs)
    return make_model([node], [("x", [None, 4, 9, 9])], [("y", [None, 4, None, None])], inits)


def _load_error(path):
    with pytest.raises(ModelError) as info:
        load_onnx(path)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_unknown_auto_pad_is_refused(tmp_path):
    path = quantize(_conv_attrs_model(pads=[1, 1, 1, 1]), tmp_path / "a.onnx")
    m = onnx.load(str(path))
    conv = next(n for n in m.graph.node if n.op_type == "Conv")
    del conv.attribute[:]
    conv.attribute.append(helper.make_attribute("auto_pad", "SAME_MIDDLE"))
    onnx.save(m, str(path))
    assert re.fullmatch(r"node 'conv' \(Conv\): auto_pad=SAME_MIDDLE is not supported",
                        _load_error(path))


@pytest.mark.parametrize("fmt", FORMATS)
def test_nonzero_weight_zero_point_is_refused(tmp_path, fmt):
    path = quantize(conv_model(3, 4, seed=1), tmp_path / "m.onnx", fmt=fmt)
    m = onnx.load(str(path))
    for init in m.graph.initializer:
        if init.name == "conv_W_zero_point":
            zp = numpy_helper.to_array(init).copy()
            zp[1] = 3
            init.CopyFrom(numpy_helper.from_array(zp, init.name))
    onnx.save(m, str(path))
    assert re.fullmatch(rf"node '{NODE[fmt]}' \((QLinear)?Conv\): weights "
                        r"have a non-zero zero point; fpgacnn needs symmetric weights \(zero point 0\)",
                        _load_error(path))


def test_unsupported_operator_is_refused(tmp_path):
    path = quantize(conv_model(3, 4, seed=1), tmp_path / "m.onnx")
    m = onnx.load(str(path))
    conv = next(n for n in m.graph.node if n.op_type == "Conv")
    conv.op_type = "Tanh"
    del conv.input[1:]
    del conv.attribute[:]
    onnx.save(m, str(path))
    assert re.fullmatch(r"node 'conv' \(Tanh\): operator Tanh is not supported",
                        _load_error(path))


def test_operator_of_an_unknown_domain_is_refused(tmp_path):
    path = quantize(conv_model(3, 4, seed=1), tmp_path / "m.onnx")
    m = onnx.load(str(path))
    conv = next(n for n in m.graph.node if n.op_type == "Conv")
    conv.domain = "com.example"
    m.opset_import.append(helper.make_opsetid("com.example", 1))
    onnx.save(m, str(path))
    assert re.fullmatch(r"node 'conv' \(Conv\): operator domain 'com.example' is not supported",
                        _load_error(path))


def test_float_model_is_refused(tmp_path):
    path = tmp_path / "float.onnx"
    onnx.save(conv_model(3, 4, seed=1), str(path))
    assert re.fullmatch(r"node 'conv' \(Conv\): input 'x' is the float graph input, not quantized "
                        r"by a QuantizeLinear", _load_error(path))


def test_missing_file(tmp_path):
    path = tmp_path / "missing.onnx"
    assert _load_error(path) == f"{path}: no such file"


def test_corrupt_file(tmp_path):
    path = tmp_path / "corrupt.onnx"
    path.write_bytes(b"\x08\x07\x12\x04this is not an ONNX model\xff\xfe" * 8)
    assert re.fullmatch(rf"{re.escape(str(path))}: not a valid ONNX (file|model) "
                        r"\(corrupt or truncated\): .+", _load_error(path))


def test_truncated_file(tmp_path):
    path = quantize(conv_model(3, 4, seed=1), tmp_path / "m.onnx")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 2 // 3])
    assert re.fullmatch(rf"{re.escape(str(path))}: not a valid ONNX (file|model) "
                        r"\(corrupt or truncated\): .+", _load_error(path))


def test_directory_is_refused(tmp_path):
    assert _load_error(tmp_path) == f"{tmp_path}: is a directory, not an ONNX file"


def _bn_model():
    """Conv -> BatchNormalization -> Relu, as torch.onnx.export writes it."""
    rng = _rng(2)
    nodes, inits = [], []
    src = _conv_nodes(nodes, inits, "x", "conv", 3, 4, 3, 1, 1, False, False, rng)
    inits += [_init("bn_scale", rng.uniform(0.5, 1.5, 4).astype(np.float32)),
              _init("bn_bias", rng.normal(0, 0.2, 4).astype(np.float32)),
              _init("bn_mean", rng.normal(0, 0.2, 4).astype(np.float32)),
              _init("bn_var", rng.uniform(0.5, 1.5, 4).astype(np.float32))]
    nodes.append(helper.make_node("BatchNormalization",
                                  [src, "bn_scale", "bn_bias", "bn_mean", "bn_var"], ["bn_out"],
                                  name="bn"))
    nodes.append(helper.make_node("Relu", ["bn_out"], ["y"], name="relu"))
    return make_model(nodes, [("x", [None, 3, 6, 6])], [("y", [None, 4, 6, 6])], inits)


@pytest.mark.parametrize("fmt", FORMATS)
def test_batch_normalization_left_in_an_int8_model_says_how_to_fold_it(tmp_path, fmt):
    """onnxruntime's quantizer (without pre-processing) quantizes a
    BatchNormalization as it is; the message says how to fold it."""
    path = quantize(_bn_model(), tmp_path / "bn.onnx", fmt=fmt)
    assert re.fullmatch(r"node 'bn' \(BatchNormalization\): a BatchNormalization left in a "
                        r"quantized model is not supported; quantize the float model with "
                        r"`fpgacnn quantize`, which folds it into the Conv or Gemm before it "
                        r"\(onnxruntime's quant_pre_process folds it after a Conv only\)",
                        _load_error(path))


def test_cli_prints_one_line_for_a_bad_model(tmp_path, capsys):
    from fpgacnn.host.cli import main
    path = quantize(_bn_model(), tmp_path / "bn.onnx")
    np.save(tmp_path / "x.npy", np.zeros((1, 3, 6, 6), np.float32))
    assert main(["run", str(path), "--input", str(tmp_path / "x.npy"),
                 "--backend", "reference"]) == 1
    err = capsys.readouterr().err
    assert re.fullmatch(r"fpgacnn: error: node 'bn' \(BatchNormalization\): a BatchNormalization "
                        r"left in a quantized model is not supported; .*\n", err)


def test_resize_other_than_nearest_is_refused(tmp_path):
    path = quantize(resize_model(mode="linear", coordinate_transformation_mode="half_pixel"),
                    tmp_path / "r.onnx")
    assert re.fullmatch(r"node 'resize' \(Resize\): mode=linear is not supported \(only nearest\)",
                        _load_error(path))


def test_concat_along_a_spatial_axis_is_refused(tmp_path):
    m = concat_model(3, 3, axis=1)
    cat = next(n for n in m.graph.node if n.op_type == "Concat")
    cat.attribute[0].i = 2
    m.graph.output[0].type.tensor_type.shape.dim[1].dim_value = 3
    m.graph.output[0].type.tensor_type.shape.dim[2].dim_value = 12
    path = quantize(m, tmp_path / "c.onnx")
    assert re.fullmatch(r"node 'concat' \(Concat\): concatenation along axis 2 is not supported "
                        r"\(only the channels, axis 1\)", _load_error(path))


def test_reduce_mean_over_the_channels_is_refused(tmp_path):
    m = global_pool_model("ReduceMean", keepdims=1, axes=(1,))
    m.graph.node[-1].CopyFrom(helper.make_node("Identity", ["flat"], ["y"], name="fc"))
    del m.graph.output[0].type.tensor_type.shape.dim[:]
    path = quantize(m, tmp_path / "r.onnx")
    assert re.fullmatch(r"node 'pool' \(ReduceMean\): ReduceMean over axes \[1\] is not "
                        r"supported \(only the spatial axes \[2, 3\] of an \(N, C, \.\.\.\) "
                        r"tensor: a global pool\)", _load_error(path))


def _conv_then(node, out_shape, inits=()):
    rng = _rng(3)
    nodes, init = [], list(inits)
    _conv_nodes(nodes, init, "x", "conv", 3, 4, 3, 2, 1, True, True, rng)
    nodes.append(node)
    return make_model(nodes, [("x", [None, 3, 8, 8])], [(node.output[0], out_shape)], init)


def test_flatten_of_more_than_the_image_is_refused(tmp_path):
    m = _conv_then(helper.make_node("Flatten", ["conv_act"], ["y"], name="view", axis=2),
                   [None, 16])
    path = quantize(m, tmp_path / "f.onnx")
    assert re.fullmatch(r"node 'view' \(Flatten\): axis=2 is not supported on a rank-4 tensor "
                        r"\(only 1 or -3: flatten each image, keep the batch axis\)",
                        _load_error(path))


def test_reshape_across_the_batch_is_refused(tmp_path):
    m = _conv_then(helper.make_node("Reshape", ["conv_act", "target"], ["y"], name="view"),
                   [None, 16], [_init("target", np.array([-1, 16], np.int64))])
    path = quantize(m, tmp_path / "r.onnx")
    assert re.fullmatch(r"node 'view' \(Reshape\): Reshape to \[-1, 16\] does not keep the batch "
                        r"axis \(N, 64 values per image\)", _load_error(path))


def test_softmax_over_the_batch_is_refused(tmp_path):
    m = _conv_then(helper.make_node("Softmax", ["conv_act"], ["y"], name="softmax", axis=0),
                   [None, 4, 4, 4])
    path = quantize(m, tmp_path / "s.onnx")
    assert re.fullmatch(r"node 'softmax' \(Softmax\): softmax over the batch axis is not "
                        r"supported", _load_error(path))


def test_gemm_bias_with_one_row_per_batch_row_is_refused(tmp_path):
    from onnx_model_builders import gemm_model
    path = quantize(gemm_model(12, 7, seed=4), tmp_path / "g.onnx", fmt="qoperator")
    m = onnx.load(str(path))
    qgemm = next(n for n in m.graph.node if n.op_type == "QGemm")
    bias = next(i for i in m.graph.initializer if i.name == qgemm.input[6])
    bias.CopyFrom(numpy_helper.from_array(np.tile(numpy_helper.to_array(bias), (4, 1)), bias.name))
    onnx.save(m, str(path))
    assert re.fullmatch(r"node 'fc_quant' \(QGemm\): bias of shape \[4, 7\] is not one value per "
                        r"output channel \(\(7,\) or \(1, 7\)\); fpgacnn does not support a "
                        r"per-row bias", _load_error(path))


def test_integer_input_without_any_scale_is_refused(tmp_path):
    nodes = [helper.make_node("MaxPool", ["x"], ["y"], name="pool", kernel_shape=[2, 2],
                              strides=[2, 2])]
    graph = helper.make_graph(
        nodes, "pool_only", [helper.make_tensor_value_info("x", onnx.TensorProto.INT8, ["N", 2, 4, 4])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.INT8, ["N", 2, 2, 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path = tmp_path / "p.onnx"
    onnx.save(model, str(path))
    assert _load_error(path) == (f"{path}: graph input 'x' is never read with a scale (no "
                                 "QuantizeLinear, DequantizeLinear or QLinear operator states its "
                                 "quantization)")


def test_gather_of_an_activation_is_refused(tmp_path):
    m = _conv_then(helper.make_node("Gather", ["conv_act", "idx"], ["y"], name="pick", axis=1),
                   [None, 4, 4], [_init("idx", np.array(0, np.int64))])
    path = quantize(m, tmp_path / "g.onnx")
    assert re.fullmatch(r"node 'pick' \(Gather\): Gather of an activation is not supported",
                        _load_error(path))
