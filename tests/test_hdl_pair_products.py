"""PairProducts: two int8 products per multiplier (docs/engine.md, "The memory
bound, and the plan"). Simulated against numpy on every triple of extreme
operands and random ones; the taking apart of the packed product proven by
yosys's SAT solver for every pair of products in range; mapped by yosys
``synth_xilinx`` to one DSP48E1 a pair, alone and in a MAC array of pairs."""

import subprocess

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from amaranth.back import verilog
from amaranth.hdl import Module, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from fpgacnn.boards.synth_stats import yosys_command
from fpgacnn.core.config import EngineConfig
from fpgacnn.core.contract import products_latency
from fpgacnn.hdl.datapath.mac_array import MacArray
from fpgacnn.hdl.tech.int8_products import Int8Products
from fpgacnn.hdl.tech.pair_products import PACKED_SHIFT, PACKED_WIDTH, PairProducts, take_apart

from hdl_pack_helpers import run_pipeline
from xilinx_cells import xilinx_cells

EXTREMES = (-128, -127, -1, 0, 1, 127)


def test_packed_operand_fits_its_width():
    low = -128 * 2 ** PACKED_SHIFT - 128
    high = 127 * 2 ** PACKED_SHIFT + 127
    assert -2 ** (PACKED_WIDTH - 1) <= low and high < 2 ** (PACKED_WIDTH - 1)
    assert low < -2 ** (PACKED_WIDTH - 2)   # one bit fewer would not do


@pytest.mark.parametrize("registered", [True, False])
def test_pairs_match_numpy(registered):
    n = 4
    dut = PairProducts(n, registered_operands=registered)
    assert dut.latency == products_latency(registered)  # a plain product's: the MAC array's
    rng = np.random.default_rng(7)
    grid = np.array(np.meshgrid(EXTREMES, EXTREMES, EXTREMES)).reshape(3, -1).T
    corners = np.repeat(grid[:, :, None], n, axis=2)          # every extreme triple
    rand = rng.integers(-128, 128, size=(200, 3, n))
    cases = np.concatenate([corners, rand])
    a0, a1, b = cases[:, 0], cases[:, 1], cases[:, 2]
    got = run_pipeline(dut, {"i_a0": a0, "i_a1": a1, "i_b": b},
                       {"o_p0": (16, n), "o_p1": (16, n)}, dut.latency)
    assert_array_equal(got["o_p0"], a0 * b)
    assert_array_equal(got["o_p1"], a1 * b)


class _TakeApart(wiring.Component):
    """:func:`take_apart` of ``hi*2**16 + lo``, beside ``hi`` and ``lo``: the property to prove."""

    def __init__(self):
        super().__init__({"hi": In(signed(16)), "lo": In(signed(16)),
                          "ok": Out(1), "in_range": Out(1)})

    def elaborate(self, platform):
        m = Module()
        product = Signal(signed(PACKED_WIDTH + 8))
        m.d.comb += product.eq((self.hi << PACKED_SHIFT) + self.lo)
        p0, p1 = take_apart(product)
        bound = 2 ** 14  # |int8 * int8| <= 2**14
        m.d.comb += [
            self.in_range.eq((self.hi >= -bound) & (self.hi <= bound)
                             & (self.lo >= -bound) & (self.lo <= bound)),
            self.ok.eq((p0 == self.hi) & (p1 == self.lo)),
        ]
        return m


def test_take_apart_proven_for_every_pair_of_products(tmp_path):
    """For every ``hi``, ``lo`` an int8 product can be, SAT finds no sum taken apart wrong."""
    (tmp_path / "take_apart.v").write_text(
        verilog.convert(_TakeApart(), name="take_apart", emit_src=False))
    script = ("read_verilog take_apart.v; proc; flatten; opt_clean; "
              "sat -verify -prove-asserts -set in_range 1 -prove ok 1 take_apart")
    proc = subprocess.run(yosys_command() + ["-q", "-l", "yosys.log", "-p", script],
                          cwd=tmp_path, capture_output=True, text=True)
    log = (tmp_path / "yosys.log").read_text() if (tmp_path / "yosys.log").exists() else ""
    assert proc.returncode == 0, log[-3000:] + proc.stderr[-2000:]
    assert "SAT proof finished - no model found: SUCCESS!" in log


def test_one_dsp48e1_a_pair(tmp_path):
    """synth_xilinx maps a pair to one DSP48E1, where two plain products take two."""
    pairs = xilinx_cells(tmp_path, PairProducts(4), "pairs")
    plain = xilinx_cells(tmp_path, Int8Products(8), "plain")
    assert pairs.get("DSP48E1") == 4, pairs
    assert plain.get("DSP48E1") == 8, plain


def test_pair_mac_array_takes_one_dsp48e1_a_tap_and_lane(tmp_path):
    """A MAC array of two windows a cycle: 2 x 9 x 2 products in 18 DSP48E1, as many as
    the plain array of half the products."""
    cfg = EngineConfig(pin=1, pout=2, kmax=3, stream_width=32)
    pairs = xilinx_cells(tmp_path, MacArray(cfg, tag_width=2, pairs=True), "pairs")
    plain = xilinx_cells(tmp_path, MacArray(cfg, tag_width=2), "plain")
    assert pairs.get("DSP48E1") == plain.get("DSP48E1") == 9 * 2, (pairs, plain)
