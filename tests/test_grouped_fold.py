"""Grouped and depthwise layers whose views fold their taps, inside a network.

Where a grouped layer's block-diagonal views cannot run as they are (a stride
over ``kmax``, a top or left pad over ``kmax - 1``, one group's input tiles
past ``max_ci_tiles``), each view's taps fold into channels
(``grouped/<k>/im2col``, docs/runtime.md), exactly as a dense Conv's im2col
fallback does: a fold of the network input is an input fold the host writes
with the input (``FoldRecord``), one of a tensor the network computed a
source pattern with ``fold`` that the host gathers from the arena (the
program sequencer stops for it, docs/program.md). Both run here on the RTL of
a program engine, by its sequencer and record by record, batch 2, cold and
warm: bit-exact. tests/test_limit_boundaries.py has the single layers at,
under and over each limit. A dilated Conv whose dilated span fits the window
falls back the same way past the stride and pad ranges (``im2col``).
"""

import math
from pathlib import Path
import re

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from fpgacnn.core.errors import MappingError
from fpgacnn.host import compiler
from fpgacnn.host.accelerator import Accelerator
from fpgacnn.host.compiler import EngineStep, compile_model
from fpgacnn.host.layers import Conv, GroupedConv
from fpgacnn.host.model import QuantizedModel, TensorSpec
from fpgacnn.host.pixel_reader_setup import reader_fields
from fpgacnn.host.program_image import EngineRecord, FoldRecord, build_image, tensor_names
from fpgacnn.host.reference import ReferenceBackend

from conftest import DEEP_PARAMS_ENGINE, SMALL_ENGINE
from limit_layers import COMPILE_CONFIGS, CONFIGS, build_model, fold_limit_layers, layer_case
from random_models import convolution_model

#: A program engine with kmax = 3 (the one tests/test_limit_boundaries.py opens).
CONFIG = DEEP_PARAMS_ENGINE


def _layer(rng, name, x, shape, scale, zp, cout, group, kernel, stride, pads):
    """A Conv (``group`` 1) or GroupedConv reading tensor ``x`` of ``shape``, seeded."""
    cin = shape[0]
    weight = rng.integers(-127, 128, (cout, cin // group, *kernel)).astype(np.int8)
    w_scale = rng.uniform(0.5, 1.5, cout) / 127
    y_scale = 12 * math.sqrt(cin // group * kernel[0] * kernel[1]) * scale * w_scale.mean()
    y_zp = int(rng.integers(-20, 20))
    args = (name, [x], name, shape, weight, rng.integers(-300, 300, cout).astype(np.int32),
            scale, zp, w_scale, y_scale, y_zp)
    kw = dict(stride=stride, pads=pads, lo=y_zp if rng.random() < 0.5 else -128)
    return Conv(*args, **kw) if group == 1 else GroupedConv(*args, group=group, **kw)


def _network(first):
    """``first == "grouped"``: a depthwise layer of stride 4 on the input (its views
    fold the input: input folds), then a Conv. ``first == "conv"``: a Conv, then a
    depthwise layer of stride 4 and a grouped one with a top pad of 3 (folds of
    tensors the network computed)."""
    rng = np.random.default_rng(7 if first == "grouped" else 8)
    shape, scale, zp = (8, 13, 11), 0.05, int(rng.integers(-10, 10))
    specs = {"grouped": [(8, 8, (3, 3), (4, 4), (1, 1, 1, 1)), (6, 1, (3, 3), (1, 1), (1,) * 4)],
             "conv": [(8, 1, (3, 3), (1, 1), (1,) * 4), (8, 8, (3, 3), (4, 4), (1, 1, 1, 1)),
                      (6, 2, (3, 3), (1, 1), (3, 1, 1, 1))]}[first]
    layers, x = [], "x"
    for i, (cout, group, kernel, stride, pads) in enumerate(specs):
        layer = _layer(rng, f"l{i}", x, shape, scale, zp, cout, group, kernel, stride, pads)
        layers.append(layer)
        x, shape = layer.output, layer.output_shape
        scale, zp = layer.y_scale, layer.y_zero_point
    first_layer = layers[0]
    return QuantizedModel(f"fold_{first}", layers,
                          TensorSpec("x", first_layer.input_shape, np.int8,
                                     first_layer.x_scale, first_layer.x_zero_point),
                          TensorSpec(x, shape, np.int8, scale, zp), "x", x)


@pytest.mark.parametrize("first", ["grouped", "conv"])
def test_folded_views_in_a_network_are_input_folds_or_host_gathers(first):
    """The program image: a grouped layer on the input reads input folds (one per
    view's channels) as plain strips; one between layers reads its step's input
    through source patterns with ``fold``, which the pixel reader does not take."""
    program = compile_model(_network(first), CONFIG, batch=2)
    grouped = [s for s in program.steps
               if isinstance(s, EngineStep) and isinstance(s.layer, GroupedConv)]
    assert grouped and all(s.mapping.endswith("/im2col") for s in grouped), \
        [s.mapping for s in grouped]
    image = build_image(program)
    names = tensor_names(program)
    folds = [r for r in image.records if isinstance(r, FoldRecord)]
    records = [r for r in image.records if isinstance(r, EngineRecord)]
    folded = [r for r in records if r.source.fold]
    if first == "grouped":
        assert folds and not folded
        assert {names[r.out] for r in folds} == \
            {names[r.source.tensor] for r in records if r.step == 0}
        assert all(names[r.source.tensor].startswith("x/fold") for r in records if r.step == 0)
    else:
        assert not folds
        steps = {r.step for r in folded}
        assert steps == {i for i, s in enumerate(program.steps) if s in grouped}, steps
        assert all(reader_fields(image, r) is None for r in folded)


@pytest.mark.parametrize("sequencer", [None, False], ids=["sequencer", "records"])
@pytest.mark.parametrize("first", ["grouped", "conv"])
def test_folded_views_in_a_network_are_exact_on_rtl(first, sequencer, program_boards):
    """On the program engine's RTL, by its sequencer (stopping for the host's
    gathers) and record by record through the DMA: bit-exact, cold and warm (a
    resident program's second inference streams no weights)."""
    model = _network(first)
    x = np.random.default_rng(3).integers(-128, 128, (2, *model.input.shape), dtype=np.int8)
    want = ReferenceBackend().run_int8(model, x)
    acc = Accelerator(model, config=CONFIG, board=program_boards(CONFIG), sequencer=sequencer)
    assert (acc.sequencer is not None) == (sequencer is None)
    for inference in ("cold", "warm"):
        assert_array_equal(acc.run_int8(x), want, err_msg=f"WRONG ANSWER ({inference})")
    if sequencer is None:  # it runs every record but those that gather folded taps
        records = [r for r in acc.image(2).records if isinstance(r, EngineRecord)]
        assert acc.report["sequencer"]["sequencer_runs"] == \
            sum(not r.source.fold for r in records) > 0
    if sequencer is False:  # the DMA's runs: every run's cycles the model's
        for layer in acc.report["layers"]:
            if "predicted_cycles" in layer:
                assert layer["cycles"] == layer["predicted_cycles"], layer


def test_a_group_past_the_input_tiles_even_folded_is_refused_naming_the_layer():
    """A full-window group whose input tiles are past max_ci_tiles folds into as many
    tiles: refused before anything runs, the message naming the layer and the limit."""
    rng = np.random.default_rng(1)
    tiles = 17  # CONFIG's max_ci_tiles is 16
    layer = _layer(rng, "g", "x", (2 * 4 * tiles, 4, 4), 0.05, 0, 2, 2, (3, 3), (1, 1),
                   (1, 1, 1, 1))
    model = QuantizedModel("m", [layer], TensorSpec("x", layer.input_shape, np.int8, 0.05, 0),
                           TensorSpec("g", layer.output_shape, np.int8, layer.y_scale,
                                      layer.y_zero_point), "x", "g")
    with pytest.raises(MappingError, match=r"^layer 'g': .*(ci_tiles = 17 is outside|line "
                                           r"buffer|weight buffer)"):
        compile_model(model, CONFIG)


def _fold_choices(key):
    """``[(case, step, {k: predicted cycles or None})]`` of the layers of
    :func:`fold_limit_layers` whose views fold, on engine ``key`` (batch 1): the
    kept step and the cycles of every ``grouped/<k>/im2col`` (None: refused)."""
    config = COMPILE_CONFIGS[key]
    out = []
    for layer, outcome in fold_limit_layers(key).values():
        if outcome != "folded":
            continue
        case = layer_case(key, **layer)
        model = build_model(case)
        conv = model.layers[0]
        cycles = {}
        for candidate in compiler._grouped_candidates(config, conv, fold=True):
            k = int(candidate[0].split("/")[1])
            try:
                step = compiler._step_of_candidate(config, conv, candidate, 1, {}, pack=False)
                cycles[k] = compiler._predicted(step)
            except MappingError:
                cycles[k] = None
        (step,) = compile_model(model, config).steps
        out.append((case, step, cycles))
    return out


def fold_choice_table():
    """The markdown table of docs/runtime.md's ``grouped-fold`` block: which
    ``grouped/<k>/im2col`` the cycle model keeps for :func:`fold_limit_layers`."""
    rows = ["| engine | layer | kept | cycles of each `k` (bold: kept) |", "|---|---|---|---|"]
    for key in CONFIGS:
        for case, step, cycles in _fold_choices(key):
            kept = int(step.mapping.split("/")[1])
            (kh, kw), sy = case.kernel, case.stride[0]
            what = "depthwise" if case.group == case.cin == case.cout else \
                f"{case.group} groups"
            layer = (f"{case.cin}x{case.h}x{case.w} -> {case.cout}, {what}, {kh}x{kw}, "
                     f"stride {sy}, pads {case.pads}")
            each = ", ".join(f"{k}: " + ("refused" if c is None else
                                         f"**{c:,}**" if k == kept else f"{c:,}")
                             for k, c in sorted(cycles.items()))
            rows.append(f"| {key} | {layer} | `{step.mapping}`, {len(step.runs)} "
                        f"run{'s' if len(step.runs) > 1 else ''} | {each} |")
    return "\n".join(rows)


@pytest.mark.parametrize("key", list(CONFIGS))
def test_the_cycle_model_picks_the_groups_per_folded_view(key):
    """The folded views' groups per view are the cycle model's pick: the kept step's
    predicted cycles are the fewest of every ``grouped/<k>/im2col``, and the counts
    differ between layers (one group, some, all of them: the whole layer folded)."""
    kept = set()
    for case, step, cycles in _fold_choices(key):
        fastest = min(c for c in cycles.values() if c is not None)
        assert sum(r.predicted_cycles for r in step.runs) == fastest, case.describe()
        assert step.mapping == f"grouped/{min(k for k, c in cycles.items() if c == fastest)}" \
                               f"/im2col", (case.describe(), step.mapping, cycles)
        kept.add(int(step.mapping.split("/")[1]))
    assert len(kept) >= 2, kept


def test_docs_fold_choice_table_is_current():
    """docs/runtime.md's table is what :func:`fold_choice_table` computes."""
    text = (Path(__file__).resolve().parent.parent / "docs" / "runtime.md").read_text()
    match = re.search(r"<!-- grouped-fold:begin -->\n(.*?)\n<!-- grouped-fold:end -->", text,
                      re.S)
    assert match, "docs/runtime.md has no grouped-fold table"
    assert match.group(1) == fold_choice_table()


@pytest.mark.parametrize("stride, pads, mapping", [
    (3, (2, 2, 0, 0), "dilated"),
    (4, (0, 0, 0, 0), "im2col"),
    (1, (3, 0, 0, 0), "im2col"),
    (1, (0, 3, 1, 1), "im2col"),
], ids=["at", "stride-over", "pad-top-over", "pad-left-over"])
def test_a_dilated_conv_past_the_window_folds_its_taps_on_rtl(stride, pads, mapping,
                                                                small_engine_board):
    """A 2x2 kernel dilated by 2 (a 3x3 span, the window of SMALL_ENGINE) at a stride
    of kmax and a top/left pad of kmax - 1 runs with zeros between its taps; a
    stride or a pad past them, its taps folded into channels (before, refused naming
    the stride or the pad): bit-exact on the RTL with and without back-pressure,
    its cycles the model's without."""
    rng = np.random.default_rng(stride * 10 + sum(pads))
    model = convolution_model(rng, 5, 6, 1, (2, 2), (stride, stride), (2, 2), pads, (10, 9))
    (step,) = compile_model(model, SMALL_ENGINE, batch=2).steps
    assert step.mapping == mapping
    x = rng.integers(-128, 128, (2, 5, 10, 9), dtype=np.int8)
    want = ReferenceBackend().run_int8(model, x)
    acc = Accelerator(model, config=SMALL_ENGINE, board=small_engine_board)
    for pauses in ((0, 0), (250, 600)):
        small_engine_board.set_backpressure(*pauses, seed=stride)
        try:
            assert_array_equal(acc.run_int8(x), want, err_msg=f"WRONG ANSWER {pauses}")
        finally:
            small_engine_board.set_backpressure(0, 0)
        if pauses == (0, 0):
            report = acc.report["layers"][0]
            assert report["cycles"] == report["predicted_cycles"], report
