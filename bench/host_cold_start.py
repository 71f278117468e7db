"""What the length of a wait costs the host's work on this machine (issue 16's host share).

One model (``--model``, default ResNet-8 of the zoo, full size) at batch 1 on a
board's sized engine with its sequencer (``--board``, default the PYNQ-Z2's):
an inference on the simulated board, checked bit-exact with the reference
backend, then the host time of ``Accelerator.run(x)`` (the report's
``host_seconds``: the wall time less the board's waits and register
accesses) on an :class:`AnsweringBoard` of that board
(``bench/sequencer_end_to_end.py``): the same host code, the board's answers
given at once, its wait for the engine a spin (a host polling its board) or
a sleep of a given length. Inferences follow one another, so every line of
``run(x)`` last ran one wait before, as on a board.

Waits: none; the engine's own time at 100 MHz (what a board would make the
host wait); and longer ones up to the simulated board's (some 0.4 s an
inference). Least and median of ``--repeats`` inferences after two each.
Wall-clock figures: read the ratios between the rows, measured in one
process.

Usage::

    python bench/host_cold_start.py [--model resnet8] [--board pynq-z2] [--repeats 15]
"""

import argparse
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from bench_report import load_zoo  # noqa: E402
from sequencer_end_to_end import AnsweringBoard  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="resnet8")
    parser.add_argument("--board", default="pynq-z2")
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args(argv)
    logging.getLogger().setLevel(logging.ERROR)

    from fpgacnn.boards.board import load_board
    from fpgacnn.boards.engine_sizing import size_engine
    from fpgacnn.boards.zynq_design import DESIGN
    from fpgacnn.host.accelerator import Accelerator, open_board
    from fpgacnn.host.onnx_import import load_onnx
    from fpgacnn.host.reference import ReferenceBackend

    zoo = load_zoo()
    written = zoo.write_zoo(Path(tempfile.mkdtemp()), names=[args.model], n_calibration=16)
    board_data = load_board(args.board)
    config = size_engine(board_data).config
    board = open_board("sim", config, sequencer=True)
    board.set_memory_timing(bytes_per_cycle=DESIGN.memory_bytes_per_cycle(board_data.family,
                                                                           config))
    qm = load_onnx(written[args.model]["int8"])
    x = zoo.calibration_data(zoo.build(args.model), 1, seed=200)
    want = qm.dequantize_output(ReferenceBackend().run_int8(qm, qm.quantize_input(x)))
    acc = Accelerator(qm, config=config, board=board)
    acc.run(x)
    t0 = time.perf_counter()
    if not np.array_equal(acc.run(x), want):
        raise SystemExit(f"{args.model}: not bit-exact with the reference")
    simulated = time.perf_counter() - t0
    engine = acc.report["engine_seconds"]
    print(f"{args.model} on the {args.board} sized engine: engine {1e3 * engine:.3f} ms at "
          f"100 MHz; one simulated inference {simulated:.2f} s of wall clock; host "
          f"{1e3 * acc.report['host_seconds']:.3f} ms there")
    print("| wait for the engine | host ms, least | median | least / engine time |")
    print("|---|---:|---:|---:|")
    waits = [(0.0, False, "none"), (engine, False, "the engine's time, spinning"),
             (engine, True, "the engine's time, sleeping")]
    waits += [(s, sleep, f"{1e3 * s:g} ms, {'sleeping' if sleep else 'spinning'}")
              for s in (0.005, 0.05, 0.4) for sleep in (False, True)]
    for seconds, sleep, label in waits:
        answering = Accelerator(qm, config=config,
                                board=AnsweringBoard(board, config, seconds, sleep=sleep))
        host = []
        for i in range(args.repeats + 2):
            answering.run(x)
            if i >= 2:
                host.append(answering.report["host_seconds"])
        print(f"| {label} | {1e3 * min(host):.3f} | {1e3 * statistics.median(host):.3f} "
              f"| {min(host) / engine:.2f} |", flush=True)
    board.close()


if __name__ == "__main__":
    main()
