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
under and over each limit.
"""

import math

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from fpgacnn.core.errors import MappingError
from fpgacnn.host.accelerator import Accelerator
from fpgacnn.host.compiler import EngineStep, compile_model
from fpgacnn.host.layers import Conv, GroupedConv
from fpgacnn.host.model import QuantizedModel, TensorSpec
from fpgacnn.host.pixel_reader_setup import reader_fields
from fpgacnn.host.program_image import EngineRecord, FoldRecord, build_image, tensor_names
from fpgacnn.host.reference import ReferenceBackend

from conftest import DEEP_PARAMS_ENGINE

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
