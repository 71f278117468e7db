"""The fused block's PairBuffer in the Amaranth simulator: the 1x1 remap's windows, bit-exact.

Step 2 of docs/engine.md's "The fused depthwise + pointwise block". A
depthwise layer's int8 output (:func:`~fpgacnn.host.integer_ops.conv2d`) is
written into the buffer a word of ``pin`` channels of two pixels a cycle;
the reader takes each full slot, oldest first, as the main array would,
``for co: for ci`` windows, then releases it. Every window's taps of real
channels are the remap's (:func:`fpgacnn.host.packing.pack_pixels`' layout), and the windows
times the remapped pointwise weight words of
:func:`~fpgacnn.host.packing.pack_weights` (the array's tap order), plus the
folded bias, are :func:`~fpgacnn.host.integer_ops.conv_acc` of the pointwise
layer on that output: stale taps past the channels meet weight 0. Random
writer gaps and reader pauses, so the slots fill, wait and are read in
every order; a reader that starts late, so the writer runs every slot
ahead and waits; channel counts at, under and over ``max_channels``; slot
counts of 2, 4 and 8, and fewer where a position's memory would outgrow
a LUT RAM.
"""

import gc
import math

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from amaranth.sim import Simulator

from fpgacnn.boards.board import load_board
from fpgacnn.boards.engine_sizing import size_engine
from fpgacnn.core.config import ConfigError, EngineConfig
from fpgacnn.core.contract import PARAM_RECORD_FIELDS, engine_contract
from fpgacnn.core.errors import MappingError
from fpgacnn.core import fused_block
from fpgacnn.core.fused_block import (LUT_RAM_WORDS, PAIR_BUFFER_SLOTS, pair_buffer_run,
                                      pair_buffer_shape)
from fpgacnn.hdl.datapath.pair_buffer import PairBuffer
from fpgacnn.host import integer_ops
from fpgacnn.host.packing import pack_weights, remap_group

from hdl_pack_helpers import pack, unpack

BOARDS = ("pynq-z2", "kv260", "k2")


#: A 2x2 engine of pin 2 beside them: another window, another remap.
SMALL_K2 = EngineConfig(pin=2, pout=2, kmax=2, stream_width=32, max_width=16, max_channels=20,
                        max_out_channels=16, spare_bank=2, pixel_pairs=1)


def sized(board):
    """The engine of ``board``, or :data:`SMALL_K2` for ``"k2"``."""
    return SMALL_K2 if board == "k2" else size_engine(load_board(board)).config


def pointwise_words(config, w, bias, x_zp):
    """The remapped (``kmax`` block) pointwise run's folded biases and weight words
    ``[co][ci][lane][tap]`` as :func:`pack_weights` streams them."""
    cout, cin = w.shape[:2]
    raw = pack_weights(config, w, bias, x_zp, np.full(cout, 1 << 23), np.full(cout, 30),
                       remap=True)
    con, b = engine_contract(config), config.stream_bytes
    co_tiles = math.ceil(cout / config.pout)
    ci_tiles = remap_group(config, cin) // config.pin
    rec_bytes, word_bytes = con.param_beats * b, con.weight_beats * b
    records = raw[:co_tiles * rec_bytes].reshape(co_tiles, rec_bytes)[:, :8 * config.pout]
    _, offset, size, _ = next(f for f in PARAM_RECORD_FIELDS if f[0] == "bias")
    folded = records.reshape(-1, 8)[:cout, offset:offset + size].copy().view("<i4").ravel()
    taps = config.kmax ** 2 * config.pin
    words = raw[co_tiles * rec_bytes:].reshape(co_tiles * ci_tiles, word_bytes)
    words = words[:, :config.pout * taps].view(np.int8).astype(np.int64)
    return folded.astype(np.int64), words.reshape(co_tiles, ci_tiles, config.pout, taps)


def simulate(config, pairs, tiles, group, co_tiles, *, slots, width, height, seed, gaps, pauses,
             reader_from=0):
    """Write ``pairs`` (each ``[tiles][2][pin]`` int8 words, the window pairs of images of
    ``height`` rows of ``width`` pixels) and read each of ``slots`` slots ``co_tiles`` times
    over, the reader idle before cycle ``reader_from``; return the windows read, ``[slot][co]
    [ci] -> (window, window_next)``, the slots' flags ``[slot] -> (q_second, q_last)``, and
    the trace: the cycles the writer was held (a slot full) and the reader waited (none
    full), the cycle each word was taken in (``"taken"``) and each slot released in
    (``"released"``)."""
    dut = PairBuffer(config)
    rng = np.random.default_rng(seed)
    taps = config.kmax ** 2 * config.pin
    nslots = slots
    reads = [(co, ci) for co in range(co_tiles) for ci in range(group)]
    got = [[[None] * group for _ in range(co_tiles)] for _ in range(nslots)]
    flags = [None] * nslots
    words = [word for pair in pairs for word in pair]
    held = {"writer": 0, "reader": 0, "taken": [], "released": []}
    ring = pair_buffer_shape(config).slots

    async def testbench(ctx):
        ctx.set(dut.tiles, tiles)
        ctx.set(dut.group, group)
        ctx.set(dut.width, width)
        ctx.set(dut.height, height)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        w, valid = 0, False      # the writer: next word, and whether it is offered
        slot, r = 0, 0           # the reader: the slot it is at, its next read
        cycle = 0
        while slot < nslots:
            awake = cycle >= reader_from
            if not valid and w < len(words) and rng.random() >= gaps:
                ctx.set(dut.w_stream.payload.as_value(), pack(words[w], 8))
                valid = True
            ctx.set(dut.w_stream.valid, valid)
            ctx.set(dut.q_slot, slot % ring)
            took = valid and ctx.get(dut.w_stream.ready)
            held["writer"] += valid and not took
            held["reader"] += not ctx.get(dut.r_ready)
            if ctx.get(dut.r_ready):
                flags[slot] = (ctx.get(dut.q_second), ctx.get(dut.q_last))
            read = release = False
            if awake and ctx.get(dut.r_ready) and r < len(reads) and rng.random() >= pauses:
                read = True
                ctx.set(dut.r_ci, reads[r][1])
                release = r == len(reads) - 1 and rng.random() < 0.5
            elif awake and ctx.get(dut.r_ready) and r == len(reads) and rng.random() >= pauses:
                release = True
            ctx.set(dut.r_en, read)
            ctx.set(dut.r_release, release)
            await ctx.tick()
            cycle += 1
            if read:
                assert ctx.get(dut.o_valid)
                co, ci = reads[r]
                got[slot][co][ci] = (unpack(ctx.get(dut.o_window.as_value()), 8, taps),
                                     unpack(ctx.get(dut.o_window_next.as_value()), 8, taps))
                r += 1
            else:
                assert not ctx.get(dut.o_valid)
            if release:
                slot, r = slot + 1, 0
                held["released"].append(cycle - 1)
            if took:
                w, valid = w + 1, False
                held["taken"].append(cycle - 1)
            assert cycle < 20 * (len(words) + nslots * len(reads)) + reader_from + 100, \
                "stuck"
        # every word of the pairs went in (no pair left unwritten)
        assert w == len(words)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(testbench)
    sim.run()
    return got, flags, held


def check_block(config, channels, *, seed, cout=None, width=5, height=1, images=1, gaps=0.3,
                pauses=0.3, reader_from=0):
    """A depthwise output of ``channels``, ``images`` of ``height`` rows of ``width`` pixels,
    through the buffer as the line buffer's window pairs (an odd row ends on a single
    pixel); each slot's two pixels the image's raster order's (an image's odd last pixel
    alone in its slot), the windows against the remap and the pointwise, the slots' flags
    (a second pixel, an image's last)."""
    rng = np.random.default_rng(seed)
    pin, k2 = config.pin, config.kmax ** 2
    tiles, group = pair_buffer_run(config, channels)
    assert group * pin == remap_group(config, channels)  # the packing's remap, in words
    y = rng.integers(-128, 128, size=(images, channels, height, width)).astype(np.int8)
    y_zp = int(rng.integers(-128, 128))
    cout = cout or int(rng.integers(1, 3 * config.pout))
    w = rng.integers(-128, 128, size=(cout, channels, 1, 1)).astype(np.int8)
    bias = rng.integers(-2**16, 2**16, size=cout).astype(np.int32)
    folded, words = pointwise_words(config, w, bias, y_zp)
    co_tiles = words.shape[0]
    pairs = []
    for n in range(images):
        for oy in range(height):
            for ox in range(0, width, 2):
                # spare channels of the last word and a missing second pixel: anything (the
                # requantized sums of zero weights, past the row's end)
                pair = rng.integers(-128, 128, size=(tiles, 2, pin))
                for j in range(min(2, width - ox)):
                    flat = pair[:, j, :].reshape(-1)
                    flat[:channels] = y[n, :, oy, ox + j]
                    pair[:, j, :] = flat.reshape(tiles, pin)
                pairs.append(pair)
    pixels = height * width
    per_image = -(-pixels // 2)
    got, flags, held = simulate(config, pairs, tiles, group, co_tiles, slots=images * per_image,
                                width=width, height=height, seed=seed, gaps=gaps, pauses=pauses,
                                reader_from=reader_from)

    acc = integer_ops.conv_acc(y, w, bias, y_zp)
    g = group * pin
    for n in range(images):
        for k in range(per_image):
            slot = n * per_image + k
            assert flags[slot] == (2 * k + 1 < pixels, k == per_image - 1), \
                f"image {n}, slot {k}"
            for j in range(min(2, pixels - 2 * k)):
                oy, ox = divmod(2 * k + j, width)
                pixel = y[n, :, oy, ox].astype(np.int64)
                sums = np.zeros(co_tiles * config.pout, np.int64)
                for co in range(co_tiles):
                    for ci in range(group):
                        window = got[slot][co][ci][j].reshape(k2, pin)
                        # tap (t, p) is channel t*g + ci*pin + p of the pixel, where it has one
                        chans = np.arange(k2)[:, None] * g + ci * pin + np.arange(pin)
                        real = chans < channels
                        assert_array_equal(window[real], pixel[chans[real]],
                                           err_msg=f"image {n}, pixel {(oy, ox)}, output tile "
                                                   f"{co}, window {ci}")
                        sums[co * config.pout:(co + 1) * config.pout] += \
                            words[co, ci] @ window.ravel()
                assert_array_equal(sums[:cout] + folded, acc[n, :, oy, ox],
                                   err_msg=f"image {n}, pixel {(oy, ox)}")
    return held


@pytest.mark.parametrize("board", BOARDS)
def test_remap_windows_bit_exact(board):
    """Channel counts of one word, of part of one, over a group, and at ``max_channels``
    (every position's memory full); the pointwise on the windows exact."""
    config = sized(board)
    limit = pair_buffer_shape(config).channels
    for n, channels in enumerate((config.pin - 1 or 1, 3 * config.pin + 1,
                                  config.kmax ** 2 * config.pin + config.pin, limit)):
        check_block(config, channels, seed=10 * n + len(board),
                    width=5 if channels < limit else 3, cout=None if channels < limit else 5)


@pytest.mark.parametrize("board, width, height, images", [
    ("pynq-z2", 5, 5, 1),    # DS-CNN's odd maps: 13 slots, the last a single pixel
    ("pynq-z2", 1, 5, 1),    # a pixel a row: every slot two rows'
    ("pynq-z2", 3, 4, 2),    # odd rows, an even image: no single; two images
    ("pynq-z2", 7, 3, 2),    # two odd images: each ends on a single, the next from half 0
    ("pynq-z2", 1, 1, 3),    # one pixel an image: every slot a single
    ("k2", 6, 3, 1),         # even rows: the row pairs, as before
    ("k2", 3, 5, 2),
])
def test_pairs_across_rows(board, width, height, images):
    """Slots of two pixels adjacent in the image's raster order: a row of odd width ends
    on half a slot that the next row's first pixel completes (its window pairs write
    half 1 of a slot and half 0 of the next), an image of an odd pixel count ends on a
    single, and the next image starts a slot. Writer gaps and reader pauses."""
    config = sized(board)
    check_block(config, 3 * config.pin + 1, seed=width * 7 + height * 3 + images,
                width=width, height=height, images=images)


@pytest.mark.parametrize("width", (1, 3))
def test_odd_rows_fill_every_slot_then_wait(width):
    """A late reader on rows of odd width: the writer fills every slot (a pair that
    would write half 0 of a full slot waits, as one that would write a full slot's half 1),
    then goes on as the slots are released; the windows exact."""
    config = sized("pynq-z2")
    slots = pair_buffer_shape(config).slots
    held = check_block(config, 2 * config.pin, seed=width, width=width, height=4 * slots + 1,
                       gaps=0.0, pauses=0.0, reader_from=200)
    assert held["writer"] > 50, held


def test_reader_and_writer_each_hold_the_other():
    """A writer that never pauses against a slow reader (every slot full, the writer held),
    and a reader that never pauses against a slow writer (the reader waits)."""
    config = sized("pynq-z2")
    # two words a pair against eight output tiles' reads a slot, three pairs over the slots
    slots = pair_buffer_shape(config).slots
    held = check_block(config, 2 * config.pin, seed=1, width=2 * slots + 6,
                       cout=8 * config.pout, gaps=0.0, pauses=0.8)
    assert held["writer"] > 20, held
    # eighteen words a pair against two reads a slot
    held = check_block(config, 2 * config.kmax ** 2 * config.pin - 3, seed=2, width=6,
                       cout=config.pout, gaps=0.8, pauses=0.0)
    assert held["reader"] > 20, held


@pytest.mark.parametrize("slots", (2, 4, 8))
def test_the_writer_runs_every_slot_ahead_then_waits(monkeypatch, slots):
    """A reader that starts late: the writer fills every slot back to back, a word a
    cycle, then waits with all of them full until the first release (its next word is
    taken the cycle after it, not before); the reader then reads the slots oldest first
    (the windows exact). With exactly as many pairs as slots the writer never waits.
    Two, four and eight slots: the buffer follows the shape's count."""
    monkeypatch.setattr(fused_block, "PAIR_BUFFER_SLOTS", slots)
    config = sized("pynq-z2")
    assert pair_buffer_shape(config).slots == slots
    channels = 3 * config.pin + 1
    tiles, _ = pair_buffer_run(config, channels)
    ahead, late = slots * tiles, 2 * slots * tiles + 10
    # slots + 2 pairs: over the slots, the writer waits
    held = check_block(config, channels, seed=slots, width=2 * slots + 3, gaps=0.0, pauses=0.0,
                       reader_from=late)
    taken, released = held["taken"], held["released"]
    assert taken[:ahead] == list(range(ahead)), taken
    assert released[0] >= late
    assert taken[ahead] == released[0] + 1, (taken, released)
    assert held["writer"] >= released[0] + 1 - ahead
    # exactly the slots' pairs: the writer never waits for the late reader
    held = check_block(config, channels, seed=slots + 1, width=2 * slots, gaps=0.0, pauses=0.0,
                       reader_from=late)
    assert held["writer"] == 0 and held["taken"] == list(range(ahead))


@pytest.mark.parametrize("slots", (0, 1, 3, 6))
def test_slot_counts_not_a_power_of_two_of_at_least_two_refused(monkeypatch, slots):
    monkeypatch.setattr(fused_block, "PAIR_BUFFER_SLOTS", slots)
    with pytest.raises(ConfigError, match=rf"^the pair buffer's slots are a power of two of at "
                                          rf"least 2 \(the writer fills one while the reader "
                                          rf"reads another\), not {slots}$"):
        pair_buffer_shape(sized("pynq-z2"))


def test_shape_follows_the_configuration():
    config = sized("pynq-z2")
    shape = pair_buffer_shape(config)
    assert PAIR_BUFFER_SLOTS == 8 and LUT_RAM_WORDS == 32
    assert (shape.channels, shape.tiles, shape.positions, shape.group, shape.slots,
            shape.depth) == (config.max_channels, 32, 9, 4, 8, 32)
    # eight slots of two pixels of max_channels, rounded up to whole groups
    assert shape.bytes == 8 * 2 * 9 * 4 * 4 >= 8 * 2 * config.max_channels
    # a group of 3 words takes 4 in each slot: the slot is the address's top bits
    assert pair_buffer_shape(SMALL_K2).group == 3 and pair_buffer_shape(SMALL_K2).depth == 32


@pytest.mark.parametrize("channels, group, slots, depth", [
    (4 * 9 * 1, 1, 8, 8),        # under a LUT RAM: the most slots
    (4 * 9 * 4, 4, 8, 32),       # at it (the PYNQ-Z2's)
    (4 * 9 * 4 + 1, 5, 4, 32),   # over it: fewer slots (the Ultra96-V2's 256 channels: group 8)
    (4 * 9 * 16, 16, 2, 32),
    (4 * 9 * 16 + 1, 17, 2, 64),  # the fewest slots, a deeper memory
])
def test_slots_keep_a_position_in_one_lut_ram(channels, group, slots, depth):
    """As many slots as :data:`PAIR_BUFFER_SLOTS` while a position's memory stays within
    :data:`LUT_RAM_WORDS`, fewer over it, and never under two."""
    config = EngineConfig(pin=4, pout=4, kmax=3, stream_width=64, max_width=16,
                          max_channels=channels, max_out_channels=16, spare_bank=2,
                          pixel_pairs=1)
    shape = pair_buffer_shape(config)
    assert (shape.group, shape.slots, shape.depth) == (group, slots, depth)


def test_channels_over_the_buffer_refused():
    config = sized("pynq-z2")
    limit = config.max_channels
    assert pair_buffer_run(config, limit) == (limit // config.pin,
                                              math.ceil(limit / config.pin / config.kmax ** 2))
    assert pair_buffer_run(config, 1) == (1, 1)
    with pytest.raises(MappingError, match=rf"^dw3: {limit + 1} depthwise channels exceed the "
                                           rf"pair buffer's {limit} \(max_channels\) a pixel$"):
        pair_buffer_run(config, limit + 1, name="dw3")
    with pytest.raises(MappingError, match=r"^layer: a fused block needs a positive channel "
                                           r"count, not 0$"):
        pair_buffer_run(config, 0)


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_refused_configuration():
    with pytest.raises(ConfigError, match=r"^the pair buffer holds pixel pairs for the array's "
                                          r"window pair: it needs pixel_pairs 1$"):
        PairBuffer(EngineConfig())
    gc.collect()  # (the refused object's warning, inside the filter)
