"""``fpgacnn demo``: the main job on a fresh machine.

Generates the engine, builds it into a simulated board (Verilator, cached),
runs the bundled digits model on it and prints the float / int8-reference /
RTL accuracy, whether the RTL equals the reference bit for bit, the cycles of
every layer and the time per image end to end (engine cycles at the clock
plus the host's measured work).

The simulated board's engine is the one a Zynq build holds: the engine with
its program sequencer and a memory (docs/program.md), so the whole network
runs from one start, as on a board, with no host work between layers
(``fpgacnn run`` runs layer by layer unless ``--sequencer``).
"""

import time
from pathlib import Path

import numpy as np

from ..accelerator import Accelerator
from ...core.errors import BackendError, InputError
from ..examples import load_example
from ..onnx_import import load_onnx
from ..reference import ReferenceBackend
from .run import (_float_accuracy, add_engine_arguments, check_outputs, engine_config,
                  print_cycles, print_progress, write_report)

__all__ = ["add_parser", "run"]


def add_parser(subparsers):
    p = subparsers.add_parser(
        "demo", help="run the example model on the simulated board",
        description="Generate the engine, build it with Verilator (cached), run the bundled "
                    "digits model on the simulated board (the engine with its program "
                    "sequencer, as a Zynq build holds it: the whole network from one start) "
                    "and print accuracy, cycles per layer and the time per image end to end.")
    p.add_argument("--images", type=int, default=None,
                   help="how many held-out digits to run (default: all 360)")
    p.add_argument("--report", metavar="REPORT.json", type=Path,
                   help="write the run's JSON report")
    add_engine_arguments(p)
    return p


def run(args):
    if args.bitfile is not None:
        raise InputError("fpgacnn demo runs on the simulated board; use fpgacnn run "
                         "--backend pynq --bitfile ... for a board")
    example = load_example("digits")
    count = len(example.x) if args.images is None else args.images
    if not 1 <= count <= len(example.x):
        raise InputError(f"--images must be between 1 and {len(example.x)}, not {count}")
    x, labels = example.x[:count], example.y[:count]
    check_outputs(args)
    config = engine_config(args)
    model = load_onnx(example.model)

    print(f"fpgacnn demo: {model.name}, {len(model.layers)} layers, {model.macs:,} MACs per image, "
          f"{count} held-out digits")
    print(f"engine: pin={config.pin} pout={config.pout} kmax={config.kmax}, "
          f"{config.peak_macs_per_cycle} MACs/cycle, {config.stream_width}-bit streams, "
          f"{args.clock_mhz:g} MHz")
    start = time.perf_counter()
    with Accelerator(model, backend="sim", config=config, batch=count, waves=args.waves,
                     clock_hz=args.clock_mhz * 1e6, sequencer=True,
                     progress=print_progress) as accelerator:
        print(f"simulated board ready in {time.perf_counter() - start:.0f} s")
        start = time.perf_counter()
        y_rtl = accelerator.run(x)
        seconds = time.perf_counter() - start
        report = accelerator.report
    y_ref = ReferenceBackend().run(model, x)
    exact = np.array_equal(y_rtl, y_ref)

    def accuracy(y):
        correct = int((y.argmax(axis=1) == labels).sum())
        return f"{correct / count:.2%} ({correct}/{count})"

    print()
    print(f"float model (onnxruntime):   {_float_accuracy(example, count):.2%}")
    print(f"int8 reference backend:      {accuracy(y_ref)}")
    print(f"int8 RTL (simulated board):  {accuracy(y_rtl)}")
    print(f"RTL output equals the reference bit for bit: {'yes' if exact else 'NO'}")
    print()
    print_cycles(report)
    print(f"simulation took {seconds:.1f} s of wall-clock time")
    if args.report is not None:
        write_report(args.report, report)
        print(f"wrote {args.report}")
    if not exact:
        raise BackendError("the RTL output differs from the reference backend")
    return 0
