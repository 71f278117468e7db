import dataclasses

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from amaranth.sim import Simulator

from fpgacnn.core.config import EngineConfig
from fpgacnn.core.contract import engine_contract
from fpgacnn.core.descriptor import descriptor_layout
from fpgacnn.hdl.datapath.line_buffer import LineBuffer

from arrangement_helpers import ARRANGEMENTS, arranged

CFG = EngineConfig(pin=2, pout=2, kmax=3, stream_width=32, max_width=12, max_channels=6,
                   max_out_channels=4)


def make_desc(**kw):
    d = dict(in_h=1, in_w=1, ci_tiles=1, co_tiles=1, out_h=1, out_w=1, stride=1, pad_top=0,
             pad_left=0, batch=1, x_zp=0, y_zp=0, clamp_lo=-128, clamp_hi=127, pool=0,
             load_weights=1)
    d.update(kw)
    return d


def expected_windows(cfg, desc, x):
    """Windows in schedule order: (n, oy, ox, co, ci) -> kmax*kmax*pin int8."""
    k, pin, s = cfg.kmax, cfg.pin, desc["stride"]
    out = []
    for img in x:
        for oy in range(desc["out_h"]):
            for ox in range(desc["out_w"]):
                for co in range(desc["co_tiles"]):
                    for ci in range(desc["ci_tiles"]):
                        win = np.full((k, k, pin), desc["x_zp"], np.int8)
                        for ky in range(k):
                            for kx in range(k):
                                y = oy * s - desc["pad_top"] + ky
                                xx = ox * s - desc["pad_left"] + kx
                                if 0 <= y < desc["in_h"] and 0 <= xx < desc["in_w"]:
                                    win[ky, kx] = img[ci * pin:(ci + 1) * pin, y, xx]
                        out.append(win.ravel())
    return np.array(out)


def pixel_words(cfg, x):
    """NHWC pin-byte words as integers (byte p = channel ci*pin + p)."""
    n, c, h, w = x.shape
    b = x.transpose(0, 2, 3, 1).reshape(-1, cfg.pin).view(np.uint8).astype(np.int64)
    return (b << (8 * np.arange(cfg.pin))).sum(axis=1)


def run_line_buffer(cfg, desc, x, *, seed=0, in_pause=0.0, en_pause=0.0):
    dut = LineBuffer(cfg)
    words = pixel_words(cfg, x)
    expect = expected_windows(cfg, desc, x)
    # With one spare bank, the window one column on: as if padded one column less;
    # with more, the window a stride on (where the stride is at most the spare banks:
    # a pair's second; past them o_window_next is not read and not compared).
    step = desc["stride"] if cfg.spare_bank > 1 else 1
    expect_next = (expected_windows(cfg, dict(desc, pad_left=desc["pad_left"] - step), x)
                   if cfg.spare_bank and step <= cfg.spare_bank else None)
    rng = np.random.default_rng(seed)
    got, got_next = [], []
    issues = []

    async def writer(ctx):
        ctx.set(dut.desc, descriptor_layout().const(desc))
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        for word in words:
            while rng.random() < in_pause:
                ctx.set(dut.w_stream.valid, 0)
                await ctx.tick()
            ctx.set(dut.w_stream.valid, 1)
            ctx.set(dut.w_stream.payload, int(word))
            await ctx.tick().until(dut.w_stream.ready)
        ctx.set(dut.w_stream.valid, 0)

    async def reader(ctx):
        await ctx.tick()
        cycles = 0
        while len(got) < len(expect):
            ctx.set(dut.en, int(rng.random() >= en_pause))
            # o_window again where the engine has no spare bank (compared with nothing)
            following = dut.o_window_next if cfg.spare_bank else dut.o_window
            _, _, valid, window, issue, window_next = await ctx.tick().sample(
                dut.o_valid, dut.o_window, dut.issue, following)
            cycles += 1
            issues.append(issue)
            if valid:
                got.append([int(v) for v in window])
                got_next.append([int(v) for v in window_next])
            assert cycles < 20000, "line buffer hung"
        assert ctx.get(dut.r_done)
        for _ in range(200):  # unused trailing rows may still be arriving
            if ctx.get(dut.w_done):
                break
            await ctx.tick()
        assert ctx.get(dut.w_done)

    sim = Simulator(dut)
    now_ready, now_can_write = dut._now  # the direct compares, built by the elaboration
    mismatches = []

    collisions = []
    # A window's memories are read the cycle of its issue, or the cycle
    # after with deep_pipeline (the read address is registered); a write
    # presented to a memory lands write_latency cycles later (the memory's
    # own figure: what the hardware does, not what this test expects).
    read_lag = 1 if cfg.deep_pipeline else 0

    async def lookahead_check(ctx):
        # `ready` and the writer's `ready` are registered a cycle ahead on
        # ECP5: they must equal the direct compares on every cycle.
        reading = [set()] * (read_lag + 1)  # slots of the windows issued, by cycle
        write_lag = dut._banks[0][0].write_latency
        writes = [{}] * (write_lag + 1)  # (slot, bank) -> address presented, by cycle
        async for _ in ctx.tick():
            got_now = (ctx.get(dut.ready), ctx.get(dut.w_stream.ready))
            want = (ctx.get(now_ready), ctx.get(now_can_write))
            if got_now != want:
                mismatches.append((got_now, want))
            # No window's read meets a write of the same word in a row it
            # uses (hdl/datapath/line_buffer.py's writer comment: what such a read
            # returns is left to the block RAM's read-during-write mode).
            slots = {ctx.get(s) for s, inside in dut._window_rows if ctx.get(inside)}
            reading = [slots if ctx.get(dut.issue) else set()] + reading[:-1]
            writes = [{(r, b): ctx.get(bank.w_addr) for r, row in enumerate(dut._banks)
                       for b, bank in enumerate(row) if ctx.get(bank.w_en)}] + writes[:-1]
            for r in reading[read_lag]:
                for b, bank in enumerate(dut._banks[r]):
                    if writes[write_lag].get((r, b)) == ctx.get(bank.r_addr):
                        collisions.append((r, b, ctx.get(bank.r_addr)))

    sim.add_clock(1e-8)
    sim.add_testbench(writer)
    sim.add_testbench(reader)
    sim.add_testbench(lookahead_check, background=True)
    sim.run()
    assert not mismatches, mismatches[:5]
    assert not collisions, collisions[:5]
    assert_array_equal(np.array(got, np.int8), expect)
    if expect_next is not None:
        assert_array_equal(np.array(got_next, np.int8), expect_next)
    return issues


def random_case(rng, *, stride=None, pads=None, batch=None):
    k = CFG.kmax
    s = stride or int(rng.integers(1, k + 1))
    pt, pl = pads if pads is not None else (int(v) for v in rng.integers(0, k, 2))
    h, w = (int(v) for v in rng.integers(1, 7, 2))
    ci_tiles = int(rng.integers(1, 4))
    out_h = max(1, (h + pt + int(rng.integers(0, k)) - k) // s + 1)
    out_w = max(1, (w + pl + int(rng.integers(0, k)) - k) // s + 1)
    n = batch or int(rng.integers(1, 4))
    desc = make_desc(in_h=h, in_w=w, ci_tiles=ci_tiles, co_tiles=int(rng.integers(1, 3)),
                     out_h=out_h, out_w=out_w, stride=s, pad_top=pt, pad_left=pl, batch=n,
                     x_zp=int(rng.integers(-128, 128)))
    x = rng.integers(-128, 128, (n, ci_tiles * CFG.pin, h, w), dtype=np.int8)
    return desc, x


@pytest.mark.parametrize("arrangement", ARRANGEMENTS)
@pytest.mark.parametrize("seed", range(6))
def test_random_windows(seed, arrangement):
    rng = np.random.default_rng(seed)
    desc, x = random_case(rng)
    run_line_buffer(arranged(CFG, arrangement), desc, x, seed=seed, in_pause=0.3 * (seed % 2), en_pause=0.3 * (seed % 3 == 1))


@pytest.mark.parametrize("arrangement", ARRANGEMENTS)
def test_slot_reuse_with_a_slow_reader(arrangement):
    # The writer runs far ahead; every slot is reused several times within an image.
    rng = np.random.default_rng(10)
    desc = make_desc(in_h=9, in_w=4, ci_tiles=1, co_tiles=1, out_h=9, out_w=4, stride=1,
                     pad_top=1, pad_left=1, batch=2, x_zp=5)
    x = rng.integers(-128, 128, (2, CFG.pin, 9, 4), dtype=np.int8)
    run_line_buffer(arranged(CFG, arrangement), desc, x, en_pause=0.8)


@pytest.mark.parametrize("stride", [2, 3])
def test_strides_skip_dropped_windows(stride):
    rng = np.random.default_rng(stride)
    desc, x = random_case(rng, stride=stride, pads=(0, 1), batch=2)
    run_line_buffer(CFG, desc, x)


def test_full_rate_once_rows_are_present():
    # 3x3 stride 1, ci_tiles*co_tiles = 4 cycles per pixel: the writer (1 word per
    # pixel per tile) keeps ahead, so after the first rows one window issues per cycle.
    rng = np.random.default_rng(7)
    desc = make_desc(in_h=6, in_w=5, ci_tiles=2, co_tiles=2, out_h=6, out_w=5, stride=1,
                     pad_top=1, pad_left=1, batch=2)
    x = rng.integers(-128, 128, (2, 2 * CFG.pin, 6, 5), dtype=np.int8)
    issues = run_line_buffer(CFG, desc, x)
    first = issues.index(1)
    last = len(issues) - 1 - issues[::-1].index(1)
    windows = 2 * 6 * 5 * 4
    # the second image's first rows are written while the first image finishes
    assert last - first + 1 == windows


@pytest.mark.parametrize("arrangement", ARRANGEMENTS)
@pytest.mark.parametrize("in_h, pad_top", [(1, 1), (2, 0), (5, 2)])
def test_one_window_images_back_to_back(in_h, pad_top, arrangement):
    # Every window ends an image: the next image's slots (kept a step ahead)
    # are taken on consecutive cycles, with in_h mod row_slots != 0.
    rng = np.random.default_rng(in_h)
    n = 2 * engine_contract(CFG).row_slots + 1
    desc = make_desc(in_h=in_h, in_w=1, out_h=1, out_w=1, pad_top=pad_top, pad_left=1,
                     batch=n, x_zp=-3)
    x = rng.integers(-128, 128, (n, CFG.pin, in_h, 1), dtype=np.int8)
    run_line_buffer(arranged(CFG, arrangement), desc, x)


@pytest.mark.parametrize("arrangement", ARRANGEMENTS)
@pytest.mark.parametrize("stride", [1, 2])
def test_one_window_rows_back_to_back(stride, arrangement):
    # Every window ends an output row: the next row's bounds (kept a row
    # ahead) are taken on consecutive cycles once the writer is ahead.
    rng = np.random.default_rng(stride)
    in_h = 11
    out_h = (in_h + 2 - CFG.kmax) // stride + 1
    desc = make_desc(in_h=in_h, in_w=1, out_h=out_h, out_w=1, stride=stride, pad_top=1,
                     pad_left=1, batch=3, x_zp=7)
    x = rng.integers(-128, 128, (3, CFG.pin, in_h, 1), dtype=np.int8)
    run_line_buffer(arranged(CFG, arrangement), desc, x, en_pause=0.0)


#: Banks of 1,368 words of 16 bits: two block RAMs deep, so the deep
#: arrangement registers the part select too (a stage longer).
WIDE = EngineConfig(pin=2, pout=2, kmax=3, stream_width=32, max_width=1024, max_channels=8,
                    max_out_channels=8)


@pytest.mark.parametrize("arrangement", ARRANGEMENTS)
def test_banks_two_block_rams_deep(arrangement):
    cfg = arranged(WIDE, arrangement)
    lb = LineBuffer(cfg)
    lb._MustUse__used = True  # built only to ask
    assert lb.latency == (6 if cfg.deep_pipeline else 2)
    # Rows of 1,000 columns at 4 tiles: bank words up to 1,335, beyond the
    # first block RAM (1,024 words) of each bank.
    rng = np.random.default_rng(11)
    desc = make_desc(in_h=2, in_w=1000, ci_tiles=4, co_tiles=1, out_h=2, out_w=1000, stride=1,
                     pad_top=1, pad_left=1, batch=1, x_zp=3)
    x = rng.integers(-128, 128, (1, 4 * cfg.pin, 2, 1000), dtype=np.int8)
    run_line_buffer(cfg, desc, x)


@pytest.mark.parametrize("arrangement", ARRANGEMENTS)
@pytest.mark.parametrize("writer_words", [1, 2])
@pytest.mark.parametrize("seed", range(4))
def test_spare_bank_random_windows(seed, writer_words, arrangement):
    """``spare_bank = 1``: rows in ``kmax + 1`` column banks, the same windows (strides
    1..kmax, pads, batches, pauses), one layer's rows filling a bank to its last word;
    beside each window the one a column on (``o_window_next``, checked in
    :func:`run_line_buffer`)."""
    cfg = arranged(dataclasses.replace(CFG, spare_bank=1, writer_words=writer_words),
                   arrangement)
    c = engine_contract(cfg)
    assert cfg.column_banks == 4 and c.line_buffer.banks == c.row_slots * 4
    rng = np.random.default_rng(100 + seed)
    desc, x = random_case(rng)
    run_line_buffer(cfg, desc, x, seed=seed, in_pause=0.3 * (seed % 2),
                    en_pause=0.3 * (seed % 3 == 1))
    # A row as wide as the banks hold at 3 tiles (their last word), stride 1 and 3.
    run_widest_row(cfg, rng, 1 + 2 * (seed % 2), seed=seed)


def run_widest_row(cfg, rng, stride, *, seed):
    """A layer of 3 input tiles whose rows fill the banks to their last word (one pixel
    more would not fit), at ``stride``, padded, two images, with input pauses."""
    c = engine_contract(cfg)
    ci_tiles, s = 3, stride
    w = c.widest_row(ci_tiles)
    assert c.line_words(w, ci_tiles) == c.line_buffer.words < c.line_words(w + 1, ci_tiles)
    assert w >= CFG.max_width
    h = 4
    desc = make_desc(in_h=h, in_w=w, ci_tiles=ci_tiles, co_tiles=1, out_h=(h + 1 - 3) // s + 1,
                     out_w=(w + 1 - 3) // s + 1, stride=s, pad_top=1, pad_left=1, batch=2,
                     x_zp=-9)
    x = rng.integers(-128, 128, (2, ci_tiles * cfg.pin, h, w), dtype=np.int8)
    run_line_buffer(cfg, desc, x, seed=seed, in_pause=0.2)


@pytest.mark.parametrize("seed, arrangement", [(0, "deep"), (1, "deep"), (0, "compact")])
@pytest.mark.parametrize("spare", [2, 3])
def test_more_spare_banks_random_windows(seed, spare, arrangement):
    """``spare_bank`` 2 and 3 (``kmax``): rows in ``kmax + spare_bank`` column banks, the
    same windows; beside each the window a stride on (``o_window_next``: the second of a
    pixel pair at that stride), at every stride up to the spare banks, pads, batches,
    pauses, the pair writer; and a row as wide as the banks hold. (Pixel pairs need the
    deep arrangement: the compact one once, for the configuration's sake.)"""
    cfg = arranged(dataclasses.replace(CFG, spare_bank=spare, writer_words=2), arrangement)
    c = engine_contract(cfg)
    assert cfg.column_banks == 3 + spare and c.line_buffer.banks == c.row_slots * (3 + spare)
    rng = np.random.default_rng(200 + 10 * spare + seed)
    for stride in range(1, spare + 1):
        desc, x = random_case(rng, stride=stride)
        run_line_buffer(cfg, desc, x, seed=seed, in_pause=0.3 * (seed % 2),
                        en_pause=0.3 * (seed % 3 == 1))
    run_widest_row(cfg, rng, spare, seed=seed)
