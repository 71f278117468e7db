"""What a model's utilization goal needs: its compiled cycles with the memory twice as wide (issue 15).

BENCHMARKS.md section 7 bounds every layer-by-layer engine by its memory:
``B`` bytes a cycle each way (the PYNQ-Z2's HP port: 8). This projects the
compiled program (the cycle model's runs, = RTL, steady state, batch 1)
onto two changes of the engine that the remaining goals name, step by step:

- **memory at ``k * B``** (``--scale``, default 2: a second HP port for the
  reads and one for the writes, with a line-buffer writer storing ``k``
  times the words a cycle): a step whose stream phase the input or the
  output binds (:func:`mlperf_tiny.run_parts`) keeps its weights, compute
  and overhead cycles, and its stream phase shrinks to
  ``max(depthwise, compute, input / k, output / k)`` (``depthwise`` a fused
  block's depthwise unit's demand, 0 elsewhere);
- **within the DRAM** besides: the board's DRAM moves at most ``D`` bytes a
  cycle, reads and writes together (``--dram-mb-s``, the memory's peak in
  MB/s at the engine's clock ``--clock-mhz``; the PYNQ-Z2's 16-bit DDR3 at
  1,066 MT/s: 2,132 MB/s, ``D`` = 21.3 bytes a cycle at 100 MHz, shared with
  the ARM cores, docs/program.md), so a stream phase takes at least
  ``(input + output) * B / D`` cycles (the demands are cycles of ``B``
  bytes);
- **lanes full** besides: a step's compute demand (the array's) down to
  its floor (``MACs / peak``; of a fused block its pointwise's MACs): what
  a datapath mode that fills the 1x1 remap's ``pin * kmax^2`` lanes with
  fewer channels would reach (MobileNetV1's first block: 8 channels in 36
  lanes), the memory as in the column before. A fused block's depthwise
  demand stays the cycle model's (its window pairs at the unit's pace,
  :func:`~fpgacnn.core.fused_block.depthwise_issue_cycles`): the unit's
  lanes are full already where the channels fill its tiles, and no lane
  mode of the array shortens it.

Both are projections from the cycle model's own split of each run, not
builds: what the engine would need, and how far it would get.

Usage::

    python bench/bandwidth_projection.py [--engine pynq-z2] [--models mobilenet_v1_025 ds_cnn]
                                         [--scale 2] [--write BENCHMARKS.md]
"""

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import mlperf_tiny  # noqa: E402
from bench_report import load_zoo, replace_section  # noqa: E402

SECTION = "bandwidth_projection"


def projected(layer, scale, *, dram=None, lanes_full=False):
    """``layer``'s cycles (a :class:`mlperf_tiny.LayerResult` of
    :func:`compile_with_demands`, batch 1) with the memory ``scale`` times as wide,
    with ``dram`` (bytes a cycle, reads and writes together, as a multiple of the
    demands' ``B``: ``D / B``) its traffic within the DRAM's peak, and with
    ``lanes_full`` its array's compute at its floor (``layer.floor``, never more
    than compiled); a fused block's depthwise demand as compiled."""
    p, d = layer.parts, layer.demands
    # The stream phase's cycles: its binding demand (the split keeps only that one).
    stream = layer.cycles - p["weights"] - p["overhead"]
    compute = min(d["compute"], layer.floor) if lanes_full else d["compute"]
    memory = max(d["input"], d["output"]) / scale
    if dram is not None:
        memory = max(memory, (d["input"] + d["output"]) / dram)
    return layer.cycles - stream + max(d["depthwise"], compute, memory)


def compile_with_demands(name, model, engine):
    """:func:`mlperf_tiny.compile_network` at batch 1, each layer with its runs' depthwise,
    compute, input and output demands summed (``layer.demands``, the cycle model's) beside
    the split, and its array's floor (``layer.floor``: its MACs at the peak, a fused
    block's pointwise MACs)."""
    from fpgacnn.host.compiler import EngineStep, compile_model
    from fpgacnn.host.cycle_model import layer_cycles
    result = mlperf_tiny.compile_network(name, model, engine, 1)
    program = compile_model(model, engine.config, batch=1)
    steps = {s.name: s for s in program.steps if isinstance(s, EngineStep)}
    config = engine.config
    for layer in result.layers:
        step = steps[layer.name]
        # (a fused block's depthwise runs beside the array, on the unit: its demand)
        macs = step.pointwise.macs if getattr(step, "fused", False) else layer.macs
        layer.floor = macs / config.peak_macs_per_cycle
        demands = {"depthwise": 0, "compute": 0, "input": 0, "output": 0}
        for run in step.runs:
            desc = run.warm_descriptor if program.resident else run.descriptor
            est = layer_cycles(engine.config, desc)
            for k in demands:
                demands[k] += est.detail["demand"][k]
        layer.demands = demands
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engine", default="pynq-z2",
                        help="a board name or BOARD+block (bench/mlperf_tiny.py's names)")
    parser.add_argument("--models", nargs="+", default=["mobilenet_v1_025", "ds_cnn"])
    parser.add_argument("--scale", type=float, default=2.0,
                        help="the memory's bytes a cycle, as a multiple of the board's")
    parser.add_argument("--dram-mb-s", type=float, default=2132.0,
                        help="the board's DRAM peak, MB/s, reads and writes together "
                             "(default: the PYNQ-Z2's 16-bit DDR3-1066)")
    parser.add_argument("--clock-mhz", type=float, default=100.0,
                        help="the engine's clock, MHz (default 100)")
    parser.add_argument("--write", help="replace the section between its markers in this file")
    args = parser.parse_args(argv)
    if args.scale < 1 or args.dram_mb_s <= 0 or args.clock_mhz <= 0:
        parser.error("--scale is at least 1, --dram-mb-s and --clock-mhz positive")
    from fpgacnn.host.onnx_import import load_onnx

    from fpgacnn.boards.board import load_board
    from fpgacnn.boards.zynq_design import DESIGN
    engine, = mlperf_tiny.engines([args.engine])
    peak = engine.config.peak_macs_per_cycle
    board = load_board(args.engine.split(mlperf_tiny.BLOCK_SUFFIX)[0])
    bandwidth = DESIGN.memory_bytes_per_cycle(board.family, engine.config)
    dram_bytes = args.dram_mb_s / args.clock_mhz  # bytes a cycle
    dram = dram_bytes / bandwidth
    zoo = load_zoo()
    written = zoo.write_zoo(Path(tempfile.mkdtemp()), args.models, n_calibration=4)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE.parent,
                            capture_output=True, text=True).stdout.strip()
    k = f"{args.scale:g}"
    lines = [f"Command: `python bench/bandwidth_projection.py --engine {args.engine} --models "
             f"{' '.join(args.models)} --scale {k} --dram-mb-s {args.dram_mb_s:g} --clock-mhz "
             f"{args.clock_mhz:g}{' --write BENCHMARKS.md' if args.write else ''}`, at "
             f"commit {commit}. {args.engine}: {engine.geometry}, "
             f"B = {bandwidth} bytes a cycle each way; the DRAM {dram_bytes:.1f} bytes a cycle "
             f"in all. Per image, batch 1, steady state; compiled = the cycle model's (= RTL, "
             f"section 5); the projections are the module docstring's: the memory {k}x as "
             f"wide; the same within the DRAM's peak; and besides it each step's compute at "
             f"its floor (lanes full).", ""]
    totals = []
    heads = [f"memory {k}x", f"memory {k}x within the DRAM", "+ lanes full"]
    for name in args.models:
        r = compile_with_demands(name, load_onnx(written[name]["int8"]), engine)
        rows = ["| layer | shape | MACs | compiled | bound | " + " | ".join(heads) + " |",
                "|---|---|---:|---:|---|---:|---:|---:|"]
        sums = [0] * 4
        for layer in r.layers:
            bound, _ = mlperf_tiny.bound_of(layer.parts)
            cells = [layer.cycles, projected(layer, args.scale),
                     projected(layer, args.scale, dram=dram),
                     projected(layer, args.scale, dram=dram, lanes_full=True)]
            sums = [a + b for a, b in zip(sums, cells)]
            rows.append(f"| {layer.name} | {layer.shape} | {layer.macs:,} | {layer.cycles:,} "
                        f"| {bound} | " + " | ".join(f"{c:,.0f}" for c in cells[1:]) + " |")
        util = [r.macs / (peak * s) for s in sums]
        rows.append(f"| **total** | | {r.macs:,} | **{sums[0]:,}** ({util[0]:.1%}) | | "
                    + " | ".join(f"**{c:,.0f}** ({u:.1%})" for c, u in zip(sums[1:], util[1:]))
                    + " |")
        totals.append(f"| {name} | " + " | ".join(f"{c:,.0f} | {u:.1%}"
                                                   for c, u in zip(sums, util)) + " |")
        lines += [f"**{name}** per step:", ""] + rows + [""]
    lines = lines[:2] + ["| model | compiled cycles | utilization | "
                         + " | ".join(f"{h}: cycles | utilization" for h in heads) + " |",
                         "|---|" + "---:|" * 8] + totals + [""] + lines[2:]
    text = "\n".join(lines)
    print(text)
    if args.write:
        replace_section(args.write, SECTION, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
