"""The generated ConvEngine in Verilator, driven by cocotb (tests/cocotb_engine.py).

One Verilator build per configuration, cached across runs (keyed by the
configuration and the generator sources, see :mod:`fpgacnn.sim.verilator`);
each cocotb test below runs in its own simulator process against it.
``FPGACNN_WAVES=1`` builds a tracing binary and leaves one trace per test in
pytest's temporary folder; ``FPGACNN_TEST_SEED`` changes the random layers.
"""

import json
import os

import pytest

from fpgacnn.core.config import EngineConfig
from fpgacnn.sim.engine_tb import CONFIG_ENV
from fpgacnn.sim.verilator import (build_engine, engine_build_key, generator_sources, run_cocotb,
                                    waves_requested)

#: Two small engines between them covering the stream packings:
#: ``k3`` has 3x3 windows (stride up to 3) and beat = pin = pout = 4 bytes;
#: ``k2`` has 2x2 windows, a 64-bit stream with 8-byte pixel words and two
#: 4-lane output words per beat. (The PYNQ-Z2's shape, two 4-byte pixel words a
#: beat stored a cycle, runs the zoo in tests/test_zoo_on_rtl.py.)
CONFIGS = {
    "k3": EngineConfig(pin=4, pout=4, kmax=3, stream_width=32, max_width=16, max_channels=16,
                       max_out_channels=16),
    "k2": EngineConfig(pin=8, pout=4, kmax=2, stream_width=64, max_width=12, max_channels=16,
                       max_out_channels=12, acc_width=24),
}

#: cocotb test names of tests/cocotb_engine.py, parametrized ones spelled out.
ALL_TESTS = [
    "id_rom",
    "random_layers/pauses=False",
    "random_layers/pauses=True",
    "cycles_match_model",
    "weights_stay_loaded",
    "reset_mid_layer/kind=soft",
    "reset_mid_layer/kind=hard",
]
#: The second configuration runs the layer scenarios only.
CASES = [("k3", name) for name in ALL_TESTS] + \
        [("k2", name) for name in ("id_rom", "random_layers/pauses=False",
                                   "random_layers/pauses=True", "cycles_match_model")]

_builds = {}


def engine_build(key):
    # Built on first use, once per configuration for the whole session.
    if key not in _builds:
        build = build_engine(CONFIGS[key], log=print)
        print(f"Verilator build of {key} ({build.key}): "
              f"{'cached' if build.cached else f'{build.seconds:.0f} s'}")
        _builds[key] = build
    return _builds[key]


@pytest.mark.parametrize("key,name", CASES,
                         ids=[f"{k}-{n.replace('/', '-').replace('=', '_')}" for k, n in CASES])
def test_engine_rtl(key, name, tmp_path):
    build = engine_build(key)
    env = {CONFIG_ENV: json.dumps(CONFIGS[key].as_dict())}
    if "FPGACNN_TEST_SEED" in os.environ:
        env["FPGACNN_TEST_SEED"] = os.environ["FPGACNN_TEST_SEED"]
    waves = tmp_path / f"waves.{build.waves}" if build.waves else None
    result = run_cocotb(build, "cocotb_engine", testcase=name, env=env, test_dir=tmp_path,
                        waves_file=waves)
    assert result.passed or result.failed, f"no cocotb test named {name!r} ran (log: {result.log_file})"
    assert not result.failed, f"{name} failed (log: {result.log_file}):\n{result.messages[name]}"


def test_second_build_is_cached():
    first = build_engine(CONFIGS["k3"])
    again = build_engine(CONFIGS["k3"])
    assert again.cached and again.build_dir == first.build_dir


def test_build_key_follows_config_sources_and_waves():
    a, b = CONFIGS["k3"], CONFIGS["k2"]
    assert engine_build_key(a) == engine_build_key(a)
    assert engine_build_key(a) != engine_build_key(b)
    assert engine_build_key(a, waves=True).endswith("-waves")
    names = {p.name for p in generator_sources()}
    assert {"engine.py", "conv_core.py", "regmap.py", "verilog.py", "line_buffer.py"} <= names
    assert "synth_stats.py" not in names


def test_waves_are_opt_in(monkeypatch):
    monkeypatch.delenv("FPGACNN_WAVES", raising=False)
    assert not waves_requested()
    monkeypatch.setenv("FPGACNN_WAVES", "1")
    assert waves_requested()
    assert not waves_requested(False)


@pytest.mark.slow
def test_waves_build_writes_a_trace(tmp_path):
    build = build_engine(CONFIGS["k3"], waves=True)
    trace = tmp_path / f"id_rom.{build.waves}"
    result = run_cocotb(build, "cocotb_engine", testcase="id_rom", test_dir=tmp_path,
                        env={CONFIG_ENV: json.dumps(CONFIGS["k3"].as_dict())}, waves_file=trace)
    assert result.passed == ["id_rom"]
    head = trace.read_bytes()[:200000]
    assert trace.stat().st_size > 1000
    if build.waves == "vcd":
        assert b"s_axil__awaddr" in head
