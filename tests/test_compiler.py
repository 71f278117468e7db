"""The compiled program: self-contained runs, the Gemm adapter, and the runtime loop.

Most tests run the program on the numpy model of the engine stream
(engine_model_helpers.py) behind the driver interface, so that they are fast
and independent of the packing they check; one runs the digits example on the
RTL (the simulated board).
"""

import dataclasses
import math
import re

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from fpgacnn.core.config import EngineConfig
from fpgacnn.core.errors import InputError, MappingError
from fpgacnn.host import accelerator, compiler, packing
from fpgacnn.host.accelerator import Accelerator
from fpgacnn.host.compiler import (BatchImage, BatchTranspose, EngineStep, GemmAsConv,
                                   compile_model, pack_run)
from fpgacnn.host.cycle_model import layer_cycles
from fpgacnn.host.engine_driver import LayerRun
from fpgacnn.host.examples import load_example
from fpgacnn.host.layers import Conv, Gemm
from fpgacnn.host.model import QuantizedModel, TensorSpec
from fpgacnn.host.onnx_import import load_onnx
from fpgacnn.host.reference import ReferenceBackend

from conftest import SMALL_ENGINE
from engine_model_helpers import emulate_engine
from random_models import convolution_model, random_cnn

#: Engines for the fast tests: the RTL tests' small engine, one with 2x2 tiles
#: (many channel groups and narrow strips) and one with 64-bit beats and
#: 8-channel tiles; Gemm also runs on one without the 1x1 remap (kmax 1).
CONFIGS = [
    SMALL_ENGINE,
    EngineConfig(pin=2, pout=2, kmax=3, stream_width=32, max_width=16, max_channels=12,
                 max_out_channels=12),
    EngineConfig(pin=8, pout=4, kmax=3, stream_width=64, max_width=16, max_channels=16,
                 max_out_channels=16),
]
GEMM_CONFIGS = CONFIGS + [
    EngineConfig(pin=1, pout=1, kmax=1, stream_width=32, max_width=16, max_channels=8,
                 max_out_channels=8),
]


def ids(config):
    return f"p{config.pin}x{config.pout}k{config.kmax}b{config.stream_bytes}"


class EmulatedDriver:
    """The driver interface in front of the numpy engine model: the input stream
    must have the descriptor's length, and the weights persist between runs."""

    def __init__(self, config):
        self.config, self.state, self.calls = config, {}, 0

    def run_layer(self, descriptor, stream_in, out_nbytes, *, timeout, name="layer"):
        assert len(stream_in) == packing.input_nbytes(self.config, descriptor), name
        assert timeout > 0
        self.calls += 1
        out = emulate_engine(self.config, descriptor, stream_in, self.state)
        assert out.size == out_nbytes, name
        return LayerRun(out, layer_cycles(self.config, descriptor).cycles, 0, 0)


@pytest.fixture
def emulated(monkeypatch):
    """``emulated(model, config)``: an Accelerator whose board is the numpy engine model."""
    monkeypatch.setattr(accelerator, "EngineDriver",
                        lambda board, expected: EmulatedDriver(expected))

    def make(model, config):
        return Accelerator(model, backend="sim", config=config, board=object())
    return make


def digits():
    return load_onnx(load_example("digits").model)


def gemm_model(rng, cin, cout):
    weight = rng.integers(-127, 128, (cout, cin)).astype(np.int8)
    w_scale = rng.uniform(0.5, 1.5, cout) / 127
    x_zp, y_zp = (int(v) for v in rng.integers(-20, 20, 2))
    y_scale = 70 * math.sqrt(cin) * 0.05 * w_scale.mean()
    fc = Gemm("fc", ["x"], "y", (cin,), weight, rng.integers(-3000, 3000, cout).astype(np.int32),
              0.05, x_zp, w_scale, y_scale, y_zp, lo=y_zp if rng.random() < 0.5 else -128)
    return QuantizedModel("gemm", [fc], TensorSpec("x", (cin,), np.int8, 0.05, x_zp),
                          TensorSpec("y", (cout,), np.int8, y_scale, y_zp), "x", "y")


def step_inputs(model, program, x):
    """Each engine step with its input tensor (the model's layers on the reference)."""
    tensors = {model.input_tensor: x}
    for layer in model.layers:
        tensors[layer.output] = layer.evaluate(*(tensors[t] for t in layer.inputs))
    return [(step, tensors[step.inputs[0]]) for step in program.steps
            if isinstance(step, EngineStep)]


@pytest.mark.parametrize("config", CONFIGS, ids=ids)
@pytest.mark.parametrize("name", ["digits", "random_cnn_1", "random_cnn_4"])
def test_runs_carry_what_pack_layer_computes(config, name):
    """Descriptor, packed weights, predicted cycles and output size of every run
    are pack_layer's, computed at compile time for the program's batch."""
    model = digits() if name == "digits" else random_cnn(int(name[-1]))
    batch = 3
    program = compile_model(model, config, batch=batch)
    x = np.random.default_rng(0).integers(-128, 128, (batch, *model.input.shape), dtype=np.int8)
    for step, x_step in step_inputs(model, program, x):
        conv = GemmAsConv(step.layer) if isinstance(step.layer, Gemm) else step.layer
        for run in step.runs:
            c0, c1 = run.channels
            load = run.descriptor["load_weights"]
            desc, data = packing.pack_layer(
                config, run.gather(x_step), conv.weight[c0:c1], conv.bias[c0:c1],
                conv.x_zero_point, conv.mult[c0:c1], conv.shift[c0:c1], conv.y_zero_point,
                clamp=step.clamp, stride=conv.stride, pads=run.pads,
                pool=step.pool is not None, load_weights=load, remap=run.pack_pixels.remap,
                name=conv.name)
            assert desc == run.descriptor
            assert desc["batch"] == (1 if isinstance(step.layer, Gemm) else batch)
            assert_array_equal(run.stream(x_step), data)
            if load:
                assert_array_equal(data[:run.weights.size], run.weights)
            assert run.predicted_cycles == layer_cycles(config, desc).cycles
            assert run.out_nbytes == packing.output_nbytes(config, desc)
            assert run.in_shape == run.gather(x_step).shape


@pytest.mark.parametrize("config", CONFIGS, ids=ids)
def test_weights_load_once_per_channel_group(config):
    """Consecutive runs of a channel group share its packed weights; only the
    first of them streams them."""
    from fpgacnn.host.commands.sim import random_layer_model
    model = random_layer_model((8, 6, 40), 20, kernel=3, pad=1, pool=True, seed=1)
    (step,) = compile_model(model, config, batch=2).steps
    groups = {run.channels for run in step.runs}
    assert len(step.runs) > len(groups) > 1  # groups x strips
    previous = None
    for run in step.runs:
        assert run.descriptor["load_weights"] == int(run.channels != previous)
        if run.channels == previous:
            assert run.weights is kept.weights
        previous, kept = run.channels, run
    x = np.zeros((2, 8, 6, 40), np.int8)
    run = step.runs[1]
    assert len(run.stream(x)) == packing.input_nbytes(config, run.descriptor)
    desc, data = pack_run(config, step, run, x, load_weights=True)
    assert desc["load_weights"] == 1 and data.size == packing.input_nbytes(config, desc)
    assert_array_equal(data[:run.weights.size], run.weights)


@pytest.mark.parametrize("config", CONFIGS, ids=ids)
@pytest.mark.parametrize("name", ["digits", "random_cnn_0", "random_cnn_3"])
def test_program_runs_without_packing_weights_or_the_cycle_model(emulated, monkeypatch,
                                                                 config, name):
    """After compiling, run(x) only packs pixels: the weight packing, the checks
    and the cycle model are not called again, and two runs agree exactly."""
    model = digits() if name == "digits" else random_cnn(int(name[-1]))
    x = np.random.default_rng(1).integers(-128, 128, (4, *model.input.shape), dtype=np.int8)
    acc = emulated(model, config)
    acc.program(len(x))

    def refuse(*args, **kwargs):
        raise AssertionError("called while running a compiled program")
    for module, name_ in ((packing, "pack_weights"), (packing, "pack_layer"),
                          (packing, "map_layer"), (compiler, "layer_cycles")):
        monkeypatch.setattr(module, name_, refuse)
    y1 = acc.run_int8(x)
    first = acc.report
    y2 = acc.run_int8(x)
    assert_array_equal(y1, ReferenceBackend().run_int8(model, x))
    assert_array_equal(y2, y1)
    engine = [(l["name"], l["runs"], l["cycles"], l["predicted_cycles"])
              for l in first["layers"] if l["engine"]]
    assert engine == [(l["name"], l["runs"], l["cycles"], l["predicted_cycles"])
                      for l in acc.report["layers"] if l["engine"]]
    assert all(cycles == predicted for _, _, cycles, predicted in engine)
    assert first["total_cycles"] == acc.report["total_cycles"] > 0


@pytest.mark.parametrize("config", GEMM_CONFIGS, ids=ids)
def test_gemm_adapter_matches_the_reference(emulated, config):
    """Gemm as a 1x1 convolution, through gather, the engine model and scatter:
    bit-exact for many shapes and batches (channel groups, remapped or not,
    batches wider than a row, partial last rows)."""
    rng = np.random.default_rng(config.pin * 10 + config.kmax)
    for cin, cout, batch in [(1, 1, 1), (5, 3, 2), (9, 17, 7), (12, 40, 50), (30, 2, 33),
                             (8, 8, 1), (3, 25, 19), (64, 10, 64)]:
        if cin > config.max_channels * config.kmax ** 2:
            continue
        model = gemm_model(rng, cin, cout)
        x = rng.integers(-128, 128, (batch, cin), dtype=np.int8)
        acc = emulated(model, config)
        y = acc.run_int8(x)
        assert_array_equal(y, ReferenceBackend().run_int8(model, x),
                           err_msg=f"{cin}->{cout} x{batch}")
        assert acc.report["layers"][0]["runs"] == len(acc.program(batch).steps[0].runs)


def test_gemm_adapter_gathers_the_batch_into_an_image_and_back():
    rng = np.random.default_rng(2)
    x = rng.integers(-128, 128, (11, 6), dtype=np.int8)
    gather = BatchImage(2, 9, rows=3, width=3)
    image = gather(x)
    assert image.shape == (1, 6, 3, 3)
    assert_array_equal(image[0].reshape(6, 9)[:, :7], x[2:9].T)
    assert not image[0].reshape(6, 9)[:, 7:].any()  # padding pixels
    y = np.zeros((11, 8), np.int8)
    BatchTranspose(1, 7, 2, 9)(y, image)  # an identity "layer": 6 channels out
    assert_array_equal(y[2:9, 1:7], x[2:9])
    assert not y[:2].any() and not y[9:].any()


def test_gemm_presents_as_a_1x1_convolution():
    rng = np.random.default_rng(3)
    fc = gemm_model(rng, 20, 7).layers[0]
    conv = GemmAsConv(fc)
    assert conv.weight.shape == (7, 20, 1, 1) and conv.stride == (1, 1)
    assert_array_equal(conv.weight[:, :, 0, 0], fc.weight)
    plans = conv.plans(SMALL_ENGINE, 30)
    assert [p.channels for p in plans] == [(0, 7)]
    (plan,) = plans
    rows, width = plan.x_shape[2:]
    assert plan.x_shape[:2] == (1, 20) and rows * width >= 30 > (rows - 1) * width


def test_a_run_refuses_another_batch():
    program = compile_model(digits(), SMALL_ENGINE, batch=2)
    run = program.steps[0].runs[0]
    x = np.zeros((3, *program.model.input.shape), np.int8)
    with pytest.raises(InputError, match=r"^the run was compiled for input \(2, 1, 8, \d+\), "
                                         r"not \(3, 1, 8, \d+\) \(compile the program for this "
                                         r"batch\)$"):
        run.stream(x)


def test_parameters_out_of_range_are_refused_at_compile_time():
    rng = np.random.default_rng(4)
    model = gemm_model(rng, 9, 2)
    fc = model.layers[0]
    fc.weight[:] = 127
    fc.bias[:] = (1 << 31) - 1000
    fc.x_zero_point = -128
    with pytest.raises(MappingError, match=r"^fc: folded bias b - x_zp\*sum\(w\) of channel 0 "
                                           r"\(\d+\) does not fit int32$"):
        compile_model(model, SMALL_ENGINE)


def test_digits_on_the_rtl_twice(small_engine_board):
    """The compiled runs on the simulated board: bit-exact, and a second run
    gives the same output and the same cycles."""
    example = load_example("digits")
    acc = Accelerator(example.model, config=SMALL_ENGINE, board=small_engine_board)
    x = example.x[:9]
    y1 = acc.run(x)
    first = acc.report
    y2 = acc.run(x)
    want = ReferenceBackend().run(acc.model, x)
    assert_array_equal(y1, want)
    assert_array_equal(y2, want)
    for a, b in zip(first["layers"], acc.report["layers"]):
        if a["engine"]:
            assert (a["cycles"], a["predicted_cycles"]) == (b["cycles"], b["predicted_cycles"])
            assert a["cycles"] == a["predicted_cycles"], a["name"]


def conv_model(rng, shape, cout, k, stride, pads, name="conv"):
    """A one-Conv int8 model with seeded random parameters."""
    cin = shape[0]
    weight = rng.integers(-127, 128, (cout, cin, k, k)).astype(np.int8)
    w_scale = rng.uniform(0.5, 1.5, cout) / 127
    x_zp, y_zp = (int(v) for v in rng.integers(-20, 20, 2))
    y_scale = 70 * math.sqrt(cin * k * k) * 0.05 * w_scale.mean()
    conv = Conv(name, ["x"], "y", shape, weight, rng.integers(-3000, 3000, cout).astype(np.int32),
                0.05, x_zp, w_scale, y_scale, y_zp, stride=(stride, stride), pads=pads)
    return QuantizedModel(name, [conv], TensorSpec("x", shape, np.int8, 0.05, x_zp),
                          TensorSpec("y", conv.output_shape, np.int8, y_scale, y_zp), "x", "y")


@pytest.mark.parametrize("width", [1, 2, 3, 5, 17, 40])
@pytest.mark.parametrize("kmax, k, stride, pads", [
    (3, 1, 1, (0, 2, 0, 2)), (3, 1, 2, (0, 1, 0, 1)), (3, 1, 2, (1, 2, 0, 2)),
    (3, 2, 1, (0, 2, 1, 2)), (3, 3, 2, (2, 2, 2, 2)),
    (2, 1, 2, (0, 1, 0, 0)), (2, 1, 2, (0, 1, 0, 1)), (2, 1, 1, (1, 1, 1, 1))])
def test_strips_of_padding_only_columns(emulated, width, kmax, k, stride, pads):
    """Kernels narrower than the padding: output columns that read padding only
    (1x1 with pads) still run bit-exact when the row is cut into strips (of
    one output column on the kmax 2 engine): a first strip left of the image
    streams column 0 and pads to it, a last strip right of it starts earlier,
    rather than streaming an empty row."""
    rng = np.random.default_rng(width * 100 + k * 10 + stride)
    config = EngineConfig(pin=1, pout=1, kmax=kmax, stream_width=32, max_width=kmax,
                          max_channels=1, max_out_channels=4)  # strips of one line-buffer word
    model = conv_model(rng, (1, 2, width), 3, k, stride, pads)
    x = rng.integers(-128, 128, (2, 1, 2, width), dtype=np.int8)
    try:
        acc = emulated(model, config)
        y = acc.run_int8(x)
    except MappingError as e:  # only a strip that cannot reach the image is refused
        assert re.fullmatch(r"layer 'conv': output columns \d+\.\.\d+ read padding only, and no "
                            r"strip of the line buffer's width can include a column of the image",
                            str(e)), e
        return
    assert_array_equal(y, ReferenceBackend().run_int8(model, x))


#: Convolutions the engine does not take as they are: (kind, cin, cout, group,
#: kernel, stride, dilation, pads). Kernels up to 7 and 10x4, square and not,
#: strides 1 to 3 (non-square too), groups 1, C and in between, dilations.
VIEW_LAYERS = [
    ("depthwise", 8, 8, 8, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
    ("depthwise-s2", 6, 6, 6, (3, 3), (2, 2), (1, 1), (0, 1, 1, 0)),
    ("depthwise-x2", 4, 8, 4, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
    ("grouped", 8, 4, 2, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
    ("grouped-1x1", 12, 6, 3, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0)),
    ("dilated", 4, 4, 1, (3, 3), (1, 1), (2, 2), (2, 2, 2, 2)),
    ("dilated-wide", 3, 4, 1, (3, 3), (1, 1), (3, 3), (3, 3, 3, 3)),
    ("dilated-k2", 4, 4, 1, (2, 2), (1, 1), (2, 2), (1, 1, 1, 1)),
    ("depthwise-dilated", 4, 4, 4, (3, 3), (1, 1), (2, 2), (2, 2, 2, 2)),
    ("k5", 3, 5, 1, (5, 5), (1, 1), (1, 1), (2, 2, 2, 2)),
    ("k7-s2", 3, 4, 1, (7, 7), (2, 2), (1, 1), (3, 3, 3, 3)),
    ("k10x4-s2", 1, 6, 1, (10, 4), (2, 2), (1, 1), (5, 1, 4, 2)),
    ("k1x7", 2, 3, 1, (1, 7), (1, 1), (1, 1), (0, 3, 0, 3)),
    ("k7x1", 2, 3, 1, (7, 1), (1, 1), (1, 1), (3, 0, 3, 0)),
    ("s2x1", 4, 4, 1, (3, 3), (2, 1), (1, 1), (1, 1, 1, 1)),
    ("k4-s3", 2, 4, 1, (4, 4), (3, 3), (1, 1), (0, 0, 0, 0)),
]


def view_layer_model(rng, kind, cin, cout, group, kernel, stride, dilation, pads, hw=(9, 10)):
    return convolution_model(rng, cin, cout, group, kernel, stride, dilation, pads, hw, name="c",
                             spread=70 / 8)


@pytest.mark.parametrize("config", CONFIGS, ids=ids)
@pytest.mark.parametrize("case", VIEW_LAYERS, ids=[c[0] for c in VIEW_LAYERS])
def test_every_convolution_runs_on_the_engine(emulated, config, case):
    """Grouped, depthwise, dilated, large, non-square kernels and strides: all
    engine steps (no host fallback), bit-exact with the reference."""
    rng = np.random.default_rng(sum(map(ord, case[0])) + config.pin)
    model = view_layer_model(rng, *case)
    (step,) = compile_model(model, config, batch=2).steps
    assert isinstance(step, EngineStep) and step.runs
    kind, group, kernel, stride, dilation = case[0], case[3], case[4], case[5], case[6]
    span = max((k - 1) * d + 1 for k, d in zip(kernel, dilation))
    want = (("grouped/", "depthwise/") if kind.startswith("depthwise") else
            "grouped/" if kind.startswith("grouped") else
            "dilated" if span <= config.kmax and stride[0] == stride[1] else "im2col")
    if group == 1 and dilation == (1, 1) and stride != (1, 1):
        want = (want, "s2d")  # a strided Conv on the input: its blocks where faster
    assert step.mapping.startswith(want), step.mapping
    x = rng.integers(-128, 128, (2, *model.input.shape), dtype=np.int8)
    acc = emulated(model, config)
    assert_array_equal(acc.run_int8(x), ReferenceBackend().run_int8(model, x))
    assert acc.report["layers"][0]["engine"] is True


def test_grouped_views_are_chosen_by_the_cycle_model():
    """The mapping with the fewest predicted cycles; depthwise on a 4x4 engine:
    one depthwise run (output tile t with input tile t) beats the best
    block-diagonal views (4 channels each, one input and one output tile),
    which are what an engine without depthwise runs gets."""
    rng = np.random.default_rng(3)
    model = view_layer_model(rng, "depthwise", 16, 16, 16, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1))
    config = EngineConfig(pin=4, pout=4, kmax=3, stream_width=32, max_width=16,
                          max_channels=16, max_out_channels=16)
    layer = model.layers[0]
    (step,) = compile_model(model, config, resident=False).steps
    assert step.mapping == "depthwise/16" and len(step.runs) == 1
    d = step.runs[0].descriptor
    assert (d["depthwise"], d["ci_tiles"], d["co_tiles"]) == (1, 4, 4)
    for k in compiler.conv_views.pack_sizes(layer, config):
        views = compiler.conv_views.grouped_views(layer, config, k)
        assert sum(v.weight.shape[0] for v in views) == 16
    assert set(compiler.conv_views.pack_sizes(layer, config)) >= {1, 4, 16}
    no_dw = dataclasses.replace(config, deep_pipeline=0)
    (views_step,) = compile_model(model, no_dw).steps
    assert views_step.mapping == "grouped/4"
    assert all(run.descriptor["ci_tiles"] == run.descriptor["co_tiles"] == 1
               for run in views_step.runs)


@pytest.mark.parametrize("shape, cout, pad, want", [
    ((8, 24, 24), 16, 0, "dense/rows2/remap2"),  # thin: the kmax block pads 8 bytes to 36
    ((36, 12, 12), 16, 0, "dense/rows2"),         # the kmax block's 4 channels a tap fill it
    ((64, 25, 5), 64, 0, "dense/rows25"),         # 5-pixel rows waste a pair's half in 3
    ((8, 24, 24), 16, 1, "dense"),                # padded: the default only
])
def test_a_1x1_layer_runs_with_its_fastest_rows_and_remap_block(shape, cout, pad, want):
    """An unpadded 1x1 convolution is compiled with its pixels as rows of every width
    that divides them, each with no remap and every block of the remap, and the
    fewest predicted cycles are kept (the first on a tie); the program's run is
    that mapping's, bit-exact by the engine model."""
    from fpgacnn.core.errors import MappingError
    from fpgacnn.host.commands.sim import random_layer_model
    from fpgacnn.host.conv_views import row_widths
    from fpgacnn.host.cycle_model import conv_cycles
    from conftest import pynq_z2_engine
    config = pynq_z2_engine()
    model = random_layer_model(shape, cout, kernel=1, pad=pad, seed=5)
    program = compile_model(model, config)
    step, = program.steps
    assert step.mapping == want and len(step.runs) == 1
    layer, run = step.layer, step.runs[0]
    c, h, w = shape
    cycles = {}
    for width in [w] + row_widths(layer, config):
        for block in (None, 0, 2, 3):
            try:
                cycles[width, block] = conv_cycles(config, (1, c, h * w // width, width),
                                                   layer.weight.shape, pads=layer.pads,
                                                   remap=block).cycles
            except MappingError:  # past the line buffer in one run
                pass
    assert run.predicted_cycles == (min(cycles.values()) if not pad else cycles[w, None])
    x = np.random.default_rng(1).integers(-128, 128, (1, *shape), dtype=np.int8)
    out = np.empty((1, *layer.output_shape), np.int8)
    run.store(out, emulate_engine(config, dict(run.descriptor), run.stream(x)))
    assert_array_equal(out, layer.evaluate(x))
