"""MacArray (and its AdderTree) in the Amaranth simulator, bit-exact against numpy."""

import gc
import re

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from amaranth.sim import Simulator

from fpgacnn.hdl.datapath.adder_tree import AdderTree
from fpgacnn.core.config import EngineConfig
from fpgacnn.hdl.datapath.mac_array import MacArray

from hdl_pack_helpers import pack, unpack, wrap


def _make_groups(rng, cfg, n_groups, *, max_len=4, low=-128, high=127, extreme=False,
                 pairs=False):
    """Random accumulation groups: lists of (window[T], weights[pout, T]) int64 arrays,
    with ``pairs`` (window, weights, second window)."""
    taps = cfg.kmax * cfg.kmax * cfg.pin
    groups = []
    for g in range(n_groups):
        length = 1 if g % 3 == 0 else int(rng.integers(1, max_len + 1))
        cycles = []
        for _ in range(length):
            if extreme:
                win = rng.choice([-128, 127], size=taps)
                wts = rng.choice([-128, 127], size=(cfg.pout, taps))
                win2 = rng.choice([-128, 127], size=taps)
            else:
                win = rng.integers(low, high + 1, size=taps)
                wts = rng.integers(low, high + 1, size=(cfg.pout, taps))
                win2 = rng.integers(low, high + 1, size=taps)
            cycle = (win.astype(np.int64), wts.astype(np.int64))
            cycles.append(cycle + ((win2.astype(np.int64),) if pairs else ()))
        groups.append(cycles)
    return groups


def _reference(groups, window=0):
    """Each group's sums of its cycles' window number ``window`` (2: the second of a pair)."""
    return np.array([sum(c[1] @ c[window] for c in cycles) for cycles in groups],
                    dtype=np.int64)


def _simulate(cfg, groups, *, tag_width=4, gap_prob=0.3, seed=0, pairs=False):
    """Drive the groups with random idle gaps; return (accs, tags, cycles from i_last to o_valid),
    with ``pairs`` the second windows' sums as ``dut.results_next``."""
    dut = MacArray(cfg, tag_width=tag_width, pairs=pairs)
    rng = np.random.default_rng(seed)
    taps = dut.taps
    results, tags, latencies = [], [], []
    dut.results_next = results_next = []
    last_cycles = []

    async def testbench(ctx):
        cycle = 0

        early = []  # o_next_tag of the cycle before, when o_next_valid

        def sample():
            if ctx.get(dut.o_valid):
                results.append(unpack(ctx.get(dut.o_acc.as_value()), cfg.acc_width, cfg.pout))
                if pairs:
                    results_next.append(unpack(ctx.get(dut.o_acc_next.as_value()),
                                               cfg.acc_width, cfg.pout))
                tags.append(ctx.get(dut.o_tag))
                latencies.append(cycle - last_cycles[len(results) - 1])
                # announced one cycle early, with the same tag
                assert early and early[-1] == (cycle - 1, tags[-1])
            if ctx.get(dut.o_next_valid):
                early.append((cycle, ctx.get(dut.o_next_tag)))

        for g, cycles in enumerate(groups):
            for i, (win, wts, *second) in enumerate(cycles):
                while rng.random() < gap_prob:
                    ctx.set(dut.i_valid, 0)
                    # Garbage on the data inputs of idle cycles must be ignored.
                    ctx.set(dut.i_first, int(rng.integers(2)))
                    ctx.set(dut.i_last, int(rng.integers(2)))
                    ctx.set(dut.i_window.as_value(), pack(rng.integers(-128, 128, taps), 8))
                    if pairs:
                        ctx.set(dut.i_window_next.as_value(),
                                pack(rng.integers(-128, 128, taps), 8))
                    sample()
                    await ctx.tick()
                    cycle += 1
                ctx.set(dut.i_valid, 1)
                ctx.set(dut.i_first, int(i == 0))
                ctx.set(dut.i_last, int(i == len(cycles) - 1))
                ctx.set(dut.i_tag, g % (1 << tag_width))
                ctx.set(dut.i_window.as_value(), pack(win, 8))
                if pairs:
                    ctx.set(dut.i_window_next.as_value(), pack(second[0], 8))
                ctx.set(dut.i_weights.as_value(), pack(wts, 8))
                if i == len(cycles) - 1:
                    last_cycles.append(cycle)
                sample()
                await ctx.tick()
                cycle += 1
        ctx.set(dut.i_valid, 0)
        for _ in range(dut.latency + 2):
            sample()
            await ctx.tick()
            cycle += 1

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(testbench)
    sim.run()
    return dut, np.array(results).reshape(-1, cfg.pout), tags, latencies


@pytest.mark.parametrize("pin, pout, kmax", [(1, 1, 1), (2, 4, 2), (4, 4, 3), (1, 2, 3)])
def test_mac_array_matches_numpy(pin, pout, kmax):
    cfg = EngineConfig(pin=pin, pout=pout, kmax=kmax, stream_width=32 if pin < 8 else 64)
    rng = np.random.default_rng(1000 * pin + 10 * pout + kmax)
    groups = _make_groups(rng, cfg, 24)
    dut, acc, tags, lat = _simulate(cfg, groups, seed=pin + pout + kmax)
    assert_array_equal(acc, _reference(groups))
    assert tags == [g % 16 for g in range(len(groups))]
    assert lat == [dut.latency] * len(groups)


@pytest.mark.parametrize("deep", [1, 0])
@pytest.mark.parametrize("pin, pout, kmax", [(1, 1, 1), (2, 4, 2), (4, 2, 3)])
def test_mac_array_pairs_match_numpy(pin, pout, kmax, deep):
    """Two windows a cycle against the same weights (one multiplier a tap, PairProducts):
    both windows' sums exact, extreme operands included, at the plain array's latency."""
    cfg = EngineConfig(pin=pin, pout=pout, kmax=kmax, stream_width=32, deep_pipeline=deep)
    rng = np.random.default_rng(500 + 1000 * pin + 10 * pout + kmax)
    groups = _make_groups(rng, cfg, 16, pairs=True)
    groups += _make_groups(rng, cfg, 8, max_len=2, extreme=True, pairs=True)
    dut, acc, tags, lat = _simulate(cfg, groups, seed=pin + pout + kmax, pairs=True)
    assert_array_equal(acc, _reference(groups))
    assert_array_equal(np.array(dut.results_next).reshape(-1, cfg.pout), _reference(groups, 2))
    assert tags == [g % 16 for g in range(len(groups))]
    plain = MacArray(cfg, tag_width=4)
    plain._MustUse__used = True  # built only to ask
    assert lat == [dut.latency] * len(groups) and dut.latency == plain.latency


def test_mac_array_back_to_back_groups_without_gaps():
    cfg = EngineConfig(pin=2, pout=2, kmax=3, stream_width=32)
    rng = np.random.default_rng(7)
    groups = _make_groups(rng, cfg, 30, max_len=3)
    dut, acc, tags, lat = _simulate(cfg, groups, gap_prob=0.0)
    assert_array_equal(acc, _reference(groups))
    assert lat == [dut.latency] * len(groups)


def test_mac_array_extreme_values_fill_acc_width_exactly():
    # 16 taps of (-128)*(-128) = 2**18 per cycle, of -128*127 about -2**18:
    # with acc_width=20, groups of two such cycles use the whole signed range.
    cfg = EngineConfig(pin=4, pout=2, kmax=2, acc_width=20, stream_width=32)
    taps = 16
    n = np.int64
    groups = [
        [(np.full(taps, -128, n), np.full((2, taps), -128, n))],                   # +2**18
        [(np.full(taps, -128, n), np.full((2, taps), 127, n))] * 2,                # -2**19 + 2**13
        [(np.full(taps, 127, n), np.full((2, taps), 127, n))],
        [(np.full(taps, -128, n), np.array([[-128] * taps, [127] * taps], n)),
         (np.full(taps, 127, n), np.array([[127] * taps, [-128] * taps], n))],
    ]
    rng = np.random.default_rng(3)
    groups += _make_groups(rng, cfg, 10, max_len=2, extreme=True)
    ref = _reference(groups)
    # The test reaches within 2**12 of both edges of the signed 20-bit range ...
    assert ref.max() == 16 * (128 * 128 + 127 * 127) and ref.min() == -2 * 16 * 128 * 127
    assert ref.max() < 2**19 and ref.min() >= -2**19           # ... and nothing wraps
    _, acc, _, _ = _simulate(cfg, groups)
    assert_array_equal(acc, ref)


def test_mac_array_wraps_modulo_acc_width():
    cfg = EngineConfig(pin=4, pout=1, kmax=2, acc_width=16, stream_width=32)
    rng = np.random.default_rng(11)
    groups = _make_groups(rng, cfg, 8, max_len=3, extreme=True)
    ref = _reference(groups)
    assert np.any(ref != wrap(ref, 16))
    _, acc, _, _ = _simulate(cfg, groups)
    assert_array_equal(acc, wrap(ref, 16))


@pytest.mark.parametrize("count", [1, 2, 5, 8])
def test_adder_tree_sums_with_its_latency(count):
    dut = AdderTree(count, 8)
    rng = np.random.default_rng(count)
    vectors = rng.integers(-128, 128, size=(20, count))
    vectors[0] = -128
    vectors[1] = 127
    got = []

    async def testbench(ctx):
        for cycle in range(len(vectors) + dut.latency):
            if cycle < len(vectors):
                ctx.set(dut.i_data.as_value(), pack(vectors[cycle], 8))
            if cycle >= dut.latency:
                got.append(ctx.get(dut.o_sum))
            if dut.latency:
                await ctx.tick()
            else:
                await ctx.delay(1e-8)

    sim = Simulator(dut)
    if dut.latency:  # a single term is pure wiring: no clock domain
        sim.add_clock(1e-8)
    sim.add_testbench(testbench)
    sim.run()
    assert dut.latency == (count - 1).bit_length()
    assert_array_equal(got, vectors.sum(axis=1))


@pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")
def test_mac_array_rejects_bad_parameters():
    cfg = EngineConfig()
    with pytest.raises(TypeError, match=r"^config must be an EngineConfig, not \{'pin': 8\}$"):
        MacArray({"pin": 8}, tag_width=2)
    with pytest.raises(TypeError, match=r"^tag_width must be a non-negative integer, not 1\.5$"):
        MacArray(cfg, tag_width=1.5)
    with pytest.raises(ValueError, match=r"^tag_width must be a non-negative integer, not -1$"):
        MacArray(cfg, tag_width=-1)
    with pytest.raises(ValueError, match=r"^count must be a positive integer, not 0$"):
        AdderTree(0, 8)
    with pytest.raises(TypeError, match=re.escape("width must be a positive integer, not '8'")):
        AdderTree(3, "8")
    gc.collect()  # the half-built components warn when collected: do it under the filter


def test_mac_array_converts_to_verilog():
    from amaranth.back import verilog
    cfg = EngineConfig(pin=2, pout=2, kmax=2, stream_width=32)
    text = verilog.convert(MacArray(cfg, tag_width=3), name="mac_array")
    header = re.search(r"module mac_array\((.*?)\);", text, re.S).group(1)
    assert set(re.split(r",\s*", header.strip())) == {
        "clk", "rst", "i_valid", "i_first", "i_last", "i_tag", "i_window", "i_weights",
        "o_valid", "o_tag", "o_acc", "o_next_valid", "o_next_tag"}
    for port in ("input [63:0] i_window;", "input [127:0] i_weights;", "input [2:0] i_tag;",
                 "output [63:0] o_acc;", "output [2:0] o_tag;"):
        assert port in text


@pytest.mark.slow
def test_mac_array_multiplies_map_to_ecp5_dsps(tmp_path):
    # Every multiplier must land in a MULT18X18D, not in LUTs.
    import subprocess
    from amaranth.back import verilog
    from fpgacnn.boards.synth_stats import yosys_command
    cfg = EngineConfig(pin=2, pout=2, kmax=2, stream_width=32)
    dut = MacArray(cfg, tag_width=2)
    (tmp_path / "mac.v").write_text(verilog.convert(dut, name="mac_array"))
    # `rename -hide w:*]`: Amaranth names array elements `x[0]`, which collide with
    # the bit names ABC9 creates (YosysHQ/yosys#4349, an assertion in yosys 0.70).
    subprocess.run(yosys_command() + ["-q", "-p", "read_verilog mac.v; rename -hide w:*]; "
                    "synth_ecp5 -top mac_array; tee -q -o stat.txt stat"],
                   cwd=tmp_path, check=True, capture_output=True)
    stat = (tmp_path / "stat.txt").read_text()
    dsps = int(re.search(r"(\d+)\s+MULT18X18D", stat).group(1))
    assert dsps == cfg.pout * dut.taps


def test_mac_array_pairs_on_ecp5_take_two_multipliers_a_tap():
    """ECP5's 18x18 blocks cannot take the packed 25-bit operand: a pair engine's
    array there has two MULT18X18D a tap and lane, no packed product."""
    from amaranth.back import verilog

    class _ECP5:
        family = "ecp5"

    cfg = EngineConfig(pin=1, pout=2, kmax=2, stream_width=32)
    text = verilog.convert(MacArray(cfg, tag_width=2, pairs=True), platform=_ECP5(),
                           emit_src=False)
    assert len(re.findall(r"\bMULT18X18D\b\s*#", text)) == 2 * 4 * 2
    assert "packed" not in text
