"""Bad models give one ModelError line naming the node (or file) and the reason."""

import logging
import re

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from onnx_model_builders import conv_model, make_model, quantize
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


@pytest.mark.parametrize("fmt", FORMATS)
def test_grouped_conv_is_refused(tmp_path, fmt):
    path = quantize(_conv_attrs_model(group=2, pads=[1, 1, 1, 1]), tmp_path / "g.onnx", fmt=fmt)
    assert re.fullmatch(rf"node '{NODE[fmt]}' \((Q?Linear)?Conv\): grouped convolution \(group=2\) "
                        r"is not supported", _load_error(path))


@pytest.mark.parametrize("fmt", FORMATS)
def test_dilated_conv_is_refused(tmp_path, fmt):
    path = quantize(_conv_attrs_model(dilations=[2, 2]), tmp_path / "d.onnx", fmt=fmt)
    assert re.fullmatch(rf"node '{NODE[fmt]}' \((QLinear)?Conv\): dilated convolution "
                        r"\(dilations=\[2, 2\]\) is not supported", _load_error(path))


def test_auto_pad_is_refused(tmp_path):
    path = quantize(_conv_attrs_model(auto_pad="SAME_UPPER"), tmp_path / "a.onnx")
    assert re.fullmatch(r"node 'conv' \(Conv\): auto_pad=SAME_UPPER is not supported "
                        r"\(only explicit pads\)", _load_error(path))


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
    conv.op_type = "Sigmoid"
    del conv.input[1:]
    del conv.attribute[:]
    onnx.save(m, str(path))
    assert re.fullmatch(r"node 'conv' \(Sigmoid\): operator Sigmoid is not supported",
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
