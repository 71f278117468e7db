"""Registers kept as copies through synthesis (hdl/tech/register_copies.py)."""

import re
import subprocess

import pytest
from amaranth.back import rtlil
from amaranth.hdl import Fragment, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from fpgacnn.hdl.tech.register_copies import KEEP_COPY, YOSYS_KEEP_COPIES, register_copy
from fpgacnn.boards.synth_stats import yosys_command



class _TwoSelects(wiring.Component):
    """One 2-bit select registered twice, each copy picking from its own word."""
    sel: In(2)
    a: In(4)
    b: In(4)
    o: Out(2)

    def elaborate(self, platform):
        m = Module()
        s0 = register_copy(m, self.sel, "sel_a")
        s1 = register_copy(m, self.sel, "sel_b")
        m.d.comb += [self.o[0].eq(self.a.bit_select(s0, 1)), self.o[1].eq(self.b.bit_select(s1, 1))]
        return m


def _flip_flops(tmp_path, before_synth):
    (tmp_path / "t.il").write_text(rtlil.convert(_TwoSelects(), name="top"))
    subprocess.run(yosys_command() + ["-q", "-p", f"read_rtlil t.il; {before_synth} synth_ecp5 -top top; "
                    f"tee -q -o stat.txt stat"], cwd=tmp_path, check=True, capture_output=True)
    return int(re.search(r"(\d+)\s+TRELLIS_FF", (tmp_path / "stat.txt").read_text()).group(1))


@pytest.mark.parametrize("keep, flip_flops", [(False, 2), (True, 4)])
def test_copies_survive_synthesis_only_when_kept(tmp_path, keep, flip_flops):
    # Without the command yosys merges the two copies into one register
    # (what the copies are there to prevent); with it, both stay.
    assert _flip_flops(tmp_path, f"{YOSYS_KEEP_COPIES};" if keep else "") == flip_flops


def test_copy_is_the_value_a_cycle_later():
    dut = _TwoSelects()
    seen = []

    async def bench(ctx):
        for sel in [1, 3, 0, 2]:
            ctx.set(dut.sel, sel)
            ctx.set(dut.a, 0b1010)
            ctx.set(dut.b, 0b0101)
            await ctx.tick()
            seen.append(ctx.get(dut.o))

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    # o[0] = a[sel], o[1] = b[sel] of the select registered at each tick.
    assert seen == [(0b1010 >> s & 1) | ((0b0101 >> s & 1) << 1) for s in [1, 3, 0, 2]]


def test_copy_is_marked_for_the_flow():
    m = Module()
    copy = register_copy(m, Signal(3), "c")
    assert copy.attrs == {KEEP_COPY: "1"} and len(copy) == 3
    Fragment.get(m, None)
