"""`fpgacnn demo` and `fpgacnn sim`: the engine commands, end to end on the simulated board.

Also what happens before the board: a model that cannot map is refused before
any Verilog is generated or built, and the generated Verilog is cached on disk.
"""

import dataclasses
import json
import re
import sys

import numpy as np
import pytest

from fpgacnn.core.errors import BackendError, InputError, MappingError
from fpgacnn.host import accelerator
from fpgacnn.host.accelerator import Accelerator
from fpgacnn.host.cli import main
from fpgacnn.host.examples import load_example
from fpgacnn.host.onnx_import import load_onnx
from fpgacnn.host.reference import ReferenceBackend
from fpgacnn.sim import verilator

from conftest import SMALL_ENGINE

#: SMALL_ENGINE with a weight buffer too small for the digits model's conv2 (8 input channels).
TINY_ENGINE = dataclasses.replace(SMALL_ENGINE, max_channels=4, max_out_channels=4)
TINY_REFUSAL = (r"layer 'conv2': the weights of even one output tile \(2 input tiles\) exceed "
                r"the weight buffer's \d+ words? \(max_channels 4\)")


@pytest.fixture(scope="module")
def small_toml(tmp_path_factory):
    path = tmp_path_factory.mktemp("engine") / "small.toml"
    path.write_text("[engine]\n" + "".join(f"{k} = {v}\n" for k, v in SMALL_ENGINE.as_dict().items()))
    return path


def toml(path, config):
    path.write_text("[engine]\n" + "".join(f"{k} = {v}\n" for k, v in config.as_dict().items()))
    return path


@pytest.fixture
def no_engine(monkeypatch):
    """Fail the test if the engine is generated, built or opened."""
    def fail(*args, **kwargs):
        raise AssertionError("the engine was generated or opened")
    monkeypatch.setattr(accelerator, "open_board", fail)
    monkeypatch.setattr(verilator, "cached_engine_verilog", fail)
    monkeypatch.setattr("fpgacnn.hdl.verilog.engine_verilog", fail)


def cli(capsys, *argv):
    status = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


# ----------------------------------------------------------------- fail early

@pytest.mark.parametrize("argv", [
    ["run", "--example", "digits"],
    ["run", "--example", "digits", "--backend", "serial", "--port", "sim"],
    ["demo", "--images", "5"],
])
def test_unmappable_model_is_refused_before_the_engine_is_built(capsys, tmp_path, no_engine, argv):
    status, out, err = cli(capsys, *argv, "--config", toml(tmp_path / "tiny.toml", TINY_ENGINE))
    assert status == 1
    assert re.fullmatch(r"fpgacnn: error: " + TINY_REFUSAL + r"\n", err), err


def test_accelerator_compiles_before_it_opens_a_board(no_engine):
    # The batch is not known yet: the constructor checks that every layer maps for one image.
    with pytest.raises(MappingError, match="^" + TINY_REFUSAL + "$"):
        Accelerator(load_example("digits").model, backend="sim", config=TINY_ENGINE)


def test_accelerator_compiles_for_the_batch_it_is_given(small_engine_board):
    acc = Accelerator(load_example("digits").model, config=SMALL_ENGINE, board=small_engine_board,
                      batch=7)
    assert list(acc._programs) == [7]
    with pytest.raises(InputError, match=r"^batch must be a positive integer, not 0$"):
        Accelerator(load_example("digits").model, backend="sim", config=SMALL_ENGINE, batch=0)


# ----------------------------------------------------------------- the Verilog cache

@pytest.fixture
def fake_generator(monkeypatch, tmp_path):
    """An empty cache folder, and an engine_verilog that records its calls (and is instant)."""
    monkeypatch.setenv("FPGACNN_CACHE_DIR", str(tmp_path / "cache"))
    calls = []

    def engine_verilog(config, *, name):
        calls.append(config)
        return f"// {config.pin}x{config.pout}\nmodule {name}();\nendmodule\n"
    monkeypatch.setattr("fpgacnn.hdl.verilog.engine_verilog", engine_verilog)
    return calls


def test_verilog_is_generated_once_per_configuration(fake_generator):
    messages = []
    first = verilator.cached_engine_verilog(SMALL_ENGINE, progress=messages.append)
    again = verilator.cached_engine_verilog(SMALL_ENGINE, progress=messages.append)
    assert again == first and fake_generator == [SMALL_ENGINE]
    assert len(messages) == 1 and messages[0].startswith("generating the engine's Verilog")
    [path] = verilator.verilog_cache_dir().iterdir()
    assert path.name.startswith("fpgacnn_engine-") and path.read_text() == first
    other = dataclasses.replace(SMALL_ENGINE, pout=8)
    assert verilator.cached_engine_verilog(other) != first
    assert fake_generator == [SMALL_ENGINE, other]


def test_verilog_cache_follows_the_generator_sources(fake_generator, monkeypatch):
    verilator.cached_engine_verilog(SMALL_ENGINE)
    monkeypatch.setattr(verilator, "_hdl_sources_digest", lambda: "an edited generator")
    verilator.cached_engine_verilog(SMALL_ENGINE)
    assert fake_generator == [SMALL_ENGINE, SMALL_ENGINE]


def test_a_generator_edited_under_a_running_process_is_not_built(fake_generator, monkeypatch):
    """A generator source newer than this process's import of fpgacnn, its module
    loaded: the Verilog would be the old module's under the new file's key (a
    cache poisoned for every later run), so nothing is generated or cached."""
    import fpgacnn
    source = verilator.generator_sources()[0]
    module = "fpgacnn." + ".".join(source.relative_to(verilator._package_root())
                                   .with_suffix("").parts)
    assert module in sys.modules
    monkeypatch.setattr(fpgacnn, "IMPORTED_AT", source.stat().st_mtime - 1)
    with pytest.raises(BackendError, match=rf"^{re.escape(module)} \(.*\) changed after this "
                                           r"process imported fpgacnn: .* run again in a new "
                                           r"process$"):
        verilator.cached_engine_verilog(SMALL_ENGINE)
    assert fake_generator == [] and not list(verilator.verilog_cache_dir().glob("*.v"))
    newest = max(p.stat().st_mtime for p in verilator.generator_sources())
    monkeypatch.setattr(fpgacnn, "IMPORTED_AT", newest + 1)
    verilator.cached_engine_verilog(SMALL_ENGINE)  # as imported: built and cached
    assert fake_generator == [SMALL_ENGINE]


def test_verilog_cache_keeps_the_most_recently_used(fake_generator, monkeypatch):
    monkeypatch.setattr(verilator, "MAX_CACHED_VERILOG", 2)
    configs = [dataclasses.replace(SMALL_ENGINE, pout=p) for p in (4, 8, 12)]
    for config in configs:
        verilator.cached_engine_verilog(config)
    assert len(list(verilator.verilog_cache_dir().glob("*.v"))) == 2
    verilator.cached_engine_verilog(configs[-1])  # still cached
    assert len(fake_generator) == 3


def test_a_damaged_verilog_file_is_regenerated(fake_generator):
    text = verilator.cached_engine_verilog(SMALL_ENGINE)
    [path] = verilator.verilog_cache_dir().iterdir()
    path.write_text(text[:10])
    assert verilator.cached_engine_verilog(SMALL_ENGINE) == text
    assert len(fake_generator) == 2


# ----------------------------------------------------------------- the commands

def test_demo_prints_accuracy_cycles_and_throughput(capsys, small_toml, tmp_path):
    status, out, err = cli(capsys, "demo", "--config", small_toml, "--images", 30,
                           "--report", tmp_path / "r.json")
    assert status == 0, err
    assert re.search(r"^float model \(onnxruntime\):\s+\d+\.\d\d%$", out, re.M), out
    ref = re.search(r"^int8 reference backend:\s+(\d+\.\d\d%) \((\d+)/30\)$", out, re.M)
    rtl = re.search(r"^int8 RTL \(simulated board\):\s+(\d+\.\d\d%) \((\d+)/30\)$", out, re.M)
    assert ref and rtl and ref.groups() == rtl.groups(), out
    assert "RTL output equals the reference bit for bit: yes" in out
    assert re.search(r"^conv2\+pool\s+Conv\+MaxPool\s+engine\s+[\d,]+\s+\d+\.\d%", out, re.M), out
    # The whole network on the engine's sequencer: the flatten is a vector copy.
    assert re.search(r"^flatten\s+Flatten\s+engine", out, re.M), out
    line = re.search(r"^total ([\d,]+) engine cycles for 30 images; per image (\d+\.\d{3}) ms "
                     r"end to end = engine (\d+\.\d{3}) ms at 100 MHz \+ host (\d+\.\d{3}) ms "
                     r"\(measured here\); ([\d,]+) images/s end to end, ([\d,]+) by the engine "
                     r"alone$", out, re.M)
    assert line, out
    total, engine, host = (float(v) for v in line.group(2, 3, 4))
    assert total == pytest.approx(engine + host, abs=0.0015)
    assert int(line.group(1).replace(",", "")) / 30 / 100e3 == pytest.approx(engine, abs=0.0005)
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["backend"] == "sim" and report["batch"] == 30
    assert report["engine"] == SMALL_ENGINE.as_dict()
    assert report["sequencer"]["sequencer_starts"] == 1


def test_run_streams_batches_and_reports_the_throughput(capsys, small_toml, tmp_path):
    """``--stream N``: the input as batches of N (the last smaller) through
    ``Accelerator.run_stream`` on the sequencer; the same accuracy and outputs as
    one run, and the stream's line and report."""
    status, out, err = cli(capsys, "run", "--example", "digits", "--config", small_toml,
                           "--sequencer", "--stream", 100, "--report", tmp_path / "r.json",
                           "--output", tmp_path / "y.npy")
    assert status == 0, err
    line = re.search(r"^stream of 4 batches of 100 \(360 images\), each batch's input written "
                     r"while the engine ran the one before: total ([\d,]+) engine cycles; per "
                     r"image (\d+\.\d{3}) ms end to end \(engine (\d+\.\d{3}) ms at 100 MHz, "
                     r"host (\d+\.\d{3}) ms while it waited, (\d+\.\d{3}) ms beside it, "
                     r"measured here\); ([\d,]+) images/s$", out, re.M)
    assert line, out
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["stream"] is True and report["overlapped"] is True
    assert [b["images"] for b in report["per_batch"]] == [100, 100, 100, 60]
    assert int(line.group(1).replace(",", "")) == report["total_cycles"]
    digits = load_example("digits")
    y = np.load(tmp_path / "y.npy")
    np.testing.assert_array_equal(y, ReferenceBackend().run(load_onnx(digits.model), digits.x))
    assert f"top-1 accuracy: {(y.argmax(1) == digits.y).mean():.2%}" in out


@pytest.mark.parametrize("value", [0, -2])
def test_run_refuses_a_stream_of_no_images(capsys, small_toml, value):
    status, out, err = cli(capsys, "run", "--example", "digits", "--config", small_toml,
                           "--sequencer", "--stream", value)
    assert status != 0
    assert err.strip().endswith(f"--stream takes a positive number of images per batch, not "
                                f"{value}"), err


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
    # End to end: the engine's cycles at the clock plus the host's measured work.
    assert report["engine_seconds"] == pytest.approx(report["total_cycles"] / 100e6)
    # The layers' host work and run()'s quantizing and dequantizing.
    assert 0 < report["quantize_seconds"] < report["host_seconds"]
    assert report["host_seconds"] == pytest.approx(
        sum(l.get("host_seconds", 0) for l in report["layers"] if "fused_into" not in l)
        + report["quantize_seconds"])
    assert report["end_to_end_seconds_per_image"] == pytest.approx(
        (report["engine_seconds"] + report["host_seconds"]) / 360)
    assert report["images_per_second"] == pytest.approx(
        1 / report["end_to_end_seconds_per_image"])
    assert report["host_share"] == pytest.approx(
        report["host_seconds"] / report["engine_seconds"])
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
    (["sim", "--shape", "40x8x8", "--out-channels", "4", "--kernel", "5"],
     r"layer 'conv': the weights of even one output tile \(28 input tiles\) exceed the weight "
     r"buffer's 16 words \(max_channels 16\) \(output channels 0\.\.3 as a dense convolution "
     r"with its taps folded into 1000 channels\)"),
    (["demo", "--images", "0"], r"--images must be between 1 and 360, not 0"),
    (["demo", "--report", "{tmp}"], r"--report \S+: is a directory, not a file"),
    (["demo", "--report", "{tmp}/r.txt"], r"--report \S+/r\.txt: the file name must end in \.json"),
    (["demo", "--waves", "{tmp}/no/w.vcd"],
     r"--waves \S+/no/w\.vcd: directory \S+/no does not exist"),
    (["sim", "--shape", "4x8x8", "--out-channels", "4", "--waves", "{tmp}/w.txt"],
     r"--waves \S+/w\.txt: the file name must end in \.vcd or \.fst"),
    (["sim", "--shape", "4x8x8", "--out-channels", "4", "--waves", "{tmp}"],
     r"--waves \S+: is a directory, not a file"),
    (["generate", "-o", "{file}"], r"-o \S+/plain: exists and is not a directory"),
    (["generate", "-o", "{file}/sub/dir"], r"-o \S+/plain/sub/dir: cannot create it, \S+/plain "
                                           r"is not a directory"),
    (["build", "--board", "ulx3s-85f", "-o", "{file}"],
     r"-o \S+/plain: exists and is not a directory"),
])
def test_engine_command_errors(capsys, small_toml, tmp_path, no_engine, argv, message):
    model = str(load_example("digits").model)
    (tmp_path / "plain").write_text("a file\n")
    names = {"{model}": model, "{tmp}": str(tmp_path), "{file}": str(tmp_path / "plain")}
    for key, value in names.items():
        argv = [a.replace(key, value) for a in argv]
    argv = argv + ["--config", str(small_toml)]
    status, out, err = cli(capsys, *argv)
    assert status == 1
    assert re.fullmatch(r"fpgacnn: error: " + message + r"\n", err), err
