"""The generated ConvEngine in Verilator, driven by cocotb (tests/cocotb_engine.py).

One Verilator build per configuration, cached across runs (keyed by the
configuration and the generator sources, see :mod:`fpgacnn.sim.verilator`);
each cocotb test below runs in its own simulator process against it.
``FPGACNN_WAVES=1`` builds a tracing binary and leaves one trace per test in
pytest's temporary folder; ``FPGACNN_TEST_SEED`` changes the random layers.

The second configuration's layer scenarios run on the simulated board (the
same bare engine top, built for the other tests of that configuration,
behind the C++ DMA model) rather than in a cocotb build of their own.
"""

import json
import os

import numpy as np
import pytest

from fpgacnn.core.config import EngineConfig
from fpgacnn.host.accelerator import open_board
from fpgacnn.host.engine_driver import EngineDriver
from fpgacnn.host.packing import output_nbytes
from fpgacnn.sim.engine_tb import CONFIG_ENV
from fpgacnn.sim.verilator import (build_engine, engine_build_key, generator_sources, run_cocotb,
                                    waves_requested)

from engine_layers import KINDS, check_output, model_cycles, random_layer

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
#: The first configuration runs every scenario in cocotb; the second runs the
#: layer scenarios (the ID ROM, random layers with and without pauses, cycles
#: against the model) on the simulated board: test_k2_* below.
CASES = [("k3", name) for name in ALL_TESTS]

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


# -- k2's layer scenarios on the simulated board ----------------------------------
#
# tests/cocotb_engine.py's id_rom, random_layers and cycles_match_model, with the
# same layers (tests/engine_layers.py), the same seeds and the same checks, on
# the k2 engine's simulated board: the bare engine top whose Verilator build
# tests/test_conv_views_rtl.py and tests/test_limit_boundaries.py use too, so
# the default run builds k2's engine once instead of twice (a cocotb build of
# its own cost ~25-45 s cold). The cocotb bus models (cocotbext-axi's AXI4-Lite
# and AXI4-Stream) still drive the bare engine in the k3 cases above.

#: Seconds of board time for one layer: far more than any of these takes.
TIMEOUT = 0.05
#: The odds of a withheld input beat and of output not ready in the paused runs
#: (cocotb's pauses: random bursts with the odds 0.3).
PAUSE_PERMILLE = 300


@pytest.fixture(scope="module")
def k2_board():
    board = open_board("sim", CONFIGS["k2"])
    yield board
    board.close()


def _seed():
    return int(os.environ.get("FPGACNN_TEST_SEED", "1"))


def _run(driver, layer):
    run = driver.run_layer(layer.desc, np.frombuffer(layer.data, np.uint8),
                           output_nbytes(driver.config, layer.desc), timeout=TIMEOUT,
                           name=layer.kind)
    check_output(layer, run.output)
    return run


def test_k2_id_rom_on_the_simulated_board(k2_board):
    """The ID ROM reads back the configuration the engine was generated with; idle."""
    k2_board.reset()
    driver = EngineDriver(k2_board)
    assert driver.config == CONFIGS["k2"]
    status = driver.regs.decode("status", k2_board.mmio_read(driver.regs.address("status")))
    assert status == dict.fromkeys(status, 0)  # idle: not busy, done, pending nor in error


@pytest.mark.parametrize("pauses", [False, True], ids=["pauses_False", "pauses_True"])
def test_k2_random_layers_on_the_simulated_board(k2_board, pauses):
    """Every layer kind, bit-exact, with and without random stream pauses."""
    driver = EngineDriver(k2_board, expected=CONFIGS["k2"])
    seed = _seed()
    rng = np.random.default_rng([seed, int(pauses)])
    stalls_in = stalls_out = 0
    if pauses:
        k2_board.set_backpressure(PAUSE_PERMILLE, PAUSE_PERMILLE, seed=seed * 7 + 1)
    try:
        for kind in KINDS:
            layer = random_layer(rng, kind, CONFIGS["k2"])
            run = _run(driver, layer)
            stalls_in += run.stall_in_cycles
            stalls_out += run.stall_out_cycles
            if not pauses:
                assert run.stall_out_cycles == 0, f"{kind}: stalled on output without pauses"
    finally:
        k2_board.set_backpressure(0, 0)
    if pauses:  # the pauses did reach the engine on both streams
        assert stalls_in > 0 and stalls_out > 0, (stalls_in, stalls_out)


def test_k2_cycles_match_model_on_the_simulated_board(k2_board):
    """Measured busy cycles are within 2% of the cycle model (no pauses)."""
    driver = EngineDriver(k2_board, expected=CONFIGS["k2"])
    rng = np.random.default_rng([_seed(), 2])
    report = []
    for kind in KINDS:
        layer = random_layer(rng, kind, CONFIGS["k2"])
        run = _run(driver, layer)
        report.append((kind, run.busy_cycles, model_cycles(layer)))
    bad = [(k, m, p) for k, m, p in report if abs(m - p) > 0.02 * m]
    assert not bad, "measured vs model cycles off by more than 2%: " + \
        ", ".join(f"{k}: {m} vs {p}" for k, m, p in bad)


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
