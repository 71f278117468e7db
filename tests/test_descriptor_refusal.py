"""The hardware refuses what it cannot do (issue 13, item 5).

A descriptor outside the engine contract sets ``status.error`` (and the bits
of ``error_fields``) instead of running; the driver names the fields.

- ``DescriptorCheck`` in the Amaranth simulator: over random descriptors
  near every limit, the fields it flags are exactly those of
  :func:`fpgacnn.core.contract.descriptor_violations`.
- The engine in Verilator (the simulated board, both pipeline arrangements):
  for each limit, a layer at it runs bit-exact and one over it is refused,
  with nothing hung, and the next valid layer is bit-exact again.
"""

import dataclasses

import itertools

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from amaranth.hdl import Cat, Module, Signal
from amaranth.sim import Simulator

from fpgacnn.core.config import EngineConfig
from fpgacnn.core.contract import descriptor_violations, engine_contract
from fpgacnn.core.descriptor import DESCRIPTOR_FIELDS, complete_descriptor
from fpgacnn.core.errors import BackendError, MappingError
from fpgacnn.core.regmap import build_regmap
from fpgacnn.hdl.datapath.descriptor_check import DescriptorCheck, _above
from fpgacnn.host import packing
from fpgacnn.host.accelerator import open_board
from fpgacnn.host.engine_driver import EngineDriver
from fpgacnn.host.integer_ops import conv2d, maxpool2d

from arrangement_helpers import ARRANGEMENTS, arranged
from conftest import DEEP_PARAMS_ENGINE, SMALL_ENGINE

#: Unit-test configurations: the simulated board's engine, the iCEBreaker's
#: (pin 1: 256 input tiles, the division's longest case), and a 2x2 engine
#: with 3 output tiles (a co_tiles table with an unused entry), the 2x2 one
#: with the spare bank (rows in 3 column banks: widest_row's multiple of 3),
#: and one with pixel pairs.
UNIT_CONFIGS = {
    "small": SMALL_ENGINE,
    "icebreaker": EngineConfig(pin=1, pout=1, max_width=64, max_channels=16, max_out_channels=16,
                               stream_width=32, deep_pipeline=0),
    "k2": EngineConfig(pin=8, pout=4, kmax=2, stream_width=64, max_width=12, max_channels=16,
                       max_out_channels=12, acc_width=24),
    "k2-spare-bank": EngineConfig(pin=8, pout=4, kmax=2, stream_width=64, max_width=12,
                                  max_channels=16, max_out_channels=12, acc_width=24,
                                  spare_bank=1),
    # pixel pairs, with depthwise runs (pin == pout): refused with a stride
    # other than 1 or a pool, depthwise or not
    "k2-pixel-pairs": EngineConfig(pin=4, pout=4, kmax=2, stream_width=64, max_width=12,
                                   max_channels=16, max_out_channels=12, acc_width=24,
                                   spare_bank=1, pixel_pairs=1),
    # resident parameters: a parameter buffer of 6 words for 3 output tiles
    "k2-param-words": EngineConfig(pin=8, pout=4, kmax=2, stream_width=64, max_width=12,
                                   max_channels=16, max_out_channels=12, acc_width=24,
                                   param_words=6),
    # pairs at strides 1 and 2 (two spare banks), not 3
    "k3-pair-stride-2": EngineConfig(pin=4, pout=4, kmax=3, stream_width=64, max_width=12,
                                     max_channels=16, max_out_channels=12, acc_width=24,
                                     spare_bank=2, pixel_pairs=1),
}


# -- DescriptorCheck in the Amaranth simulator ---------------------------------

def _field_range(f):
    return ((-(1 << (f.width - 1)), (1 << (f.width - 1)) - 1) if f.signed
            else (0, (1 << f.width) - 1))


def random_descriptor(config, rng):
    """A descriptor near the contract's limits: all in range, or a few fields out of it."""
    c = engine_contract(config)
    d = {}
    for f in DESCRIPTOR_FIELDS:
        lo, hi = c.ranges[f.name]
        d[f.name] = int(rng.choice([lo, hi, rng.integers(lo, hi + 1), rng.integers(lo, hi + 1)]))
    d["ci_tiles"] = int(rng.choice([1, 2, c.max_ci_tiles, rng.integers(1, c.max_ci_tiles + 1)]))
    ci = d["ci_tiles"]
    d["co_tiles"] = int(min(c.max_co_tiles, max(1, c.max_co_tiles_for(ci) + rng.integers(-1, 2))))
    d["in_w"] = int(min(c.max_cols, max(1, c.widest_row(ci) + rng.integers(-1, 2))))
    d["pool"] = int(rng.integers(0, 2))
    pooled = c.widest_pooled_row(d["co_tiles"]) + rng.integers(-1, 2)
    d["out_w"] = int(rng.choice([1, 2, 3, c.max_cols, min(c.max_cols, pooled)]))
    # out_h around the last output row whose window starts inside the image.
    rows = (d["in_h"] + d["pad_top"] - 1) // d["stride"] + 1
    d["out_h"] = int(rng.choice([1, 2, 3, rng.integers(1, 1 << 16),
                                 min(rows + rng.integers(0, 2), (1 << 16) - 1)]))
    # Then some fields anywhere in their register (out of range or not).
    for name in rng.choice([f.name for f in DESCRIPTOR_FIELDS], size=rng.integers(0, 3),
                           replace=False):
        f = next(f for f in DESCRIPTOR_FIELDS if f.name == name)
        lo, hi = c.ranges[name]
        flo, fhi = _field_range(f)
        d[name] = int(rng.choice([v for v in (lo - 1, hi + 1, flo, fhi, rng.integers(flo, fhi + 1))
                                  if flo <= v <= fhi]))
    return d


def expected_fields(dut, config, desc):
    """The fields descriptor_violations names, as the gateware flags them.

    Without :attr:`DescriptorCheck.checks_rows` (the compact arrangement)
    the rule that every window holds an input row is the driver's alone.
    """
    return {name for name, why in descriptor_violations(config, desc)
            if dut.checks_rows or not (name == "out_h" and why.startswith("output row"))}


def _flagged(fields_word):
    return {f.name for i, f in enumerate(DESCRIPTOR_FIELDS) if fields_word >> i & 1}


@pytest.mark.parametrize("key", UNIT_CONFIGS)
def test_check_agrees_with_descriptor_violations(key):
    config = UNIT_CONFIGS[key]
    dut = DescriptorCheck(config)
    rng = np.random.default_rng(13)
    descs = [random_descriptor(config, rng) for _ in range(150)]
    # Every input-tile count once with the row at its widest and one wider.
    c = engine_contract(config)
    for ci in range(1, c.max_ci_tiles + 1):
        for extra in (0, 1):
            d = dict(descs[0], ci_tiles=ci, co_tiles=1, pool=0, stride=1, pad_top=0, pad_left=0,
                     in_h=1, out_h=1, batch=1, out_w=1)
            d["in_w"] = min(c.widest_row(ci) + extra, c.max_cols)
            descs.append(d)
    # Every output-tile count with the input tiles and the pooled row at their
    # most and one more.
    for co in range(1, c.max_co_tiles + 1):
        for extra in (0, 1):
            descs.append(dict(descs[-1], co_tiles=co, in_w=1, pool=1, out_h=2,
                              ci_tiles=min(c.max_ci_tiles_for(co) + extra, c.max_ci_tiles),
                              out_w=min(c.widest_pooled_row(co) + extra, c.max_cols)))
    if config.pixel_pairs:
        # Pixel pairs with every stride, pool and depthwise choice, in an
        # otherwise valid descriptor: refused (field pixel_pairs) past the
        # contract's pair_stride (the spare banks) or with a pool, depthwise or not.
        fits = dict(descs[-1], ci_tiles=1, co_tiles=1, in_w=4, in_h=4, out_w=2, out_h=2, pad_top=0,
                    pad_left=0, batch=1, weight_base=0, x_zp=0, y_zp=0, clamp_lo=-128,
                    clamp_hi=127)
        assert not descriptor_violations(config, dict(fits, pixel_pairs=1, stride=1, pool=0,
                                                      depthwise=0))
        for stride, pool, depthwise in itertools.product(range(1, config.kmax + 1), (0, 1),
                                                         (0, 1)):
            d = dict(fits, pixel_pairs=1, stride=stride, pool=pool, depthwise=depthwise)
            bad = stride > c.pair_stride or pool
            assert ({name for name, _ in descriptor_violations(config, d)} ==
                    ({"pixel_pairs"} if bad else set()))
            descs.append(d)
    if c.resident_params:
        # Every output-tile count from bases at, one under and one over the
        # buffer's end, and out of range.
        fits = dict(descs[-1], ci_tiles=1, in_w=4, in_h=4, out_w=2, out_h=2, pad_top=0,
                    pad_left=0, batch=1, weight_base=0, pool=0, stride=1, depthwise=0,
                    pixel_pairs=0)
        for co in range(1, c.max_co_tiles + 1):
            for base in (c.params.words - co - 1, c.params.words - co, c.params.words - co + 1,
                         c.params.words, (1 << 16) - 1):
                d = dict(fits, co_tiles=co, param_base=base)
                want = {"param_base"} if base + co > c.params.words else set()
                assert {name for name, _ in descriptor_violations(config, d)} == want, d
                descs.append(d)
    mismatches = []

    async def bench(ctx):
        for d in descs:
            for f in DESCRIPTOR_FIELDS:
                ctx.set(dut.desc[f.name], d[f.name])
            ctx.set(dut.written, 1)
            ctx.set(dut.ci_tiles_written, 1)
            await ctx.tick()
            ctx.set(dut.written, 0)
            ctx.set(dut.ci_tiles_written, 0)
            cycles = 1
            assert not ctx.get(dut.ready)
            while not ctx.get(dut.ready):
                await ctx.tick()
                cycles += 1
            assert cycles <= dut.max_latency
            want = expected_fields(dut, config, d)
            got = _flagged(ctx.get(dut.fields))
            if got != want or ctx.get(dut.error) != bool(want):
                mismatches.append((d, sorted(want), sorted(got)))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert not mismatches, f"{len(mismatches)} of {len(descs)}; first: {mismatches[0]}"


def test_constant_compare_is_exact():
    """The LUT-logic ``v > limit`` the range checks use, for every 5-bit value and limit."""
    v = Signal(5)
    limits = range(-1, 33)
    out = Signal(len(limits))
    m = Module()
    m.d.comb += out.eq(Cat(*(_above(v, limit) for limit in limits)))

    async def bench(ctx):
        for value in range(32):
            ctx.set(v, value)
            got = ctx.get(out)
            assert [got >> i & 1 for i in range(len(limits))] == \
                [int(value > limit) for limit in limits], value

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()


@pytest.mark.parametrize("key", UNIT_CONFIGS)
def test_division_decides_in_a_cycle_per_bit_of_a_bank(key):
    """After a write of ci_tiles, ready rises exactly ``division_cycles`` later (a
    quotient bit a cycle: 13 + stages on the PYNQ-Z2's 2,754-word banks, where
    counting took ``words // ci_tiles + 2``) for every ci_tiles in range;
    ``settle_cycles + 1`` for 0."""
    config = UNIT_CONFIGS[key]
    dut = DescriptorCheck(config)
    c = engine_contract(config)
    assert dut.division_cycles == c.line_buffer.words.bit_length() + 1 + dut.stages \
        <= dut.max_latency
    base = complete_descriptor(dict(
        in_h=1, in_w=1, ci_tiles=1, co_tiles=1, out_h=1, out_w=1, stride=1, pad_top=0,
        pad_left=0, batch=1, x_zp=0, y_zp=0, clamp_lo=-128, clamp_hi=127, pool=0,
        load_weights=1))
    seen = {}

    async def bench(ctx):
        for f in DESCRIPTOR_FIELDS:
            ctx.set(dut.desc[f.name], base[f.name])
        for ci in [0] + list(range(1, c.max_ci_tiles + 1)):
            ctx.set(dut.desc.ci_tiles, ci)
            ctx.set(dut.ci_tiles_written, 1)
            await ctx.tick()
            ctx.set(dut.ci_tiles_written, 0)
            cycles = 1
            while not ctx.get(dut.ready):
                await ctx.tick()
                cycles += 1
            seen[ci] = cycles

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert seen.pop(0) == dut.settle_cycles + 1
    assert set(seen.values()) == {dut.division_cycles}


def test_check_follows_each_write_within_a_few_cycles():
    """A write of a field other than ci_tiles needs no division: ready within
    stride + 2 + stages cycles."""
    config = SMALL_ENGINE
    dut = DescriptorCheck(config)
    c = engine_contract(config)
    good = complete_descriptor(dict(
        in_h=5, in_w=8, ci_tiles=2, co_tiles=2, out_h=3, out_w=6, stride=1, pad_top=0,
        pad_left=0, batch=1, x_zp=0, y_zp=0, clamp_lo=-128, clamp_hi=127, pool=1,
        load_weights=1, weight_base=12))
    assert descriptor_violations(config, good) == []

    async def write(ctx, name, value, *, ci_tiles=False):
        ctx.set(dut.desc[name], value)
        ctx.set(dut.written, 1)
        ctx.set(dut.ci_tiles_written, ci_tiles)
        await ctx.tick()
        ctx.set(dut.written, 0)
        ctx.set(dut.ci_tiles_written, 0)
        cycles = 1
        while not ctx.get(dut.ready):
            await ctx.tick()
            cycles += 1
        return cycles

    async def bench(ctx):
        for f in DESCRIPTOR_FIELDS:
            ctx.set(dut.desc[f.name], good[f.name])
        await write(ctx, "ci_tiles", good["ci_tiles"], ci_tiles=True)
        assert (ctx.get(dut.error), ctx.get(dut.fields)) == (0, 0)
        for name, value in (("in_w", c.widest_row(2) + 1), ("out_w", 1), ("stride", 0),
                            ("batch", 0), ("out_h", 6), ("in_h", 2), ("stride", 3),
                            # weight words past the buffer's 16: 2 x 2 from a base a
                            # word too far, 3 x 2 from the base (the registered product)
                            ("weight_base", c.weights.words - 3), ("co_tiles", 3)):
            cycles = await write(ctx, name, value)
            assert cycles <= config.kmax + 2 + dut.stages
            want = {n for n, _ in descriptor_violations(config, dict(good, **{name: value}))}
            assert want and _flagged(ctx.get(dut.fields)) == want, name
            assert ctx.get(dut.error)
            await write(ctx, name, good[name])
            assert (ctx.get(dut.error), ctx.get(dut.fields)) == (0, 0)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


# -- the engine on the simulated board ------------------------------------------

CONTRACT = engine_contract(SMALL_ENGINE)
TIMEOUT = 0.05  # seconds of board time: far more than any layer here takes


@pytest.fixture(scope="module", params=list(ARRANGEMENTS))
def board(request, small_engine_board):
    """The simulated board in both arrangements (the deep one is conftest's)."""
    if request.param == "deep":
        assert SMALL_ENGINE.deep_pipeline == 1
        yield small_engine_board
        return
    b = open_board("sim", arranged(SMALL_ENGINE, request.param))
    yield b
    b.close()


@pytest.fixture
def driver(board):
    return EngineDriver(board)  # the configuration from the ID ROM

@dataclasses.dataclass
class Layer:
    desc: dict
    data: np.ndarray
    want: np.ndarray
    cout: int


def make_layer(config, cin, h, w, cout, *, stride=1, pads=(0, 0, 0, 0), pool=False, batch=1,
               seed=0):
    """A random 3x3 layer, packed, and its reference output."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (batch, cin, h, w)).astype(np.int8)
    wt = rng.integers(-127, 128, (cout, cin, 3, 3)).astype(np.int8)
    bias = rng.integers(-5000, 5000, cout).astype(np.int32)
    x_zp, y_zp = (int(v) for v in rng.integers(-20, 20, 2))
    mult = rng.integers(1 << 14, 1 << 15, cout)
    # Outputs spread over the int8 range: the accumulators are ~ sqrt(9 cin) * 74 * 73.
    shift = np.full(cout, int(np.log2(np.sqrt(9 * cin) * 74 * 73 * (1 << 14) / 64)))
    desc, data = packing.pack_layer(config, x, wt, bias, x_zp, mult, shift, y_zp, stride=stride,
                                    pads=pads, pool=pool)
    want = conv2d(x, wt, bias, x_zp, mult, shift, y_zp, stride=(stride, stride), pads=pads)
    if pool:
        want = maxpool2d(want)
    assert len(np.unique(want)) > 1  # not all saturated
    return Layer(desc, data, want, cout)


def run(driver, layer, **kwargs):
    config = driver.config
    result = driver.run_layer(layer.desc, layer.data, packing.output_nbytes(config, layer.desc),
                              timeout=TIMEOUT, **kwargs)
    y = packing.unpack_output(config, result.output, layer.desc, layer.cout)
    assert_array_equal(y, layer.want)
    return result


IDLE = {"busy": 0, "done": 0, "error": 0, "pending": 0, "error_fields": 0}
IDLE_DONE = dict(IDLE, done=1)
REFUSED = dict(IDLE, error=1)


def _bits(*names):
    return sum(1 << i for i, f in enumerate(DESCRIPTOR_FIELDS) if f.name in names)


def _status(driver):
    return driver.regs.decode("status", driver.board.mmio_read(driver.regs.address("status")))


#: Layers at a limit of SMALL_ENGINE: (what, the field at its limit, its value, layer arguments).
AT_LIMIT = [
    ("widest row", "in_w", CONTRACT.widest_row(1), dict(cin=4, h=3, w=72, cout=4)),
    ("widest output", "out_w", CONTRACT.max_cols, dict(cin=4, h=2, w=72, cout=4,
                                                      pads=(1, 2, 1, 2))),
    ("most input tiles", "ci_tiles", CONTRACT.max_ci_tiles, dict(cin=64, h=4, w=3, cout=4)),
    ("most output tiles", "co_tiles", CONTRACT.max_co_tiles, dict(cin=16, h=4, w=6, cout=16)),
    ("largest stride", "stride", 3, dict(cin=4, h=7, w=8, cout=4, stride=3)),
    ("most padding", "pad_top", 2, dict(cin=4, h=5, w=5, cout=4, pads=(2, 2, 2, 2))),
    ("one row", "in_h", 1, dict(cin=4, h=1, w=5, cout=4, pads=(1, 1, 1, 1), batch=2)),
    ("smallest pool", "out_h", 2, dict(cin=4, h=4, w=4, cout=4, pool=True)),
    ("widest pooled row", "out_w", CONTRACT.widest_pooled_row(4),
     dict(cin=4, h=4, w=16, cout=16, pads=(1, 1, 1, 1), pool=True)),
    # weights in the buffer's last words (deep arrangement only, see below)
    ("weights at the buffer's end", "weight_base", CONTRACT.weights.words - 4,
     dict(cin=8, h=4, w=5, cout=8)),
]


@pytest.mark.parametrize("what,field,value,args", AT_LIMIT, ids=[a[0] for a in AT_LIMIT])
def test_layer_at_a_limit_runs_bit_exact(driver, what, field, value, args):
    layer = make_layer(driver.config, seed=len(what), **args)
    if field == "weight_base":
        if not driver.config.deep_pipeline:
            pytest.skip("the compact arrangement keeps no resident weights")
        layer.desc["weight_base"] = value
        assert value + layer.desc["co_tiles"] * layer.desc["ci_tiles"] == CONTRACT.weights.words
    assert layer.desc[field] == value
    assert descriptor_violations(driver.config, layer.desc) == []
    result = run(driver, layer, check=False)
    assert result.busy_cycles > 0
    assert _status(driver) == IDLE_DONE


def test_last_window_on_the_last_input_row_runs_bit_exact(driver):
    """Bottom padding beyond the kernel: the packing adds rows of x_zp up to the limit."""
    layer = make_layer(driver.config, cin=4, h=5, w=5, cout=4, pads=(1, 1, 3, 1), seed=9)
    d = layer.desc
    assert (d["out_h"] - 1) * d["stride"] - d["pad_top"] == d["in_h"] - 1
    assert descriptor_violations(driver.config, dict(d, out_h=d["out_h"] + 1))[0][0] == "out_h"
    run(driver, layer, check=False)
    assert _status(driver) == IDLE_DONE


def _base():
    return make_layer(SMALL_ENGINE, cin=4, h=5, w=6, cout=8, pads=(1, 1, 1, 1), seed=1)


#: Descriptors one over a limit: (what, changes to the base layer's descriptor, fields named).
OVER = [
    ("no rows", dict(in_h=0), ["in_h"]),
    ("no images", dict(batch=0), ["batch"]),
    ("no output rows", dict(out_h=0), ["out_h"]),
    ("row over max_cols", dict(in_w=CONTRACT.max_cols + 1), ["in_w"]),
    ("output over max_cols", dict(out_w=CONTRACT.max_cols + 1), ["out_w"]),
    ("too many input tiles", dict(ci_tiles=CONTRACT.max_ci_tiles + 1), ["ci_tiles"]),
    ("too many output tiles", dict(co_tiles=CONTRACT.max_co_tiles + 1), ["co_tiles"]),
    ("stride over kmax", dict(stride=4), ["stride"]),
    ("stride 0", dict(stride=0), ["stride"]),
    ("pad_top of kmax", dict(pad_top=3), ["pad_top"]),
    ("pad_left of kmax", dict(pad_left=3), ["pad_left"]),
    ("line-buffer overflow", dict(ci_tiles=1, in_w=CONTRACT.widest_row(1) + 1), ["in_w"]),
    ("weights overflow", dict(ci_tiles=5, co_tiles=4, in_w=6), ["co_tiles"]),
    ("pooled row overflow", dict(co_tiles=4, pool=1, out_w=CONTRACT.widest_pooled_row(4) + 1),
     ["out_w"]),
    ("window below the image", dict(out_h=7), ["out_h"]),
    ("pool of one column", dict(pool=1, out_w=1), ["pool"]),
    ("pool of one row", dict(pool=1, out_h=1), ["pool"]),
    ("two fields", dict(in_h=0, co_tiles=7), ["in_h", "co_tiles"]),
    ("16-bit width", dict(in_w=0xFFFF), ["in_w"]),
    # Resident weights (deep arrangement; on the compact one the registers are
    # constants 0, and only the driver sees a base): the base layer's 2 x 1
    # weight words from a base, one word past the buffer's end, and a base
    # past its last word.
    ("weights from a base past the end", dict(weight_base=CONTRACT.weights.words - 1),
     ["weight_base"]),
    ("weight_base out of range", dict(weight_base=CONTRACT.weights.words), ["weight_base"]),
    # A depthwise run pairs output tile t with input tile t: 1 input tile, 2 output.
    ("depthwise with other tile counts", dict(depthwise=1), ["depthwise"]),
    # A parameter buffer of one run's tiles: param_base is a constant 0 (resident
    # parameters: test_param_base_at_over_and_out_of_range).
    ("param_base without resident parameters", dict(param_base=1), ["param_base"]),
]


def _message(desc, fields):
    parts = []
    for name in fields:
        lo, hi = CONTRACT.ranges[name]
        v = desc[name]
        part = rf"{name} = {v} \(range {lo}\.\.{hi}\)"
        if lo <= v <= hi:
            part += ": .+"  # the capacity, from the contract
        parts.append(part)
    return (r"^layer 'bad': the engine refused the descriptor \(status\.error\): "
            + "; ".join(parts) + "$")


@pytest.mark.parametrize("what,changes,fields", OVER, ids=[o[0] for o in OVER])
def test_descriptor_over_a_limit_is_refused(driver, what, changes, fields):
    board = driver.board
    base = _base()
    bad = dict(base.desc, **changes)
    assert sorted(f for f, _ in descriptor_violations(driver.config, bad)) == sorted(fields)

    # The driver's own check refuses it without touching the engine.
    start = board.cycles
    with pytest.raises(MappingError, match=rf"^layer 'bad' does not fit the engine: {fields[0]}"):
        driver.run_layer(bad, base.data, 64, timeout=TIMEOUT, name="bad")
    assert board.cycles == start

    if "param_base" in changes:
        # A constant 0 on this engine: the engine never sees another value.
        assert driver.regs["desc_param_base"].access == "const"
        return
    if "window below" in what and not driver.config.deep_pipeline:
        pytest.skip("the compact arrangement leaves this rule to the driver")
    if ("weight" in what or "depthwise" in what) and not driver.config.deep_pipeline:
        # Its weight_base and depthwise are constants 0: the engine never sees
        # another value.
        assert driver.regs["desc_weight_base"].access == "const"
        assert driver.regs["desc_depthwise"].access == "const"
        return
    # The engine's: refused at start, nothing streamed, nothing hung.
    with pytest.raises(BackendError, match=_message(bad, fields)):
        driver.run_layer(bad, base.data, 64, timeout=TIMEOUT, name="bad", check=False)
    status = _status(driver)
    assert {**status, "error_fields": 0} == REFUSED
    assert sorted(_flagged(status["error_fields"])) == sorted(fields)
    assert board.cycles - start < 2000  # register accesses only

    # The next valid layer runs, bit-exact, and clears the error.
    run(driver, base)
    assert _status(driver) == IDLE_DONE


def _write_descriptor(driver, desc, *, last="ci_tiles"):
    names = [f.name for f in DESCRIPTOR_FIELDS if f.name != last] + [last]
    for name in names:
        if name not in desc or driver.regs[f"desc_{name}"].access == "const":
            continue
        driver.board.mmio_write(driver.regs.address(f"desc_{name}"),
                                driver.regs.encode(f"desc_{name}", desc[name]))


def _finished(driver):
    """``status`` once ``done`` rose (a few cycles after the last output beat)."""
    for _ in range(100):
        status = _status(driver)
        if status["done"]:
            return status
    return status


def _start_and_stream(driver, layer):
    board, config = driver.board, driver.config
    board.mmio_write(driver.regs.address("control"), driver.regs.encode("control", start=1))
    status = _status(driver)
    out = board.allocate(packing.output_nbytes(config, layer.desc))
    board.dma_recv(out)
    board.dma_send(layer.data)
    return status, out


@pytest.mark.parametrize("fits", [True, False], ids=["accepted", "refused"])
def test_start_right_after_writing_ci_tiles_waits_for_the_check(driver, fits):
    """ci_tiles = 1 written last: the division takes ``division_cycles``, longer than
    the start write; the start waits (status.pending) and is decided right."""
    board = driver.board
    layer = make_layer(driver.config, cin=4, h=3, w=20, cout=4, seed=3)
    desc = dict(layer.desc) if fits else dict(layer.desc, in_w=CONTRACT.widest_row(1) + 1)
    _write_descriptor(driver, desc, last="ci_tiles")
    status, out = _start_and_stream(driver, layer)
    assert status == dict(IDLE, busy=1, pending=1)
    if fits:
        assert board.dma_wait(TIMEOUT)
        assert_array_equal(packing.unpack_output(driver.config, out, layer.desc, 4), layer.want)
        assert _finished(driver) == IDLE_DONE
    else:
        assert not board.dma_wait(1e-5)  # the engine takes no input
        assert _status(driver) == dict(REFUSED, error_fields=_bits("in_w"))
        board.dma_abort()
        run(driver, layer)


def test_descriptor_written_during_a_run_is_ignored_and_refuses_the_next_start(driver):
    board, regs = driver.board, driver.regs
    layer = make_layer(driver.config, cin=8, h=6, w=12, cout=8, seed=4)
    _write_descriptor(driver, layer.desc)
    status, out = _start_and_stream(driver, layer)
    while status["pending"]:
        status = _status(driver)
    assert status == dict(IDLE, busy=1)
    # Mid-run: the write is ignored, the run goes on with its own descriptor.
    board.mmio_write(regs.address("desc_out_w"), 3)
    assert board.mmio_read(regs.address("desc_out_w")) == layer.desc["out_w"]
    assert board.dma_wait(TIMEOUT)
    assert_array_equal(packing.unpack_output(driver.config, out, layer.desc, 8), layer.want)
    assert _finished(driver)["done"] == 1
    # The next start is refused (the host meant another descriptor), with no
    # field to blame. The driver's own check passes, so it learns of the
    # refusal when no output comes, and says so rather than time out.
    with pytest.raises(BackendError, match=r"^layer 'again': the engine refused the descriptor "
                                           r"\(status\.error\): descriptor registers were written "
                                           r"while the engine was busy \(those writes were "
                                           r"ignored\): write the descriptor again$"):
        driver.run_layer(layer.desc, layer.data, packing.output_nbytes(driver.config, layer.desc),
                         timeout=1e-4, name="again")
    # That refusal was the last: the same layer runs.
    run(driver, layer)


def test_descriptor_written_while_a_start_is_pending_refuses_it(driver):
    """The division after the ci_tiles write lasts ``division_cycles`` (7 or 8 on
    these engines): the in_h write right behind the start lands inside it."""
    board, regs = driver.board, driver.regs
    layer = make_layer(driver.config, cin=4, h=3, w=9, cout=4, seed=5)
    _write_descriptor(driver, layer.desc, last="ci_tiles")
    board.mmio_write(regs.address("control"), regs.encode("control", start=1))
    board.mmio_write(regs.address("desc_in_h"), 2)  # ignored
    out = board.allocate(packing.output_nbytes(driver.config, layer.desc))
    board.dma_recv(out)
    board.dma_send(layer.data)
    assert not board.dma_wait(1e-5)
    assert _status(driver) == REFUSED  # no field to blame
    board.dma_abort()
    run(driver, layer)


def test_soft_reset_clears_the_error(driver):
    base = _base()
    with pytest.raises(BackendError):
        driver.run_layer(dict(base.desc, batch=0), base.data, 64, timeout=TIMEOUT, check=False)
    assert _status(driver) == dict(REFUSED, error_fields=_bits("batch"))
    driver.soft_reset()
    assert _status(driver) == IDLE
    run(driver, base)


# -- resident parameters: param_base at, over and out of its range, on the RTL ----

@pytest.fixture(scope="module")
def deep_params_driver(program_boards):
    """The driver of DEEP_PARAMS_ENGINE's board (6 parameter words, 4 output tiles a run)."""
    return EngineDriver(program_boards(DEEP_PARAMS_ENGINE))


def test_param_base_at_over_and_out_of_range(deep_params_driver):
    """A run's 4 output tiles' records at the buffer's last words (param_base 2 of
    6) load there and are read from there, bit-exact; a base one word further
    (their end past the buffer) and one out of range (6) are refused by the
    driver and by the engine, on field param_base; the next valid run is
    bit-exact. On an engine whose buffer holds one run's tiles param_base is a
    constant 0."""
    driver = deep_params_driver
    c = engine_contract(DEEP_PARAMS_ENGINE)
    assert c.resident_params and c.ranges["param_base"] == (0, 5)
    assert driver.regs["desc_param_base"].access == "rw"
    assert build_regmap(SMALL_ENGINE)["desc_param_base"].access == "const"
    layer = make_layer(DEEP_PARAMS_ENGINE, cin=8, h=4, w=5, cout=16, seed=21)
    co = layer.desc["co_tiles"]
    assert co == c.max_co_tiles == 4
    at = dict(layer.desc, param_base=c.params.words - co)
    assert descriptor_violations(DEEP_PARAMS_ENGINE, at) == []
    run(driver, dataclasses.replace(layer, desc=at))
    assert _status(driver) == IDLE_DONE
    for base in (c.params.words - co + 1, c.params.words):
        bad = dict(layer.desc, param_base=base)
        assert [f for f, _ in descriptor_violations(DEEP_PARAMS_ENGINE, bad)] == ["param_base"]
        with pytest.raises(MappingError, match=r"^layer 'bad' does not fit the engine: param_base"):
            driver.run_layer(bad, layer.data, 64, timeout=TIMEOUT, name="bad")
        lo, hi = c.ranges["param_base"]
        reason = r": .+" if base <= hi else ""
        with pytest.raises(BackendError, match=rf"^layer 'bad': the engine refused the descriptor "
                                               rf"\(status\.error\): param_base = {base} "
                                               rf"\(range {lo}\.\.{hi}\){reason}$"):
            driver.run_layer(bad, layer.data, 64, timeout=TIMEOUT, name="bad", check=False)
        status = _status(driver)
        assert {**status, "error_fields": 0} == REFUSED
        assert _flagged(status["error_fields"]) == {"param_base"}
    # The records at word 2 stay: the same layer without them (no constants at
    # all, the weights resident too) from there, bit-exact.
    warm = dict(at, load_weights=0, load_params=0)
    pixels = layer.data[len(layer.data) - c.input_nbytes(warm):]
    run(driver, dataclasses.replace(layer, desc=warm, data=pixels))
    assert _status(driver) == IDLE_DONE
