"""PipelinedMultiplier: exact products after two cycles in the simulator, and
the ECP5 netlist's MULT18X18D blocks with their own registers enabled.

No simulation model of the MULT18X18D ships with the PyPI tools, so the ECP5
side is checked as a netlist: every product goes to a block whose input and
output registers are clocked, with the operands sign-extended to 18 bits;
nextpnr places and times these blocks in the board builds.
"""

import re

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from amaranth.back import verilog
from amaranth.hdl import signed, unsigned
from amaranth.sim import Simulator

from fpgacnn.core.config import EngineConfig
from fpgacnn.hdl.tech.dsp import PipelinedMultiplier
from fpgacnn.hdl.tech.int8_products import Int8Products
from fpgacnn.hdl.datapath.requantizer import Requantizer


class _ECP5:
    family = "ecp5"
    device = "LFE5U-85F"


@pytest.mark.parametrize("a_shape, b_shape", [
    (signed(8), signed(8)), (unsigned(17), unsigned(7)), (signed(16), unsigned(17)),
    (signed(33), unsigned(24)),
])
def test_generic_products_are_exact_after_two_cycles(a_shape, b_shape):
    dut = PipelinedMultiplier(a_shape, b_shape)
    rng = np.random.default_rng(a_shape.width * 100 + b_shape.width)

    def values(shape, n):
        lo, hi = (-(1 << (shape.width - 1)), 1 << (shape.width - 1)) if shape.signed else (0, 1 << shape.width)
        v = rng.integers(lo, hi, size=n, dtype=np.int64)
        v[:2] = lo, hi - 1  # the extremes
        return v

    a, b = values(a_shape, 40), values(b_shape, 40)
    a[2], b[2] = a[0], b[1]
    got = []

    async def testbench(ctx):
        for i in range(len(a) + dut.latency):
            if i < len(a):
                ctx.set(dut.a, int(a[i]))
                ctx.set(dut.b, int(b[i]))
            await ctx.tick()
            if i >= dut.latency - 1 and len(got) < len(a):
                got.append(ctx.get(dut.p))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(testbench)
    sim.run()
    assert dut.latency == 2
    assert_array_equal(np.array([int(g) for g in got], dtype=object),
                       np.array([int(x) * int(y) for x, y in zip(a, b)], dtype=object))


def _blocks(text):
    return re.findall(r"MULT18X18D\s*#\((.*?)\)\s*\w+\s*\((.*?)\);", text, re.S)


def test_ecp5_products_use_registered_dsp_blocks():
    text = verilog.convert(PipelinedMultiplier(signed(16), unsigned(17)), name="mul",
                           platform=_ECP5(), emit_src=False)
    (params, ports), = _blocks(text)
    for reg in ("INPUTA", "INPUTB", "OUTPUT"):
        assert re.search(rf'\.REG_{reg}_CLK\("CLK0"\)', params), reg
    assert re.search(r'\.REG_PIPELINE_CLK\("NONE"\)', params)
    assert re.search(r"\.SIGNEDA\(1'h1\)", ports) and re.search(r"\.SIGNEDB\(1'h1\)", ports)
    assert re.search(r"\.CLK0\(clk\)", ports)
    # The generic path elsewhere, and where the operands do not fit the block.
    assert "MULT18X18D" not in verilog.convert(PipelinedMultiplier(signed(16), unsigned(17)),
                                                name="mul", emit_src=False)
    assert "MULT18X18D" not in verilog.convert(PipelinedMultiplier(signed(19), unsigned(17)),
                                                name="mul", platform=_ECP5(), emit_src=False)


def test_ecp5_engine_blocks_take_every_multiplication():
    products = verilog.convert(Int8Products(9), name="products", platform=_ECP5(), emit_src=False)
    assert len(_blocks(products)) == 9
    rq = Requantizer(EngineConfig(pout=2), tag_width=1)
    text = verilog.convert(rq, name="rq", platform=_ECP5(), emit_src=False)
    assert len(_blocks(text)) == 2 * 4  # four 17-bit partial products per lane
    assert not _multiplications(text)  # none left for yosys to map


def _multiplications(text):
    return [line for line in text.splitlines() if re.match(r"\s*assign .*\) \* ", line)]


def test_generic_netlists_multiply_in_the_fabric():
    # ... which the check above would see: it can fail.
    assert len(_multiplications(verilog.convert(Int8Products(9), name="p", emit_src=False))) == 9
