"""A multi-layer residual CNN (Add, 1x1 and stride-2 conv, GlobalAveragePool,
Flatten, Gemm, Relu) quantized by onnxruntime, against onnxruntime."""

import logging

import numpy as np
import pytest

from onnx_model_builders import (calibration_data, ort_int8_output, ort_int8_tensors, quantize,
                                 residual_model)
from fpgacnn.host.onnx_import import load_onnx
from fpgacnn.host.reference import ReferenceBackend

logging.getLogger().setLevel(logging.ERROR)

FORMATS = [("qdq", "int8"), ("qdq", "uint8"), ("qoperator", "int8"), ("qoperator", "uint8")]
OPS = ["Conv", "Conv", "Conv", "Conv", "Add", "Conv", "GlobalAveragePool", "Flatten", "Gemm"]


def _close(ref, ort):
    diff = np.abs(ref.astype(np.int64) - ort.astype(np.int64))
    return int(diff.max()), float(np.mean(diff == 0))


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("residual")
    float_model = residual_model(cin=3, hw=(8, 8), width=8, classes=10, seed=5)
    x = calibration_data(float_model, 100, seed=6)
    paths = {f: quantize(float_model, tmp / f"{f[0]}_{f[1]}.onnx", fmt=f[0], activation=f[1], seed=5)
             for f in FORMATS}
    return x, paths


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: "-".join(f))
def test_residual_model_imports(models, fmt):
    x, paths = models
    qm = load_onnx(paths[fmt])
    assert [layer.op for layer in qm.layers] == OPS
    # QOperator node names carry onnxruntime's "_quant" suffix
    by_name = {layer.name.removesuffix("_quant"): layer for layer in qm.layers}
    assert by_name["proj"].kernel == (1, 1) and by_name["proj"].stride == (2, 2)
    assert by_name["b1"].stride == (2, 2) and by_name["b1"].output_shape == (16, 4, 4)
    assert by_name["stem"].lo == -128  # Relu folded into the [0, max] output range
    assert by_name["stem"].macs == 8 * 8 * 8 * 3 * 3 * 3
    assert by_name["fc"].weight.shape == (10, 16) and by_name["fc"].macs == 160
    assert qm.output.shape == (10,) and qm.output.dtype == np.float32
    y = ReferenceBackend().run(qm, x)
    assert y.shape == (100, 10) and y.dtype == np.float32


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: "-".join(f))
def test_residual_layers_match_onnxruntime(models, fmt):
    """Every layer, fed onnxruntime's own int8 inputs, within 1 LSB and >= 99% exact."""
    x, paths = models
    qm = load_onnx(paths[fmt])
    names = sorted({qm.input_tensor} | {t for layer in qm.layers for t in (*layer.inputs, layer.output)})
    ort = ort_int8_tensors(paths[fmt], x, names)
    for layer in qm.layers:
        ref = layer.evaluate(*(ort[t] for t in layer.inputs))
        worst, exact = _close(ref, ort[layer.output])
        assert worst <= 1, f"layer {layer.name}: {worst} LSB"
        assert exact >= 0.99, f"layer {layer.name}: only {exact:.4%} exact"


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: "-".join(f))
def test_residual_model_end_to_end_matches_onnxruntime(models, fmt):
    x, paths = models
    qm = load_onnx(paths[fmt])
    ref = ReferenceBackend().run_int8(qm, qm.quantize_input(x))
    worst, exact = _close(ref, ort_int8_output(paths[fmt], x))
    assert worst <= 1 and exact >= 0.99, f"{worst} LSB, {exact:.4%} exact"


@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: "-".join(f))
def test_residual_model_top1_agrees_with_onnxruntime(models, fmt):
    x, paths = models
    qm = load_onnx(paths[fmt])
    ref = ReferenceBackend().run_int8(qm, qm.quantize_input(x))
    ort = ort_int8_output(paths[fmt], x)
    worst, _ = _close(ref, ort)
    assert worst <= 2
    assert np.mean(ref.argmax(1) == ort.argmax(1)) >= 0.97
