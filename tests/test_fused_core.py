"""A fused depthwise + pointwise block on the convolution core, in the Amaranth simulator.

Step 3 of docs/engine.md's "The fused depthwise + pointwise block": a run
with the descriptor's ``fused`` takes the depthwise layer's input, and the
line buffer's window pairs go through the depthwise unit, its requantizer
(the depthwise words' records) and the pair buffer into the array as the
pointwise layer's 1x1 remap windows. The output must equal
:func:`~fpgacnn.host.integer_ops.conv2d` of the depthwise layer (``group =
C``) and then of the pointwise one, bit for bit, on seeded random blocks:
channels over whole and partial tiles, strides 1 and 2, pads, zero points,
odd widths, several output tiles, batches, with and without stream pauses.
"""

import dataclasses

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from fpgacnn.core.config import EngineConfig
from fpgacnn.core.contract import descriptor_violations, engine_contract
from fpgacnn.host import integer_ops
from fpgacnn.host.cycle_model import layer_cycles
from fpgacnn.host.packing import pack_depthwise_words, pack_fused_block, unpack_output

from amaranth.hdl import Module
from amaranth.lib import wiring

from fpgacnn.core.fused_block import depthwise_on_vector_lanes
from fpgacnn.hdl.datapath.conv_core import ConvCore
from fpgacnn.hdl.program.vector_unit import VectorUnit

from conv_core_helpers import run_core

#: The step's test engine: pin 4, pout 4, kmax 3, 64-bit beats (a beat holds two
#: output words: paired beats), pairs at strides 1 and 2, two blocks' depthwise words.
FUSED = EngineConfig(pin=4, pout=4, kmax=3, stream_width=64, max_width=16, max_channels=32,
                     max_out_channels=16, spare_bank=2, pixel_pairs=1, fused_blocks=2)


class CoreOnVectorLanes(wiring.Component):
    """A :class:`ConvCore` whose depthwise half requantizes on an idle
    :class:`VectorUnit`'s lanes, connected as the program engine connects them; the
    core's other ports are its own."""

    def __init__(self, config):
        self._core = ConvCore(config, lent_lanes=True)
        self._vector = VectorUnit(config)
        super().__init__({name: member for name, member in self._core.signature.members.items()
                          if name != "dw_lanes"})

    def elaborate(self, platform):
        m = Module()
        m.submodules.core = core = self._core
        m.submodules.vector = vector = self._vector
        wiring.connect(m, core.dw_lanes, vector.dw_lanes)
        wiring.connect(m, wiring.flipped(self.i_stream), core.i_stream)
        wiring.connect(m, core.o_stream, wiring.flipped(self.o_stream))
        m.d.comb += [core.desc.eq(self.desc), core.start.eq(self.start)]
        m.d.comb += [getattr(self, name).eq(getattr(core, name))
                     for name in ("busy", "done", "stall_in", "stall_out")]
        return m


def random_block(rng, c, cout, h, w, k=3, stride=1, pads=(1, 1, 1, 1), n=1, relu=False,
                 clamp=None):
    """A depthwise k x k layer of ``c`` channels and the pointwise ``c -> cout`` after it:
    ``(x, x_zp, dw, pw, expected)``; ``clamp``, the depthwise's, where not the Relu's
    or none."""
    x = rng.integers(-128, 128, (n, c, h, w)).astype(np.int8)
    x_zp = int(rng.integers(-20, 21))
    dw = dict(w=rng.integers(-128, 128, (c, 1, k, k)).astype(np.int8),
              bias=rng.integers(-20000, 20000, c), mult=rng.integers(1 << 23, 1 << 24, c),
              shift=rng.integers(29, 33, c), y_zp=int(rng.integers(-10, 11)))
    dw["clamp"] = clamp if clamp is not None else (dw["y_zp"], 127) if relu else (-128, 127)
    pw = dict(w=rng.integers(-128, 128, (cout, c, 1, 1)).astype(np.int8),
              bias=rng.integers(-20000, 20000, cout), mult=rng.integers(1 << 23, 1 << 24, cout),
              shift=rng.integers(30, 35, cout), y_zp=int(rng.integers(-10, 11)),
              clamp=(-128, 127))
    s = (stride, stride)
    mid = integer_ops.conv2d(x, dw["w"], dw["bias"], x_zp, dw["mult"], dw["shift"], dw["y_zp"],
                             *dw["clamp"], stride=s, pads=pads, group=c)
    out = integer_ops.conv2d(mid, pw["w"], pw["bias"], dw["y_zp"], pw["mult"], pw["shift"],
                             pw["y_zp"], *pw["clamp"])
    return x, x_zp, dw, pw, out


#: (channels, output channels, height, width, kernel, stride, pads, batch)
BLOCKS = [
    (8, 8, 4, 4, 3, 1, (1, 1, 1, 1), 1),      # whole tiles, even width
    (5, 7, 5, 5, 3, 1, (1, 1, 1, 1), 1),      # part of a tile each side, odd width
    (32, 16, 3, 6, 3, 1, (1, 1, 1, 1), 1),    # the pair buffer full: 8 tiles, 4 output tiles
    (12, 6, 7, 7, 3, 2, (1, 1, 1, 1), 1),     # stride 2, odd output width
    (20, 4, 6, 5, 2, 1, (0, 1, 0, 0), 2),     # a 2x2 kernel, uneven pads, a batch
    (4, 12, 5, 8, 3, 2, (0, 0, 1, 1), 1),     # stride 2, pads bottom-right only
    (3, 16, 4, 7, 3, 1, (1, 1, 1, 1), 1),     # output-bound: one tile in, four out
    (32, 4, 4, 6, 3, 1, (1, 1, 1, 1), 1),     # depthwise-bound: eight tiles in, one out
    (4, 8, 3, 16, 3, 1, (1, 1, 1, 1), 1),     # eight pairs a row of two cycles each: every pair
                                              # buffer slot full, the depthwise side waiting
]


def run_blocks(blocks, *, seed, in_pause=0.0, out_pause=0.0, config=FUSED, make_dut=ConvCore,
               clamps=None):
    """Run ``blocks`` back to back on one simulated core (``make_dut``), each bit-exact and,
    without pauses, in the model's cycles. ``clamps``: the depthwise half's clamp
    of each block, where not the random one."""
    rng = np.random.default_rng(seed)
    runs, expected = [], []
    for i, (c, cout, h, w, k, stride, pads, n) in enumerate(blocks):
        x, x_zp, dw, pw, out = random_block(rng, c, cout, h, w, k, stride, pads, n,
                                            relu=bool(rng.integers(2)),
                                            clamp=clamps[i] if clamps else None)
        if clamps:
            # (packing refuses lo > hi, which the descriptor may hold: set after it)
            desc, data = pack_fused_block(config, x, x_zp, dict(dw, clamp=(-128, 127)), pw,
                                          stride=stride, pads=pads)
            desc = dict(desc, dw_clamp_lo=clamps[i][0], dw_clamp_hi=clamps[i][1])
            assert not descriptor_violations(config, desc)
        else:
            desc, data = pack_fused_block(config, x, x_zp, dw, pw, stride=stride, pads=pads)
        assert len(data) == engine_contract(config).input_nbytes(desc)
        runs.append((desc, data))
        expected.append((out, cout))
    results = run_core(config, runs, seed=seed, in_pause=in_pause, out_pause=out_pause,
                       make_dut=make_dut)
    for (desc, _), (out, cout), (raw, cycles) in zip(runs, expected, results):
        assert_array_equal(unpack_output(config, raw, desc, cout), out)
        if not (in_pause or out_pause):
            # the cycle model of a fused run, exact
            assert cycles == layer_cycles(config, desc).cycles, desc
    return results


def test_fused_blocks_are_bit_exact_and_cycles_exact():
    # Back to back on one simulated core (one elaboration, not nine: the default
    # run's time); each block is checked, and its cycles, on its own.
    run_blocks(BLOCKS, seed=0)


def test_fused_blocks_back_to_back_with_pauses_are_bit_exact():
    run_blocks(BLOCKS[:4], seed=11, in_pause=0.3, out_pause=0.4)


#: Blocks whose slots pair pixels across rows (docs/engine.md, "Pairs across rows"): odd
#: output widths 1, 3, 5 and 7, odd heights, batches whose images end on a single, and
#: runs at and over the pair buffer's 8 slots with the depthwise side ahead.
ACROSS = [
    (8, 8, 5, 1, 3, 1, (1, 1, 1, 1), 1),      # a pixel a row: each slot two rows'
    (8, 4, 3, 3, 3, 1, (1, 1, 1, 1), 2),      # 3 x 3, two images of 5 slots, each a single last
    (16, 12, 4, 5, 3, 1, (1, 1, 1, 1), 3),    # 4 x 5, three images of 10 slots (no single)
    (4, 8, 5, 7, 3, 1, (1, 1, 1, 1), 1),      # 5 x 7: two-cycle slots, the depthwise side waits
    (12, 6, 9, 13, 3, 2, (1, 1, 1, 1), 1),    # stride 2: 5 x 7
    (8, 8, 1, 1, 3, 1, (1, 1, 1, 1), 3),      # one pixel an image: every slot a single
    (4, 16, 5, 3, 3, 1, (1, 1, 1, 1), 1),     # 15 pixels: exactly the 8 slots, output-bound
    (4, 16, 6, 3, 3, 1, (1, 1, 1, 1), 1),     # 18 pixels: 9 slots, one over
    (4, 4, 7, 5, 3, 1, (1, 1, 1, 1), 1),      # a cycle a slot: the pair credits bind
]


def test_slots_across_rows_are_bit_exact_and_cycles_exact():
    # Back to back on one simulated core (one elaboration, not nine: the default
    # run's time); each block is checked, and its cycles, on its own.
    run_blocks(ACROSS, seed=100)


def test_slots_across_rows_with_pauses_are_bit_exact():
    run_blocks([ACROSS[i] for i in (0, 1, 3, 5, 7)], seed=111, in_pause=0.3, out_pause=0.5)


def test_the_depthwise_words_are_the_units_weights_then_the_records():
    rng = np.random.default_rng(3)
    c = 6
    w = rng.integers(-128, 128, (c, 1, 2, 3)).astype(np.int8)
    bias, mult, shift = rng.integers(-999, 999, c), rng.integers(1 << 23, 1 << 24, c), \
        rng.integers(0, 63, c)
    raw = pack_depthwise_words(FUSED, w, bias, 5, mult, shift)
    con, pin, b = engine_contract(FUSED), FUSED.pin, FUSED.stream_bytes
    assert raw.size == 2 * con.depthwise_beats * b
    words = raw.reshape(2, -1)
    for ch in range(8):
        t, p = divmod(ch, pin)
        taps = words[t, p * 9:(p + 1) * 9].view(np.int8).reshape(3, 3)
        rec = words[t, 36 + 8 * p:36 + 8 * (p + 1)]
        if ch < c:
            assert_array_equal(taps[:2, :3], w[ch, 0])
            assert not taps[2].any()  # the 2x3 kernel top-left in zeros
            assert int(rec[:4].view("<i4")[0]) == bias[ch] - 5 * int(w[ch].astype(int).sum())
            assert int.from_bytes(rec[4:7].tobytes(), "little") == mult[ch]
            assert rec[7] == shift[ch]
        else:
            assert not taps.any() and not rec.any()


def test_resident_blocks_run_from_their_bases():
    """Two blocks loaded at their own depthwise-memory, weight-buffer bases, then run
    again from there without their weights (the pointwise parameters streamed: the
    parameter buffer holds one run's): bit-exact each time."""
    rng = np.random.default_rng(21)
    blocks = [random_block(rng, 9, 8, 4, 5, 3, 1, (1, 1, 1, 1)),
              random_block(rng, 30, 4, 3, 4, 3, 2, (1, 1, 1, 1))]
    bases = [dict(dw_base=0, weight_base=0), dict(dw_base=8, weight_base=30)]
    runs, expected = [], []
    for load in (True, False):
        for (x, x_zp, dw, pw, out), base, stride in zip(blocks, bases, (1, 2)):
            desc, data = pack_fused_block(FUSED, x, x_zp, dw, pw, stride=stride,
                                          pads=(1, 1, 1, 1), load_weights=load,
                                          load_params=not load, **base)
            assert len(data) == engine_contract(FUSED).input_nbytes(desc)
            runs.append((desc, data))
            expected.append((out, pw["w"].shape[0]))
    results = run_core(FUSED, runs, seed=2)
    for (desc, _), (out, cout), (raw, cycles) in zip(runs, expected, results):
        assert_array_equal(unpack_output(FUSED, raw, desc, cout), out)
        assert cycles == layer_cycles(FUSED, desc).cycles, desc


@pytest.mark.slow
def test_unfused_runs_on_an_engine_with_the_block_are_as_before():
    """The window multiplexer and the loader's new section leave every other run alone:
    the pixel-pair test layers and a depthwise run, bit-exact with and without pauses,
    with the model's cycles. (40 s of the Amaranth simulator: slow; the default run
    keeps unfused runs on engines with the block on Verilator, the models' unfused
    layers in tests/test_fused_compiler.py and tests/test_fused_program.py.)"""
    from test_hdl_conv_core import check_pair_runs, pixel_pair_layers
    from fpgacnn.host.packing import pack_layer
    rng = np.random.default_rng(5)
    layers = pixel_pair_layers(FUSED, rng)
    runs = [pack_layer(FUSED, **layer) for layer in layers]
    check_pair_runs(FUSED, layers, runs, seed=6)


def check_blocks_on_a_board(board, seed, config=None):
    """Blocks through ``board``'s engine registers and streams (EngineDriver): bit-exact
    with perf_busy_cycles the model's, and a block over a limit refused by the
    hardware, naming the field, the next one fine. ``config``: the engine's, read from
    its ID ROM by the default map (:data:`FUSED` where not given)."""
    from fpgacnn.core.errors import BackendError
    from fpgacnn.host.engine_driver import EngineDriver
    from fpgacnn.host.packing import output_nbytes
    driver = EngineDriver(board)
    engine = config or FUSED
    assert driver.config == engine
    rng = np.random.default_rng(seed)
    blocks = [BLOCKS[1], BLOCKS[3], BLOCKS[5]]
    for i, (c, cout, h, w, k, stride, pads, n) in enumerate(blocks):
        x, x_zp, dw, pw, out = random_block(rng, c, cout, h, w, k, stride, pads, n)
        desc, data = pack_fused_block(engine, x, x_zp, dw, pw, stride=stride, pads=pads)
        if i == 1:
            # the same block from a depthwise-memory base past the memory: refused
            bad = dict(desc, dw_base=engine_contract(engine).fused.depthwise_memory.words - 1)
            with pytest.raises(BackendError, match=r"status\.error\): dw_base = 15 "
                                                   r"\(range 0\.\.15\): 3 depthwise words"):
                driver.run_layer(bad, data, output_nbytes(engine, bad), timeout=0.05,
                                 check=False)
        run = driver.run_layer(desc, data, output_nbytes(engine, desc), timeout=0.05)
        assert_array_equal(unpack_output(engine, run.output, desc, cout), out)
        assert run.busy_cycles == layer_cycles(engine, desc).cycles, desc


def test_fused_blocks_through_the_engine_top_on_the_simulated_board():
    """The engine top (Verilator, the simulated board): the 2.6 registers and check of
    the block, its own requantizing lanes."""
    from fpgacnn.host.accelerator import open_board
    board = open_board("sim", FUSED)
    try:
        check_blocks_on_a_board(board, 31)
    finally:
        board.close()


def test_fused_blocks_through_the_program_engine_top(program_boards):
    """The program engine's top (Verilator; the host's runs while the sequencer is idle):
    the depthwise half on the vector unit's lanes, bit-exact in the model's cycles."""
    check_blocks_on_a_board(program_boards(FUSED), 37)


@pytest.mark.slow  # (a Verilator build of its own)
def test_half_rate_blocks_through_the_program_engine_top(program_boards):
    """The half-rate unit in the program engine's top (Verilator): its 2.7 ID ROM read by
    the default map, the blocks bit-exact in the model's cycles."""
    check_blocks_on_a_board(program_boards(HALF), 39, config=HALF)


# -- the depthwise half on the vector unit's lanes (the program engine's) -------------

def test_the_test_engine_lends_the_vector_lanes():
    """The test engine's program top requantizes on the vector unit's lanes (eight, the
    read port's bytes, for its 2 x 4 sums), so the tests below run that path."""
    assert depthwise_on_vector_lanes(FUSED)
    assert not depthwise_on_vector_lanes(dataclasses.replace(FUSED, fused_blocks=0))
    # a 32-bit read port: four lanes, too few for 2 x 4 sums
    assert not depthwise_on_vector_lanes(dataclasses.replace(FUSED, stream_width=32))


#: The blocks on the lent lanes: whole and part tiles, the pair buffer full, stride 2,
#: a 2x2 kernel with a batch, both bounds.
LENT = [BLOCKS[i] for i in (1, 2, 3, 4, 6, 7)]


def test_blocks_on_the_vector_units_lanes_are_bit_exact_and_cycles_exact():
    run_blocks(LENT, seed=41, make_dut=CoreOnVectorLanes)


def test_blocks_on_the_vector_units_lanes_with_pauses_are_bit_exact():
    run_blocks(LENT[:4], seed=43, in_pause=0.3, out_pause=0.4, make_dut=CoreOnVectorLanes)


def test_slots_across_rows_on_the_vector_units_lanes():
    """Odd widths and heights, a batch, at the slots: in the model's cycles, then with
    pauses; bit-exact."""
    blocks = [ACROSS[i] for i in (1, 3, 6)]
    run_blocks(blocks, seed=45, make_dut=CoreOnVectorLanes)
    run_blocks(blocks, seed=46, in_pause=0.3, out_pause=0.4, make_dut=CoreOnVectorLanes)


@pytest.mark.parametrize("make_dut", [ConvCore, CoreOnVectorLanes],
                         ids=["own lanes", "vector lanes"])
def test_depthwise_clamps_at_and_over_their_limits(make_dut):
    """The depthwise half's clamps as numpy.clip's: a Relu6-like window, the full int8
    range, a single value, and lo over hi (every output hi), on both lane kinds."""
    blocks = [BLOCKS[0]] * 4
    run_blocks(blocks, seed=47, make_dut=make_dut,
               clamps=[(-3, 6), (-128, 127), (9, 9), (5, -7)])


def test_lent_lanes_only_where_the_configuration_has_them():
    from fpgacnn.core.config import ConfigError
    with pytest.raises(ConfigError, match=r"^the depthwise half takes lent lanes only where "
                                          r"depthwise_on_vector_lanes\(config\)"):
        ConvCore(dataclasses.replace(FUSED, stream_width=32), lent_lanes=True)
    with pytest.raises(ConfigError, match=r"lent lanes only"):
        ConvCore(dataclasses.replace(FUSED, fused_blocks=0), lent_lanes=True)
    with pytest.raises(TypeError, match=r"^lent_lanes must be True or False, not 1$"):
        ConvCore(FUSED, lent_lanes=1)


#: An engine whose vector unit has more lanes than the half's sums: 8 (64-bit beats)
#: for 2 x 2; the first four are lent.
WIDE_LANES = EngineConfig(pin=2, pout=4, kmax=3, stream_width=64, max_width=16, max_channels=16,
                          max_out_channels=16, spare_bank=2, pixel_pairs=1, fused_blocks=1)


def test_blocks_on_some_of_the_vector_units_lanes_are_bit_exact_and_cycles_exact():
    assert depthwise_on_vector_lanes(WIDE_LANES)
    run_blocks([(5, 7, 5, 5, 3, 1, (1, 1, 1, 1), 1), (16, 8, 4, 6, 3, 2, (1, 1, 1, 1), 1)],
               seed=53, config=WIDE_LANES, make_dut=CoreOnVectorLanes)


# -- the half-rate depthwise unit (depthwise_pixels 1) --------------------------

#: The test engine with the half-rate depthwise unit: a window pair every other cycle.
HALF = dataclasses.replace(FUSED, depthwise_pixels=1)

#: Output widths 1 to 7 at strides 1 and 2 (pads keep every width reachable), channels
#: at the pair buffer's 32 and over a tile's, the depthwise side the bound (eight tiles
#: in, one out: 16 cycles a pair against 2) and the pointwise (one in, four out).
HALF_BLOCKS = [
    (8, 8, 5, 1, 3, 1, (1, 1, 1, 1), 1),      # width 1
    (5, 7, 3, 2, 3, 1, (1, 1, 1, 1), 2),      # width 2, a batch, part tiles
    (12, 6, 7, 5, 3, 2, (1, 1, 1, 1), 1),     # stride 2: width 3
    (32, 16, 3, 4, 3, 1, (1, 1, 1, 1), 1),    # width 4, the pair buffer's 32 channels
    (20, 4, 6, 5, 2, 1, (0, 1, 0, 0), 2),     # a 2x2 kernel, width 5, a batch
    (3, 16, 4, 6, 3, 1, (1, 1, 1, 1), 1),     # width 6, output-bound
    (32, 4, 4, 7, 3, 1, (1, 1, 1, 1), 1),     # width 7, depthwise-bound
    (4, 4, 7, 5, 3, 1, (1, 1, 1, 1), 1),      # two cycles a slot each side: the credits bind
    (4, 12, 5, 13, 3, 2, (0, 0, 1, 1), 1),    # stride 2, pads bottom-right: width 7
]


def test_half_rate_blocks_are_bit_exact_and_cycles_exact():
    run_blocks(HALF_BLOCKS, seed=61, config=HALF)


def test_half_rate_blocks_with_pauses_are_bit_exact():
    run_blocks(HALF_BLOCKS[:6], seed=62, config=HALF, in_pause=0.3, out_pause=0.4)


@pytest.mark.slow  # (the lent lanes' own tests and the half rate's above cover each)
def test_half_rate_blocks_on_the_vector_units_lanes():
    """On the lent lanes, as the program engine builds it: in the model's cycles, then
    with pauses; bit-exact."""
    blocks = [HALF_BLOCKS[i] for i in (1, 3, 6, 7)]
    run_blocks(blocks, seed=63, config=HALF, make_dut=CoreOnVectorLanes)
    run_blocks(blocks, seed=64, config=HALF, in_pause=0.3, out_pause=0.4,
               make_dut=CoreOnVectorLanes)


def test_half_rate_unit_only_with_the_block():
    from fpgacnn.core.config import ConfigError
    with pytest.raises(ConfigError, match=r"^depthwise_pixels 1 needs fused_blocks >= 1 \(it "
                                          r"sets the fused block's depthwise unit\), not "
                                          r"fused_blocks 0$"):
        dataclasses.replace(FUSED, fused_blocks=0, depthwise_pixels=1)
    for bad in (0, 3):
        with pytest.raises(ConfigError, match=rf"^depthwise_pixels must be between 1 and 2, "
                                              rf"not {bad}$"):
            dataclasses.replace(FUSED, depthwise_pixels=bad)
