"""Fmax of an engine on a board's part, with the critical path in a few lines.

Builds the board's default engine, with any parameter overridden, behind
the port harness of :func:`fpgacnn.boards.open_flow.build_open` (no host
link: the engine alone), and prints nextpnr's routed Fmax and its critical
path with the carry chains folded. A small engine on a big part routes in a
few minutes where the full default takes an hour: the way to find the
engine's slow paths before a full build.

Usage::

    python bench/fmax_probe.py --board ulx3s-85f --set pin=2 pout=1 max_channels=16 max_out_channels=16
"""

import argparse
import dataclasses
import re
import sys
import tempfile
import time
from pathlib import Path

from fpgacnn.boards.board import load_board
from fpgacnn.boards.engine_sizing import size_engine
from fpgacnn.boards.open_flow import TimingError, build_open
from fpgacnn.hdl.engine import ConvEngine

_STEP = re.compile(r"Info:\s+(clk-to-q|routing|logic|setup)\s+([\d.]+)\s+([\d.]+)\s+(Source|Net)\s+(\S+)")


def critical_path(log_text):
    """The first clock-to-clock critical path of a nextpnr log, as ``(kind, ns, total, name)`` rows.

    Routing hops of zero delay and the cells of one carry chain after the
    first are left out.
    """
    lines = log_text.splitlines()
    starts = [i for i, line in enumerate(lines) if "Critical path report for clock" in line]
    if not starts:
        return []
    rows, previous = [], None
    for line in lines[starts[0] + 2:]:
        if "ns logic" in line:
            break
        match = _STEP.match(line)
        if not match:
            continue
        kind, delay, total, _, name = match.groups()
        if kind == "routing" and float(delay) == 0.0:
            continue
        chain = re.sub(r"(_CCU2C|\$CCU2|\$nextpnr_CCU2C).*$", "", name)
        if kind == "logic" and chain == previous:
            continue
        previous = chain
        rows.append((kind, float(delay), float(total), name.replace("harness.dut.", "")))
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--board", required=True)
    parser.add_argument("--set", nargs="*", default=[], metavar="NAME=VALUE",
                        help="engine parameters to override (integers)")
    parser.add_argument("--target", type=float, help="clock target in MHz (default: the board's)")
    parser.add_argument("--out", type=Path, help="keep the build here (default: a temporary folder)")
    args = parser.parse_args(argv)

    board = load_board(args.board)
    overrides = {}
    for item in args.set:
        name, _, value = item.partition("=")
        overrides[name] = int(value)
    config = dataclasses.replace(size_engine(board).config, **overrides)
    print(config)
    out = args.out or Path(tempfile.mkdtemp(prefix="fmax_probe_"))
    t0 = time.monotonic()
    try:
        result = build_open(board, ConvEngine(config), out, target_mhz=args.target,
                            echo=lambda s: None)
        report = result.report
        met = True
    except TimingError as e:
        report, met = None, False
        print(f"timing not met: {e}")
    log = next(out.glob("**/*.tim"), None)
    if report is None:
        import json
        report = json.loads((out / "report.json").read_text())
    for clock in report["clocks"]:
        print(f"clock {clock['name']}: {clock['achieved_mhz']:.2f} MHz "
              f"(target {clock['target_mhz']:.2f}, {'met' if met else 'not met'})")
    print(f"build time {time.monotonic() - t0:.0f} s; build in {out}")
    if log is not None:
        print("critical path (ns, cumulative):")
        for kind, delay, total, name in critical_path(log.read_text()):
            print(f"  {kind:8s} {delay:5.2f} {total:6.2f}  {name[:110]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
