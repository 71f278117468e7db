"""Simulation speed of the sim backend (issue 4).

In one run on the default engine and the same layer:

- (s) the sim backend: :class:`fpgacnn.sim.native_board.SimulatedBoard`
  running the layer through :class:`~fpgacnn.host.engine_driver.EngineDriver`
  (descriptor by AXI4-Lite, DMA model in C++), timed around ``run_layer``;
- (a) a naive cocotb loop (bench/cocotb_naive_feed.py) on the engine's cocotb
  build (:func:`fpgacnn.sim.verilator.build_engine`): one stream beat per
  Python ``await``; only its streaming loop is timed;
- (b) the bare Verilator loop: ``SimulatedBoard.free_run`` clocks the same
  model with no host at all, the engine kept busy on a large layer (the ceiling).

Simulated cycles per wall-clock second (and per CPU second of the simulating
process), repeated; best and median of each are compared (the machine is
shared: the best pass is the least disturbed, CPU time the steadiest).

The host's share of a run is measured by bench/host_share.py.

Usage::

    python bench/sim_speed.py [--repeats 5] [--write BENCHMARKS.md]
"""

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # the cocotb module and the report helper live here

from bench_report import replace_section  # noqa: E402
from fpgacnn.core.config import EngineConfig  # noqa: E402
from fpgacnn.host import packing  # noqa: E402
from fpgacnn.host.accelerator import open_board  # noqa: E402
from fpgacnn.host.commands.sim import random_layer_model  # noqa: E402
from fpgacnn.host.compiler import compile_model  # noqa: E402
from fpgacnn.host.cycle_model import layer_cycles  # noqa: E402
from fpgacnn.host.engine_driver import EngineDriver  # noqa: E402
from fpgacnn.host.reference import ReferenceBackend  # noqa: E402

#: The layer all three loops simulate.
LAYER = dict(shape=(64, 16, 16), out_channels=64, kernel=3, stride=1)
LAYER_NAME = "conv 3x3 64->64 @16x16"


def pack(config, model, x):
    """Descriptor and input stream of the model's single engine run."""
    (run,) = compile_model(model, config, batch=len(x)).steps[0].runs
    return run.descriptor, run.stream(x)


def sim_backend(config, board, desc, data, want_bytes, repeats):
    driver = EngineDriver(board, expected=config)
    nbytes = packing.output_nbytes(config, desc)
    passes = []
    for _ in range(repeats):
        board.reset()
        c0, t0, p0 = board.cycles, time.perf_counter(), time.process_time()
        result = driver.run_layer(desc, data, nbytes, timeout=1.0)
        seconds, cpu, cycles = time.perf_counter() - t0, time.process_time() - p0, board.cycles - c0
        if bytes(result.output) != want_bytes:
            raise AssertionError("sim backend: output stream differs from the reference")
        passes.append((cycles, seconds, cpu))
    return passes, result.busy_cycles


def naive_cocotb(config, desc, data, want_bytes, repeats):
    from fpgacnn.sim.engine_tb import CONFIG_ENV
    from fpgacnn.sim.verilator import build_engine, run_cocotb
    build = build_engine(config, waves=False, log=lambda m: print(f"  {m}", file=sys.stderr))
    with tempfile.TemporaryDirectory(prefix="fpgacnn-bench-") as tmp:
        job, result = Path(tmp) / "job.json", Path(tmp) / "result.json"
        job.write_text(json.dumps({"desc": {k: int(v) for k, v in desc.items()},
                                   "data": bytes(data).hex(), "passes": repeats,
                                   "result": str(result)}))
        outcome = run_cocotb(build, "cocotb_naive_feed", test_dir=Path(tmp) / "run",
                             env={CONFIG_ENV: json.dumps(config.as_dict()),
                                  "FPGACNN_BENCH_JOB": str(job)})
        if outcome.failed:
            raise RuntimeError(f"naive cocotb loop failed: {outcome.messages}")
        passes = json.loads(result.read_text())
    for p in passes:
        if bytes.fromhex(p["output"]) != want_bytes:
            raise AssertionError("naive cocotb loop: output stream differs from the reference")
    return [(p["cycles"], p["seconds"], p["cpu_seconds"]) for p in passes]


def bare_loop(config, board, desc, cycles, repeats):
    from fpgacnn.core.regmap import build_regmap
    from fpgacnn.core.descriptor import DESCRIPTOR_FIELDS
    regs = build_regmap(config)
    # The same layer with many images: the engine stays busy for the whole free run.
    big = dict(desc, batch=1000, load_weights=1)
    passes = []
    for _ in range(repeats):
        board.reset()
        for f in DESCRIPTOR_FIELDS:
            board.mmio_write(regs.address(f"desc_{f.name}"),
                             regs.encode(f"desc_{f.name}", int(big[f.name])))
        board.mmio_write(regs.address("control"), regs.encode("control", start=1))
        t0, p0 = time.perf_counter(), time.process_time()
        board.free_run(cycles)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - p0
        status = regs.decode("status", board.mmio_read(regs.address("status")))
        if not status["busy"] or status["done"]:
            raise AssertionError(f"bare loop: the engine was not busy throughout ({status})")
        passes.append((cycles, seconds, cpu))
    board.reset()
    return passes


def rate_row(name, passes):
    rates = [c / s for c, s, _ in passes]
    cpu = [c / p for c, _, p in passes]
    return {"name": name, "cycles": passes[0][0], "best": max(rates), "median": statistics.median(rates),
            "cpu_best": max(cpu), "cpu_median": statistics.median(cpu), "n": len(rates)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed passes of each loop (default 5)")
    parser.add_argument("--free-cycles", type=int, default=None,
                        help="cycles of each bare-loop pass (default: as many as a sim-backend pass)")
    parser.add_argument("--write", metavar="FILE", help="replace this benchmark's section in FILE")
    args = parser.parse_args(argv)
    config = EngineConfig()
    wall = time.perf_counter()
    log = lambda m: print(f"  {m}", file=sys.stderr, flush=True)  # noqa: E731

    model = random_layer_model(LAYER["shape"], LAYER["out_channels"], LAYER["kernel"],
                               LAYER["stride"], seed=3)
    x = np.random.default_rng(4).integers(-128, 128, (1, *model.input.shape)).astype(np.int8)
    desc, data = pack(config, model, x)
    board = open_board("sim", config, progress=log)
    # The reference output stream: the engine's output format of the reference result.
    driver = EngineDriver(board, expected=config)
    first = driver.run_layer(desc, data, packing.output_nbytes(config, desc), timeout=1.0)
    y = packing.unpack_output(config, first.output, desc, LAYER["out_channels"])
    np.testing.assert_array_equal(y, ReferenceBackend().run_int8(model, x))
    want = bytes(first.output)
    predicted = layer_cycles(config, desc).cycles

    # (s) and (b) alternate pass by pass, before and after (a), so that they
    # see the same load on the shared machine.
    sim_passes, bare_passes = [], []
    for half in range(2):
        log(f"(s) sim backend and (b) bare loop, alternating, round {half + 1} ...")
        for _ in range(args.repeats):
            passes, busy = sim_backend(config, board, desc, data, want, 1)
            sim_passes += passes
            # By default the same cycles from start, so the same mix of weight
            # loading and compute as the sim-backend pass.
            free = args.free_cycles or passes[0][0]
            bare_passes += bare_loop(config, board, desc, free, 1)
        if half == 0:
            log("(a) naive cocotb loop ...")
            naive_passes = naive_cocotb(config, desc, data, want, args.repeats)
    board.close()

    rows = [rate_row("(s) sim backend: SimulatedBoard, C++ DMA + AXI-Lite models", sim_passes),
            rate_row("(a) naive cocotb loop, one beat per Python await", naive_passes),
            rate_row("(b) bare Verilator loop, no host (ceiling)", bare_passes)]
    s, a, b = rows
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    out = [f"Command: `python bench/sim_speed.py --repeats {args.repeats}"
           f"{' --write ' + args.write if args.write else ''}`, run {stamp} on "
           f"{platform.machine()}, {os.cpu_count()} cores (shared), Python "
           f"{platform.python_version()}, {time.perf_counter() - wall:.0f} s wall.", "",
           f"Layer: {LAYER_NAME}, batch 1, on `EngineConfig()`: {busy:,} busy cycles "
           f"(cycle model {predicted:,}); every pass of (s) and (a) returned the reference "
           f"output stream byte for byte. (s) counts every simulated cycle of the run "
           f"(descriptor writes and status reads included), (a) the cycles of its streaming "
           f"loop, (b) {b['cycles']:,} cycles per pass from `start` with the engine busy throughout "
           f"(same constant beat on every input, output always ready). Rates per wall-clock "
           f"second (asked for) and per CPU second of the simulating process "
           f"(`time.process_time`, less disturbed by the other jobs on this machine).", "",
           "| loop | simulated cycles per pass | passes | best cycles/s (wall) | median cycles/s (wall) "
           "| best cycles/s (CPU) | median cycles/s (CPU) |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r['name']} | {r['cycles']:,} | {r['n']} | {r['best']:,.0f} | {r['median']:,.0f} "
                   f"| {r['cpu_best']:,.0f} | {r['cpu_median']:,.0f} |")
    out += ["", "| ratio | best (wall) | median (wall) | best (CPU) | median (CPU) | goal | met (best, wall) |",
            "|---|---:|---:|---:|---:|---|---|",
            f"| (s) / (a): sim backend over naive cocotb | {s['best'] / a['best']:.1f}x "
            f"| {s['median'] / a['median']:.1f}x | {s['cpu_best'] / a['cpu_best']:.1f}x "
            f"| {s['cpu_median'] / a['cpu_median']:.1f}x | >= 10x "
            f"| {'yes' if s['best'] / a['best'] >= 10 else '**no**'} |",
            f"| (s) / (b): sim backend over bare loop | {s['best'] / b['best']:.1%} "
            f"| {s['median'] / b['median']:.1%} | {s['cpu_best'] / b['cpu_best']:.1%} "
            f"| {s['cpu_median'] / b['cpu_median']:.1%} | >= 50% "
            f"| {'yes' if s['best'] / b['best'] >= 0.5 else '**no**'} |",
            "", "The host's share of a run: section 4 (bench/host_share.py)."]
    text = "\n".join(out)
    print(text)
    if args.write:
        replace_section(args.write, "sim_speed", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
