"""``fpgacnn run`` and ``fpgacnn quantize`` end to end, through the real CLI.

Every call goes through :func:`fpgacnn.host.cli.main` (as the console script
does); one test runs the installed ``fpgacnn`` script in a subprocess. Bad
input must give exactly one line ``fpgacnn: error: ...`` on stderr (checked
with an anchored regex), exit status 1 and no traceback.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from fpgacnn.host.cli import main
from fpgacnn.host.examples import example_dir, load_example
from fpgacnn.host.onnx_import import load_onnx
from fpgacnn.host.quantize import quantize_model
from fpgacnn.host.reference import ReferenceBackend

EXAMPLES = example_dir()
INT8 = EXAMPLES / "digits_int8.onnx"
FLOAT = EXAMPLES / "digits_float.onnx"
DIGITS_OPS = ["Conv", "Conv", "MaxPool", "Conv", "Flatten", "Gemm"]


@pytest.fixture(scope="module")
def digits():
    return load_example("digits")


@pytest.fixture
def files(tmp_path, digits):
    """A small batch of held-out digits, its labels, and broken variants, as files."""
    f = {}

    def save(name, array, **kw):
        f[name] = tmp_path / f"{name}.npy"
        np.save(f[name], array, **kw)

    save("x", digits.x[:16])
    save("labels", digits.y[:16])
    save("x64", digits.x[:16].astype(np.float64))
    save("x_nobatch", digits.x[0])
    save("x_chw", digits.x[:16, 0])
    save("labels_float", digits.y[:16].astype(np.float32))
    save("labels_short", digits.y[:5])
    save("objects", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    f["npz"] = tmp_path / "x.npz"
    np.savez(f["npz"], x=digits.x[:16])
    f["x_truncated"] = tmp_path / "x_truncated.npy"
    f["x_truncated"].write_bytes(f["x"].read_bytes()[:1000])
    f["model_truncated"] = tmp_path / "truncated.onnx"
    f["model_truncated"].write_bytes(INT8.read_bytes()[:4000])
    f["not_onnx"] = tmp_path / "text.onnx"
    f["not_onnx"].write_text("this is not a model\n")
    f["text_npy"] = tmp_path / "text.npy"
    f["text_npy"].write_text("1 2 3\n")
    f["empty_npy"] = tmp_path / "empty.npy"
    f["empty_npy"].write_bytes(b"")
    f["zip_npy"] = tmp_path / "zipped.npy"
    f["zip_npy"].write_bytes(f["npz"].read_bytes())
    f["dir"] = tmp_path / "folder.npy"
    f["dir"].mkdir()
    f["file"] = tmp_path / "plain"
    f["file"].write_text("a file, not a folder\n")
    return f


def cli(capsys, *argv):
    """Run ``fpgacnn *argv``; return (status, stdout, stderr).

    ``run`` goes to the reference backend unless a test names another: these
    tests are about the command, tests/test_sim_backend.py about the engine.
    """
    argv = [str(a) for a in argv]
    if argv[:1] == ["run"] and "--backend" not in argv:
        argv += ["--backend", "reference"]
    status = main(argv)
    out, err = capsys.readouterr()
    return status, out, err


def check_error(capsys, pattern, *argv):
    status, out, err = cli(capsys, *argv)
    assert status == 1
    assert out == ""
    assert err.count("\n") == 1, err
    assert re.fullmatch(pattern + r"\n", err), err


# ----------------------------------------------------------------- run

def test_run_writes_output_in_model_dtype_and_shape(capsys, files, tmp_path, digits):
    y_path = tmp_path / "y.npy"
    status, out, err = cli(capsys, "run", INT8, "--input", files["x"], "--output", y_path)
    assert (status, err) == (0, "")
    y = np.load(y_path, allow_pickle=False)
    assert (y.dtype, y.shape) == (np.float32, (16, 10))
    expected = ReferenceBackend().run(load_onnx(INT8), digits.x[:16])
    np.testing.assert_array_equal(y, expected)
    assert re.search(r"^wrote .*y\.npy: \(16, 10\) float32$", out, re.M)


def test_run_writes_exactly_the_output_path(capsys, files, tmp_path):
    # np.save given a name would write y.NPY.npy; the file is opened by fpgacnn instead.
    y_path = tmp_path / "y.NPY"
    status, out, err = cli(capsys, "run", INT8, "--input", files["x"], "--output", y_path)
    assert (status, err) == (0, "")
    assert sorted(p.name for p in tmp_path.glob("y*")) == ["y.NPY"]
    assert np.load(y_path, allow_pickle=False).shape == (16, 10)
    assert re.search(r"^wrote \S+/y\.NPY: \(16, 10\) float32$", out, re.M), out


def test_run_batch_rows_do_not_depend_on_batch(capsys, files, tmp_path, digits):
    one = tmp_path / "one.npy"
    np.save(one, digits.x[3:4])
    cli(capsys, "run", INT8, "--input", files["x"], "--output", tmp_path / "y16.npy")
    cli(capsys, "run", INT8, "--input", one, "--output", tmp_path / "y1.npy")
    np.testing.assert_array_equal(np.load(tmp_path / "y1.npy")[0], np.load(tmp_path / "y16.npy")[3])


def test_run_labels_prints_accuracy(capsys, files, tmp_path, digits):
    y_path = tmp_path / "y.npy"
    status, out, _ = cli(capsys, "run", INT8, "--input", files["x"], "--labels", files["labels"],
                         "--output", y_path)
    assert status == 0
    correct = int((np.load(y_path).argmax(1) == digits.y[:16]).sum())
    m = re.search(r"^top-1 accuracy: (\d+\.\d\d)% \((\d+)/16\)$", out, re.M)
    assert m, out
    assert int(m[2]) == correct
    assert float(m[1]) == pytest.approx(100 * correct / 16, abs=0.005)


def test_run_report(capsys, files, tmp_path):
    report_path = tmp_path / "report.json"
    status, _, _ = cli(capsys, "run", INT8, "--input", files["x"], "--labels", files["labels"],
                       "--report", report_path)
    assert status == 0
    report = json.loads(report_path.read_text())
    model = load_onnx(INT8)
    assert report["backend"] == "reference"
    assert report["model"] == model.name
    assert report["batch"] == 16
    assert [layer["op"] for layer in report["layers"]] == DIGITS_OPS
    assert [layer["name"] for layer in report["layers"]] == [layer.name for layer in model.layers]
    assert [layer["macs"] for layer in report["layers"]] == [layer.macs for layer in model.layers]
    # conv1: 8 output channels x 8x8 pixels x 1 input channel x 3x3 taps.
    assert report["layers"][0]["macs"] == 8 * 8 * 8 * 1 * 9
    assert report["layers"][0]["output_shape"] == [8, 8, 8]
    assert report["macs_per_image"] == sum(layer["macs"] for layer in report["layers"])
    assert report["total_macs"] == 16 * report["macs_per_image"]
    assert report["input"] == {"name": "input", "shape": ["N", 1, 8, 8], "dtype": "float32"}
    assert report["output"]["dtype"] == "float32"
    assert 0.0 <= report["accuracy"] <= 1.0


def test_run_example_digits(capsys, tmp_path, digits):
    y_path = tmp_path / "y.npy"
    status, out, err = cli(capsys, "run", "--example", "digits", "--output", y_path)
    assert (status, err) == (0, "")
    y = np.load(y_path)
    assert y.shape == (len(digits.y), 10)
    correct = int((y.argmax(1) == digits.y).sum())
    assert re.search(rf"^top-1 accuracy: \d+\.\d\d% \({correct}/{len(digits.y)}\)$", out, re.M), out
    assert re.search(r"^float model \(onnxruntime\): \d+\.\d\d%$", out, re.M), out


def int8_io_model(path):
    """The digits model with its boundary QuantizeLinear/DequantizeLinear removed:
    graph input and output are the int8 tensors themselves."""
    m = onnx.load(str(INT8))
    g = m.graph
    q_in = next(n for n in g.node if n.op_type == "QuantizeLinear" and n.input[0] == "input")
    dq_out = next(n for n in g.node if n.op_type == "DequantizeLinear" and n.output[0] == "logits")
    g.node.remove(q_in)
    g.node.remove(dq_out)
    del g.input[:], g.output[:]
    g.input.append(helper.make_tensor_value_info(q_in.output[0], TensorProto.INT8, ["N", 1, 8, 8]))
    g.output.append(helper.make_tensor_value_info(dq_out.input[0], TensorProto.INT8, ["N", 10]))
    onnx.save(m, str(path))
    return path


def test_run_int8_io_model(capsys, tmp_path, digits):
    path = int8_io_model(tmp_path / "int8io.onnx")
    qdq = load_onnx(INT8)
    x8 = qdq.quantize_input(digits.x[:16])
    np.save(tmp_path / "x8.npy", x8)
    status, _, err = cli(capsys, "run", path, "--input", tmp_path / "x8.npy",
                         "--output", tmp_path / "y8.npy")
    assert (status, err) == (0, "")
    y8 = np.load(tmp_path / "y8.npy")
    assert (y8.dtype, y8.shape) == (np.int8, (16, 10))
    np.testing.assert_array_equal(y8, ReferenceBackend().run_int8(qdq, x8))


def test_run_int8_io_model_rejects_float_input(capsys, tmp_path, files):
    path = int8_io_model(tmp_path / "int8io.onnx")
    check_error(capsys, r"fpgacnn: error: --input \S+x\.npy: dtype float32 does not match "
                        r"model input '\S+' of dtype int8",
                "run", path, "--input", files["x"])


def test_backend_choices_are_the_real_backends(capsys, files):
    with pytest.raises(SystemExit) as e:
        main(["run", str(INT8), "--input", str(files["x"]), "--backend", "fpga"])
    assert e.value.code == 2
    assert re.search(r"argument --backend: invalid choice: 'fpga' \(choose from '?sim'?, "
                     r"'?reference'?, '?pynq'?, '?serial'?\)", capsys.readouterr().err)


def test_waves_need_the_sim_backend(capsys, files, tmp_path):
    check_error(capsys, r"fpgacnn: error: --waves needs the sim backend, not reference",
                "run", INT8, "--input", files["x"], "--waves", tmp_path / "w.vcd")


def test_sequencer_needs_the_sim_backend(capsys, files):
    check_error(capsys, r"fpgacnn: error: --sequencer is simulated on the sim backend only, "
                        r"not --backend reference",
                "run", INT8, "--input", files["x"], "--backend", "reference", "--sequencer")


# ----------------------------------------------------------------- run: bad input

RUN_ERRORS = {
    "missing model": (["run", "{tmp}/nope.onnx", "--input", "{x}"],
                      r"fpgacnn: error: MODEL \S+/nope\.onnx: no such file"),
    "truncated model": (["run", "{model_truncated}", "--input", "{x}"],
                        r"fpgacnn: error: \S+/truncated\.onnx: not a valid ONNX (file|model) "
                        r"\(corrupt or truncated\): .+"),
    "text as model": (["run", "{not_onnx}", "--input", "{x}"],
                      r"fpgacnn: error: \S+/text\.onnx: not a valid ONNX (file|model) "
                      r"\(corrupt or truncated\).*"),
    "float model": (["run", str(FLOAT), "--input", "{x}"],
                    r"fpgacnn: error: node 'conv1' \(Conv\): .*not quantized.*"),
    "missing input": (["run", str(INT8), "--input", "{tmp}/nope.npy"],
                      r"fpgacnn: error: --input \S+/nope\.npy: no such file"),
    "npz input": (["run", str(INT8), "--input", "{npz}"],
                  r"fpgacnn: error: --input \S+/x\.npz: is an \.npz archive, "
                  r"expected a single \.npy array"),
    "pickled input": (["run", str(INT8), "--input", "{objects}"],
                      r"fpgacnn: error: --input \S+/objects\.npy: holds Python objects, which are "
                      r"not loaded \(arrays are read without pickle\)"),
    "truncated input": (["run", str(INT8), "--input", "{x_truncated}"],
                        r"fpgacnn: error: --input \S+/x_truncated\.npy: not a readable \.npy "
                        r"array \(.+\)"),
    "input dtype": (["run", str(INT8), "--input", "{x64}"],
                    r"fpgacnn: error: --input \S+/x64\.npy: dtype float64 does not match model "
                    r"input 'input' of dtype float32"),
    "input without batch": (["run", str(INT8), "--input", "{x_nobatch}"],
                            r"fpgacnn: error: --input \S+/x_nobatch\.npy: shape \(1, 8, 8\) does "
                            r"not match model input 'input' of shape \(N, 1, 8, 8\)"),
    "input shape": (["run", str(INT8), "--input", "{x_chw}"],
                    r"fpgacnn: error: --input \S+/x_chw\.npy: shape \(16, 8, 8\) does not match "
                    r"model input 'input' of shape \(N, 1, 8, 8\)"),
    "labels dtype": (["run", str(INT8), "--input", "{x}", "--labels", "{labels_float}"],
                     r"fpgacnn: error: --labels \S+/labels_float\.npy: dtype float32 is not an "
                     r"integer type"),
    "labels length": (["run", str(INT8), "--input", "{x}", "--labels", "{labels_short}"],
                      r"fpgacnn: error: --labels \S+/labels_short\.npy: shape \(5,\) does not "
                      r"match the batch, expected \(16,\)"),
    "model is a directory": (["run", "{tmp}", "--input", "{x}"],
                             r"fpgacnn: error: MODEL \S+: is a directory, not an ONNX file"),
    "input is a directory": (["run", str(INT8), "--input", "{dir}"],
                             r"fpgacnn: error: --input \S+/folder\.npy: is a directory, not a "
                             r"NumPy \.npy file"),
    "labels is a directory": (["run", str(INT8), "--input", "{x}", "--labels", "{dir}"],
                              r"fpgacnn: error: --labels \S+/folder\.npy: is a directory, not a "
                              r"NumPy \.npy file"),
    "text as input": (["run", str(INT8), "--input", "{text_npy}"],
                      r"fpgacnn: error: --input \S+/text\.npy: not a NumPy \.npy file"),
    "empty input": (["run", str(INT8), "--input", "{empty_npy}"],
                    r"fpgacnn: error: --input \S+/empty\.npy: not a NumPy \.npy file "
                    r"\(the file is empty\)"),
    "npz named npy": (["run", str(INT8), "--input", "{zip_npy}"],
                      r"fpgacnn: error: --input \S+/zipped\.npy: is an \.npz archive, "
                      r"expected a single \.npy array"),
    "output without .npy": (["run", str(INT8), "--input", "{x}", "--output", "{tmp}/y"],
                            r"fpgacnn: error: --output \S+/y: the file name must end in \.npy"),
    "output is a directory": (["run", str(INT8), "--input", "{x}", "--output", "{dir}"],
                              r"fpgacnn: error: --output \S+/folder\.npy: is a directory, "
                              r"not a file"),
    "output under a file": (["run", str(INT8), "--input", "{x}", "--output", "{file}/y.npy"],
                            r"fpgacnn: error: --output \S+/plain/y\.npy: \S+/plain is not a "
                            r"directory"),
    "report is a directory": (["run", str(INT8), "--input", "{x}", "--report", "{tmp}"],
                              r"fpgacnn: error: --report \S+: is a directory, not a file"),
    "report without .json": (["run", str(INT8), "--input", "{x}", "--report", "{tmp}/r.txt"],
                             r"fpgacnn: error: --report \S+/r\.txt: the file name must end in "
                             r"\.json"),
    "waves suffix": (["run", str(INT8), "--input", "{x}", "--waves", "{tmp}/w.txt"],
                     r"fpgacnn: error: --waves \S+/w\.txt: the file name must end in \.vcd or "
                     r"\.fst"),
    "waves directory": (["run", str(INT8), "--input", "{x}", "--waves", "{tmp}/no/w.vcd"],
                        r"fpgacnn: error: --waves \S+/no/w\.vcd: directory \S+/no does not "
                        r"exist"),
    "output directory": (["run", str(INT8), "--input", "{x}", "--output", "{tmp}/no/y.npy"],
                         r"fpgacnn: error: --output \S+/no/y\.npy: directory \S+/no does not exist"),
    "report directory": (["run", str(INT8), "--input", "{x}", "--report", "{tmp}/no/r.json"],
                         r"fpgacnn: error: --report \S+/no/r\.json: directory \S+/no does not "
                         r"exist"),
    "no input": (["run", str(INT8)],
                 r"fpgacnn: error: --input X\.npy is required to run \S+digits_int8\.onnx"),
    "no model": (["run"], r"fpgacnn: error: give a MODEL\.onnx to run, or --example digits"),
    "model and example": (["run", str(INT8), "--example", "digits"],
                          r"fpgacnn: error: give either MODEL\.onnx or --example, not both "
                          r"\(got \S+ and --example digits\)"),
    "example with input": (["run", "--example", "digits", "--input", "{x}"],
                           r"fpgacnn: error: --input cannot be used with --example \(the example "
                           r"brings its own held-out data\)"),
}


@pytest.mark.parametrize("case", RUN_ERRORS)
def test_run_bad_input(capsys, files, tmp_path, case):
    argv, pattern = RUN_ERRORS[case]
    names = {k: str(v) for k, v in files.items()} | {"tmp": str(tmp_path)}
    check_error(capsys, pattern, *(a.format(**names) for a in argv))


def test_output_paths_are_checked_before_a_board_is_opened(capsys, files, tmp_path, monkeypatch):
    from fpgacnn.host import accelerator

    def no_board(*args, **kwargs):
        raise AssertionError("a board was opened before the output paths were checked")
    monkeypatch.setattr(accelerator, "open_board", no_board)
    check_error(capsys, r"fpgacnn: error: --report \S+: is a directory, not a file",
                "run", INT8, "--input", files["x"], "--backend", "sim", "--report", tmp_path)


def test_unwritable_output_directory(capsys, files, tmp_path, monkeypatch):
    # Tests may run as root, for whom every folder is writable: ask os.access to say no.
    from fpgacnn.host import paths
    monkeypatch.setattr(paths.os, "access", lambda path, mode: not mode & os.W_OK)
    check_error(capsys, r"fpgacnn: error: --output \S+/y\.npy: directory \S+ is not writable",
                "run", INT8, "--input", files["x"], "--output", tmp_path / "y.npy")


def test_a_failed_report_write_keeps_the_output(capsys, files, tmp_path, monkeypatch):
    # Should the report become unwritable during the run, the output is already saved and the
    # failure is one line.
    from fpgacnn.host.commands import run as run_command
    monkeypatch.setattr(run_command, "check_outputs", lambda args: None)
    report = tmp_path / "r.json"
    report.mkdir()
    status, out, err = cli(capsys, "run", INT8, "--input", files["x"],
                           "--output", tmp_path / "y.npy", "--report", report)
    assert status == 1
    assert re.fullmatch(r"fpgacnn: error: --report \S+/r\.json: cannot write \(Is a directory\)\n",
                        err), err
    assert np.load(tmp_path / "y.npy").shape == (16, 10)


def conv_model(path, group=1, batch="N"):
    """A float 3x3 convolution 4 -> 4 channels on 6x6 images."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 4 // group, 3, 3)).astype(np.float32)
    name = "grouped" if group > 1 else "conv"
    node = helper.make_node("Conv", ["x", "w"], ["y"], name=name, group=group, pads=[1] * 4)
    graph = helper.make_graph(
        [node], name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4, 6, 6])],
        initializer=[numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def unsupported_model(path, tail):
    """A float 3x3 convolution followed by ``tail``, a node fpgacnn does not support."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 4, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1] * 4), tail]
    graph = helper.make_graph(
        nodes, "unsupported",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4, None, None])],
        initializer=[numpy_helper.from_array(w, "w"),
                     numpy_helper.from_array(np.array([], np.float32), "roi"),
                     numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_run_unsupported_attribute(capsys, tmp_path):
    resize = helper.make_node("Resize", ["c", "roi", "scales"], ["y"], name="resize",
                              mode="linear")
    float_path = unsupported_model(tmp_path / "linear_float.onnx", resize)
    calib = np.random.default_rng(1).standard_normal((8, 4, 6, 6)).astype(np.float32)
    quantize_model(float_path, calib, tmp_path / "linear.onnx")
    np.save(tmp_path / "x.npy", calib)
    check_error(capsys, r"fpgacnn: error: node 'resize' \(Resize\): mode=linear is not supported "
                        r"\(only nearest\)",
                "run", tmp_path / "linear.onnx", "--input", tmp_path / "x.npy")


def test_run_labels_need_a_classifier(capsys, tmp_path):
    calib = np.random.default_rng(3).standard_normal((4, 4, 6, 6)).astype(np.float32)
    quantize_model(conv_model(tmp_path / "conv.onnx"), calib, tmp_path / "q.onnx")
    np.save(tmp_path / "x.npy", calib)
    np.save(tmp_path / "labels.npy", np.zeros(4, np.int64))
    check_error(capsys, r"fpgacnn: error: --labels \S+labels\.npy: top-1 accuracy needs a model "
                        r"output of shape \(N, classes\), 'y' has shape \(N, 4, 6, 6\)",
                "run", tmp_path / "q.onnx", "--input", tmp_path / "x.npy",
                "--labels", tmp_path / "labels.npy")


# ----------------------------------------------------------------- quantize

@pytest.mark.parametrize("fmt, activation", [("qdq", "int8"), ("qoperator", "uint8")])
def test_quantize_end_to_end(capsys, tmp_path, digits, fmt, activation):
    np.save(tmp_path / "calib.npy", digits.x[:64])
    out = tmp_path / "q.onnx"
    status, stdout, err = cli(capsys, "quantize", FLOAT, "--calibration", tmp_path / "calib.npy",
                              "-o", out, "--format", fmt, "--activation-type", activation)
    assert (status, err) == (0, "")
    assert re.search(rf"^wrote \S+q\.onnx \({fmt}, {activation} activations, per-channel int8 "
                     rf"weights\)$", stdout, re.M), stdout
    assert re.search(r"^fpgacnn imports it: 6 layers, 98,048 MACs per image$", stdout, re.M)
    ops = {n.op_type for n in onnx.load(str(out)).graph.node}
    assert ("QLinearConv" in ops) == (fmt == "qoperator")
    assert ("DequantizeLinear" in ops)
    model = load_onnx(out)
    assert [layer.op for layer in model.layers] == DIGITS_OPS
    # The freshly quantized model still classifies the held-out digits.
    y = ReferenceBackend().run(model, digits.x)
    assert np.mean(y.argmax(1) == digits.y) > 0.9


def test_quantize_warns_when_fpgacnn_cannot_run_the_result(capsys, tmp_path):
    tanh = helper.make_node("Tanh", ["c"], ["y"], name="tanh")
    float_path = unsupported_model(tmp_path / "tanh_float.onnx", tanh)
    np.save(tmp_path / "calib.npy", np.ones((2, 4, 6, 6), np.float32))
    status, _, err = cli(capsys, "quantize", float_path, "--calibration", tmp_path / "calib.npy",
                         "-o", tmp_path / "q.onnx")
    assert status == 0
    assert re.fullmatch(r"fpgacnn: warning: \S+q\.onnx cannot be run by fpgacnn: node 'tanh' "
                        r"\(Tanh\): operator Tanh is not supported\n", err), err


def test_quantize_model_with_fixed_batch(capsys, tmp_path):
    """Exporters often fix the batch at 1: calibration still takes any number of samples."""
    float_path = conv_model(tmp_path / "fixed.onnx", batch=1)
    calib = np.random.default_rng(2).standard_normal((8, 4, 6, 6)).astype(np.float32)
    np.save(tmp_path / "calib.npy", calib)
    status, _, err = cli(capsys, "quantize", float_path, "--calibration", tmp_path / "calib.npy",
                         "-o", tmp_path / "q.onnx")
    assert (status, err) == (0, "")
    assert [layer.op for layer in load_onnx(tmp_path / "q.onnx").layers] == ["Conv"]


def test_quantize_fixed_batch_needs_whole_batches(capsys, tmp_path):
    float_path = conv_model(tmp_path / "fixed.onnx", batch=2)
    np.save(tmp_path / "calib.npy", np.ones((3, 4, 6, 6), np.float32))
    check_error(capsys, r"fpgacnn: error: --calibration \S+calib\.npy: 3 samples, but model "
                        r"input 'x' has a fixed batch of 2; give a multiple of 2",
                "quantize", float_path, "--calibration", tmp_path / "calib.npy",
                "-o", tmp_path / "q.onnx")


QUANTIZE_ERRORS = {
    "missing model": (["{tmp}/nope.onnx", "--calibration", "{x}", "-o", "{tmp}/q.onnx"],
                      r"fpgacnn: error: model \S+/nope\.onnx: no such file"),
    "truncated model": (["{float_truncated}", "--calibration", "{x}", "-o", "{tmp}/q.onnx"],
                        r"fpgacnn: error: model \S+/float_truncated\.onnx: not a valid ONNX "
                        r"model \(.+\)"),
    "already quantized": ([str(INT8), "--calibration", "{x}", "-o", "{tmp}/q.onnx"],
                          r"fpgacnn: error: model \S+digits_int8\.onnx: already quantized "
                          r"\(contains DequantizeLinear, QuantizeLinear\); quantize takes a "
                          r"float model"),
    "missing calibration": ([str(FLOAT), "--calibration", "{tmp}/nope.npy", "-o", "{tmp}/q.onnx"],
                            r"fpgacnn: error: --calibration \S+/nope\.npy: no such file"),
    "calibration is a directory": ([str(FLOAT), "--calibration", "{dir}", "-o", "{tmp}/q.onnx"],
                                   r"fpgacnn: error: --calibration \S+/folder\.npy: is a "
                                   r"directory, not a NumPy \.npy file"),
    "text as calibration": ([str(FLOAT), "--calibration", "{text_npy}", "-o", "{tmp}/q.onnx"],
                            r"fpgacnn: error: --calibration \S+/text\.npy: not a NumPy \.npy "
                            r"file"),
    "pickled calibration": ([str(FLOAT), "--calibration", "{objects}", "-o", "{tmp}/q.onnx"],
                            r"fpgacnn: error: --calibration \S+/objects\.npy: holds Python "
                            r"objects, which are not loaded \(arrays are read without pickle\)"),
    "calibration shape": ([str(FLOAT), "--calibration", "{x_chw}", "-o", "{tmp}/q.onnx"],
                          r"fpgacnn: error: --calibration \S+/x_chw\.npy: shape \(16, 8, 8\) "
                          r"does not match model input 'input' of shape \(N, 1, 8, 8\)"),
    "calibration dtype": ([str(FLOAT), "--calibration", "{x64}", "-o", "{tmp}/q.onnx"],
                          r"fpgacnn: error: --calibration \S+/x64\.npy: dtype float64 does not "
                          r"match model input 'input' of dtype float32"),
    "output directory": ([str(FLOAT), "--calibration", "{x}", "-o", "{tmp}/no/q.onnx"],
                         r"fpgacnn: error: output \S+/no/q\.onnx: directory \S+/no does not "
                         r"exist"),
    "model is a directory": (["{dir}", "--calibration", "{x}", "-o", "{tmp}/q.onnx"],
                             r"fpgacnn: error: model \S+/folder\.npy: is a directory, not an "
                             r"ONNX file"),
    "output is a directory": ([str(FLOAT), "--calibration", "{x}", "-o", "{dir}"],
                              r"fpgacnn: error: output \S+/folder\.npy: is a directory, not a "
                              r"file"),
    "output suffix": ([str(FLOAT), "--calibration", "{x}", "-o", "{tmp}/q.txt"],
                      r"fpgacnn: error: output \S+/q\.txt: the file name must end in \.onnx"),
}


@pytest.mark.parametrize("case", QUANTIZE_ERRORS)
def test_quantize_bad_input(capsys, files, tmp_path, case):
    argv, pattern = QUANTIZE_ERRORS[case]
    truncated = tmp_path / "float_truncated.onnx"
    truncated.write_bytes(FLOAT.read_bytes()[:5000])
    names = {k: str(v) for k, v in files.items()} | {"tmp": str(tmp_path),
                                                    "float_truncated": str(truncated)}
    check_error(capsys, pattern, "quantize", *(a.format(**names) for a in argv))
    assert not (tmp_path / "q.onnx").exists()


# ----------------------------------------------------------------- console script

def console_script():
    path = Path(sys.executable).with_name("fpgacnn")
    return str(path) if path.exists() else shutil.which("fpgacnn")


def test_console_script(tmp_path):
    script = console_script()
    assert script, "the fpgacnn console script is not installed next to this Python"
    ok = subprocess.run([script, "run", "--example", "digits", "--backend", "reference"],
                        capture_output=True, text=True,
                        cwd=tmp_path, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert re.search(r"^top-1 accuracy: \d+\.\d\d% \(\d+/360\)$", ok.stdout, re.M), ok.stdout
    bad = subprocess.run([script, "run", "missing.onnx", "--input", "x.npy"], capture_output=True,
                         text=True, cwd=tmp_path, timeout=120)
    assert bad.returncode == 1
    assert bad.stdout == ""
    assert bad.stderr == "fpgacnn: error: MODEL missing.onnx: no such file\n"
