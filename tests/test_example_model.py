"""The bundled example model (digits) end to end.

The reference backend must agree with onnxruntime's own execution of
``digits_int8.onnx`` on the held-out digits (top-1 >= 99%, every logit within
1 LSB), the int8 accuracy must stay close to the float accuracy, and the
numbers README.md states must be the ones a run produces.

onnxruntime runs the file with graph optimisations off, i.e. exactly as
written (DequantizeLinear, float operator, QuantizeLinear): with them it fuses
the QDQ groups into u8s8 kernels whose int16 pair sums saturate on x86 CPUs
without VNNI, which makes its int8 result depend on the CPU.
"""

import re
from pathlib import Path

import numpy as np
import onnx
import pytest

from fpgacnn.host.examples import EXAMPLES, example_dir, load_example
from fpgacnn.host.onnx_import import load_onnx
from fpgacnn.host.reference import ReferenceBackend

README = Path(__file__).resolve().parents[1] / "README.md"


def ort_run(path, x):
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x})[0]


@pytest.fixture(scope="module")
def digits():
    return load_example("digits")


@pytest.fixture(scope="module")
def results(digits):
    model = load_onnx(digits.model)
    return {
        "model": model,
        "reference": ReferenceBackend().run(model, digits.x),
        "ort_int8": ort_run(digits.model, digits.x),
        "ort_float": ort_run(digits.float_model, digits.x),
    }


def accuracy(logits, labels):
    return float(np.mean(logits.argmax(1) == labels))


def test_bundled_files_are_package_data_and_small():
    folder = example_dir()
    for name in EXAMPLES["digits"]:
        path = folder / name
        assert path.is_file(), path
        assert path.stat().st_size < 100_000, f"{path} is {path.stat().st_size} bytes"


def test_held_out_data(digits):
    assert (digits.x.dtype, digits.x.shape) == (np.float32, (360, 1, 8, 8))
    assert (digits.y.dtype, digits.y.shape) == (np.int64, (360,))
    assert digits.x.min() >= 0.0 and digits.x.max() <= 1.0
    assert set(np.unique(digits.y)) == set(range(10))
    with np.load(example_dir() / "digits_test.npz", allow_pickle=False) as archive:
        assert sorted(archive.files) == ["x", "y"]


def test_model_structure(results):
    model = results["model"]
    assert [layer.op for layer in model.layers] == ["Conv", "Conv", "MaxPool", "Conv",
                                                    "Flatten", "Gemm"]
    assert model.input.shape == (1, 8, 8) and model.output.shape == (10,)
    assert model.input.dtype == np.float32 and model.output.dtype == np.float32
    assert model.macs == 98_048
    # The float model has a dynamic batch dimension, opset 17.
    float_model = onnx.load(str(example_dir() / "digits_float.onnx"))
    assert float_model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "N"
    assert {o.domain: o.version for o in float_model.opset_import}[""] == 17


def test_reference_agrees_with_onnxruntime_int8(results):
    ref, ort = results["reference"], results["ort_int8"]
    agreement = np.mean(ref.argmax(1) == ort.argmax(1))
    assert agreement >= 0.99, f"top-1 agreement {agreement:.2%}"
    # Logits: within 1 LSB of the output scale, almost all exact.
    lsb = results["model"].output.scale
    assert np.abs(ref - ort).max() <= lsb * 1.001
    assert np.mean(ref == ort) >= 0.95


def test_accuracy_float_and_int8(digits, results):
    float_acc = accuracy(results["ort_float"], digits.y)
    int8_acc = accuracy(results["reference"], digits.y)
    assert float_acc >= 0.95
    assert int8_acc >= float_acc - 0.01


def test_readme_states_the_actual_accuracy(digits, results):
    text = README.read_text()
    for row, logits in (("float, onnxruntime", results["ort_float"]),
                        ("int8, fpgacnn reference backend", results["reference"])):
        m = re.search(rf"^\| {re.escape(row)} +\| (\d+\.\d\d)% \((\d+)/(\d+)\) +\|$", text, re.M)
        assert m, f"README has no accuracy row {row!r}"
        correct = int((logits.argmax(1) == digits.y).sum())
        assert (int(m[2]), int(m[3])) == (correct, len(digits.y)), row
        assert m[1] == f"{100 * correct / len(digits.y):.2f}", row


@pytest.mark.slow
def test_training_script_reproduces_the_example(tmp_path):
    """Retrain from scratch (about 10 s): accuracy as stated, files as small."""
    import subprocess
    import sys
    script = Path(__file__).resolve().parents[1] / "examples" / "train_digits.py"
    done = subprocess.run([sys.executable, str(script), "--out-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    x = load_example("digits").x
    with np.load(tmp_path / "digits_test.npz", allow_pickle=False) as archive:
        np.testing.assert_array_equal(archive["x"], x)
        y = archive["y"]
    model = load_onnx(tmp_path / "digits_int8.onnx")
    assert accuracy(ReferenceBackend().run(model, x), y) >= 0.95
    assert accuracy(ort_run(tmp_path / "digits_float.onnx", x), y) >= 0.95
