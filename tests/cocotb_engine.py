"""cocotb tests of the generated ConvEngine (run by tests/test_engine_rtl.py).

Every layer is seeded random data, packed by :func:`fpgacnn.host.packing.pack_layer`,
run through the RTL over AXI4-Lite / AXI4-Stream (cocotbext-axi), unpacked,
and compared bit-exactly with :func:`fpgacnn.host.integer_ops.conv2d` (and
:func:`~fpgacnn.host.integer_ops.maxpool2d`). The engine configuration comes
in through ``FPGACNN_ENGINE_CONFIG``; ``FPGACNN_TEST_SEED`` varies the data.
"""

from dataclasses import dataclass
import os

import cocotb
import numpy as np
from numpy.testing import assert_array_equal

from fpgacnn.host.integer_ops import conv2d, maxpool2d
from fpgacnn.host.packing import input_nbytes, pack_layer, unpack_output
from fpgacnn.host.requant import requant_params
from fpgacnn.sim.engine_tb import EngineTB, config_from_env

CONFIG = config_from_env()
SEED = int(os.environ.get("FPGACNN_TEST_SEED", "1"))

#: Layer kinds of the random scenario, each run with and without stream pauses.
KINDS = ("kxk", "kxk_stride2", "kxk_stride_kmax", "kxk_pool_relu", "smaller_kernel", "1x1_remap",
         "1x1_stride2_remap", "batch_pad0", "largest")


@dataclass
class Layer:
    """A quantized convolution (``params``: the weights and requantization) on input ``x``."""

    kind: str
    x: np.ndarray
    params: dict
    cout: int
    desc: dict = None
    data: bytes = None
    expected: np.ndarray = None

    def __post_init__(self):
        if self.desc is None:
            self.desc, data = pack_layer(CONFIG, self.x, name=self.kind, **self.params)
            self.data = bytes(data)
            self.expected = self.reference(self.x)

    def reference(self, x):
        p = self.params
        y = conv2d(x, p["w"], p["bias"], p["x_zp"], p["mult"], p["shift"], p["y_zp"],
                   *p["clamp"], stride=(p["stride"],) * 2, pads=p["pads"])
        return maxpool2d(y) if p["pool"] else y

    def with_input(self, x, *, load_weights):
        """The same layer on other images (``load_weights=False``: weights already loaded)."""
        desc, data = pack_layer(CONFIG, x, name=self.kind, load_weights=load_weights, **self.params)
        return Layer(self.kind, x, self.params, self.cout, desc, bytes(data), self.reference(x))

    def __str__(self):
        p = self.params
        return (f"{self.kind}: input {self.x.shape}, weights {p['w'].shape}, stride {p['stride']}, "
                f"pads {p['pads']}, pool {p['pool']}, clamp {p['clamp']}")


def random_layer(rng, kind, cfg=CONFIG):
    """A random quantized convolution of ``kind`` that fits ``cfg``."""
    k, stride, pool, batch, relu = cfg.kmax, 1, False, 1, bool(rng.integers(2))
    pads = (1, 1, 1, 1)
    if kind == "kxk_stride2":
        stride, pads = 2, tuple(int(p) for p in rng.integers(0, 2, size=4))
    elif kind == "kxk_pool_relu":
        pool, relu = True, True
    elif kind == "kxk_stride_kmax":
        stride, pads = cfg.kmax, (1, 0, 1, 0)
    elif kind == "smaller_kernel":  # embedded in the kmax x kmax window
        k, pads = max(1, cfg.kmax - 1), (int(rng.integers(2)), int(rng.integers(2)), 0, 1)
    elif kind in ("1x1_remap", "1x1_stride2_remap"):
        k, pads = 1, (0, 0, 0, 0)
        stride = 2 if kind == "1x1_stride2_remap" else 1
    elif kind == "batch_pad0":
        batch, pads = 2, (0, 0, 0, 0)
    cin = int(rng.integers(1, min(cfg.max_channels, 3 * cfg.pin) + 1))
    if kind.startswith("1x1"):
        cin = int(rng.integers(cfg.pin + 1, min(cfg.max_channels, cfg.kmax ** 2 * cfg.pin) + 1))
    cout = int(rng.integers(1, min(cfg.max_out_channels, 3 * cfg.pout) + 1))
    h = int(rng.integers(max(k, 4), 9))
    w = int(rng.integers(max(k, 4), min(cfg.max_width, 10) + 1))
    if kind == "largest":
        # The widest row at the deepest input the line buffer holds, every output channel.
        cin, cout, w = cfg.max_channels, cfg.max_out_channels, cfg.max_width
    x = rng.integers(-128, 128, size=(batch, cin, h, w), dtype=np.int8)
    wt = rng.integers(-128, 128, size=(cout, cin, k, k), dtype=np.int8)
    bias = rng.integers(-(1 << 14), 1 << 14, size=cout).astype(np.int32)
    x_zp = int(rng.integers(-20, 21))
    y_zp = int(rng.integers(-10, 11))
    # Scales that spread the accumulators over the int8 range, so clamping
    # and rounding are both exercised.
    acc_std = 75.0 * 75.0 * np.sqrt(cin * k * k)
    mult, shift = requant_params(rng.uniform(20.0, 80.0, size=cout) / acc_std)
    clamp = (y_zp if relu else -128, int(rng.integers(90, 128)))
    params = dict(w=wt, bias=bias, x_zp=x_zp, mult=mult, shift=shift, y_zp=y_zp, clamp=clamp,
                  stride=stride, pads=pads, pool=pool)
    return Layer(kind, x, params, cout)


def check(layer, result, cfg=CONFIG):
    got = unpack_output(cfg, result.output, layer.desc, layer.cout)
    assert_array_equal(got, layer.expected, err_msg=str(layer))


def model_cycles(layer, cfg=CONFIG):
    """Cycles the analytic model predicts for the run of ``layer``."""
    from fpgacnn.host.cycle_model import layer_cycles
    return layer_cycles(cfg, layer.desc).cycles


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
