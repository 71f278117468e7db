"""The fused block's DepthwiseUnit in the Amaranth simulator, bit-exact against integer_ops.

Step 2 of docs/engine.md's "The fused depthwise + pointwise block". Random
depthwise layers (channels over several tiles and part of one, kernels 1 to
``kmax``, strides 1 and 2, pads, zero points) on the PYNQ-Z2's and the
KV260's sized engines (``pin`` 4 and 8): windows laid out as the line buffer
gives them in a pixel-pair run, weights and folded biases taken out of
:func:`fpgacnn.host.packing.pack_weights`' depthwise words and records; the
sums plus the bias equal :func:`~fpgacnn.host.integer_ops.conv_acc`, and
the vector unit's lane arithmetic (:func:`~fpgacnn.hdl.program.scaled_sum.
scaled_sum`, ``mb = 0``) makes of them :func:`~fpgacnn.host.integer_ops.conv2d`'s
int8 output. With and without back-pressure; one window pair a cycle.
"""

import dataclasses
import gc
import math

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from amaranth.hdl import Module, Signal, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from fpgacnn.boards.board import load_board
from fpgacnn.boards.engine_sizing import size_engine
from fpgacnn.core.config import ConfigError, EngineConfig
from fpgacnn.core.contract import PARAM_RECORD_FIELDS, engine_contract
from fpgacnn.core.fused_block import BIAS_BITS, depthwise_sum_width
from fpgacnn.core.widths import MULT_BITS, SHIFT_BITS
from fpgacnn.hdl.datapath.delay import delayed
from fpgacnn.hdl.datapath.depthwise_unit import DepthwiseUnit
from fpgacnn.hdl.program.scaled_sum import SCALED_SUM_STAGES, scaled_sum
from fpgacnn.host import integer_ops
from fpgacnn.host.packing import pack_weights
from fpgacnn.host.requant import requant_params

from hdl_pack_helpers import pack, unpack
from xilinx_cells import xilinx_cells

#: The sized engines of a pin-4 and a pin-8 board (boards/engine_sizing.py), a 2x2 one, and
#: the half-rate units (``depthwise_pixels`` 1) of the PYNQ-Z2's and the 2x2 engine.
BOARDS = ("pynq-z2", "kv260", "k2", "pynq-z2-half", "k2-half")


#: A 2x2 engine of pin 2 beside them: another window, another remap.
SMALL_K2 = EngineConfig(pin=2, pout=2, kmax=2, stream_width=32, max_width=16, max_channels=20,
                        max_out_channels=16, spare_bank=2, pixel_pairs=1)


def sized(board):
    """The engine of ``board``, or :data:`SMALL_K2` for ``"k2"``; ``"-half"``: with the
    half-rate depthwise unit (``depthwise_pixels`` 1, which needs ``fused_blocks``)."""
    name = board.removesuffix("-half")
    # (the full-rate unit of each board's sized engine, or the half-rate one with "-half")
    config = (SMALL_K2 if name == "k2" else
              size_engine(load_board(name), fused_block=False).config)
    if board.endswith("-half"):
        config = dataclasses.replace(config, fused_blocks=1, depthwise_pixels=1)
    return config


# -- a depthwise layer, as the engine gets it ----------------------------------

def random_layer(rng, config, *, channels=None, kernel=None, stride=None, extreme=False):
    """A random depthwise layer on ``config``'s engine: a dict of integer_ops' arguments."""
    k = kernel or int(rng.integers(1, config.kmax + 1))
    c = channels or int(rng.integers(1, 3 * config.pin))
    s = stride or int(rng.integers(1, 3))
    h, w = int(rng.integers(k, k + 4)), int(rng.integers(k, k + 6))
    pads = tuple(int(rng.integers(0, k)) for _ in range(4))
    if extreme:
        x = rng.choice(np.array([-128, 127], np.int8), size=(1, c, h, w))
        wt = rng.choice(np.array([-128, 127], np.int8), size=(c, 1, k, k))
        x_zp = int(rng.choice([-128, 127]))
    else:
        x = rng.integers(-128, 128, size=(1, c, h, w)).astype(np.int8)
        wt = rng.integers(-128, 128, size=(c, 1, k, k)).astype(np.int8)
        x_zp = int(rng.integers(-128, 128))
    mult, shift = requant_params(rng.uniform(2e-5, 2e-2, size=c))
    lo = int(rng.integers(-128, 0))
    return dict(x=x, w=wt, bias=rng.integers(-2**20, 2**20, size=c).astype(np.int32),
                x_zp=x_zp, stride=(s, s), pads=pads, mult=mult, shift=shift,
                y_zp=int(rng.integers(-128, 128)), lo=lo, hi=int(rng.integers(lo, 128)))


def packed_depthwise(config, layer):
    """The depthwise run's parameter records and weight words as ``pack_weights`` streams them:
    ``(folded bias per channel, compact weights [tile][p][ky*kmax + kx])``, the weights the
    diagonal of each word (lane ``p``'s channel ``p``)."""
    c, _, k, _ = layer["w"].shape
    dense = np.zeros((c, c, k, k), np.int8)
    dense[np.arange(c), np.arange(c)] = layer["w"][:, 0]
    raw = pack_weights(config, dense, layer["bias"], layer["x_zp"], layer["mult"],
                       layer["shift"], depthwise=True)
    con, b = engine_contract(config), config.stream_bytes
    tiles, pin, pout, k2 = math.ceil(c / config.pin), config.pin, config.pout, config.kmax ** 2
    rec_bytes, word_bytes = con.param_beats * b, con.weight_beats * b
    records = raw[:tiles * rec_bytes].reshape(tiles, rec_bytes)[:, :8 * pout].reshape(-1, 8)
    _, offset, size, _ = next(f for f in PARAM_RECORD_FIELDS if f[0] == "bias")
    folded = records[:c, offset:offset + size].copy().view("<i4").astype(np.int64).ravel()
    words = raw[tiles * rec_bytes:].reshape(tiles, word_bytes)[:, :pout * k2 * pin]
    words = words.view(np.int8).reshape(tiles, pout, k2, pin)
    return folded, np.stack([words[:, p, :, p] for p in range(pin)], axis=1)


def pair_windows(config, layer):
    """The window pairs of a pixel-pair run, in issue order ``for oy: for ox in 0, 2, ..:
    for tile``: ``(tile, oy, ox, window, window_next)``, tap ``(ky*kmax + kx)*pin + p``
    (the line buffer's ``o_window``): raw ``x``, ``x_zp`` outside the image, 0 in the
    channels past the layer's inside it (the packed pixels' lanes)."""
    x, (s, _), (top, left, _, _) = layer["x"][0], layer["stride"], layer["pads"]
    c, h, w = x.shape
    oh, ow = integer_ops.conv_acc(layer["x"], layer["w"], None, 0, layer["stride"],
                                  layer["pads"], group=c).shape[2:]
    kmax, pin = config.kmax, config.pin
    tiles = math.ceil(c / pin)
    # a canvas of x_zp wide enough for every tap of every window, the image at (top, left)
    rows = (oh - 1) * s + kmax + top
    cols = (ow + 1) * s + kmax + left
    canvas = np.full((tiles * pin, rows + h, cols + w), layer["x_zp"], np.int64)
    canvas[:, top:top + h, left:left + w] = 0
    canvas[:c, top:top + h, left:left + w] = x
    out = []
    for oy in range(oh):
        for ox in range(0, ow, 2):
            for t in range(tiles):
                pair = []
                for j in range(2):
                    y0, x0 = oy * s, (ox + j) * s
                    win = canvas[t * pin:(t + 1) * pin, y0:y0 + kmax, x0:x0 + kmax]
                    pair.append(win.transpose(1, 2, 0).ravel())  # ky, kx, p
                out.append((t, oy, ox, *pair))
    return out, (oh, ow)


# -- the simulation ------------------------------------------------------------

def simulate_unit(config, transfers, *, seed, gaps=0.0, back_pressure=0.0, tag_width=6):
    """Stream ``(window, window_next, weights[pin][k2])`` transfers through a DepthwiseUnit;
    return the sums ``(n, 2, pin)``, the tags, and the cycle of each output transfer."""
    dut = DepthwiseUnit(config, tag_width=tag_width)
    rng = np.random.default_rng(seed)
    width, pin = config.acc_width, config.pin
    got, tags, cycles = [], [], []

    async def testbench(ctx):
        i, cycle, valid = 0, 0, False
        while len(got) < len(transfers):
            if not valid and i < len(transfers) and rng.random() >= gaps:
                win, nxt, wts, *single = transfers[i]
                payload = dut.i_stream.payload
                if single:  # (the half-rate unit's pair of one pixel)
                    ctx.set(payload.single, single[0])
                ctx.set(payload.window.as_value(), pack(win, 8))
                ctx.set(payload.window_next.as_value(), pack(nxt, 8))
                ctx.set(payload.weights.as_value(), pack(wts, 8))
                ctx.set(payload.tag, i % (1 << tag_width))
                valid = True
            elif not valid:
                # garbage while not valid must be ignored
                ctx.set(dut.i_stream.payload.window.as_value(),
                        pack(rng.integers(-128, 128, len(transfers[0][0])), 8))
            ctx.set(dut.i_stream.valid, valid)
            ctx.set(dut.o_stream.ready, rng.random() >= back_pressure)
            took = valid and ctx.get(dut.i_stream.ready)
            if ctx.get(dut.o_stream.valid) and ctx.get(dut.o_stream.ready):
                o = dut.o_stream.payload
                got.append(unpack(ctx.get(o.acc.as_value()), width, 2 * pin).reshape(2, pin))
                tags.append(ctx.get(o.tag))
                cycles.append(cycle)
            await ctx.tick()
            cycle += 1
            if took:
                i, valid = i + 1, False
            assert cycle < 50 * len(transfers) + 100, "the unit stopped"

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(testbench)
    sim.run()
    return dut, np.array(got), tags, cycles


class RequantLanes(wiring.Component):
    """``lanes`` of :func:`scaled_sum` as the vector unit's lanes would requantize the unit's
    sums: ``a_term = acc + bias`` registered, ``ma`` the channel's multiplier, ``mb = 0``;
    each row of sums with its channels' multipliers and shifts."""

    def __init__(self, lanes, acc_width):
        self._lanes = lanes
        super().__init__({
            "acc": In(data.ArrayLayout(signed(acc_width), lanes)),
            "bias": In(data.ArrayLayout(signed(BIAS_BITS), lanes)),
            "ma": In(data.ArrayLayout(unsigned(MULT_BITS), lanes)),
            "shift": In(data.ArrayLayout(unsigned(SHIFT_BITS), lanes)),
            "zy": In(signed(8)), "lo": In(signed(8)), "hi": In(signed(8)),
            "y": Out(data.ArrayLayout(signed(8), lanes)),
        })

    def elaborate(self, platform):
        m = Module()
        for n in range(self._lanes):
            # (an exact sum: one bit more than the wider term)
            a_term = Signal(signed(max(len(self.acc[n]), BIAS_BITS) + 1), name=f"a_term{n}")
            m.d.sync += a_term.eq(self.acc[n] + self.bias[n])
            # The lane reads its parameters at its stages, not with its terms: a word's
            # own multiplier and shift must travel beside its sum (the multiplier to the
            # products, a stage on; the shift to the rounding, three), where the vector
            # unit holds a layer's. The run's zero point and clamp stay put.
            params = _LaneParams(ma=delayed(m, self.ma[n], 1, f"ma{n}_d"), mb=0,
                                 shift=delayed(m, self.shift[n], 3, f"shift{n}_d"),
                                 ties_to_even=0, zy=self.zy, lo=self.lo, hi=self.hi)
            m.d.comb += self.y[n].eq(scaled_sum(m, a_term, Signal(signed(9)), params, name=str(n)))
        return m


class _LaneParams:
    def __init__(self, **fields):
        self.__dict__.update(fields)


def requantize_on_lanes(config, accs, biases, mults, shifts, layer):
    """Run rows of ``2*pin`` sums through :class:`RequantLanes`; return the int8 rows."""
    lanes = 2 * config.pin
    dut = RequantLanes(lanes, config.acc_width)
    latency = 1 + SCALED_SUM_STAGES
    out = []

    async def testbench(ctx):
        ctx.set(dut.zy, layer["y_zp"])
        ctx.set(dut.lo, layer["lo"])
        ctx.set(dut.hi, layer["hi"])
        for i in range(len(accs) + latency):
            if i < len(accs):
                ctx.set(dut.acc.as_value(), pack(accs[i], config.acc_width))
                ctx.set(dut.bias.as_value(), pack(biases[i], BIAS_BITS))
                ctx.set(dut.ma.as_value(), pack(mults[i], MULT_BITS))
                ctx.set(dut.shift.as_value(), pack(shifts[i], SHIFT_BITS))
            if i >= latency:
                out.append(unpack(ctx.get(dut.y.as_value()), 8, lanes))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(testbench)
    sim.run()
    return np.array(out)


def check_layers(config, layers, *, seed, gaps=0.0, back_pressure=0.0):
    """Run ``layers`` back to back through one unit, then each through the lanes; compare
    with integer_ops. (One simulator for all: building one is most of a run's time.)"""
    pin, kmax = config.pin, config.kmax
    runs, transfers = [], []
    for layer in layers:
        folded, compact = packed_depthwise(config, layer)
        windows, (_, ow) = pair_windows(config, layer)
        k = layer["w"].shape[2]
        # the kernel embedded top-left in kmax x kmax, as the packing's words hold it
        assert_array_equal(compact.reshape(-1, pin, kmax, kmax)[..., k:, :], 0)
        assert_array_equal(compact.reshape(-1, pin, kmax, kmax)[..., k:], 0)
        runs.append((layer, folded, windows, ow, len(transfers)))
        transfers += [(a, b, compact[t]) for t, _, _, a, b in windows]
    _, got, tags, _ = simulate_unit(config, transfers, seed=seed, gaps=gaps,
                                    back_pressure=back_pressure)
    assert tags == [i % 64 for i in range(len(transfers))]
    for layer, folded, windows, ow, first in runs:
        check_sums(config, layer, folded, windows, ow, got[first:first + len(windows)])
    return len(transfers)


def check_sums(config, layer, folded, windows, ow, got):
    """The unit's sums of one layer's windows, plus the folded bias, against conv_acc; on the
    lanes, against conv2d."""
    c, pin = layer["x"].shape[1], config.pin
    acc = integer_ops.conv_acc(layer["x"], layer["w"], layer["bias"], layer["x_zp"],
                               layer["stride"], layer["pads"], group=c)[0]
    y = integer_ops.conv2d(layer["x"], layer["w"], layer["bias"], layer["x_zp"],
                           layer["mult"], layer["shift"], layer["y_zp"], layer["lo"],
                           layer["hi"], layer["stride"], layer["pads"], group=c)[0]
    lanes = {"bias": [], "mult": [], "shift": []}
    padded = {key: np.zeros(math.ceil(c / pin) * pin, np.int64) for key in lanes}
    for key, values in (("bias", folded), ("mult", layer["mult"]), ("shift", layer["shift"])):
        padded[key][:c] = values
    for (t, oy, ox, _, _), sums in zip(windows, got):
        chans = slice(t * pin, min((t + 1) * pin, c))
        for j in range(2):
            if ox + j < ow:
                n = chans.stop - chans.start
                assert_array_equal(sums[j][:n] + folded[chans], acc[chans, oy, ox + j],
                                   err_msg=f"tile {t} pixel ({oy}, {ox + j})")
        for key in lanes:
            lanes[key].append(np.tile(padded[key][t * pin:(t + 1) * pin], 2))
    rq = requantize_on_lanes(config, got.reshape(len(got), -1), *(lanes[key] for key in lanes),
                             layer)
    for (t, oy, ox, _, _), row in zip(windows, rq):
        row = row.reshape(2, pin)
        chans = slice(t * pin, min((t + 1) * pin, c))
        for j in range(2):
            if ox + j < ow:
                assert_array_equal(row[j][:chans.stop - chans.start], y[chans, oy, ox + j],
                                   err_msg=f"requantized tile {t} pixel ({oy}, {ox + j})")


@pytest.mark.parametrize("pressure", [False, True], ids=["free", "back-pressure"])
@pytest.mark.parametrize("board", BOARDS)
def test_random_depthwise_layers_bit_exact(board, pressure):
    """Random layers: every kernel size, strides 1 and 2, pads, zero points, channel
    counts over whole tiles and part of one; sums and requantized outputs exact."""
    config = sized(board)
    rng = np.random.default_rng(7 + BOARDS.index(board) + 2 * pressure)
    kernels = [config.kmax, 1, 2, config.kmax, None]
    layers = [random_layer(rng, config, kernel=k, stride=1 + n % 2)
              for n, k in enumerate(kernels)]
    check_layers(config, layers, seed=len(board), gaps=0.3 if pressure else 0.0,
                 back_pressure=0.4 if pressure else 0.0)


def test_extreme_operands_bit_exact():
    """Operands at both ends (-128, 127: the largest sums, ``kmax^2 * 2**14``) and the
    zero point at each end, with back-pressure."""
    config = sized("pynq-z2")
    rng = np.random.default_rng(3)
    layers = [random_layer(rng, config, kernel=config.kmax, channels=2 * config.pin - 1,
                           stride=1 + n, extreme=True) for n in range(2)]
    check_layers(config, layers, seed=10, gaps=0.2, back_pressure=0.3)


def test_largest_sum_fits_its_width():
    """The exact width of a sum: ``kmax^2`` products of -128 * -128 need every bit."""
    for kmax in range(1, 8):
        config = EngineConfig(kmax=kmax, spare_bank=1, pixel_pairs=1)
        width = depthwise_sum_width(config)
        assert kmax * kmax * 2 ** 14 < 2 ** (width - 1)
        assert kmax * kmax * -128 * 127 >= -2 ** (width - 1)


def test_one_window_pair_a_cycle():
    """Back to back, unpressed: the n-th result leaves ``latency + n`` cycles after the first
    transfer in (the unit never idles)."""
    config = sized("pynq-z2")
    rng = np.random.default_rng(5)
    taps = config.kmax ** 2 * config.pin
    transfers = [(rng.integers(-128, 128, taps), rng.integers(-128, 128, taps),
                  rng.integers(-128, 128, (config.pin, config.kmax ** 2))) for _ in range(20)]
    dut, got, _, cycles = simulate_unit(config, transfers, seed=0)
    assert cycles == [dut.latency + n for n in range(len(transfers))]
    for (a, b, w), sums in zip(transfers, got):
        for j, win in enumerate((a, b)):
            assert_array_equal(sums[j], (win.reshape(-1, config.pin).T * w).sum(axis=1))


def test_half_rate_one_window_pair_every_other_cycle():
    """``depthwise_pixels`` 1, offered a pair every cycle: it takes one every other cycle
    (``i_stream.ready`` low the cycle after each) but the cycle after a ``single`` one (a
    pair of one pixel), and each result leaves ``latency`` cycles after its transfer, a
    cycle later than the full-rate unit's; a single's first pixel exact."""
    config = sized("pynq-z2-half")
    rng = np.random.default_rng(6)
    taps = config.kmax ** 2 * config.pin
    singles = [0] * 6 + [1, 0, 1, 1, 0, 1] + [int(b) for b in rng.integers(0, 2, 12)]
    transfers = [(rng.integers(-128, 128, taps), rng.integers(-128, 128, taps),
                  rng.integers(-128, 128, (config.pin, config.kmax ** 2)), single)
                 for single in singles]
    dut, got, _, cycles = simulate_unit(config, transfers, seed=0)
    assert dut.latency == DepthwiseUnit(sized("pynq-z2")).latency + 1 == 8
    taken = np.cumsum([0] + [1 if single else 2 for single in singles[:-1]])
    assert cycles == [dut.latency + int(t) for t in taken]
    for (a, b, w, single), sums in zip(transfers, got):
        for j, win in enumerate((a, b)[:1 if single else 2]):
            assert_array_equal(sums[j], (win.reshape(-1, config.pin).T * w).sum(axis=1))


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_refused_configurations():
    with pytest.raises(ConfigError, match=r"^the depthwise unit takes the window pair of a "
                                          r"pixel-pair engine: it needs pixel_pairs 1$"):
        DepthwiseUnit(EngineConfig())
    narrow = EngineConfig(acc_width=16, spare_bank=1, pixel_pairs=1)
    with pytest.raises(ConfigError, match=r"^the depthwise unit's sums of 3x3 products need "
                                          r"acc_width >= 20, not 16$"):
        DepthwiseUnit(narrow)
    at = EngineConfig(acc_width=20, spare_bank=1, pixel_pairs=1)
    assert DepthwiseUnit(at).latency == 7
    with pytest.raises(TypeError, match=r"^config must be an EngineConfig, not 3$"):
        DepthwiseUnit(3)
    gc.collect()  # (the refused objects' warnings, inside the filter)


def test_no_dsp_block(tmp_path):
    """yosys's synth_xilinx maps the products to LUTs, no DSP48E1 (a plain ``*`` would
    take one each: yosys honours no ``use_dsp`` attribute)."""
    config = EngineConfig(pin=1, pout=1, kmax=3, stream_width=32, spare_bank=1, pixel_pairs=1)
    cells = xilinx_cells(tmp_path, DepthwiseUnit(config), "dw")
    assert cells.get("DSP48E1", 0) == 0 and cells.get("CARRY4", 0) > 0, cells
