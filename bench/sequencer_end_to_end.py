"""End to end with the engine's own sequencer, beside the layer-by-layer host (issue 16).

For each MLPerf Tiny model of the zoo (examples/model_zoo.py, full size) on
each board's sized engine (``--boards``: the PYNQ-Z2's and the ZCU104's), in
one process, on two simulated boards of the same engine: the plain engine,
which the host drives run by run (``Accelerator`` over
:mod:`fpgacnn.host.program_runner`), and the ProgramEngine with its
sequencer and the memory model at its Zynq-7000 defaults (40 cycles, 8
bytes per cycle each way), where the host starts the sequencer
and runs only the records it stops at (:mod:`fpgacnn.host.sequencer_runner`).

Both outputs are checked against the reference backend bit for bit. Per
model, batch and mode, in steady state (weights resident where they fit,
the least of ``--repeats`` inferences after a first):

- records: those the sequencer ran / all of the program's (the input folds,
  which the host writes with the input, not counted); starts: how often the
  host started the sequencer in one inference (1: the whole network in one
  call);
- engine cycles: the engine's busy cycles of every run, plus the sequencer's
  own (record fetches, descriptor writes, counters), i.e. what the report
  adds up; memory stalls are inside the busy cycles (stall-in);
- host ms per inference: the host's measured work (the report's
  ``host_seconds``: packing and unpacking of the runs it makes, host
  layers, the input and output copies, starting the sequencer), which is
  wall-clock on this x86 machine: read the ratio between the two modes,
  measured side by side, not the figure;
- host share: host time / engine time at 100 MHz, the issue's goal being
  <= 5 % on ResNet-8 at batch 1.

Usage::

    python bench/sequencer_end_to_end.py [--models resnet8 ds_cnn ...] [--batches 1 8]
                                         [--boards pynq-z2 zcu104] [--repeats 5]
                                         [--write BENCHMARKS.md]
"""

import argparse
import datetime
import importlib.util
import logging
import subprocess
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SECTION = "## 6. The whole network on the engine's sequencer (issue 16)"


def _zoo():
    spec = importlib.util.spec_from_file_location("model_zoo", ROOT / "examples" / "model_zoo.py")
    zoo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(zoo)
    return zoo


def _measure(acc, x8, want, repeats):
    acc.run_int8(x8)  # the first inference loads the weights
    best = None
    for _ in range(repeats):
        y = acc.run_int8(x8)
        if not np.array_equal(y, want):
            raise SystemExit(f"{acc.model.name}: not bit-exact with the reference")
        r = acc.report
        if best is None or r["host_seconds"] < best["host_seconds"]:
            best = r
    return best


#: Published MLPerf Tiny and overlay figures (ms per image, batch 1), from ../shared/ANCHORS.md.
PUBLISHED = [
    ("fpgaConvNet, MLPerf Tiny v1.1 closed (tiny_results_v1.1 closed/fpgaconvnet)",
     "ZedBoard (XC7Z020, the PYNQ-Z2's part)", {"resnet8": 0.411, "ds_cnn": 0.324,
                                                "mobilenet_v1_025": 9.49},
     "one bitstream per network; 143 / 143 / 111 MHz, 188-211 DSP"),
    ("hls4ml, MLPerf Tiny v1.0 open (tiny_results_v1.0 open/hls4ml)", "PYNQ-Z2 (XC7Z020)",
     {"resnet8": 7.64}, "RN08, not the reference ResNet-8; 100 MHz"),
    ("Vitis AI DPU 2x B4096 (Vitis-AI 2.0 AI-Model-Zoo README)", "ZCU104", {},
     "ResNet-18 5.11 ms, MobileNetV2 3.74 ms at 300 MHz: no MLPerf Tiny model published"),
]


def _published(rows):
    """The comparison with published figures: fpgacnn's end to end at batch 1 (one
    bitstream for every model) beside them."""
    models = ["resnet8", "ds_cnn", "mobilenet_v1_025", "autoencoder"]
    lines = ["", "Beside published figures (ms per image at batch 1; fpgacnn's are end to end "
             "from the table above, engine at 100 MHz plus the host's measured time; one "
             "bitstream runs every model):", "",
             "| system | board | ResNet-8 | DS-CNN | MobileNetV1-VWW | AutoEncoder | notes |",
             "|---|---|---:|---:|---:|---:|---|"]
    for board in dict.fromkeys(r[0] for r in rows):
        ours = {r[1]: r[10] for r in rows if r[0] == board and r[2] == 1 and r[3] == "sequencer"}
        cells = " | ".join(f"{ours[m]:.3f}" if m in ours else "-" for m in models)
        lines.append(f"| fpgacnn, sequencer | {board} sized engine (simulated) | {cells} | "
                     "one bitstream, all models; its Zynq top generated and simulated, not yet "
                     "built with Vivado |")
    for system, board, figures, notes in PUBLISHED:
        cells = " | ".join(f"{figures[m]:g}" if m in figures else "-" for m in models)
        lines.append(f"| {system} | {board} | {cells} | {notes} |")
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", nargs="+",
                        default=["resnet8", "ds_cnn", "mobilenet_v1_025", "autoencoder"])
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--boards", nargs="+", default=["pynq-z2", "zcu104"])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--write", help="replace section 6 of this BENCHMARKS.md")
    args = parser.parse_args(argv)
    logging.getLogger().setLevel(logging.ERROR)

    from fpgacnn.boards.board import load_board
    from fpgacnn.boards.engine_sizing import size_engine
    from fpgacnn.host.accelerator import Accelerator, open_board
    from fpgacnn.host.onnx_import import load_onnx
    from fpgacnn.host.program_image import FoldRecord
    from fpgacnn.host.reference import ReferenceBackend

    zoo = _zoo()
    written = zoo.write_zoo(Path(tempfile.mkdtemp()), names=args.models, n_calibration=16)
    rows, engines = [], []
    for board_name in args.boards:
        config = size_engine(load_board(board_name)).config
        engines.append(f"{board_name}: pin {config.pin}, pout {config.pout}, "
                       f"{config.stream_width}-bit stream")
        boards = {"host, run by run": open_board("sim", config),
                  "sequencer": open_board("sim", config, sequencer=True)}
        for name in args.models:
            qm = load_onnx(written[name]["int8"])
            for batch in args.batches:
                x8 = qm.quantize_input(zoo.calibration_data(zoo.build(name), batch, seed=200))
                want = ReferenceBackend().run_int8(qm, x8)
                for mode, board in boards.items():
                    acc = Accelerator(qm, config=config, board=board)
                    r = _measure(acc, x8, want, args.repeats)
                    seq = r.get("sequencer")
                    records = sum(not isinstance(rec, FoldRecord)
                                  for rec in acc.image(batch).records)
                    ran = seq["sequencer_runs"] if seq else 0
                    starts = seq["sequencer_starts"] if seq else 0
                    rows.append((board_name, name, batch, mode, f"{ran} / {records}", starts,
                                 r["total_cycles"], 1e3 * r["engine_seconds"] / batch,
                                 1e3 * r["host_seconds"] / batch, r["host_share"],
                                 1e3 * r["end_to_end_seconds_per_image"]))
                    print(*rows[-1], flush=True)
        for board in boards.values():
            board.close()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    lines = [SECTION, "",
             f"Measured {datetime.date.today()} at commit {commit} with "
             f"`python bench/sequencer_end_to_end.py --repeats {args.repeats}` "
             f"(the boards' sized engines: {'; '.join(engines)}; "
             f"memory 40 cycles, 8 B/cycle; steady state; "
             "every output bit-exact with the reference). Engine time at 100 MHz. Host "
             "milliseconds are wall-clock on this x86 machine: compare the two modes, "
             "measured side by side in one process.", "",
             "| engine | model | batch | mode | records on the sequencer | starts "
             "| engine cycles | engine ms / image | host ms / image | host share "
             "| end to end ms / image |",
             "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
    for board_name, name, batch, mode, ran, starts, cycles, eng, host, share, e2e in rows:
        lines.append(f"| {board_name} | {name} | {batch} | {mode} | {ran} | {starts} | "
                     f"{cycles:,} | {eng:.3f} | {host:.3f} | {share:.2f} | {e2e:.3f} |")
    lines += _published(rows)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.write:
        path = Path(args.write)
        old = path.read_text()
        if SECTION in old:
            head, rest = old.split(SECTION, 1)
            tail = rest[rest.find("\n## ") + 1:] if "\n## " in rest else ""
            old = head + text + ("\n" + tail if tail else "")
        else:
            old = old.rstrip("\n") + "\n\n" + text
        path.write_text(old)


if __name__ == "__main__":
    main()
