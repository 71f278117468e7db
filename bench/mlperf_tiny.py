"""Engine cycles, utilization and latency of the MLPerf Tiny models of the model zoo (issue 15).

Every model of ``examples/model_zoo.py`` (ResNet-8, MobileNetV1-0.25 at 96x96,
DS-CNN small, the FC autoencoder, ResNet-18's stem), quantized by fpgacnn, is
compiled (:func:`fpgacnn.host.compiler.compile_model`) for several engines:
``EngineConfig()`` (the default engine) and each board's sized engine
(:func:`fpgacnn.boards.engine_sizing.size_engine`), boards with the same
engine and clock sharing a row. For each model, engine and batch size it
reports:

- engine cycles per image (the compiled runs' ``predicted_cycles``, which the
  tests hold equal to the RTL's cycles; ``--rtl`` measures them on the
  simulated board too and asserts the equality);
- whole-network MAC utilization: the engine steps' MACs / (cycles x the
  array's peak MACs per cycle); the host steps that remain (Add, pools,
  Flatten);
- the projected latency per image at the board's target clock, engine time
  only (no host layers, no transfers);
- lane use: the MACs / the products of the windows issued (``compute_cycles``
  x peak), i.e. the utilization the array would have if it issued every
  cycle; block-diagonal zeros, idle lanes and the 1x1 remap's waste are the rest;
- the depthwise layers' utilization and their share of cycles and MACs (a
  depthwise layer fused with the pointwise after it, on an engine with
  ``fused_blocks``, is one ``fused`` step: its MACs are the block's, not
  a depthwise layer's; the fused blocks' utilization, their depthwise and
  pointwise MACs over their cycles, is given beside it, for the issue's
  depthwise goal is met there or nowhere);
- per layer (for the ``--detail`` engines): mapping (dense, im2col,
  grouped/k, depthwise/k, dilated, gemm, fused), runs, cycles, utilization and the bound.

The bound of a layer is derived from the cycle model
(:func:`fpgacnn.host.cycle_model.layer_cycles`) run by run. A run's cycles
split exactly into

- ``weights``: the parameter and weight beats (``load_cycles``), which
  nothing overlaps;
- the stream phase's binding demand, the largest of ``depthwise`` (a fused
  block's depthwise unit: its window pairs at
  :func:`~fpgacnn.core.fused_block.depthwise_issue_cycles` each, ``ci_tiles``
  windows a pair; 0 in other runs), ``compute`` (windows issued into the
  array, ``compute_cycles``: a fused block's pointwise half), ``input``
  (line-buffer writer cycles: ``batch*in_h*in_w*ci_tiles`` words at
  ``max(1, pin/beat)`` cycles each) and ``output`` (output words at
  ``max(1, pout/beat)`` beats each), i.e. the cycle model's own demands
  (``detail["demand"]``), of which it names the largest as the run's
  ``bound`` (the first of a tie in that order);
- ``overhead``: the rest (start, line-buffer fill before the first window,
  pipeline drain, and whatever of the non-binding streams does not overlap).

Summed over a layer's runs, the largest of weights / depthwise / compute /
input / output / overhead is the layer's bound; the tables give it with its
share of the layer's cycles, and the six shares (``w / dw / c / i / o /
ovh``). A fused block whose depthwise unit is slower than its pointwise
(MobileNetV1's 32 -> 32 block on the PYNQ-Z2's half-rate unit) is
``depthwise``, not ``overhead``: the unit's cycles are its own part.

Published figures (``PUBLISHED``) are MLPerf Tiny results (whole-system
latencies), cited with their sources.

Usage::

    python bench/mlperf_tiny.py             # every model and engine, batches 1 and 8 (~20 s)
    python bench/mlperf_tiny.py --rtl       # + RTL cycles of the PYNQ-Z2 engine, batch 1
    python bench/mlperf_tiny.py --models resnet8,ds_cnn --boards pynq-z2 --batches 1
    python bench/mlperf_tiny.py --rtl default,pynq-z2 --rtl-batches 1,8 --write BENCHMARKS.md
    python bench/mlperf_tiny.py --boards pynq-z2,pynq-z2+block --rtl pynq-z2+block

An engine name ``BOARD+block`` is the board's sized engine with the fused
depthwise + pointwise block (``size_engine(board, fused_block=True)``,
docs/boards.md), where the board's file does not choose it for its sized
engine (the PYNQ-Z1/Z2's do: there both names are one engine).

``--write FILE`` also replaces the section in FILE (BENCHMARKS.md section 5);
``--detail ENGINES`` picks the engines with per-layer tables (default pynq-z2).

The section in the file is the text between ``<!-- mlperf_tiny:begin -->``
and ``<!-- mlperf_tiny:end -->`` (appended when the markers are missing).
"""

import argparse
import datetime
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from fpgacnn.boards.board import list_boards, load_board
from fpgacnn.boards.engine_sizing import multipliers_needed, size_engine
from fpgacnn.core.config import EngineConfig
from fpgacnn.core.errors import MappingError
from fpgacnn.host.compiler import EngineStep, compile_model
from fpgacnn.host.cycle_model import layer_cycles
from fpgacnn.host.layers import Gemm, GroupedConv
from fpgacnn.host.onnx_import import load_onnx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_report import load_zoo  # noqa: E402  (the tests call bench.load_zoo too)

REPO = HERE.parent

#: The engine of the issue's goals, and its batch.
GOAL_BOARD, GOAL_BATCH = "pynq-z2", 1

#: Whole-network utilization goals of issue 15 (PYNQ-Z2 sized engine, batch 1).
GOALS = {"resnet8": 0.90, "mobilenet_v1_025": 0.75, "ds_cnn": 0.75}

#: Utilization goal of the depthwise layers (issue 15).
DEPTHWISE_GOAL = 0.50

#: Published latencies per image (ms): MLPerf Tiny results, 1 / the median
#: single-stream throughput of the benchmark harness (whole system);
#: model -> [(system, board and clock, ms, source, same network)].
_FPGACONVNET = ("github.com/mlcommons/tiny_results_v1.1, closed/fpgaconvnet: README.md "
                "(resources, clock) and results/zedboard/{}/performance/results.txt "
                "(median throughput)")
PUBLISHED = {
    "resnet8": [
        ("fpgaConvNet", "ZedBoard (XC7Z020), 143 MHz, 211 DSP", 0.411,
         "MLPerf Tiny v1.1 closed, " + _FPGACONVNET.format("ic"), True),
        ("hls4ml RN08 (not the reference ResNet-8)", "PYNQ-Z2 (XC7Z020), 100 MHz", 7.64,
         "MLPerf Tiny v1.0 open, github.com/mlcommons/tiny_results_v1.0, open/hls4ml", False),
    ],
    "mobilenet_v1_025": [
        ("fpgaConvNet", "ZedBoard (XC7Z020), 111 MHz, 189 DSP", 9.49,
         "MLPerf Tiny v1.1 closed, " + _FPGACONVNET.format("vww"), True),
    ],
    "ds_cnn": [
        ("fpgaConvNet", "ZedBoard (XC7Z020), 143 MHz, 188 DSP", 0.324,
         "MLPerf Tiny v1.1 closed, " + _FPGACONVNET.format("kws"), True),
    ],
}

#: The parts of a layer's cycles, in table order (the stream's demands in the cycle
#: model's order, so that a tie names the part the model names), and their short names.
PARTS = ("weights", "depthwise", "compute", "input", "output", "overhead")
PART_ABBREVIATIONS = {"weights": "w", "depthwise": "dw", "compute": "c", "input": "i",
                      "output": "o", "overhead": "ovh"}


# -- engines -------------------------------------------------------------------------------


@dataclass
class Engine:
    """One engine configuration at one clock, and the boards it stands for.

    Attributes
    ----------
    names : list of str
        ``"default"`` for ``EngineConfig()``, else board names.
    config : EngineConfig
    clock_mhz : float
        The board's ``clock.target_mhz`` (100 MHz for the default engine:
        the ``Accelerator``'s default ``clock_hz``).
    dsps : str
        Hard multipliers used / available on the row's boards ('' for the default engine).
    """

    names: list
    config: EngineConfig
    clock_mhz: float
    dsps: str = ""

    @property
    def label(self):
        """The row's name in the tables."""
        if self.names == ["default"]:
            return "`EngineConfig()` (default)"
        return ", ".join(self.names)

    @property
    def geometry(self):
        """``pin x pout``, peak MACs per cycle and buffers, one string."""
        c = self.config
        return (f"pin {c.pin} x pout {c.pout} ({c.peak_macs_per_cycle} MACs/cycle), "
                f"width/ch/out-ch {c.max_width}/{c.max_channels}/{c.max_out_channels}")


#: The suffix of an engine name for a board's sized engine with the fused block.
BLOCK_SUFFIX = "+block"


def engines(names):
    """The engines of ``names`` ("default", board names and ``BOARD+block``), boards with
    the same configuration, clock and multipliers merged into one :class:`Engine`."""
    out = {}
    for name in names:
        if name == "default":
            key = (EngineConfig(), 100.0, "")
        else:
            block = name.endswith(BLOCK_SUFFIX)
            board = load_board(name[:-len(BLOCK_SUFFIX)] if block else name)
            # (a board name: its sized engine as its file chooses, the block or not)
            config = size_engine(board, fused_block=True if block else None).config
            key = (config, float(board.clock.target_mhz),
                   f"{multipliers_needed(config, board)} / {board.resources.multipliers} "
                   f"{board.resources.multiplier_kind}")
        if key in out:
            out[key].names.append(name)
        else:
            out[key] = Engine([name], *key)
    return list(out.values())


def find_engine(engine_list, name):
    """The engine of ``engine_list`` that stands for ``name`` (None when absent)."""
    return next((e for e in engine_list if name in e.names), None)


# -- the cycle model, run by run -----------------------------------------------------------


def run_parts(config, desc, predicted):
    """The split of one run's cycles into :data:`PARTS`.

    Parameters
    ----------
    config : EngineConfig
    desc : mapping
        The run's descriptor.
    predicted : int
        The compiled run's ``predicted_cycles`` (checked against the cycle model).

    Returns
    -------
    dict
        ``PARTS`` -> cycles (they sum to the run's cycles); ``"stream"``: which of
        depthwise / compute / input / output binds the stream phase; ``"issued"``:
        the cycles in which a window is issued into the array (whether or not
        compute binds).
    """
    est = layer_cycles(config, desc)
    if est.cycles != predicted:
        raise RuntimeError(f"the cycle model gives {est.cycles} cycles, the compiled run "
                           f"{predicted}")
    # What each stream needs on its own, the cycle model's, in its order (the weights aside).
    demand = {name: cycles for name, cycles in est.detail["demand"].items() if name != "weights"}
    stream = max(demand, key=demand.get)
    if est.bound != "weights" and est.bound != stream:
        raise RuntimeError(f"the cycle model names {est.bound!r}, the demands here {stream!r}")
    parts = dict.fromkeys(PARTS, 0)
    parts["weights"] = est.load_cycles
    parts[stream] = demand[stream]
    parts["overhead"] = est.cycles - est.load_cycles - demand[stream]
    if parts["overhead"] < 0:
        raise RuntimeError(f"{est.cycles} cycles are fewer than the weights and the "
                           f"{stream} demand ({est.load_cycles} + {demand[stream]})")
    return dict(parts, stream=stream, issued=est.compute_cycles)


def bound_of(parts):
    """``(name, share)`` of the largest of :data:`PARTS` in ``parts``."""
    total = sum(parts[p] for p in PARTS)
    name = max(PARTS, key=lambda p: parts[p])
    return name, parts[name] / total if total else 0.0


# -- one model on one engine ---------------------------------------------------------------


@dataclass
class LayerResult:
    """One engine step of a compiled program, with the cycle model's split."""

    name: str
    op: str
    shape: str
    mapping: str
    depthwise: bool
    runs: int
    macs: int          # per image
    cycles: int        # all images of the batch
    parts: dict        # PARTS and "issued", all images of the batch
    rtl_cycles: int = None

    def lane_use(self, batch, peak):
        """MACs / the MAC slots of the issued windows."""
        return self.macs * batch / (self.parts["issued"] * peak)


@dataclass
class NetworkResult:
    """One model compiled for one engine and batch."""

    model: str
    batch: int
    peak: int
    layers: list = field(default_factory=list)
    host_steps: list = field(default_factory=list)
    error: str = None
    rtl_cycles: int = None
    #: "resident" (the figures are every inference after the first, which loads
    #: the weights: ``first_cycles``) or "streamed" (every inference loads them).
    weights: str = "streamed"
    first_cycles: int = None

    @property
    def cycles(self):
        return sum(layer.cycles for layer in self.layers)

    @property
    def runs(self):
        """Engine runs per batch."""
        return sum(layer.runs for layer in self.layers)

    @property
    def macs(self):
        """Engine MACs per image."""
        return sum(layer.macs for layer in self.layers)

    @property
    def utilization(self):
        return self.macs * self.batch / (self.cycles * self.peak)

    def depthwise(self):
        """``(utilization, share of the cycles, share of the MACs)`` of the depthwise
        layers (None without any)."""
        dw = [layer for layer in self.layers if layer.depthwise]
        if not dw:
            return None
        macs, cycles = sum(l.macs for l in dw), sum(l.cycles for l in dw)
        return macs * self.batch / (cycles * self.peak), cycles / self.cycles, macs / self.macs

    def fused_blocks(self):
        """``(count, utilization, share of the cycles, share of the MACs)`` of the fused
        depthwise + pointwise blocks, their MACs both halves' (None without any)."""
        blocks = [layer for layer in self.layers if layer.mapping == "fused"]
        if not blocks:
            return None
        macs, cycles = sum(l.macs for l in blocks), sum(l.cycles for l in blocks)
        return (len(blocks), macs * self.batch / (cycles * self.peak), cycles / self.cycles,
                macs / self.macs)

    def parts(self):
        """:data:`PARTS` (and ``"issued"``) summed over the engine layers."""
        return {p: sum(layer.parts[p] for layer in self.layers) for p in (*PARTS, "issued")}

    def lane_use(self):
        """Engine MACs / the MAC slots of the issued windows (zeros, padding lanes and
        remap waste are the rest)."""
        return self.macs * self.batch / (self.parts()["issued"] * self.peak)


def describe_layer(layer):
    """A short shape string: ``dw 3x3 s2 32 ch @48x48``, ``1x1 32->64 @24x24``, ``FC 64->10``."""
    if isinstance(layer, Gemm):
        cout, cin = layer.weight.shape
        return f"FC {cin}->{cout}"
    cout = layer.weight.shape[0]
    cin, h, w = layer.input_shape
    kh, kw = layer.kernel
    stride = f" s{layer.stride[0]}" if layer.stride[0] == layer.stride[1] else f" s{layer.stride}"
    stride = "" if stride == " s1" else stride
    if isinstance(layer, GroupedConv) and layer.depthwise and cout == cin:
        return f"dw {kh}x{kw}{stride} {cin} ch @{h}x{w}"
    group = f" g{layer.group}" if getattr(layer, "group", 1) > 1 else ""
    return f"{kh}x{kw}{stride}{group} {cin}->{cout} @{h}x{w}"


def compile_network(name, model, engine, batch):
    """The :class:`NetworkResult` of ``model`` on ``engine`` at ``batch`` (cycle model only)."""
    result = NetworkResult(name, batch, engine.config.peak_macs_per_cycle)
    try:
        program = compile_model(model, engine.config, batch=batch)
    except MappingError as e:
        result.error = str(e)
        return result
    # Steady state: a resident program's inferences after the first (docs/engine.md,
    # "Resident weights"); the first, which loads the weights, is `first_cycles`.
    warm = program.resident
    if warm:
        result.weights = "resident"
        result.first_cycles = sum(run.predicted_cycles for step in program.steps
                                  for run in getattr(step, "runs", ()))
    for step in program.steps:
        if not isinstance(step, EngineStep):
            result.host_steps.append(step.op)
            continue
        parts = dict.fromkeys((*PARTS, "issued"), 0)
        cycles = 0
        for run in step.runs:
            desc = run.warm_descriptor if warm else run.descriptor
            predicted = run.warm_predicted_cycles if warm else run.predicted_cycles
            cycles += predicted
            split = run_parts(engine.config, desc, predicted)
            for p in parts:
                parts[p] += split[p]
        layer = step.layer
        fused = getattr(step, "fused", False)
        shape = describe_layer(layer)
        if fused:  # the depthwise and the pointwise after it, one engine step
            shape += " + " + describe_layer(step.pointwise).split(" @")[0]
        result.layers.append(LayerResult(
            name=step.name, op=step.op, shape=shape,
            mapping=getattr(step, "mapping", "dense"),
            # A fused block's depthwise half runs in the depthwise unit beside the
            # array, its MACs counted with the pointwise's: not a depthwise layer here.
            depthwise=isinstance(layer, GroupedConv) and layer.depthwise and not fused,
            runs=len(step.runs), macs=step.macs, cycles=cycles, parts=parts))
    return result


def measure_rtl(result, model, x, engine, board):
    """Run ``x`` (float inputs, ``result.batch`` of them) on the simulated ``board``;
    record the RTL cycles in ``result`` and assert they equal the prediction and the
    output equals the reference backend's."""
    from fpgacnn.host.accelerator import Accelerator
    from fpgacnn.host.reference import ReferenceBackend
    x8 = model.quantize_input(x[:result.batch])
    acc = Accelerator(model, config=engine.config, board=board)
    want = ReferenceBackend().run_int8(model, x8)
    for _ in range(2 if result.weights == "resident" else 1):  # the second with them resident
        y8 = acc.run_int8(x8)
        np.testing.assert_array_equal(
            y8, want, err_msg=f"{result.model}: RTL output differs from the reference")
    measured = {l["name"]: l for l in acc.report["layers"] if l["engine"]}
    for layer in result.layers:
        entry = measured[layer.name]
        if entry["cycles"] != layer.cycles or entry["predicted_cycles"] != layer.cycles:
            raise AssertionError(f"{result.model} {layer.name}: RTL {entry['cycles']} cycles, "
                                 f"predicted {entry['predicted_cycles']} (here {layer.cycles})")
        layer.rtl_cycles = entry["cycles"]
    result.rtl_cycles = sum(layer.rtl_cycles for layer in result.layers)


# -- tables --------------------------------------------------------------------------------


def _pct(x):
    return "-" if x is None else f"{x:.1%}"


def _ms(cycles, mhz):
    return f"{cycles / (mhz * 1e3):.3f}"


def _part_names(short=True):
    """The parts' names as the tables' headings give them: ``w / dw / ... / ovh``."""
    return " / ".join(PART_ABBREVIATIONS[p] if short else p for p in PARTS)


def _shares(parts):
    total = sum(parts[p] for p in PARTS)
    return " / ".join(f"{100 * parts[p] / total:.0f}" for p in PARTS)


def _bound(parts):
    name, share = bound_of(parts)
    return f"{name} {share:.0%}"


def _host(steps):
    counts = {}
    for op in steps:
        counts[op] = counts.get(op, 0) + 1
    return ", ".join(op if n == 1 else f"{op} x{n}" for op, n in counts.items()) or "none"


def _rtl_cell(result):
    if result.rtl_cycles is None:
        return "-"
    return f"{result.rtl_cycles:,} (= model)"


def _depthwise_cell(dw, blocks):
    """The headline's depthwise cell: the depthwise layers run alone (``dw``) and the
    fused blocks (``blocks``), each against :data:`DEPTHWISE_GOAL`."""
    def met(u):
        return "yes" if u >= DEPTHWISE_GOAL else "**no**"
    cells = []
    if dw is not None:
        cells.append(f"{dw[0]:.1%} ({met(dw[0])}; {dw[1]:.0%} of the cycles, "
                     f"{dw[2]:.0%} of the MACs)")
    if blocks is not None:
        n, u, cycles, macs = blocks
        cells.append(f"in {n} fused blocks: {u:.1%} ({met(u)}; depthwise + pointwise MACs, "
                     f"{cycles:.0%} of the cycles, {macs:.0%} of the MACs)")
    return "; ".join(cells) or "-"


def headline_table(results, engine, batch):
    """Per model on ``engine`` at ``batch``: cycles, utilization against the goals,
    latency against the published figures."""
    mhz = engine.clock_mhz
    notes = footnotes(results)
    head = ["model", "engine MACs/image", "engine layers / runs", "cycles/image (cycle model)",
            "RTL cycles/image", "first inference (loads the weights)", "utilization", "goal",
            "met",
            f"depthwise utilization (goal {DEPTHWISE_GOAL:.0%})",
            "lane use (MACs / issued slots)",
            f"bound mix ({_part_names(short=False)} %)", "host steps left",
            f"engine time/image at {mhz:g} MHz (engine only)", "same at 100% utilization",
            "published (ms/image, whole system)", "ours / published"]
    lines = ["| " + " | ".join(head) + " |",
             "|---|---:|---:|---:|---:|---:|---:|---|---|---:|---:|---|---|---:|---:|---|---|"]
    for name, r in results.items():
        if r.error:
            lines.append(f"| {name} | does not fit: {r.error} |" + " |" * (len(head) - 2))
            continue
        goal = GOALS.get(name)
        met = "-" if goal is None else ("yes" if r.utilization >= goal else "**no**")
        dw = r.depthwise()
        ms = r.cycles / batch / (mhz * 1e3)
        pubs = [(p, notes[id(p)]) for p in PUBLISHED.get(name, [])]
        cells = [
            name, f"{r.macs:,}", f"{len(r.layers)} / {r.runs:,}", f"{r.cycles // batch:,}",
            "-" if r.rtl_cycles is None else f"{r.rtl_cycles // batch:,} (= model)",
            "- (weights streamed)" if r.first_cycles is None else f"{r.first_cycles // batch:,}",
            f"**{r.utilization:.1%}**", "-" if goal is None else f">= {goal:.0%}", met,
            _depthwise_cell(dw, r.fused_blocks()),
            f"{r.lane_use():.1%}", _shares(r.parts()), _host(r.host_steps), f"**{ms:.3f} ms**",
            f"{r.macs / (r.peak * mhz * 1e3):.3f} ms",
            "<br>".join(f"{s}, {b}: {v} ms [{n}]" for (s, b, v, _, _), n in pubs) or "-",
            "<br>".join(f"{ms / v:.2f}x" if same else "(another network)"
                        for (s, b, v, _, same), _ in pubs) or "-"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def footnotes(models):
    """``id(published entry) -> number``, in the order of ``models``."""
    entries = [p for name in models for p in PUBLISHED.get(name, [])]
    return {id(p): i for i, p in enumerate(entries, 1)}


def sources(models):
    """The numbered sources of the published figures of ``models``."""
    entries = [p for name in models for p in PUBLISHED.get(name, [])]
    return "\n".join(f"[{i}] {system}, {board}: {source}."
                     for i, (system, board, _, source, _) in enumerate(entries, 1))


def network_table(name, per_engine, batches):
    """Rows: engines; columns: cycles, utilization and latency per batch."""
    head = ["engine (boards)", "array", "DSPs used / available", "clock MHz"]
    for b in batches:
        head += [f"cycles/image b{b}", f"util. b{b}", f"ms/image b{b} (engine only)"]
    head += [f"bound mix b{batches[0]} ({_part_names()} %)", "RTL cycles/image"]
    lines = ["| " + " | ".join(head) + " |",
             "|---|---|---|---:|" + "---:|---:|---:|" * len(batches) + "---|---|"]
    for engine, results in per_engine:
        cells = [engine.label, engine.geometry, engine.dsps or "-", f"{engine.clock_mhz:g}"]
        first = results[batches[0]]
        if first.error:
            lines.append("| " + " | ".join(cells) + f" | does not fit: {first.error} |")
            continue
        for b in batches:
            r = results[b]
            cells += [f"{r.cycles // b:,}", f"{r.utilization:.1%}",
                      _ms(r.cycles / b, engine.clock_mhz)]
        rtl = [f"b{b}: {results[b].rtl_cycles // b:,}" for b in batches
               if results[b].rtl_cycles is not None]
        cells += [_shares(first.parts()), ", ".join(rtl) + " (= model)" if rtl else "-"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def layer_table(results, batches):
    """Per engine layer of one model on one engine: cycles, utilization, bound per batch."""
    head = ["layer", "shape", "mapping", "runs", "MACs/image"]
    for b in batches:
        head += [f"cycles/image b{b}", f"util. b{b}", f"bound b{b}"]
    head += [f"lane use b{batches[0]}", f"{_part_names()} % b{batches[0]}",
             f"RTL cycles b{batches[0]}"]
    lines = ["| " + " | ".join(head) + " |",
             "|---|---|---|---:|---:|" + "---:|---:|---|" * len(batches) + "---:|---|---:|"]
    first = results[batches[0]]
    peak = first.peak
    for i, layer in enumerate(first.layers):
        cells = [f"{layer.name} ({layer.op})", layer.shape, layer.mapping, str(layer.runs),
                 f"{layer.macs:,}"]
        for b in batches:
            lb = results[b].layers[i]
            cells += [f"{lb.cycles / b:,.0f}" if b > 1 else f"{lb.cycles:,}",
                      f"{lb.macs * b / (lb.cycles * peak):.1%}", _bound(lb.parts)]
        cells += [f"{layer.lane_use(batches[0], peak):.1%}", _shares(layer.parts),
                  "-" if layer.rtl_cycles is None else f"{layer.rtl_cycles:,}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# -- provenance ----------------------------------------------------------------------------


def source_state():
    """``(commit, changed)``: HEAD's short hash and the source files that differ from it
    (tracked and untracked, outside bench/, tests/ and the markdown files)."""
    def git(*args):
        return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True,
                              text=True).stdout
    commit = git("rev-parse", "--short", "HEAD").strip()
    changed = []
    for line in git("status", "--porcelain").splitlines():
        path = line[3:]
        if path.endswith(".py") and not path.startswith(("bench/", "tests/")):
            changed.append(path + (" (new)" if line.startswith("??") else ""))
    return commit, sorted(changed)


# -- main ----------------------------------------------------------------------------------


def _names(text, known, what):
    names = [n for n in text.split(",") if n]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"unknown {what} {', '.join(unknown)}; choose from {', '.join(known)}")
    return names


def parse_args(argv):
    boards = [b.name for b in list_boards()]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=None, help="comma-separated zoo models (default all)")
    parser.add_argument("--boards", default="default,all",
                        help="comma-separated: 'default' (EngineConfig()), board names, 'all' "
                             "(every board); default: default,all")
    parser.add_argument("--batches", default="1,8", help="comma-separated batch sizes")
    parser.add_argument("--rtl", nargs="?", const=GOAL_BOARD, default=None, metavar="ENGINES",
                        help=f"run on the simulated board (Verilator) for these engines "
                             f"(comma-separated; bare --rtl: {GOAL_BOARD})")
    parser.add_argument("--rtl-batches", default="1", help="batch sizes run with --rtl")
    parser.add_argument("--detail", default=GOAL_BOARD,
                        help=f"engines with per-layer tables (default {GOAL_BOARD})")
    parser.add_argument("--zoo-dir", help="write the zoo's ONNX files here (default: a temp dir)")
    parser.add_argument("--write", metavar="FILE", help="replace this benchmark's section in FILE")
    args = parser.parse_args(argv)
    blocks = [b + BLOCK_SUFFIX for b in boards]
    args.board_names = []
    for n in _names(args.boards, ["default", "all", *boards, *blocks], "board"):
        args.board_names += boards if n == "all" else [n]
    args.board_names = list(dict.fromkeys(args.board_names))
    args.batch_list = [int(b) for b in args.batches.split(",") if b]
    args.rtl_names = _names(args.rtl, ["default", *boards, *blocks], "board") if args.rtl else []
    args.rtl_batch_list = [int(b) for b in args.rtl_batches.split(",") if b]
    args.detail_names = (_names(args.detail, ["default", *boards, *blocks], "board")
                         if args.detail else [])
    if any(b < 1 for b in args.batch_list + args.rtl_batch_list) or not args.batch_list:
        parser.error("batch sizes are positive integers")
    missing = [b for b in args.rtl_batch_list if b not in args.batch_list]
    if args.rtl_names and missing:
        parser.error(f"--rtl-batches {missing} are not in --batches")
    return args


def command_line(argv):
    """The command as run (for the section's first line)."""
    return "python bench/mlperf_tiny.py" + "".join(f" {a}" for a in argv)


def collect(args, zoo, zoo_dir):
    """Compile (and with ``--rtl`` run) every model on every engine.

    Returns
    -------
    (list of Engine, dict)
        The engines, and ``results[model][engine index][batch]`` -> :class:`NetworkResult`.
    """
    names = _names(args.models, list(zoo.ZOO), "model") if args.models else list(zoo.ZOO)
    engine_list = engines(args.board_names)
    written = zoo.write_zoo(zoo_dir, names)
    models = {n: load_onnx(written[n]["int8"]) for n in names}
    inputs = {n: np.load(written[n]["calibration"]) for n in names}
    results = {n: [{b: compile_network(n, models[n], e, b) for b in args.batch_list}
                   for e in engine_list] for n in names}
    for rtl_name in args.rtl_names:
        engine = find_engine(engine_list, rtl_name)
        if engine is None:
            raise SystemExit(f"--rtl {rtl_name}: not among --boards")
        run_engine_rtl(engine, engine_list.index(engine), args.rtl_batch_list, models, inputs,
                       results)
    return engine_list, results


def run_engine_rtl(engine, index, batches, models, inputs, results):
    """Every model on ``engine``'s simulated board, at each batch of ``batches``."""
    from fpgacnn.host.accelerator import open_board
    print(f"  RTL: {engine.label} ...", file=sys.stderr, flush=True)
    board = open_board("sim", engine.config,
                       progress=lambda m: print(f"    {m}", file=sys.stderr, flush=True))
    try:
        for name, model in models.items():
            for b in batches:
                r = results[name][index][b]
                if r.error or r.rtl_cycles is not None:
                    continue
                print(f"    {name} batch {b} ({r.cycles:,} cycles) ...", file=sys.stderr,
                      flush=True)
                x = inputs[name]
                if len(x) < b:
                    x = np.concatenate([x] * -(-b // len(x)))
                measure_rtl(r, model, x, engine, board)
    finally:
        board.close()


def report(args, argv, engine_list, results, wall):
    """The markdown section."""
    commit, changed = source_state()
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    tree = f"commit {commit}" + (f" with uncommitted changes to {', '.join(changed)}"
                                 if changed else "")
    rtl_runs = [(e, b) for e in engine_list for b in args.rtl_batch_list
                if any(name in e.names for name in args.rtl_names)]
    rtl_text = ("RTL-measured (the engine's Verilog in Verilator on the simulated board, outputs "
                "equal to the reference backend bit for bit, cycles asserted equal to the "
                "prediction per layer): "
                + "; ".join(f"{e.label} at batch {b}" for e, b in rtl_runs)
                + ". Every other figure is the cycle model's.") if rtl_runs else \
        "No RTL run in this pass (`--rtl`): every figure is the cycle model's."
    out = [f"Command: `{command_line(argv)}`, run {stamp} at {tree}, on {platform.machine()}, "
           f"{os.cpu_count()} cores (shared), Python {platform.python_version()}, "
           f"{wall:.0f} s wall.", "",
           "Cycles are the compiled runs' predicted cycles, engine only: host steps, "
           "transfers and the host's packing are not counted. Where a model's weights fit the "
           "engine's weight buffer together they stay resident, and on an engine with a "
           "parameter buffer deeper than a run's (`param_words`) their parameters where they "
           "fit (docs/engine.md, \"Resident weights\"), and the "
           "figures are the steady state, every inference after the first "
           "(`EngineRun.warm_predicted_cycles`); the first, which loads the weights, is its "
           "own column. "
           "Utilization = engine MACs / (cycles x peak MACs/cycle). Latency = cycles / the "
           "board's target clock. " + rtl_text, ""]
    for goal_name in (GOAL_BOARD, GOAL_BOARD + BLOCK_SUFFIX):
        goal = find_engine(engine_list, goal_name)
        if goal is None or GOAL_BATCH not in args.batch_list:
            continue
        i = engine_list.index(goal)
        what = ("sized engine" if goal_name == GOAL_BOARD else
                f"(the {GOAL_BOARD}'s sized engine with the fused depthwise + pointwise block)")
        out += [f"**{goal.label}** {what} ({goal.geometry}; {goal.dsps}), batch "
                f"{GOAL_BATCH}, against the issue's goals and published figures:", "",
                headline_table({n: r[i][GOAL_BATCH] for n, r in results.items()}, goal,
                               GOAL_BATCH), "", sources(results), ""]
    for name, per_engine in results.items():
        out += [f"**{name}** on every engine:", "",
                network_table(name, list(zip(engine_list, per_engine)), args.batch_list), ""]
    for detail in args.detail_names:
        engine = find_engine(engine_list, detail)
        if engine is None:
            continue
        i = engine_list.index(engine)
        for name, per_engine in results.items():
            if per_engine[i][args.batch_list[0]].error:
                continue
            out += [f"Per layer, **{name}** on {engine.label} ({engine.geometry}); cycles per "
                    f"image; bound = the largest part of the layer's cycles (weights, the "
                    f"stream's depthwise / compute / input / output demand, overhead: "
                    f"depthwise the fused block's depthwise unit, compute the array):", "",
                    layer_table(per_engine[i], args.batch_list), ""]
    return "\n".join(out)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    t0 = time.perf_counter()
    zoo = load_zoo()
    if args.zoo_dir:
        engine_list, results = collect(args, zoo, Path(args.zoo_dir))
    else:
        with tempfile.TemporaryDirectory() as tmp:
            engine_list, results = collect(args, zoo, Path(tmp))
    text = report(args, argv, engine_list, results, time.perf_counter() - t0)
    print(text)
    if args.write:
        sys.path.insert(0, str(HERE))
        from bench_report import replace_section
        replace_section(args.write, "mlperf_tiny", text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
