"""The memory bound of a layer-by-layer engine: what no datapath mode can beat (issue 15).

Each engine layer of the zoo's MLPerf Tiny models reads its input tensor
from memory and writes its output tensor back (through the DMA's stream or
the program engine's memory port, ``B`` bytes a cycle each way: the board's
HP port as the design sets it for the engine,
``DESIGN.memory_bytes_per_cycle``, which on the sized engines is also the
stream's beat: 8 on the PYNQ-Z2, 16 on the ZCU104), so a layer
takes at least ``max(MACs / peak, in_bytes / B, out_bytes / B)`` cycles
however its MACs are mapped. Summed over a model's engine layers this is a
floor on its cycles, and ``MACs / (peak x floor)`` a ceiling on its
utilization; the same with twice the peak (an array of two output pixels a
cycle, docs/engine.md "The memory bound, and the plan") shows which
layers more multipliers would speed up at all. Beside them the compiled
program's cycles (the cycle model's, steady state, weights resident where
they fit: what BENCHMARKS.md section 5 measures on the RTL).

The fused columns are the floors of the fused depthwise + pointwise block
designed in docs/engine.md ("The fused depthwise + pointwise block",
built on the convolution core, compiled on engines with ``fused_blocks``,
none of the sized ones: "Step 4"): a depthwise layer whose output only the
next 1x1 convolution reads runs with it as one block that reads the depthwise input and writes
the pointwise output, nothing between them; its floor ``max(pw MACs /
peak, dw MACs / U, in_bytes / B, out_bytes / B)`` with the depthwise on a
unit of its own of ``U`` products a cycle, and ``max(dw MACs / D + pw MACs
/ peak, in / B, out / B)`` with it on the array itself (time-shared, at
today's depthwise rate ``D = peak / pout``: a window's ``pin`` channels of
each pixel meet their own output lane only). ``U`` is a share of ``D``
(``--unit-shares``, default 1 and 1/2: the design's unit of ``pin``
channels x taps x two pixels, on the PYNQ-Z2's engine 72 products a cycle,
and one of half that). The projected columns take the same blocks with
the pointwise and the layers in no block at their compiled cycles: what the
block would give on today's engine, its array mapped as now.

Weights and parameters are not counted (resident in the engine on the
PYNQ-Z2's engine for every model but ResNet-18's stem), nor are the tensors'
padding or the host steps (Add, pools). ``in_bytes`` is the input tensor's
size per image (of a strided 1x1 convolution the pixels it keeps), ``out_bytes``
the output's (after a fused max-pool).

Usage::

    python bench/memory_bound.py [--boards pynq-z2 zcu104] [--models resnet8 ds_cnn ...]
                                 [--layers pynq-z2] [--unit-shares 1 0.5]
                                 [--write BENCHMARKS.md]
"""

import argparse
import dataclasses
import datetime
import subprocess
import sys
import tempfile
from math import prod
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from bench_report import load_zoo, replace_section  # noqa: E402

SECTION = "memory_bound"


def layer_bounds(program, bytes_per_cycle):
    """Per engine step of ``program``: ``(name, macs, in_bytes, out_bytes, cycles,
    compute floor, memory floor)``, cycles the compiled runs' steady-state
    prediction per image, the floors at the engine's peak."""
    return [row for row, _ in _bounds_and_blocks(program, bytes_per_cycle)]


def _bounds_and_blocks(program, bytes_per_cycle):
    """:func:`layer_bounds`' rows, each with whether it is a depthwise layer whose
    output only the next engine step, a 1x1 convolution, reads (the first half of
    a fusable block)."""
    from fpgacnn.host.compiler import EngineStep
    from fpgacnn.host.layers import Conv, GroupedConv

    peak = program.config.peak_macs_per_cycle
    steps = [s for s in program.steps if isinstance(s, EngineStep)]
    readers = {}
    for step in program.steps:
        for t in step.inputs:
            readers[t] = readers.get(t, 0) + 1
    rows = []
    for n, step in enumerate(steps):
        after = steps[n + 1] if n + 1 < len(steps) else None
        # (a step compiled fused already is a block: its row has both layers)
        fusable = (not step.fused and isinstance(step.layer, GroupedConv) and step.layer.depthwise
                   and after is not None and isinstance(after.layer, Conv)
                   and after.layer.kernel == (1, 1) and after.inputs[0] == step.output
                   and readers.get(step.output) == 1)
        cycles = sum(run.warm_predicted_cycles or run.predicted_cycles for run in step.runs)
        in_bytes = prod(step.layer.input_shape)
        if getattr(step.layer, "kernel", None) == (1, 1) and len(step.layer.input_shape) == 3:
            # A 1x1 convolution reads only the pixels it keeps (subsampled first).
            in_bytes = step.layer.input_shape[0] * prod(step.layer.output_shape[1:])
        out_bytes = prod(step.output_shape)
        rows.append(((step.name, step.macs, in_bytes, out_bytes, cycles / program.batch,
                      step.macs / peak, max(in_bytes, out_bytes) / bytes_per_cycle), fusable))
    return rows


def fused_floor(rows, peak, bytes_per_cycle, unit, *, compiled=False):
    """A model's floor with its fusable depthwise + pointwise pairs as blocks
    (:func:`_bounds_and_blocks`' rows): the depthwise on a unit of ``unit``
    products a cycle beside the array, or, with ``unit`` a pair ``("array",
    rate)``, on the array itself at ``rate`` products a cycle before the
    pointwise.

    With ``compiled``, a projection instead of a floor: the pointwise and every
    layer in no block take their compiled cycles (today's mapping on the
    array, its lane padding and fills), only the depthwise's MACs and the
    block's memory traffic at their floors."""
    floor, n = 0.0, 0
    while n < len(rows):
        (name, macs, in_bytes, out_bytes, cycles, cf, mf), fusable = rows[n]
        if not fusable:
            floor += cycles if compiled else max(cf, mf)
            n += 1
            continue
        pw = rows[n + 1][0]
        pointwise = pw[4] if compiled else pw[1] / peak
        memory = max(in_bytes, pw[3]) / bytes_per_cycle
        if isinstance(unit, tuple):
            floor += max(macs / unit[1] + pointwise, memory)
        else:
            floor += max(pointwise, macs / unit, memory)
        n += 2
    return floor


def model_bound(rows, peak, scale=1):
    """``(floor cycles, utilization ceiling)`` of a model's rows on an array of
    ``scale`` times the peak (the ceiling is of that array's peak)."""
    macs = sum(r[1] for r in rows)
    floor = sum(max(r[5] / scale, r[6]) for r in rows)
    return floor, macs / (scale * peak * floor)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--boards", nargs="+", default=["pynq-z2", "zcu104"])
    parser.add_argument("--models", nargs="+",
                        default=["resnet8", "ds_cnn", "mobilenet_v1_025", "autoencoder"])
    parser.add_argument("--layers", nargs="*", default=[], metavar="BOARD",
                        help="per-layer tables of these boards' engines too")
    parser.add_argument("--unit-shares", nargs="+", type=float, default=[1.0, 0.5],
                        metavar="S", help="the fused blocks' depthwise unit's products a "
                        "cycle, as shares of the array's depthwise rate (peak / pout)")
    parser.add_argument("--fused-blocks", type=int, default=13, metavar="N",
                        help="the compiled-with-the-block column: the board's engine with "
                        "fused_blocks N (where it has pixel_pairs)")
    parser.add_argument("--write", help="replace the section between its markers in this file "
                        "(BENCHMARKS.md section 7)")
    args = parser.parse_args(argv)

    from fpgacnn.boards.board import load_board
    from fpgacnn.boards.engine_sizing import size_engine
    from fpgacnn.boards.zynq_design import DESIGN
    from fpgacnn.host.compiler import compile_model
    from fpgacnn.host.onnx_import import load_onnx

    zoo = load_zoo()
    written = zoo.write_zoo(Path(tempfile.mkdtemp()), names=args.models, n_calibration=8)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                            capture_output=True, text=True).stdout.strip()
    shares = " ".join(f"{u:g}" for u in args.unit_shares)
    lines = [f"Command: `python bench/memory_bound.py"
             f"{' --layers ' + ' '.join(args.layers) if args.layers else ''}"
             f"{' --unit-shares ' + shares if args.unit_shares != [1.0, 0.5] else ''}"
             f"{f' --fused-blocks {args.fused_blocks}' if args.fused_blocks != 13 else ''}"
             f"{' --write BENCHMARKS.md' if args.write else ''}`, "
             f"run {datetime.date.today()} at commit {commit}. Engine layers only, batch 1, "
             "per image; `B` = the board's memory bandwidth each way, its HP port's bytes a "
             "cycle as the design sets it for the engine (`DESIGN.memory_bytes_per_cycle`, "
             "what the simulated board's memory model takes), on these engines also the "
             "stream's bytes per beat. Floor = sum over layers "
             "of max(MACs / peak, in bytes / B, out bytes / B); compiled = the compiled "
             "program's steady-state cycles (the cycle model, = RTL in section 5). Fused: the "
             "ceilings with each depthwise layer and the 1x1 convolution after it as one block "
             "(docs/engine.md \"The fused depthwise + pointwise block\", built on the convolution "
             "core and compiled where an engine has it): "
             "the depthwise on the array before the pointwise (at its depthwise rate "
             "D = peak / pout), or on a unit of its own beside it at U products a cycle, a "
             "share of D (the module docstring). Projected: the same blocks with the pointwise "
             "and every other layer at their compiled cycles (today's mapping on the array: the "
             "1x1 remap's lane padding, fills), the depthwise's MACs and the block's memory at "
             "their floors: what the fused block alone would give. Compiled with the block: "
             f"the board's engine with `fused_blocks` {args.fused_blocks} and the depthwise "
             "unit its file chooses (half-rate on the PYNQ-Z1/Z2, `depthwise_pixels` 1; "
             "the compiler fuses where the cycle model says the block is faster and its "
             "depthwise words fit the depthwise memory, docs/engine.md \"Step 4\"), its "
             "steady-state cycles and utilization; the other columns are of the sized engine "
             "without the block (`size_engine(board, fused_block=False)`; the PYNQ-Z1/Z2's "
             "sized engine has it, docs/boards.md).", "",
             "| engine | model | MACs | compiled cycles | utilization | memory-bound layers "
             "| floor (cycles) | ceiling | floor at 2x peak | its ceiling (of 2x peak) "
             "| fused ceiling: depthwise on the array | "
             + " | ".join(f"beside it, U = {u:g} D" for u in args.unit_shares)
             + " | projected, fused: depthwise on the array | "
             + " | ".join(f"beside it, U = {u:g} D" for u in args.unit_shares)
             + " | compiled with the block: cycles | its utilization |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
             + "---:|" * (2 * len(args.unit_shares) + 3)]
    details = []
    for board_name in args.boards:
        board = load_board(board_name)
        # A layer-by-layer engine: the board's sized engine without the block (which the
        # last columns add, at the depthwise rate the board's file chooses).
        config = size_engine(board, fused_block=False).config
        peak = config.peak_macs_per_cycle
        bandwidth = DESIGN.memory_bytes_per_cycle(board.family, config)
        for name in args.models:
            program = compile_model(load_onnx(written[name]["int8"]), config)
            blocks = _bounds_and_blocks(program, bandwidth)
            rows = [row for row, _ in blocks]
            macs = sum(r[1] for r in rows)
            cycles = sum(r[4] for r in rows)
            floor, ceil1 = model_bound(rows, peak)
            floor2, ceil2 = model_bound(rows, peak, 2)
            memory_bound = sum(r[6] > r[5] for r in rows)
            # Today's depthwise rate: a window's pin channels of each pixel meet their own
            # output lane only, 1/pout of the array.
            rate = peak / config.pout
            units = [("array", rate)] + [share * rate for share in args.unit_shares]
            fused = [fused_floor(blocks, peak, bandwidth, u, compiled=compiled)
                     for compiled in (False, True) for u in units]
            with_block = "- | -"
            if config.pixel_pairs:
                block_config = dataclasses.replace(
                    config, fused_blocks=args.fused_blocks,
                    depthwise_pixels=board.sizing.depthwise_pixels)
                block_rows = layer_bounds(compile_model(load_onnx(written[name]["int8"]),
                                                        block_config), bandwidth)
                block_cycles = sum(r[4] for r in block_rows)
                with_block = f"{block_cycles:,.0f} | {macs / (peak * block_cycles):.1%}"
            lines.append(f"| {board_name} (pin {config.pin} x pout {config.pout}, B {bandwidth}) "
                         f"| {name} | {macs:,} | {cycles:,.0f} | {macs / (peak * cycles):.1%} "
                         f"| {memory_bound} / {len(rows)} | {floor:,.0f} | {ceil1:.1%} "
                         f"| {floor2:,.0f} | {ceil2:.1%} | "
                         + " | ".join(f"{macs / (peak * f):.1%}" for f in fused)
                         + f" | {with_block} |")
            if board_name in args.layers:
                details += ["", f"**{name}** on {board_name}'s engine, per layer:", "",
                            "| layer | MACs | in / out bytes | compiled cycles | compute floor "
                            "| memory floor | floor at 2x peak |",
                            "|---|---:|---:|---:|---:|---:|---:|"]
                for lname, m, i, o, c, cf, mf in rows:
                    details.append(f"| {lname} | {m:,} | {i:,} / {o:,} | {c:,.0f} | {cf:,.0f} "
                                   f"| {mf:,.0f} | {max(cf / 2, mf):,.0f} |")
    text = "\n".join(lines + details) + "\n"
    print(text)
    if args.write:
        replace_section(args.write, SECTION, text)


if __name__ == "__main__":
    main()
