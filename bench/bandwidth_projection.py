"""What a model's utilization goal needs: its compiled cycles with the memory twice as wide (issue 15).

BENCHMARKS.md section 7 bounds every layer-by-layer engine by its memory:
``B`` bytes a cycle each way (the PYNQ-Z2's HP port: 8). This projects the
compiled program (the cycle model's runs, = RTL, steady state, batch 1)
onto two changes of the engine that the remaining goals name, step by step:

- **memory at ``k * B``** (``--scale``, default 2: a second HP port for the
  reads and one for the writes, with a line-buffer writer storing ``k``
  times the words a cycle): a step whose stream phase the input or the
  output binds (:func:`mlperf_tiny.run_parts`) keeps its weights, compute
  and overhead cycles, and its binding demand shrinks to
  ``max(compute, input / k, output / k)``; every other step is unchanged;
- **lanes full** besides: a step's compute demand down to its MACs at the
  array's peak (``MACs / peak``; of a fused block the larger of its
  pointwise's MACs at the peak and its depthwise's at the depthwise unit's
  products a cycle): what a datapath mode that fills the 1x1 remap's
  ``pin * kmax^2`` lanes with fewer channels would reach (MobileNetV1's
  first block: 8 channels in 36 lanes), then the memory as above.

Both are projections from the cycle model's own split of each run, not
builds: what the engine would need, and how far it would get.

Usage::

    python bench/bandwidth_projection.py [--engine pynq-z2+block] [--models mobilenet_v1_025 ds_cnn]
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


def projected(layer, scale, lanes_full=False):
    """``layer``'s cycles (a :class:`mlperf_tiny.LayerResult` of
    :func:`compile_with_demands`, batch 1) with the memory ``scale`` times as wide,
    and with ``lanes_full`` its compute at its floor (``layer.floor``), never more
    than compiled."""
    p, d = layer.parts, layer.demands
    # The stream phase's cycles: its binding demand (the split keeps only that one).
    stream = layer.cycles - p["weights"] - p["overhead"]
    compute = min(d["compute"], layer.floor) if lanes_full else d["compute"]
    return layer.cycles - stream + max(compute, d["input"] / scale, d["output"] / scale)


def compile_with_demands(name, model, engine):
    """:func:`mlperf_tiny.compile_network` at batch 1, each layer with its runs' compute,
    input and output demands summed (``layer.demands``, the cycle model's) beside the split."""
    from fpgacnn.host.compiler import EngineStep, compile_model
    from fpgacnn.core.fused_block import depthwise_lanes
    from fpgacnn.host.cycle_model import layer_cycles
    result = mlperf_tiny.compile_network(name, model, engine, 1)
    program = compile_model(model, engine.config, batch=1)
    steps = {s.name: s for s in program.steps if isinstance(s, EngineStep)}
    config = engine.config
    # The fused block's depthwise unit: its lanes' kmax^2 products a cycle.
    unit = depthwise_lanes(config) * config.kmax ** 2 if config.fused_blocks else None
    for layer in result.layers:
        step = steps[layer.name]
        if getattr(step, "fused", False):
            # the pointwise on the array, the depthwise beside it on the unit
            pw = step.pointwise.macs
            layer.floor = max(pw / config.peak_macs_per_cycle, (layer.macs - pw) / unit)
        else:
            layer.floor = layer.macs / config.peak_macs_per_cycle
        demands = {"compute": 0, "input": 0, "output": 0}
        for run in step.runs:
            desc = run.warm_descriptor if program.resident else run.descriptor
            est = layer_cycles(engine.config, desc)
            for k in demands:
                demands[k] += est.detail["demand"][k]
        layer.demands = demands
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--engine", default="pynq-z2+block",
                        help="a board name or BOARD+block (bench/mlperf_tiny.py's names)")
    parser.add_argument("--models", nargs="+", default=["mobilenet_v1_025", "ds_cnn"])
    parser.add_argument("--scale", type=float, default=2.0,
                        help="the memory's bytes a cycle, as a multiple of the board's")
    parser.add_argument("--write", help="replace the section between its markers in this file")
    args = parser.parse_args(argv)
    if args.scale < 1:
        parser.error("--scale is at least 1")
    from fpgacnn.host.onnx_import import load_onnx

    engine, = mlperf_tiny.engines([args.engine])
    peak = engine.config.peak_macs_per_cycle
    zoo = load_zoo()
    written = zoo.write_zoo(Path(tempfile.mkdtemp()), args.models, n_calibration=4)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE.parent,
                            capture_output=True, text=True).stdout.strip()
    k = f"{args.scale:g}"
    lines = [f"Command: `python bench/bandwidth_projection.py --engine {args.engine} --models "
             f"{' '.join(args.models)} --scale {k}`, at commit {commit}. {args.engine}: "
             f"{engine.geometry}. Per image, batch 1, steady state; compiled = the cycle "
             f"model's (= RTL, section 5); the projections are the module docstring's: the "
             f"memory {k}x as wide (input- or output-bound steps only), and besides it each "
             f"step's compute at MACs / peak (lanes full).", ""]
    totals = []
    for name in args.models:
        r = compile_with_demands(name, load_onnx(written[name]["int8"]), engine)
        rows = ["| layer | shape | MACs | compiled | bound | memory "
                f"{k}x | + lanes full |", "|---|---|---:|---:|---|---:|---:|"]
        sums = [0, 0, 0]
        for layer in r.layers:
            bound, _ = mlperf_tiny.bound_of(layer.parts)
            a = projected(layer, args.scale)
            b = projected(layer, args.scale, lanes_full=True)
            sums = [sums[0] + layer.cycles, sums[1] + a, sums[2] + b]
            rows.append(f"| {layer.name} | {layer.shape} | {layer.macs:,} | {layer.cycles:,} "
                        f"| {bound} | {a:,.0f} | {b:,.0f} |")
        util = [r.macs / (peak * s) for s in sums]
        rows.append(f"| **total** | | {r.macs:,} | **{sums[0]:,}** ({util[0]:.1%}) | "
                    f"| **{sums[1]:,.0f}** ({util[1]:.1%}) | **{sums[2]:,.0f}** "
                    f"({util[2]:.1%}) |")
        totals.append(f"| {name} | {sums[0]:,} | {util[0]:.1%} | {sums[1]:,.0f} | "
                      f"{util[1]:.1%} | {sums[2]:,.0f} | {util[2]:.1%} |")
        lines += [f"**{name}** per step:", ""] + rows + [""]
    lines = lines[:2] + ["| model | compiled cycles | utilization | memory " + k +
                         "x: cycles | utilization | + lanes full: cycles | utilization |",
                         "|---|---:|---:|---:|---:|---:|---:|"] + totals + [""] + lines[2:]
    text = "\n".join(lines)
    print(text)
    if args.write:
        replace_section(args.write, SECTION, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
