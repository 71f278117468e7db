"""Host time per engine layer, before and after a change to the host side (issue 13).

What the host spends on each engine layer of a model (gathering the runs'
input, packing the stream, the timeout, unpacking and scattering the output),
per inference, and as a share of the engine's own time (its cycles at
100 MHz), for two source trees measured side by side in one session:

- ``--before TREE``: a second checkout of the repository, e.g. of the commit
  before the change (``git worktree add /tmp/before HEAD``, made before
  editing);
- the "after" tree: the repository this script is in (``--after`` to change).

Each tree runs in its own worker process (``--worker TREE``) that imports
``fpgacnn`` from that tree (the editable install's finder is taken out of
``sys.meta_path`` and the tree loaded as the ``fpgacnn`` package), so both
use the same virtualenv and dependencies. Workers of the two trees
alternate, ``--rounds`` times each, so that both see the same machine load;
the least time of all passes is reported (the least disturbed), with the
median beside it.

In a worker, each case runs once on the simulated board (the engine RTL in
Verilator): the output is checked against the reference backend bit for bit,
and the engine cycles and the board's answers are recorded. The timed passes
then replay those answers (a driver that returns the recorded
:class:`~fpgacnn.host.engine_driver.LayerRun` of each run at once), so that
the wall time of ``Accelerator.run_int8`` is host time only:

- host per engine layer: the layer's ``host_seconds`` in the report (the
  driver's board call excluded, as in every ``Accelerator`` report);
- host per inference: the wall time of ``run_int8`` with the replaying
  driver (host layers and the loop included; the descriptor writes of a real
  driver are the board's);
- host share: engine-layer host time / (engine cycles at 100 MHz).

Cases: the example ``digits`` model at batch 1 and 64, and a ResNet-8-shaped
int8 model (MLPerf Tiny: 32x32x3, 3x3 convolutions of 16/32/64 channels,
stride-2 stages with 1x1 stride-2 shortcuts, Add, 8x8 average pool, FC 10;
seeded random weights, built from the IR classes) at batch 1, all on
``EngineConfig()``.

Usage::

    python bench/host_share.py --before /tmp/before [--rounds 3] [--repeats 50]
                               [--write BENCHMARKS.md]
"""

import argparse
import datetime
import importlib.util
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent

#: (model, batch) cases, in order.
CASES = [("digits", 1), ("digits", 64), ("resnet8", 1)]


def use_tree(tree):
    """Import ``fpgacnn`` from the source tree ``tree`` instead of the installed one."""
    tree = Path(tree).resolve()
    if "fpgacnn" in sys.modules:
        raise RuntimeError("fpgacnn is already imported")
    sys.meta_path[:] = [f for f in sys.meta_path
                        if getattr(f, "__name__", "") != "_EditableFinder"]
    spec = importlib.util.spec_from_file_location(
        "fpgacnn", tree / "__init__.py", submodule_search_locations=[str(tree)])
    module = importlib.util.module_from_spec(spec)
    sys.modules["fpgacnn"] = module
    spec.loader.exec_module(module)
    return module


def resnet8(seed=0):
    """A ResNet-8-shaped int8 model (MLPerf Tiny image classification) with random weights."""
    from fpgacnn.host.layers import Add, AveragePool, Conv, Flatten, Gemm
    from fpgacnn.host.model import QuantizedModel, TensorSpec
    rng = np.random.default_rng(seed)
    layers = []

    def push(layer):
        layers.append(layer)
        return layer

    def conv(src, cout, k, stride, relu, name):
        cin = src.output_shape[0]
        weight = rng.integers(-127, 128, (cout, cin, k, k)).astype(np.int8)
        w_scale = rng.uniform(0.5, 1.5, cout) / 127
        y_scale = 127 * 70 * math.sqrt(cin * k * k) * src.y_scale * w_scale.mean() / 90
        y_zp = int(rng.integers(-20, 20))
        return push(Conv(name, [src.output], name, src.output_shape, weight,
                         rng.integers(-3000, 3000, cout).astype(np.int32), src.y_scale,
                         src.y_zero_point, w_scale, y_scale, y_zp, stride=(stride, stride),
                         pads=((k - 1) // 2,) * 4, lo=y_zp if relu else -128))

    def add(a, b, name):
        y_zp = int(rng.integers(-10, 10))
        return push(Add(name, [a.output, b.output], name, a.output_shape, a.y_scale,
                        a.y_zero_point, b.y_scale, b.y_zero_point, (a.y_scale + b.y_scale) * 0.8,
                        y_zp, lo=y_zp))  # the block's Relu

    class Input:  # the graph input, as the first layer sees it
        output, output_shape, y_scale, y_zero_point = "x", (3, 32, 32), 0.05, 0

    x = conv(Input, 16, 3, 1, True, "conv1")
    a = conv(x, 16, 3, 1, True, "s1_conv1")
    a = conv(a, 16, 3, 1, False, "s1_conv2")
    x = add(x, a, "s1_add")
    for stage, cout in ((2, 32), (3, 64)):
        a = conv(x, cout, 3, 2, True, f"s{stage}_conv1")
        a = conv(a, cout, 3, 1, False, f"s{stage}_conv2")
        short = conv(x, cout, 1, 2, False, f"s{stage}_shortcut")
        x = add(a, short, f"s{stage}_add")
    pool = push(AveragePool("pool", [x.output], "pool", x.output_shape, (8, 8),
                            x_scale=x.y_scale, x_zero_point=x.y_zero_point,
                            y_scale=x.y_scale, y_zero_point=x.y_zero_point))
    flat = push(Flatten("flatten", [pool.output], "flatten", pool.output_shape, pool.y_scale,
                        pool.y_zero_point))
    weight = rng.integers(-127, 128, (10, 64)).astype(np.int8)
    w_scale = rng.uniform(0.5, 1.5, 10) / 127
    fc = push(Gemm("fc", [flat.output], "fc", flat.output_shape, weight,
                   rng.integers(-3000, 3000, 10).astype(np.int32), flat.y_scale,
                   flat.y_zero_point, w_scale, 127 * 70 * 8 * flat.y_scale * w_scale.mean() / 90,
                   0))
    return QuantizedModel("resnet8", layers, TensorSpec("x", (3, 32, 32), np.int8, 0.05, 0),
                          TensorSpec("fc", (10,), np.int8, fc.y_scale, 0), "x", "fc")


class _Recorder:
    """A driver that runs on the board and keeps every answer."""

    def __init__(self, driver):
        self.driver, self.results = driver, []

    def run_layer(self, *args, **kwargs):
        result = self.driver.run_layer(*args, **kwargs)
        self.results.append(result)
        return result


class _Replayer:
    """A driver that answers each run with the recorded result, in order, at once."""

    def __init__(self, results):
        self.results, self.i = results, 0

    def run_layer(self, descriptor, stream_in, out_nbytes, *, timeout, name="layer"):
        result = self.results[self.i]
        self.i = (self.i + 1) % len(self.results)
        return result


def worker(tree, repeats):
    """Measure every case with ``fpgacnn`` from ``tree``; returns a JSON-able dict."""
    fpgacnn = use_tree(tree)
    from fpgacnn.core.config import EngineConfig
    from fpgacnn.host.accelerator import Accelerator, open_board
    from fpgacnn.host.examples import load_example
    from fpgacnn.host.onnx_import import load_onnx
    from fpgacnn.host.reference import ReferenceBackend
    config = EngineConfig()
    board = open_board("sim", config)
    digits = load_example("digits")
    models = {"digits": load_onnx(digits.model), "resnet8": resnet8()}
    inputs = {"digits": lambda n: models["digits"].quantize_input(digits.x[:n]),
              "resnet8": lambda n: np.random.default_rng(1).integers(
                  -128, 128, (n, 3, 32, 32), dtype=np.int8)}
    out = {"tree": str(Path(tree).resolve()), "fpgacnn": fpgacnn.__file__, "cases": []}
    for name, batch in CASES:
        model, x8 = models[name], inputs[name](batch)
        acc = Accelerator(model, backend="sim", config=config, board=board)
        t0 = time.perf_counter()
        getattr(acc, "image", acc.program)(batch)  # the program and, where there is one, its image
        compile_s = time.perf_counter() - t0
        want = ReferenceBackend().run_int8(model, x8)
        acc.driver = _Recorder(acc.driver)
        y8 = acc.run_int8(x8)
        np.testing.assert_array_equal(y8, want)
        real = acc.report
        acc.driver = _Replayer(acc.driver.results)
        host = {layer["name"]: [] for layer in real["layers"]}
        wall = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            acc.run_int8(x8)
            wall.append(time.perf_counter() - t0)
            for layer in acc.report["layers"]:
                host[layer["name"]].append(layer["host_seconds"])
        np.testing.assert_array_equal(acc.run_int8(x8), want)
        out["cases"].append({
            "model": name, "batch": batch, "compile_s": compile_s, "wall": wall,
            "layers": [{"name": l["name"], "op": l["op"], "engine": l["engine"],
                        "runs": l.get("runs"), "cycles": l.get("cycles"), "host": host[l["name"]]}
                       for l in real["layers"]]})
    board.close()
    return out


def _merge(results):
    """Per case and layer: every pass of every round of one tree."""
    merged = {}
    for result in results:
        for case in result["cases"]:
            key = (case["model"], case["batch"])
            if key not in merged:
                merged[key] = {"wall": [], "compile_s": [], "layers": {},
                               "order": [l["name"] for l in case["layers"]]}
            m = merged[key]
            m["wall"] += case["wall"]
            m["compile_s"].append(case["compile_s"])
            for l in case["layers"]:
                entry = m["layers"].setdefault(l["name"], dict(l, host=[]))
                entry["host"] += l["host"]
    return merged


def _us(seconds):
    return f"{seconds * 1e6:,.0f} us"


def table(before, after, clock_hz=100e6):
    """The before/after markdown table."""
    lines = ["| model, batch | layer | runs | engine cycles | on board at 100 MHz "
             "| host before | host after | after / before | host share before | host share after |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    totals = []
    for key in [(m, b) for m, b in CASES if (m, b) in after]:
        b, a = before[key], after[key]
        label = f"{key[0]}, {key[1]}"
        eng_b = eng_a = 0.0
        cycles = cycles_b = 0
        for name in a["order"]:
            la, lb = a["layers"][name], b["layers"][name]
            hb, ha = min(lb["host"]), min(la["host"])
            if not la["engine"]:
                continue
            # The engine is the same RTL on both sides unless the trees' hdl differ.
            shown = f"{la['cycles']:,}" if la["cycles"] == lb["cycles"] else \
                f"{lb['cycles']:,} -> {la['cycles']:,}"
            board_b, board_a = lb["cycles"] / clock_hz, la["cycles"] / clock_hz
            eng_b, eng_a = eng_b + hb, eng_a + ha
            cycles, cycles_b = cycles + la["cycles"], cycles_b + lb["cycles"]
            lines.append(f"| {label} | {name} ({la['op']}) | {la['runs']} | {shown} "
                         f"| {board_a * 1e6:,.1f} us | {_us(hb)} | {_us(ha)} | {ha / hb:.2f} "
                         f"| {hb / board_b:.1f}x | {ha / board_a:.1f}x |")
        board_b, board_a = cycles_b / clock_hz, cycles / clock_hz
        shown = f"{cycles:,}" if cycles == cycles_b else f"{cycles_b:,} -> {cycles:,}"
        lines.append(f"| {label} | **engine layers, total** | | {shown} | {board_a * 1e6:,.1f} us "
                     f"| {_us(eng_b)} | {_us(eng_a)} | **{eng_a / eng_b:.2f}** "
                     f"| {eng_b / board_b:.1f}x | **{eng_a / board_a:.1f}x** |")
        totals.append((label, b, a))
    lines += ["", "| model, batch | host per inference before (least / median) "
              "| after (least / median) | after / before (least) | compile before "
              "| compile after |",
              "|---|---:|---:|---:|---:|---:|"]
    for label, b, a in totals:
        lines.append(f"| {label} | {_us(min(b['wall']))} / {_us(statistics.median(b['wall']))} "
                     f"| {_us(min(a['wall']))} / {_us(statistics.median(a['wall']))} "
                     f"| **{min(a['wall']) / min(b['wall']):.2f}** "
                     f"| {min(b['compile_s']) * 1e3:,.1f} ms "
                     f"| {min(a['compile_s']) * 1e3:,.1f} ms |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", metavar="TREE", help="the source tree measured as 'before'")
    parser.add_argument("--after", metavar="TREE", default=str(HERE.parent),
                        help="the source tree measured as 'after' (default: this repository)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="worker processes per tree, alternating (default 3)")
    parser.add_argument("--repeats", type=int, default=50,
                        help="timed passes of each case in a worker (default 50)")
    parser.add_argument("--write", metavar="FILE", help="replace this benchmark's section in FILE")
    parser.add_argument("--worker", metavar="TREE", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        json.dump(worker(args.worker, args.repeats), sys.stdout)
        return 0
    if not args.before:
        parser.error("--before TREE is required")
    wall = time.perf_counter()
    results = {"before": [], "after": []}
    for r in range(args.rounds):
        for side in ("before", "after"):
            tree = getattr(args, side)
            print(f"  round {r + 1}/{args.rounds}: {side} ({tree}) ...", file=sys.stderr,
                  flush=True)
            proc = subprocess.run([sys.executable, __file__, "--worker", tree,
                                   "--repeats", str(args.repeats)],
                                  capture_output=True, text=True, check=False)
            if proc.returncode:
                sys.stderr.write(proc.stderr)
                raise SystemExit(f"the {side} worker failed")
            result = json.loads(proc.stdout)
            if not Path(result["fpgacnn"]).resolve().is_relative_to(Path(tree).resolve()):
                raise SystemExit(f"the {side} worker imported {result['fpgacnn']}, not {tree}")
            results[side].append(result)
    before, after = _merge(results["before"]), _merge(results["after"])

    def commit(tree):
        return subprocess.run(["git", "-C", tree, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True).stdout.strip()

    def changed(tree):
        lines = subprocess.run(["git", "-C", tree, "status", "--porcelain",
                                "--untracked-files=no"],
                               capture_output=True, text=True).stdout.splitlines()
        return sorted(line[3:] for line in lines)

    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    command = (f"python bench/host_share.py --before {args.before}"
               + (f" --after {args.after}" if args.after != str(HERE.parent) else "")
               + f" --rounds {args.rounds} --repeats {args.repeats}"
               + (f" --write {args.write}" if args.write else ""))
    desc = {}
    for side in ("before", "after"):
        tree = getattr(args, side)
        files = changed(tree)
        desc[side] = f"`{tree}` at commit {commit(tree)}" + \
            (f" with uncommitted changes to {', '.join(files)}" if files else "")
    text = "\n".join([
        f"Command: `{command}`, run {stamp} on {platform.machine()}, {os.cpu_count()} cores "
        f"(shared), Python {platform.python_version()}, {time.perf_counter() - wall:.0f} s wall. "
        f"Before: {desc['before']}; after: {desc['after']}.", "",
        f"`Accelerator(backend=\"sim\")` on `EngineConfig()`; every case checked bit-exact "
        f"against the reference backend on the simulated board, then timed "
        f"{args.rounds} x {args.repeats} passes per tree (worker processes of the two trees "
        f"alternating) with a driver that replays the board's recorded answers at once, so "
        f"that the time is the host's. Host per layer: the report's `host_seconds` (gather, "
        f"packing, timeout, unpack, scatter; least of all passes); host share: host time / "
        f"engine cycles at 100 MHz. Host per inference: wall time of `run_int8` with the "
        f"replaying driver (host layers included). Compile: `Accelerator.program(batch)` "
        f"(and `Accelerator.image(batch)`, the program's memory image, in trees that have "
        f"it), once per batch size.", "",
        table(before, after)])
    print(text)
    if args.write:
        sys.path.insert(0, str(HERE))
        from bench_report import replace_section
        replace_section(args.write, "host_share", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
