"""Requantizer in the Amaranth simulator, bit-exact against fpgacnn.host.requant.requantize."""

import gc

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from amaranth.sim import Simulator

from fpgacnn.core.config import EngineConfig
from fpgacnn.hdl.datapath.requantizer import Requantizer
from fpgacnn.host.requant import requant_params, requantize

from arrangement_helpers import arranged
from hdl_pack_helpers import pack, unpack


def _random_layer(rng, cfg, n, *, mult_source="scales"):
    """``n`` vectors of (acc, bias, mult, shift), each of shape (n, pout)."""
    w = cfg.acc_width
    acc = rng.integers(-2**(w - 1), 2**(w - 1), size=(n, cfg.pout), dtype=np.int64)
    acc[0] = -2**(w - 1)
    acc[1] = 2**(w - 1) - 1
    bias = rng.integers(-2**31, 2**31, size=(n, cfg.pout), dtype=np.int64)
    bias[0] = -2**31
    bias[1] = 2**31 - 1
    total = np.abs(acc + bias).astype(np.float64) + 1
    # Even rows: scales and shifts over their whole range (mostly saturating or
    # rounding to 0); odd rows: matched to |acc + bias| so the result lands
    # inside int8 and the rounding decides the low bits.
    fit = np.arange(n)[:, None] % 2 == 1
    if mult_source == "scales":
        # log-uniform scales from far below 2**-47 (shift saturates at 63) to just below 2**16 (shift 0)
        scale = 2.0 ** rng.uniform(-60, 15.999, size=(n, cfg.pout))
        scale = np.where(fit, np.minimum(2.0 ** rng.uniform(2, 8, size=scale.shape) / total, 2.0**15.9), scale)
        scale[2] = 2.0**15  # shift 0
        scale[4] = 2.0**-47  # shift 63 exactly
        mult, shift = requant_params(scale)
    else:  # any multiplier of mult_width bits, any shift
        mult = rng.integers(0, 2**cfg.mult_width, size=(n, cfg.pout), dtype=np.int64)
        mult[4] = 2**cfg.mult_width - 1
        shift = rng.integers(0, 64, size=(n, cfg.pout), dtype=np.int64)
        bits = np.ceil(np.log2(total * (mult + 1))).astype(np.int64)
        shift = np.where(fit, np.clip(bits - rng.integers(2, 9, size=bits.shape), 0, 63), shift)
    return acc, bias, mult, shift


#: (arrangement, whole_multiplier): the deep arrangement's two tilings of its product
#: (17-bit parts of the multiplier too, or the whole multiplier: the program
#: engine's), the compact arrangement's one.
TILINGS = [("deep", False), ("deep", True), ("compact", False)]
TILING_IDS = ["deep", "deep-whole", "compact"]


def _simulate(cfg, segments, *, tag_width=3, gap_prob=0.25, seed=0, whole_multiplier=False):
    """Run segments of (acc, bias, mult, shift, y_zp, lo, hi); y_zp/lo/hi are static per segment."""
    dut = Requantizer(cfg, tag_width=tag_width, whole_multiplier=whole_multiplier)
    rng = np.random.default_rng(seed)
    out, tags, lat = [], [], []
    sent = []

    async def testbench(ctx):
        cycle = 0

        def sample():
            if ctx.get(dut.o_valid):
                out.append(unpack(ctx.get(dut.o_data.as_value()), 8, cfg.pout))
                tags.append(ctx.get(dut.o_tag))
                lat.append(cycle - sent[len(out) - 1])

        async def tick():
            nonlocal cycle
            sample()
            await ctx.tick()
            cycle += 1

        for acc, bias, mult, shift, y_zp, lo, hi in segments:
            ctx.set(dut.y_zp, y_zp)
            ctx.set(dut.clamp_lo, lo)
            ctx.set(dut.clamp_hi, hi)
            for i in range(len(acc)):
                while rng.random() < gap_prob:
                    ctx.set(dut.i_valid, 0)
                    ctx.set(dut.i_acc.as_value(), pack(rng.integers(-2**20, 2**20, cfg.pout), cfg.acc_width))
                    await tick()
                ctx.set(dut.i_valid, 1)
                ctx.set(dut.i_tag, len(sent) % (1 << tag_width))
                ctx.set(dut.i_acc.as_value(), pack(acc[i], cfg.acc_width))
                ctx.set(dut.i_bias.as_value(), pack(bias[i], 32))
                ctx.set(dut.i_mult.as_value(), pack(mult[i], cfg.mult_width))
                ctx.set(dut.i_shift.as_value(), pack(shift[i], 6))
                sent.append(cycle)
                await tick()
            # Drain before the next layer changes the static zero point and clamps.
            ctx.set(dut.i_valid, 0)
            for _ in range(dut.latency):
                await tick()
        await tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(testbench)
    sim.run()
    assert lat == [dut.latency] * len(sent)
    assert tags == [i % (1 << tag_width) for i in range(len(sent))]
    return np.array(out, dtype=np.int64).reshape(-1, cfg.pout)


def _reference(segments):
    return np.concatenate([
        requantize(acc + bias, mult, shift, y_zp, lo, hi).astype(np.int64)
        for acc, bias, mult, shift, y_zp, lo, hi in segments
    ])


@pytest.mark.parametrize("acc_width, mult_width, mult_source", [
    (32, 24, "scales"),
    (24, 24, "scales"),
    (32, 24, "random"),
    (16, 24, "random"),
    # The widest the int64 reference is exact at with 24-bit multipliers (the class
    # docstring): acc + bias in three 17-bit parts, six products a lane (three with
    # the whole multiplier).
    (38, 24, "scales"),
])
@pytest.mark.parametrize("arrangement, whole", TILINGS, ids=TILING_IDS)
def test_requantizer_matches_reference(acc_width, mult_width, mult_source, arrangement, whole):
    cfg = EngineConfig(pout=4, acc_width=acc_width, mult_width=mult_width)
    rng = np.random.default_rng(acc_width * 100 + mult_width)
    segments = []
    for kind in ("full", "relu", "random", "relu6like", "inverted"):
        acc, bias, mult, shift = _random_layer(rng, cfg, 40, mult_source=mult_source)
        y_zp = int(rng.integers(-128, 128))
        if kind == "full":
            lo, hi = -128, 127
        elif kind == "relu":
            lo, hi = y_zp, 127
        elif kind == "relu6like":
            lo, hi = y_zp, min(127, y_zp + int(rng.integers(0, 100)))
        elif kind == "inverted":  # lo > hi: numpy.clip gives hi, so must the hardware
            hi, lo = sorted(int(v) for v in rng.integers(-128, 128, size=2))
        else:
            lo, hi = sorted(int(v) for v in rng.integers(-128, 128, size=2))
        segments.append((acc, bias, mult, shift, y_zp, lo, hi))
    got = _simulate(arranged(cfg, arrangement), segments, seed=acc_width, whole_multiplier=whole)
    ref = _reference(segments)
    assert_array_equal(got, ref)
    assert len(np.unique(ref)) > 50  # not everything saturated: the rounding is really tested


@pytest.mark.parametrize("arrangement, whole", TILINGS, ids=TILING_IDS)
def test_requantizer_rounds_ties_half_up_and_shift_zero_exactly(arrangement, whole):
    cfg = EngineConfig(pout=2)
    # acc*mult = k + 0.5 ulp exactly: ties at shift 1 and 2, negative ties too (half up = towards +inf).
    acc = np.array([[1, -1], [3, -3], [5, -5], [2, -2], [6, -6], [100, -100], [127, -129]], dtype=np.int64)
    bias = np.zeros_like(acc)
    mult = np.array([[1, 1], [1, 1], [1, 1], [1, 1], [1, 1], [1, 1], [1, 1]], dtype=np.int64)
    shift = np.array([[1, 1], [1, 1], [1, 1], [2, 2], [2, 2], [0, 0], [0, 0]], dtype=np.int64)
    segments = [(acc, bias, mult, shift, 0, -128, 127)]
    ref = _reference(segments)
    assert_array_equal(ref[:, 0], [1, 2, 3, 1, 2, 100, 127])
    assert_array_equal(ref[:, 1], [0, -1, -2, 0, -1, -100, -128])
    assert_array_equal(_simulate(arranged(cfg, arrangement), segments, gap_prob=0.0,
                                 whole_multiplier=whole), ref)


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_requantizer_rejects_bad_parameters():
    with pytest.raises(TypeError, match=r"^config must be an EngineConfig, not None$"):
        Requantizer(None, tag_width=1)
    with pytest.raises(ValueError, match=r"^tag_width must be a non-negative integer, not -2$"):
        Requantizer(EngineConfig(), tag_width=-2)
    with pytest.raises(TypeError, match=r"^whole_multiplier must be True or False, not 1$"):
        Requantizer(EngineConfig(), tag_width=0, whole_multiplier=1)
    # The core and the engine pass it down: they refuse it at construction too.
    from fpgacnn.hdl.datapath.conv_core import ConvCore
    from fpgacnn.hdl.engine import ConvEngine
    for component in (ConvCore, ConvEngine):
        with pytest.raises(TypeError, match=r"^whole_multiplier must be True or False, "
                                            r"not 'yes'$"):
            component(EngineConfig(), whole_multiplier="yes")
    gc.collect()  # the half-built components warn when collected: do it under the filter


def test_requantizer_converts_to_verilog():
    from amaranth.back import verilog
    text = verilog.convert(Requantizer(EngineConfig(pout=2), tag_width=2), name="requantizer")
    for port in ("input [63:0] i_acc;", "input [63:0] i_bias;", "input [47:0] i_mult;",
                 "input [11:0] i_shift;", "input [7:0] clamp_lo;", "output [15:0] o_data;",
                 "output [1:0] o_tag;"):
        assert port in text


@pytest.mark.parametrize("arrangement, whole", TILINGS, ids=TILING_IDS)
def test_requantizer_saturates_exactly_at_the_edges_of_its_narrow_shifter(arrangement, whole):
    # The result is saturated to 10 bits (11 in the iCE40 shifter, sat_shift):
    # results around +-256 and +-512,
    # and far beyond, with extreme zero points, must still match the reference.
    cfg = EngineConfig(pout=2)
    rows = []
    for shift in (0, 1, 5, 17, 40, 63):
        for r in (255, 256, 257, 383, 384, 510, 511, 512, 513, 1023, 1024, 1 << 20):
            for sign in (1, -1):
                for tie in (0, 1):
                    value = sign * r * (1 << shift) + (tie << max(shift - 1, 0) if shift else 0)
                    if -2**32 <= value < 2**32:
                        rows.append((value, shift))
    n = len(rows)
    value = np.array([v for v, _ in rows], dtype=np.int64)
    shift = np.array([s for _, s in rows], dtype=np.int64)
    # value = acc + bias with mult 1 (and mult 2**23 for the large shifts' bits).
    acc = np.stack([value // 2, value // 2], axis=1)
    bias = np.stack([value - value // 2, value - value // 2], axis=1)
    mult = np.ones((n, 2), dtype=np.int64)
    shifts = np.stack([shift, shift], axis=1)
    segments = [(acc, bias, mult, shifts, zp, -128, 127) for zp in (-128, 0, 127)]
    got = _simulate(arranged(cfg, arrangement), segments, gap_prob=0.0, whole_multiplier=whole)
    assert_array_equal(got, _reference(segments))
