"""`fpgacnn demo` and `fpgacnn sim`: the engine commands, end to end on the simulated board."""

import json
import re

import pytest

from fpgacnn.host.cli import main
from fpgacnn.host.examples import load_example

from conftest import SMALL_ENGINE


@pytest.fixture(scope="module")
def small_toml(tmp_path_factory):
    path = tmp_path_factory.mktemp("engine") / "small.toml"
    path.write_text("[engine]\n" + "".join(f"{k} = {v}\n" for k, v in SMALL_ENGINE.as_dict().items()))
    return path


def cli(capsys, *argv):
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def test_demo_prints_accuracy_cycles_and_throughput(capsys, small_toml, tmp_path, small_engine_board):
    status, out, err = cli(capsys, "demo", "--config", small_toml, "--images", 30,
                           "--report", tmp_path / "r.json")
    assert status == 0, err
    assert re.search(r"^float model \(onnxruntime\):\s+\d+\.\d\d%$", out, re.M), out
    ref = re.search(r"^int8 reference backend:\s+(\d+\.\d\d%) \((\d+)/30\)$", out, re.M)
    rtl = re.search(r"^int8 RTL \(simulated board\):\s+(\d+\.\d\d%) \((\d+)/30\)$", out, re.M)
    assert ref and rtl and ref.groups() == rtl.groups(), out
    assert "RTL output equals the reference bit for bit: yes" in out
    assert re.search(r"^conv2\+pool\s+Conv\+MaxPool\s+engine\s+[\d,]+\s+\d+\.\d%", out, re.M), out
    assert re.search(r"^flatten\s+Flatten\s+host", out, re.M), out
    assert re.search(r"^total [\d,]+ engine cycles for 30 images; projected [\d,]+ images/s "
                     r"at 100 MHz", out, re.M), out
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["backend"] == "sim" and report["batch"] == 30
    assert report["engine"] == SMALL_ENGINE.as_dict()


def test_run_on_sim_reports_cycles_per_layer(capsys, small_toml, tmp_path, small_engine_board):
    status, out, err = cli(capsys, "run", "--example", "digits", "--config", small_toml,
                           "--report", tmp_path / "r.json")
    assert status == 0, err
    report = json.loads((tmp_path / "r.json").read_text())
    layers = {layer["name"]: layer for layer in report["layers"]}
    assert layers["pool"]["fused_into"] == "conv2"
    assert layers["conv2"]["cycles"] > 0 and 0 < layers["conv2"]["utilization"] <= 1
    assert layers["flatten"]["engine"] is False
    assert report["total_cycles"] == sum(l.get("cycles", 0) for l in report["layers"])
    assert report["projected_images_per_second"] == pytest.approx(
        360 * 100e6 / report["total_cycles"])
    assert re.search(r"^top-1 accuracy: \d+\.\d\d% \(\d+/360\)$", out, re.M), out


def test_sim_random_layer(capsys, small_toml, tmp_path, small_engine_board):
    status, out, err = cli(capsys, "sim", "--config", small_toml, "--shape", "8x10x12",
                           "--out-channels", 12, "--stride", 2, "--relu", "--batch", 2)
    assert status == 0, err
    assert re.search(r"^output check: equal to the reference \([\d,]+ values\)$", out, re.M), out
    cycles = re.search(r"^cycles: ([\d,]+) measured, ([\d,]+) by the cycle model$", out, re.M)
    assert cycles and cycles.group(1) == cycles.group(2), out
    assert re.search(r"^utilization: \d+\.\d% of 144 MACs/cycle", out, re.M), out
    assert re.search(r"^bound: (compute|input|output|weights) \(", out, re.M), out


def test_sim_layer_of_a_model_with_waveform(capsys, small_toml, tmp_path):
    waves = tmp_path / "conv3.vcd"
    status, out, err = cli(capsys, "sim", load_example("digits").model, "--layer", "conv3",
                           "--config", small_toml, "--waves", waves)
    assert status == 0, err
    assert "output check: equal to the reference" in out
    assert waves.stat().st_size > 0 and "s_axis__tdata" in waves.read_text()[:200_000]


@pytest.mark.parametrize("argv, message", [
    (["sim"], r"give a layer: --shape CxHxW --out-channels N, or MODEL --layer NAME"),
    (["sim", "--shape", "8x8"], r"--shape must look like CxHxW \(e\.g\. 16x32x32\), not '8x8'"),
    (["sim", "--shape", "8x8x8"], r"--out-channels must be a positive integer"),
    (["sim", "{model}"], r"--layer NAME is required with MODEL \(\S+digits_int8\.onnx\)"),
    (["sim", "{model}", "--layer", "nope"],
     r"model 'digits_cnn' has no layer 'nope' \(layers: conv1, conv2, pool, conv3, flatten, fc\)"),
    (["sim", "{model}", "--layer", "flatten"], r"layer 'flatten' \(Flatten\) runs on the host, not the engine"),
    (["sim", "--shape", "4x8x8", "--out-channels", "4", "--kernel", "5"],
     r"layer 'conv': kernel 5x5 exceeds the engine's kmax 3"),
    (["demo", "--images", "0"], r"--images must be between 1 and 360, not 0"),
])
def test_engine_command_errors(capsys, small_toml, argv, message):
    model = str(load_example("digits").model)
    argv = [a.replace("{model}", model) for a in argv] + ["--config", str(small_toml)]
    status, out, err = cli(capsys, *argv)
    assert status == 1
    assert re.fullmatch(r"fpgacnn: error: " + message + r"\n", err), err
