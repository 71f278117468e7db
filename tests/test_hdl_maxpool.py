"""MaxPool2x2 in the Amaranth simulator, bit-exact against fpgacnn.host.integer_ops.maxpool2d."""

import gc

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from amaranth.sim import Simulator

from fpgacnn.core.config import EngineConfig
from fpgacnn.hdl.datapath.maxpool import MaxPool2x2
from fpgacnn.host.integer_ops import maxpool2d

from arrangement_helpers import ARRANGEMENTS, arranged
from hdl_pack_helpers import pack, unpack

POUT = 2
CFG = EngineConfig(pout=POUT, max_width=10, max_out_channels=3 * POUT, stream_width=32)


def _words(img, co_tiles):
    """An image (C, H, W) as stream words in (y, x, co) order: shape (H*W*co_tiles, pout)."""
    c, h, w = img.shape
    assert c == co_tiles * POUT
    return img.reshape(co_tiles, POUT, h, w).transpose(2, 3, 0, 1).reshape(-1, POUT)


def _simulate(images, co_tiles, *, gap_prob=0.3, seed=0, clear_with_first_word=False,
              cfg=CFG, latency=None):
    """Stream images (each (C, H, W) int8) with a clear before each; return words per image."""
    dut = MaxPool2x2(cfg)
    assert latency is None or dut.latency == latency
    rng = np.random.default_rng(seed)
    out = []  # (image index, word)
    current = [0]
    last_in = []  # cycle of each window's last input word
    out_cycles = []

    async def testbench(ctx):
        cycle = 0

        async def tick():
            nonlocal cycle
            if ctx.get(dut.o_valid):
                out.append((current[0], unpack(ctx.get(dut.o_data.as_value()), 8, POUT)))
                out_cycles.append(cycle)
            await ctx.tick()
            cycle += 1

        ctx.set(dut.co_tiles, co_tiles)
        for n, img in enumerate(images):
            _, h, w = img.shape
            ctx.set(dut.out_w, w)
            words = _words(img, co_tiles)
            # Let the previous image drain: its results belong to it.
            for _ in range(dut.latency):
                await tick()
            current[0] = n
            if not clear_with_first_word:
                ctx.set(dut.clear, 1)
                await tick()
                ctx.set(dut.clear, 0)
            for i, wd in enumerate(words):
                while rng.random() < gap_prob:
                    ctx.set(dut.i_valid, 0)
                    ctx.set(dut.i_data.as_value(), pack(rng.integers(-128, 128, POUT), 8))
                    await tick()
                y, rest = divmod(i, w * co_tiles)
                x = rest // co_tiles
                if y % 2 and x % 2 and x < w - w % 2:
                    last_in.append(cycle)
                ctx.set(dut.clear, int(clear_with_first_word and i == 0))
                ctx.set(dut.i_valid, 1)
                ctx.set(dut.i_data.as_value(), pack(wd, 8))
                await tick()
                ctx.set(dut.clear, 0)
            ctx.set(dut.i_valid, 0)
        for _ in range(dut.latency + 1):
            await tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(testbench)
    sim.run()
    assert [c - i for c, i in zip(out_cycles, last_in)] == [dut.latency] * len(last_in)
    return [np.array([wd for k, wd in out if k == n], dtype=np.int64).reshape(-1, POUT)
            for n in range(len(images))]


def _reference(img, co_tiles):
    if min(img.shape[1:]) < 2:  # maxpool2d's sliding window refuses images smaller than 2x2
        return np.zeros((0, POUT), dtype=np.int64)
    pooled = maxpool2d(img[None])[0]
    return _words(pooled, co_tiles).astype(np.int64)


@pytest.mark.parametrize("co_tiles, h, w", [
    (1, 4, 6), (1, 5, 7), (2, 6, 5), (2, 3, 4), (3, 5, 6), (3, 4, 3), (1, 4, 10), (3, 2, 10),
])
@pytest.mark.parametrize("arrangement", ARRANGEMENTS)
def test_maxpool_matches_reference(co_tiles, h, w, arrangement):
    rng = np.random.default_rng(100 * co_tiles + 10 * h + w)
    img = rng.integers(-128, 128, size=(co_tiles * POUT, h, w), dtype=np.int64).astype(np.int8)
    img[0, 0, 0] = -128  # a window whose max is -128
    img[0, 0, 1] = img[0, 1, 0] = img[0, 1, 1] = -128
    (got,) = _simulate([img], co_tiles, seed=h * w, cfg=arranged(CFG, arrangement))
    assert_array_equal(got, _reference(img, co_tiles))


@pytest.mark.parametrize("co_tiles", [1, 2])
@pytest.mark.parametrize("arrangement", ARRANGEMENTS)
def test_maxpool_back_to_back_words_without_gaps(co_tiles, arrangement):
    # co_tiles = 1 and no gaps: every pair of columns hits the same entry on consecutive cycles.
    rng = np.random.default_rng(co_tiles)
    img = rng.integers(-128, 128, size=(co_tiles * POUT, 6, 8), dtype=np.int64).astype(np.int8)
    (got,) = _simulate([img], co_tiles, gap_prob=0.0, cfg=arranged(CFG, arrangement))
    assert_array_equal(got, _reference(img, co_tiles))


#: A row memory of 1,280 words: two block RAMs deep, so the part select is
#: registered and the read-modify-write is a stage longer.
DEEP = EngineConfig(pout=POUT, max_width=64, max_out_channels=40 * POUT, stream_width=32)


@pytest.mark.parametrize("co_tiles, w, gap_prob", [
    (1, 2, 0.0), (1, 3, 0.0), (2, 2, 0.0), (1, 8, 0.0), (2, 8, 0.0), (3, 9, 0.0), (4, 8, 0.0),
    (5, 6, 0.0), (40, 64, 0.1),
])
@pytest.mark.parametrize("arrangement", ARRANGEMENTS)
def test_maxpool_with_a_deep_row_memory(co_tiles, w, gap_prob, arrangement):
    # Entries 1 to 4 words apart meet the forwarding at every distance (two
    # columns: four words in a row on one entry, the newest must win); 40
    # tiles of 64 columns use both block RAMs.
    rng = np.random.default_rng(co_tiles * w)
    img = rng.integers(-128, 128, size=(co_tiles * POUT, 4, w), dtype=np.int64).astype(np.int8)
    (got,) = _simulate([img], co_tiles, gap_prob=gap_prob, cfg=arranged(DEEP, arrangement),
                       latency=5 if arrangement == "deep" else 2)
    assert_array_equal(got, _reference(img, co_tiles))


@pytest.mark.parametrize("clear_with_first_word", [False, True])
def test_maxpool_images_back_to_back_with_clear(clear_with_first_word):
    rng = np.random.default_rng(5)
    # The first image has an odd height: its last row is left half-done in the
    # row memory and must not leak into the second image.
    images = [rng.integers(-128, 128, size=(2 * POUT, h, w), dtype=np.int64).astype(np.int8)
              for h, w in [(5, 6), (4, 7), (1, 4), (4, 4)]]
    got = _simulate(images, 2, gap_prob=0.2, clear_with_first_word=clear_with_first_word)
    for g, img in zip(got, images):
        assert_array_equal(g, _reference(img, 2))
    assert len(got[2]) == 0  # one row: nothing to pool


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_maxpool_rejects_bad_config():
    with pytest.raises(TypeError, match=r"^config must be an EngineConfig, not 3$"):
        MaxPool2x2(3)
    gc.collect()  # the half-built component warns when collected: do it under the filter


def test_maxpool_converts_to_verilog():
    from amaranth.back import verilog
    text = verilog.convert(MaxPool2x2(CFG), name="maxpool")
    for port in ("input clear;", "input [15:0] out_w;", "input [15:0] co_tiles;",
                 "input [15:0] i_data;", "output [15:0] o_data;"):
        assert port in text
