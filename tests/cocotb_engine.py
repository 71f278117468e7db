"""cocotb tests of the generated ConvEngine (run by tests/test_engine_rtl.py).

Every layer is seeded random data (tests/engine_layers.py), packed by
:func:`fpgacnn.host.packing.pack_layer`,
run through the RTL over AXI4-Lite / AXI4-Stream (cocotbext-axi), unpacked,
and compared bit-exactly with :func:`fpgacnn.host.integer_ops.conv2d` (and
:func:`~fpgacnn.host.integer_ops.maxpool2d`). The engine configuration comes
in through ``FPGACNN_ENGINE_CONFIG``; ``FPGACNN_TEST_SEED`` varies the data.
"""

import os

import cocotb
import numpy as np

from fpgacnn.host.packing import input_nbytes
from fpgacnn.sim.engine_tb import EngineTB, config_from_env

import engine_layers
from engine_layers import KINDS

CONFIG = config_from_env()
SEED = int(os.environ.get("FPGACNN_TEST_SEED", "1"))


def random_layer(rng, kind, cfg=CONFIG):
    """A random quantized convolution of ``kind`` that fits ``cfg`` (tests/engine_layers.py)."""
    return engine_layers.random_layer(rng, kind, cfg)


def check(layer, result):
    engine_layers.check_output(layer, result.output)


def model_cycles(layer):
    """Cycles the analytic model predicts for the run of ``layer``."""
    return engine_layers.model_cycles(layer)


@cocotb.test()
async def id_rom(dut):
    """The ID ROM reads back the configuration the engine was generated with."""
    tb = EngineTB(dut)
    await tb.reset()
    assert await tb.read_config() == CONFIG
    status = await tb.read("status")
    assert status == dict.fromkeys(status, 0)  # idle: not busy, done, pending nor in error


@cocotb.test()
@cocotb.parametrize(pauses=[False, True])
async def random_layers(dut, pauses):
    """Every layer kind, bit-exact, with and without random stream pauses."""
    tb = EngineTB(dut)
    await tb.reset()
    if pauses:
        tb.set_pauses(input_seed=SEED * 7 + 1, output_seed=SEED * 7 + 2)
    rng = np.random.default_rng([SEED, int(pauses)])
    stalls_in = stalls_out = 0
    for kind in KINDS:
        layer = random_layer(rng, kind)
        result = await tb.run_layer(layer.desc, layer.data)
        check(layer, result)
        dut._log.info("%s: %d cycles, perf %s", layer, result.cycles, result.perf)
        stalls_in += result.perf["stall_in_cycles"]
        stalls_out += result.perf["stall_out_cycles"]
        if not pauses:
            assert result.perf["stall_out_cycles"] == 0, f"{kind}: stalled on output without pauses"
    if pauses:  # the pauses did reach the engine on both streams
        assert stalls_in > 0 and stalls_out > 0, (stalls_in, stalls_out)


@cocotb.test()
async def cycles_match_model(dut):
    """Measured busy cycles are within 2% of the cycle model (no pauses)."""
    tb = EngineTB(dut)
    await tb.reset()
    rng = np.random.default_rng([SEED, 2])
    report = []
    for kind in KINDS:
        layer = random_layer(rng, kind)
        result = await tb.run_layer(layer.desc, layer.data)
        check(layer, result)
        predicted = model_cycles(layer)
        dut._log.info("%s: measured %d cycles, model %d", layer, result.cycles, predicted)
        report.append((kind, result.cycles, predicted))
    bad = [(k, m, p) for k, m, p in report if abs(m - p) > 0.02 * m]
    assert not bad, "measured vs model cycles off by more than 2%: " + \
        ", ".join(f"{k}: {m} vs {p}" for k, m, p in bad)


@cocotb.test()
async def weights_stay_loaded(dut):
    """A run with load_weights=0 reuses the previous run's parameters and weights."""
    tb = EngineTB(dut)
    await tb.reset()
    rng = np.random.default_rng([SEED, 3])
    layer = random_layer(rng, "kxk")
    check(layer, await tb.run_layer(layer.desc, layer.data))
    # Same weights, new images: only the pixels are streamed.
    x2 = rng.integers(-128, 128, size=(2,) + layer.x.shape[1:], dtype=np.int8)
    again = layer.with_input(x2, load_weights=False)
    assert again.desc["load_weights"] == 0 and len(again.data) == input_nbytes(CONFIG, again.desc)
    check(again, await tb.run_layer(again.desc, again.data))


@cocotb.test()
@cocotb.parametrize(kind=["soft", "hard"])
async def reset_mid_layer(dut, kind):
    """A reset in the middle of a layer, then a correct layer."""
    tb = EngineTB(dut)
    await tb.reset()
    rng = np.random.default_rng([SEED, 4])
    layer = random_layer(rng, "kxk")
    # Only part of the input: the engine is mid-layer, waiting for more.
    half = (len(layer.data) // 2) // tb.beat_bytes * tb.beat_bytes
    await tb.write_descriptor(layer.desc)
    tb.send(layer.data[:half])
    await tb.write("control", start=1)
    await tb.cycles(half // tb.beat_bytes + 50)
    assert (await tb.read("status"))["busy"] == 1
    if kind == "soft":
        await tb.soft_reset()
    else:
        tb.flush_streams()
        await tb.reset()
    status = await tb.read("status")
    assert status == dict.fromkeys(status, 0)  # idle: not busy, done, pending nor in error
    layer = random_layer(rng, "kxk_pool_relu")
    check(layer, await tb.run_layer(layer.desc, layer.data))
