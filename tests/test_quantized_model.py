"""QuantizedModel boundary conversions, ReferenceBackend API and the integer
helpers added for pooling and Add."""

import logging
import time
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onnx_model_builders import calibration_data, ort_session, quantize, residual_model
from quantize_edges import quantize_edges
from fpgacnn.core.errors import InputError
from fpgacnn.host.integer_ops import add_params, avgpool2d
from fpgacnn.host.onnx_import import load_onnx
from fpgacnn.host.reference import ReferenceBackend
from fpgacnn.host.requant import round_shift

logging.getLogger().setLevel(logging.ERROR)


def _qdq_identity(path, zp_dtype, scale=0.05, zp=3):
    """x -> QuantizeLinear -> DequantizeLinear -> y: a model with no layers."""
    inits = [numpy_helper.from_array(np.array(scale, np.float32), "s"),
             numpy_helper.from_array(np.array(zp, zp_dtype), "z")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="q"),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], name="dq")]
    graph = helper.make_graph(nodes, "identity",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 2, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3, 2, 2])],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize("zp_dtype,zp", [(np.int8, 3), (np.uint8, 131), (np.uint8, 0)])
def test_float_boundary_is_bit_exact_with_onnxruntime(tmp_path, zp_dtype, zp):
    """Quantize (ties to even, saturation) and dequantize exactly as onnxruntime."""
    path = _qdq_identity(tmp_path / "id.onnx", zp_dtype, zp=zp)
    qm = load_onnx(path)
    assert qm.layers == [] and qm.input.shape == (3, 2, 2)
    assert qm.input.zero_point == (zp if zp_dtype == np.int8 else zp - 128)
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(0, 4, size=(200, 3, 2, 2)),
                        (rng.integers(-300, 300, size=(200, 3, 2, 2)) + 0.5) * 0.05]).astype(np.float32)
    y = ReferenceBackend().run(qm, x)
    y_ort = ort_session(path).run(None, {"x": x})[0]
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, y_ort)


@pytest.fixture(scope="module")
def residual(tmp_path_factory):
    path = tmp_path_factory.mktemp("m") / "res.onnx"
    fm = residual_model(seed=1)
    return load_onnx(quantize(fm, path, activation="uint8", seed=1)), calibration_data(fm, 300, seed=2)


def test_input_checks_name_the_problem(residual):
    qm, x = residual
    with pytest.raises(InputError, match=r"^input has shape \(300, 3, 8\), model 'residual' input "
                                         r"'x' takes \(N, 3, 8, 8\)$"):
        ReferenceBackend().run(qm, x[:, :, :, 0])
    with pytest.raises(InputError, match=r"^input has dtype int8, model 'residual' input 'x' "
                                         r"takes float32$"):
        ReferenceBackend().run(qm, x.astype(np.int8))
    with pytest.raises(InputError, match=r"^int8 input must be int8 of shape \(N, 3, 8, 8\), "
                                         r"not float32 \(300, 3, 8, 8\)$"):
        ReferenceBackend().run_int8(qm, x)


def test_trace_gives_every_layer_and_ends_in_the_output(residual):
    qm, x = residual
    x8 = qm.quantize_input(x[:7])
    trace = ReferenceBackend().trace_int8(qm, x8)
    assert list(trace) == [layer.name for layer in qm.layers]
    for layer in qm.layers:
        assert trace[layer.name].shape == (7, *layer.output_shape)
        assert trace[layer.name].dtype == np.int8
    np.testing.assert_array_equal(trace[qm.layers[-1].name], ReferenceBackend().run_int8(qm, x8))


def test_batch_is_independent_of_its_size(residual):
    qm, x = residual
    whole = ReferenceBackend().run(qm, x[:20])
    one_by_one = np.concatenate([ReferenceBackend().run(qm, x[i:i + 1]) for i in range(20)])
    np.testing.assert_array_equal(whole, one_by_one)


def test_a_few_hundred_images_run_in_well_under_a_second(residual):
    qm, x = residual
    ReferenceBackend().run(qm, x[:2])
    start = time.perf_counter()
    y = ReferenceBackend().run(qm, x)
    elapsed = time.perf_counter() - start
    assert y.shape == (300, 10)
    assert elapsed < 1.0, f"{elapsed:.2f} s for 300 images"


def test_round_shift_ties():
    v = np.array([5, 6, 7, -5, -6, -7, 4, 12, 20, -4, -12])   # / 4
    assert round_shift(v, 2).tolist() == [1, 2, 2, -1, -1, -2, 1, 3, 5, -1, -3]
    assert round_shift(v, 2, ties_to_even=True).tolist() == [1, 2, 2, -1, -2, -2, 1, 3, 5, -1, -3]
    assert round_shift(np.array([3, -3]), 0, ties_to_even=True).tolist() == [3, -3]


def test_add_params_share_one_shift():
    ma, mb, shift = add_params(0.75, 0.01)
    assert 2**23 <= ma < 2**24
    assert abs(ma / 2**shift - 0.75) < 2**-16 and abs(mb / 2**shift - 0.01) <= 2**-shift


def test_avgpool_counts_only_inside_taps_without_count_include_pad():
    x = np.full((1, 1, 2, 2), 10, np.int8)
    y = avgpool2d(x, 0, 1.0, 0, (2, 2), (1, 1), (1, 1, 1, 1), count_include_pad=False)
    assert (y == 10).all()
    y = avgpool2d(x, 0, 1.0, 0, (2, 2), (1, 1), (1, 1, 1, 1), count_include_pad=True)
    assert y[0, 0].tolist() == [[2, 5, 2], [5, 10, 5], [2, 5, 2]]   # 10/4 = 2.5 -> 2 (even)


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_non_finite_float_input_is_refused_naming_the_input(residual, value):
    qm, x = residual
    x = x[:5].copy()
    x[3, 0, 2, 1] = value
    with pytest.raises(InputError, match=r"^input 'x' holds 1 NaN or infinite value\(s\), the "
                                         r"first at index \(3, 0, 2, 1\); fpgacnn quantizes "
                                         r"finite values only$"):
        ReferenceBackend().run(qm, x)


def test_quantize_and_dequantize_are_the_onnxruntime_formulas(residual):
    """The host's quantizing (one reduction checks finiteness) and dequantizing
    (a table of the 256 codes) give the formulas' values bit for bit: float32
    ``clip(rint(x / scale) + zp)`` and ``(y - zp) * scale``; a finite input whose
    sum overflows float32 is quantized (clipped), not refused."""
    qm, x = residual
    rng = np.random.default_rng(3)
    inputs = [x[:7], (x[:7] * 40).astype(np.float32),
              np.full((2, *qm.input.shape), 3e38, np.float32),
              np.full((2, *qm.input.shape), -3e38, np.float32), x[:3].astype(np.float64)]
    scale, zp = np.float32(qm.input.scale), qm.input.zero_point
    for v in inputs:
        with np.errstate(over="ignore"):
            want = np.clip(np.rint(v.astype(np.float32) / scale) + zp, -128, 127).astype(np.int8)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # saturating is no overflow to warn of
            np.testing.assert_array_equal(qm.quantize_input(v), want)
    codes = np.arange(-128, 128, dtype=np.int8)
    y = np.concatenate([codes, rng.integers(-128, 128, 300).astype(np.int8)])
    y = y[:(y.size // qm.output.shape[0]) * qm.output.shape[0]].reshape(-1, *qm.output.shape)
    d = ((y.astype(np.int32) - qm.output.zero_point).astype(np.float32)
         * np.float32(qm.output.scale)).astype(np.float32)
    got = qm.dequantize_output(y)
    np.testing.assert_array_equal(got, d if qm.head is None else qm.head.apply(d))
    assert got.dtype == np.float32


def test_quantizing_at_the_int8_limits_and_into_a_view_is_the_formula(residual):
    """Inputs whose codes fall at, under and over -128 and 127 (ties and the float32
    neighbours of each code's edges, where the clip is skipped and where it is not)
    quantize to the formula's codes, and ``out`` (a strided int8 view, as a program's
    input in board memory) receives exactly what a new array would."""
    qm, x = residual
    scale, zp = np.float32(qm.input.scale), qm.input.zero_point
    per_image = int(np.prod(qm.input.shape))
    edges = quantize_edges(scale, zp)
    for lo, hi in [(0, len(edges))] + [(i, i + 1) for i in range(len(edges))]:
        v = np.resize(np.array(edges[lo:hi], np.float32), 2 * per_image)
        v = v.reshape(2, *qm.input.shape)
        want = np.clip(np.rint(v / scale) + zp, -128, 127).astype(np.int8)
        np.testing.assert_array_equal(qm.quantize_input(v), want)
        arena = np.full((2, *qm.input.shape[1:], qm.input.shape[0] + 1), 99, np.int8)
        out = arena[..., :qm.input.shape[0]].transpose(0, 3, 1, 2)
        assert qm.quantize_input(v, out=out) is out
        np.testing.assert_array_equal(out, want)
        assert (arena[..., -1] == 99).all()  # the padding channel untouched
    with pytest.raises(InputError, match=r"^cannot quantize an input of shape \(2, "):
        qm.quantize_input(x[:2], out=np.zeros((3, *qm.input.shape), np.int8))


def test_float_head_is_applied_after_dequantization():
    from fpgacnn.host.model import FloatHead
    y = np.array([[0.5, -1.0, 2.0], [0.0, 0.0, 0.0]], np.float32)
    p = FloatHead("Softmax", "softmax").apply(y)
    e = np.exp(y - y.max(1, keepdims=True))
    np.testing.assert_allclose(p, e / e.sum(1, keepdims=True), rtol=1e-6)
    assert p.dtype == np.float32
    np.testing.assert_allclose(FloatHead("Sigmoid", "sigmoid").apply(y), 1 / (1 + np.exp(-y)),
                               rtol=1e-6)
    # In float32 as written, bit for bit (the head works in place).
    np.testing.assert_array_equal(p, (e / e.sum(1, keepdims=True)).astype(np.float32))
    np.testing.assert_array_equal(FloatHead("Sigmoid", "sigmoid").apply(y),
                                  np.float32(1) / (np.float32(1) + np.exp(-y)))
    with pytest.raises(ValueError, match=r"^a float head is Softmax or Sigmoid, not 'Tanh'$"):
        FloatHead("Tanh", "tanh")
