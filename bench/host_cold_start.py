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

Side by side (``--before TREE``, a checkout of another commit, e.g.
``git archive fb64989 | tar -x -C /tmp/before``): for each of ``--models``
(default ResNet-8, MobileNetV1 and DS-CNN), the host time of ``run(x)``
after a spin as long as the engine's, in the other tree and in this one.
The simulated board runs once per model, in this process (checked
bit-exact with the reference); its register answers are handed to worker
processes (``--worker``), each of which imports ``fpgacnn`` from one tree
(``bench/host_share.py``'s ``use_tree``) and times ``--repeats``
inferences on an :class:`AnsweringBoard` of them; the workers of the two
trees alternate ``--rounds`` times, so both see the same machine load. The
table gives the least and the median of all their inferences, and the host
share (the least over the engine's time at 100 MHz; issue 16's goal is
<= 5 % on ResNet-8 at batch 1).

Usage::

    python bench/host_cold_start.py [--model resnet8] [--board pynq-z2] [--repeats 15]
    python bench/host_cold_start.py --before /tmp/before [--models resnet8 ...]
                                    [--rounds 4] [--repeats 200]
"""

import argparse
import json
import logging
import pickle
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from bench_report import load_zoo  # noqa: E402
from sequencer_end_to_end import AnsweringBoard  # noqa: E402

#: The models of the side-by-side table, by default.
MODELS = ["resnet8", "mobilenet_v1_025", "ds_cnn"]


def _simulated(zoo, path, name, board, config):
    """``(model, x, accelerator)`` after an inference of ``name`` on the simulated
    ``board`` checked bit-exact with the reference backend."""
    from fpgacnn.host.accelerator import Accelerator
    from fpgacnn.host.onnx_import import load_onnx
    from fpgacnn.host.reference import ReferenceBackend
    qm = load_onnx(path)
    x = zoo.calibration_data(zoo.build(name), 1, seed=200)
    want = qm.dequantize_output(ReferenceBackend().run_int8(qm, qm.quantize_input(x)))
    acc = Accelerator(qm, config=config, board=board)
    acc.run(x)
    if not np.array_equal(acc.run(x), want):
        raise SystemExit(f"{name}: not bit-exact with the reference")
    return qm, x, acc


def _open_board(board_name):
    from fpgacnn.boards.board import load_board
    from fpgacnn.boards.engine_sizing import size_engine
    from fpgacnn.boards.zynq_design import DESIGN
    from fpgacnn.host.accelerator import open_board
    board_data = load_board(board_name)
    config = size_engine(board_data).config
    board = open_board("sim", config, sequencer=True)
    board.set_memory_timing(bytes_per_cycle=DESIGN.memory_bytes_per_cycle(board_data.family,
                                                                           config))
    return board, config


def waits(args):
    """The table of waits for one model, in this tree."""
    from fpgacnn.host.accelerator import Accelerator
    zoo = load_zoo()
    written = zoo.write_zoo(Path(tempfile.mkdtemp()), names=[args.model], n_calibration=16)
    board, config = _open_board(args.board)
    t0 = time.perf_counter()
    qm, x, acc = _simulated(zoo, written[args.model]["int8"], args.model, board, config)
    simulated = (time.perf_counter() - t0) / 2
    engine = acc.report["engine_seconds"]
    print(f"{args.model} on the {args.board} sized engine: engine {1e3 * engine:.3f} ms at "
          f"100 MHz; one simulated inference {simulated:.2f} s of wall clock; host "
          f"{1e3 * acc.report['host_seconds']:.3f} ms there")
    print("| wait for the engine | host ms, least | median | least / engine time |")
    print("|---|---:|---:|---:|")
    rows = [(0.0, False, "none"), (engine, False, "the engine's time, spinning"),
            (engine, True, "the engine's time, sleeping")]
    rows += [(s, sleep, f"{1e3 * s:g} ms, {'sleeping' if sleep else 'spinning'}")
             for s in (0.005, 0.05, 0.4) for sleep in (False, True)]
    for seconds, sleep, label in rows:
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


def worker(tree, state, repeats):
    """In a process of its own: this tree's host time of ``run(x)`` after a spin as long
    as the engine's, ``repeats`` inferences a model of ``state`` (after two)."""
    from host_share import use_tree
    module = use_tree(tree)
    from fpgacnn.host.accelerator import Accelerator
    from fpgacnn.host.onnx_import import load_onnx
    logging.getLogger().setLevel(logging.ERROR)
    with open(state, "rb") as f:
        cases = pickle.load(f)
    result = {"fpgacnn": str(Path(module.__file__).resolve().parent)}
    for case in cases:
        board = AnsweringBoard.from_answers(case["answers"], case["engine_seconds"])
        acc = Accelerator(load_onnx(case["model"]), config=case["config"], board=board)
        host = []
        for i in range(repeats + 2):
            acc.run(case["x"])
            if i >= 2:
                host.append(acc.report["host_seconds"])
        result[case["name"]] = host
    return result


def side_by_side(args):
    """The before / after table (module docstring)."""
    zoo = load_zoo()
    tmp = Path(tempfile.mkdtemp())
    written = zoo.write_zoo(tmp, names=args.models, n_calibration=16)
    board, config = _open_board(args.board)
    cases = []
    for name in args.models:
        _, x, acc = _simulated(zoo, written[name]["int8"], name, board, config)
        cases.append({"name": name, "model": str(written[name]["int8"]), "x": x,
                      "config": config, "engine_seconds": acc.report["engine_seconds"],
                      "answers": AnsweringBoard(board, config, 0.0).answers})
    board.close()
    state = tmp / "cases.pickle"
    with open(state, "wb") as f:
        pickle.dump(cases, f)
    trees = {"before": str(Path(args.before).resolve()), "after": str(ROOT)}
    host = {side: {c["name"]: [] for c in cases} for side in trees}
    for _ in range(args.rounds):
        for side, tree in trees.items():
            proc = subprocess.run([sys.executable, __file__, "--worker", tree, "--state",
                                   str(state), "--repeats", str(args.repeats)],
                                  capture_output=True, text=True)
            if proc.returncode:
                sys.stderr.write(proc.stderr)
                raise SystemExit(f"the {side} worker failed")
            result = json.loads(proc.stdout)
            if result.pop("fpgacnn") != tree:
                raise SystemExit(f"the {side} worker imported another tree than {tree}")
            for name, times in result.items():
                host[side][name] += times
    print(f"Host time of one `run(x)` after a spin as long as the engine's, batch 1, on the "
          f"{args.board} sized engine ({args.rounds} x {args.repeats} inferences per tree, "
          "workers alternating; microseconds, least and median); host share = least / "
          "engine time at 100 MHz")
    print()
    print("| model | engine µs | before least | before median | after least | after median "
          "| after / before (least) | host share before | host share after |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for case in cases:
        name, engine = case["name"], case["engine_seconds"]
        b, a = host["before"][name], host["after"][name]
        print(f"| {name} | {1e6 * engine:.0f} | {1e6 * min(b):.1f} | "
              f"{1e6 * statistics.median(b):.1f} | {1e6 * min(a):.1f} | "
              f"{1e6 * statistics.median(a):.1f} | {min(a) / min(b):.2f} | "
              f"{100 * min(b) / engine:.1f} % | {100 * min(a) / engine:.1f} % |", flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="resnet8")
    parser.add_argument("--models", nargs="+", default=MODELS)
    parser.add_argument("--board", default="pynq-z2")
    parser.add_argument("--repeats", type=int, default=None,
                        help="inferences per wait (default 15), per worker with --before "
                             "(default 200)")
    parser.add_argument("--before", metavar="TREE",
                        help="also time this source tree, side by side")
    parser.add_argument("--rounds", type=int, default=4,
                        help="worker processes per tree with --before (default 4)")
    parser.add_argument("--worker", metavar="TREE", help=argparse.SUPPRESS)
    parser.add_argument("--state", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    logging.getLogger().setLevel(logging.ERROR)
    if args.worker:
        json.dump(worker(args.worker, args.state, args.repeats), sys.stdout)
    elif args.before:
        args.repeats = args.repeats or 200
        side_by_side(args)
    else:
        args.repeats = args.repeats or 15
        waits(args)


if __name__ == "__main__":
    main()
