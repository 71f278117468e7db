"""Space to depth of the network input (issue 15 items 3 and 5, docs/runtime.md).

A strided Conv on the network's input runs as a stride-1 convolution over its
input's ``sy x sx`` blocks of pixels (``conv_views.space_to_depth_view``): the
host writes the blocks with the input (an input fold, ``FoldRecord``), the
compiler keeps the mapping (``s2d``, ``s2d/phase``) where the cycle model
predicts fewer cycles than today's. Checked here:

- the transform (weights at their block offsets, pads of whole blocks,
  derived per axis) computes the layer exactly, on the integer reference, for
  random kernels, strides (square or not), pads, sizes, channels and batches;
- the compiler keeps it only where predicted faster, never as a fallback;
- on the RTL, forced, single layers (kernels 1 to 7, non-square, strides 2 to
  4, asymmetric pads, odd and even sizes, 1 to 4 channels, a fused max-pool,
  batches) through the DMA and through the program sequencer in one start,
  bit-exact, with and without back-pressure, cycles the model's; and MobileNetV1
  (reduced) through the whole path on the PYNQ-Z2's engine.
"""

import dataclasses
import importlib.util
from pathlib import Path

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from fpgacnn.host import compiler, conv_views
from fpgacnn.host.accelerator import Accelerator
from fpgacnn.host.compiler import EngineStep, compile_model
from fpgacnn.host.cycle_model import sequenced_run_cycles
from fpgacnn.host.integer_ops import conv2d
from fpgacnn.host.layers import MaxPool
from fpgacnn.host.model import QuantizedModel, TensorSpec
from fpgacnn.host.onnx_import import load_onnx
from fpgacnn.host.program_image import EngineRecord, FoldRecord
from fpgacnn.host.reference import ReferenceBackend

from conftest import SMALL_ENGINE, pynq_z2_engine
from random_models import convolution_model

_spec = importlib.util.spec_from_file_location(
    "model_zoo", Path(__file__).resolve().parents[1] / "examples" / "model_zoo.py")
zoo = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(zoo)


def _layer(rng, cin, cout, kernel, stride, pads, hw):
    return convolution_model(rng, cin, cout, 1, kernel, stride, (1, 1), pads, hw).layers[0]


def _reference(layer, x, weight=None, stride=None, pads=None):
    return conv2d(x, layer.weight if weight is None else weight, layer.bias, layer.x_zero_point,
                  layer.mult, layer.shift, layer.y_zero_point, layer.lo, layer.hi,
                  stride=layer.stride if stride is None else stride,
                  pads=layer.pads if pads is None else pads)


# -- the transform -------------------------------------------------------------------------


def test_the_blocks_compute_the_layer_exactly():
    """Random strided Convs (kernels 1..7 either way, strides 1..4 either way, pads up
    to the kernel, sizes 1..13, 1..4 channels, batches 1..3), each phase: the view's
    stride-1 convolution on the gathered blocks is the layer's output, bit for bit."""
    rng = np.random.default_rng(1501)
    checked = phased = 0
    while checked < 400:
        kernel = tuple(int(k) for k in rng.integers(1, 8, 2))
        stride = tuple(int(s) for s in rng.integers(1, 5, 2))
        hw = tuple(int(k + rng.integers(0, 7)) for k in kernel)
        pads = tuple(int(rng.integers(0, kernel[i % 2])) for i in range(4))
        cin, cout, batch = (int(v) for v in (rng.integers(1, 5), rng.integers(1, 6),
                                             rng.integers(1, 4)))
        layer = _layer(rng, cin, cout, kernel, stride, pads, hw)
        x = rng.integers(-128, 128, (batch, cin, *hw), dtype=np.int8)
        want = _reference(layer, x)
        for phase in conv_views.space_to_depth_phases(layer):
            try:
                view = conv_views.space_to_depth_view(layer, phase)
            except ValueError as e:  # an axis whose outputs read padding alone
                assert "read no input pixel" in str(e)
                continue
            blocks = view.gather(x)
            assert blocks.shape == (batch, *view.input_shape)
            assert view.input_shape[0] == cin * stride[0] * stride[1]
            assert view.stride == (1, 1) and min(view.pads) >= 0
            got = _reference(layer, blocks, view.weight, (1, 1), view.pads)
            assert_array_equal(got, want, err_msg=f"{kernel} {stride} {pads} {hw} {phase}")
            checked += 1
            phased += any(phase)
    assert phased > 50


@pytest.mark.parametrize("kernel, stride, pads, hw, phase, want", [
    # MobileNetV1's first layer: 48x48 blocks of 12 channels, a 2x2 kernel whose first
    # taps read one block of padding (the layer's 1 pixel), none after.
    ((3, 3), (2, 2), (1, 1, 1, 1), (96, 96), (0, 0), ((2, 2), (1, 1, 0, 0), (48, 48))),
    # ... the host padding the pixel itself: 49x49 blocks, no engine padding.
    ((3, 3), (2, 2), (1, 1, 1, 1), (96, 96), (1, 1), ((2, 2), (0, 0, 0, 0), (49, 49))),
    # ResNet-18's stem: 7x7 stride 2 pad 3 -> a 4x4 kernel over 112x112 blocks.
    ((7, 7), (2, 2), (3, 3, 3, 3), (224, 224), (0, 0), ((4, 4), (2, 2, 1, 1), (112, 112))),
    ((7, 7), (2, 2), (3, 3, 3, 3), (224, 224), (1, 1), ((4, 4), (1, 1, 1, 1), (113, 113))),
    # TensorFlow's SAME on an even size (no pad before, one after): 2x2, one block after.
    ((3, 3), (2, 2), (0, 0, 1, 1), (8, 8), (0, 0), ((2, 2), (0, 0, 1, 1), (4, 4))),
    # odd size, 5x5 stride 2 pad 2: 3x3 over 5 blocks (the last half padding).
    ((5, 5), (2, 2), (2, 2, 2, 2), (9, 9), (0, 0), ((3, 3), (1, 1, 1, 1), (5, 5))),
    # a 3x3 stride 3: the host's phase makes it a 1x1 over 4 blocks, none a 2x2.
    ((3, 3), (3, 3), (1, 1, 1, 1), (10, 10), (1, 1), ((1, 1), (0, 0, 0, 0), (4, 4))),
    ((3, 3), (3, 3), (1, 1, 1, 1), (10, 10), (0, 0), ((2, 2), (1, 1, 0, 0), (4, 4))),
    # a non-square stride and kernel: one stride, 1.
    ((2, 3), (2, 3), (0, 1, 1, 0), (9, 12), (0, 0), ((1, 2), (0, 1, 0, 0), (5, 4))),
    # a patch stem (kernel = stride): a 1x1 over the patches, the ragged edge cropped.
    ((4, 4), (4, 4), (0, 0, 0, 0), (12, 13), (0, 0), ((1, 1), (0, 0, 0, 0), (3, 3))),
])
def test_the_pads_are_whole_blocks(kernel, stride, pads, hw, phase, want):
    layer = _layer(np.random.default_rng(7), 3, 8, kernel, stride, pads, hw)
    view = conv_views.space_to_depth_view(layer, phase)
    assert (view.kernel, view.pads, view.input_shape[1:]) == want
    assert view.output_shape == layer.output_shape and view.how == "s2d"
    x = np.random.default_rng(8).integers(-128, 128, (1, 3, *hw), dtype=np.int8)
    assert_array_equal(_reference(layer, view.gather(x), view.weight, (1, 1), view.pads),
                       _reference(layer, x))


def test_a_phase_past_the_pads_is_refused():
    layer = _layer(np.random.default_rng(9), 3, 4, (3, 3), (2, 2), (1, 0, 1, 0), (8, 8))
    assert conv_views.space_to_depth_phases(layer) == [(0, 0), (1, 0)]
    with pytest.raises(ValueError, match=r"^layer 'conv': the host pads \(0, 1\) before the "
                                         r"input, the layer only \(1, 0\)$"):
        conv_views.space_to_depth_view(layer, (0, 1))


# -- the compiler's choice -----------------------------------------------------------------


def _mobilenet(hw=96):
    written = zoo.write_zoo(_tmp(), ["mobilenet_v1_025"], n_calibration=4,
                            sizes={"mobilenet_v1_025": {"hw": hw}})
    return load_onnx(written["mobilenet_v1_025"]["int8"])


_TMP = []


def _tmp():
    import tempfile
    if not _TMP:
        _TMP.append(tempfile.TemporaryDirectory())
    return _TMP[0].name


def _without_s2d(monkeypatch):
    monkeypatch.setattr(compiler, "_space_to_depth", lambda config, layer, best, *a: best)


def _forced(phase=None):
    """A ``compiler._space_to_depth`` that keeps the blocks wherever they compile
    (with ``phase``: that phase's), to run them on the RTL where they are slower."""
    def force(config, layer, best, batch, cycles):
        if phase is None:
            s2d = compiler._space_to_depth_fastest(config, layer, best[0][2], batch, cycles)
            return best if s2d is None else s2d
        view = conv_views.space_to_depth_view(layer, phase)
        name = "s2d/phase" if any(phase) else "s2d"
        s2d, errors = compiler._fastest(config, layer, [(name, [view], best[0][2], None)],
                                        batch, cycles)
        assert s2d is not None, errors
        return s2d
    return force


def _first(program):
    return next(s for s in program.steps if isinstance(s, EngineStep))


def _predicted(step):
    return sum(r.predicted_cycles for r in step.runs)


@pytest.mark.parametrize("board, mapping, before, after", [
    ("default", "s2d", 9376, 4984),  # pin 8: the 12 channels' 2 input tiles keep pace
    ("pynq-z2", "dense", 4732, 4732),  # pin 4: 3 input tiles x 2 output tiles of compute
])
def test_mobilenet_first_layer_is_kept_where_faster(monkeypatch, board, mapping, before, after):
    """MobileNetV1-0.25's first layer (3x3 stride 2, 3 -> 8 channels at 96x96): the
    blocks where the cycle model predicts fewer cycles, today's mapping elsewhere
    (docs/runtime.md's figures)."""
    from fpgacnn.boards.board import load_board
    from fpgacnn.boards.engine_sizing import size_engine
    from fpgacnn.core.config import EngineConfig
    config = EngineConfig() if board == "default" else size_engine(load_board(board)).config
    model = _mobilenet()
    step = _first(compile_model(model, config))
    assert (step.mapping, _predicted(step)) == (mapping, after)
    with monkeypatch.context() as m:
        _without_s2d(m)
        assert _predicted(_first(compile_model(model, config))) == before
    with monkeypatch.context() as m:
        m.setattr(compiler, "_space_to_depth", _forced())
        forced = _first(compile_model(model, config))
        assert forced.mapping == "s2d" and (_predicted(forced) < before) == (mapping == "s2d")


def test_the_blocks_never_cost_the_program_its_resident_weights(tmp_path):
    """tests/test_fused_compiler.py's reduced MobileNet on its FUSED engine: the stem's
    blocks (3 input tiles, three times the weight words) would push the program's
    weights past the weight buffer, so the stem stays dense and the weights resident;
    a program that is not to be resident anyway keeps the faster blocks."""
    from test_fused_compiler import FUSED, MOBILENET_BLOCKS, MOBILENET_HW, mobilenet_like, \
        quantized
    model, _ = quantized(mobilenet_like(MOBILENET_BLOCKS, hw=MOBILENET_HW), tmp_path, n=2)
    kept = compile_model(model, FUSED, fuse="always")
    assert (_first(kept).mapping, kept.resident) == ("dense", True)
    streamed = compile_model(model, FUSED, fuse="always", resident=False)
    assert (_first(streamed).mapping, streamed.resident) == ("s2d", False)
    assert _predicted(_first(streamed)) < _predicted(_first(kept))


def test_a_kernel_the_blocks_do_not_fit_keeps_todays_mapping(monkeypatch):
    """ResNet-18's stem on a ``kmax = 3`` engine: its blocks take a 4x4 kernel, past the
    window, so the layer keeps its taps folded into channels (``im2col``)."""
    rng = np.random.default_rng(4)
    model = convolution_model(rng, 3, 8, 1, (7, 7), (2, 2), (1, 1), (3, 3, 3, 3), (16, 16))
    assert _first(compile_model(model, SMALL_ENGINE)).mapping == "im2col"
    monkeypatch.setattr(compiler, "_space_to_depth", _forced())
    assert _first(compile_model(model, SMALL_ENGINE)).mapping == "im2col"


def test_the_blocks_are_an_input_fold_of_the_image():
    """The program image holds the blocks as an input fold (an Im2Col whose kernel is
    its stride), written with the input; the run reads them as a plain strip."""
    from fpgacnn.core.config import EngineConfig
    from fpgacnn.host.program_image import build_image
    model = _mobilenet(32)
    program = compile_model(model, EngineConfig(), batch=2)
    assert _first(program).mapping == "s2d"
    image = build_image(program)
    fold, = [r for r in image.records if isinstance(r, FoldRecord)]
    assert (fold.kh, fold.kw, fold.sy, fold.sx, fold.top, fold.left, fold.oh, fold.ow) == \
        (2, 2, 2, 2, 0, 0, 16, 16)
    x = np.random.default_rng(5).integers(-128, 128, (2, 3, 32, 32), dtype=np.int8)
    image.write_input(x)
    view = conv_views.space_to_depth_view(model.layers[0])
    assert_array_equal(image.tensors[fold.out].view(image.data), view.gather(x))
    record = next(r for r in image.records if isinstance(r, EngineRecord))
    assert record.source.tensor == fold.out and record.source.fold == 0


# -- on the RTL ----------------------------------------------------------------------------

#: (cin, cout, kernel, stride, pads, (h, w), batch, phase, pool, pauses)
RTL_LAYERS = [
    (3, 8, (3, 3), (2, 2), (1, 1, 1, 1), (11, 10), 2, (0, 0), False, (0, 0)),
    (3, 5, (3, 3), (2, 2), (1, 1, 1, 1), (9, 9), 1, (1, 1), False, (2, 3)),
    (4, 6, (3, 3), (2, 2), (0, 0, 1, 1), (8, 8), 1, (0, 0), False, (0, 0)),
    (2, 4, (5, 5), (2, 2), (2, 2, 2, 2), (9, 12), 2, (0, 0), False, (0, 0)),
    (1, 3, (7, 7), (3, 3), (3, 3, 3, 3), (13, 11), 1, (0, 0), False, (1, 2)),
    (1, 4, (7, 7), (4, 4), (3, 2, 3, 1), (14, 15), 1, (3, 2), False, (0, 0)),
    (3, 4, (1, 3), (2, 2), (0, 1, 0, 1), (7, 9), 2, (0, 0), False, (0, 0)),
    (4, 5, (1, 1), (2, 2), (0, 0, 0, 0), (8, 9), 1, (0, 0), False, (0, 0)),
    (2, 7, (3, 5), (2, 2), (1, 2, 0, 1), (10, 11), 3, (0, 0), False, (3, 1)),
    (1, 2, (2, 3), (2, 3), (0, 1, 1, 0), (9, 12), 2, (0, 0), False, (0, 0)),
    (1, 8, (4, 4), (4, 4), (0, 0, 0, 0), (12, 13), 1, (0, 0), False, (0, 0)),
    (1, 4, (3, 3), (3, 3), (1, 1, 1, 1), (10, 10), 2, (1, 1), False, (0, 0)),
    (3, 8, (3, 3), (2, 2), (1, 1, 1, 1), (16, 14), 1, (0, 0), True, (0, 0)),
    (3, 4, (3, 3), (2, 2), (1, 1, 1, 1), (12, 12), 2, (1, 1), True, (2, 2)),
]


def _rtl_model(index):
    cin, cout, kernel, stride, pads, hw, batch, phase, pool, pauses = RTL_LAYERS[index]
    rng = np.random.default_rng(1600 + index)
    model = convolution_model(rng, cin, cout, 1, kernel, stride, (1, 1), pads, hw)
    if pool:
        conv = model.layers[0]
        conv.output = "conv_out"
        pooled = MaxPool("pool", ["conv_out"], "y", conv.output_shape, (2, 2),
                         x_scale=model.output.scale, x_zero_point=model.output.zero_point)
        model = QuantizedModel("m", [conv, pooled], model.input,
                               TensorSpec("y", pooled.output_shape, np.int8,
                                          model.output.scale, model.output.zero_point),
                               "x", "y")
    x = rng.integers(-128, 128, (batch, cin, *hw), dtype=np.int8)
    return model, x, phase, pauses


def _describe(index):
    cin, cout, kernel, stride, pads, hw, batch, phase, pool, _ = RTL_LAYERS[index]
    return (f"{cin}x{hw[0]}x{hw[1]}->{cout} k{kernel[0]}x{kernel[1]} s{stride[0]}x{stride[1]} "
            f"pads{pads} b{batch} phase{phase}" + (" +pool" if pool else ""))


@pytest.mark.parametrize("index", range(len(RTL_LAYERS)), ids=_describe)
def test_blocks_are_exact_through_the_dma(monkeypatch, small_engine_board, index):
    model, x, phase, pauses = _rtl_model(index)
    monkeypatch.setattr(compiler, "_space_to_depth", _forced(phase))
    acc = Accelerator(model, config=SMALL_ENGINE, board=small_engine_board, sequencer=False)
    step = _first(acc.program(len(x)))
    assert step.mapping.startswith("s2d"), step.mapping
    assert (step.pool is not None) == (len(model.layers) == 2)  # today's fused pool kept
    small_engine_board.set_backpressure(*pauses, seed=index)
    try:
        y = acc.run_int8(x)
    finally:
        small_engine_board.set_backpressure(0, 0)
    assert_array_equal(y, ReferenceBackend().run_int8(model, x),
                       err_msg=f"WRONG ANSWER: {_describe(index)}")
    if pauses == (0, 0):
        layer = acc.report["layers"][0]
        assert layer["cycles"] == layer["predicted_cycles"] == _predicted(step)


@pytest.mark.parametrize("index", range(0, len(RTL_LAYERS), 2), ids=lambda i: _describe(i))
def test_blocks_are_exact_through_the_sequencer(monkeypatch, program_boards, index):
    """From board memory in one start of the sequencer: the host writes the blocks with
    the input; every engine run takes the model's cycles."""
    model, x, phase, _ = _rtl_model(index)
    monkeypatch.setattr(compiler, "_space_to_depth", _forced(phase))
    board = program_boards(SMALL_ENGINE)
    acc = Accelerator(model, config=SMALL_ENGINE, board=board)
    assert acc.sequencer is not None
    assert_array_equal(acc.run_int8(x), ReferenceBackend().run_int8(model, x),
                       err_msg=f"WRONG ANSWER: {_describe(index)}")
    _sequenced_as_predicted(acc, len(x), SMALL_ENGINE, warm=False)


def _sequenced_as_predicted(acc, batch, config, warm):
    """One start of the sequencer (the blocks are written with the input, no stop), every
    engine run the model's cycles (:func:`~fpgacnn.host.cycle_model.sequenced_run_cycles`)."""
    sequenced = acc.sequenced(batch)
    records = sequenced.image.records
    on_engine = sequenced.on_engine[warm]
    assert any(isinstance(r, FoldRecord) for r in records)
    taken = [on for r, on in zip(records, on_engine) if not isinstance(r, FoldRecord)]
    assert all(taken) and acc.report["sequencer"]["sequencer_starts"] == 1
    for i, r in enumerate(records):
        if isinstance(r, EngineRecord):
            model = sequenced_run_cycles(
                config, sequenced.descriptor(i, warm=warm),
                writer=sequenced.table_writer_fields(i, warm=warm),
                reader=sequenced.table_reader_fields(i, warm=warm))
            assert sequenced.counter_words(i)[0] == model, i


@pytest.fixture(scope="module")
def small_mobilenet():
    return _mobilenet(32)


@pytest.mark.parametrize("sequencer", [False, True], ids=["dma", "sequencer"])
def test_mobilenet_with_blocks_is_exact_on_the_pynq_z2_engine(monkeypatch, pynq_z2_board,
                                                            small_mobilenet, sequencer):
    """MobileNetV1-0.25 at 32x32 on the PYNQ-Z2's engine, its first layer as blocks
    (forced: on this engine the cycle model keeps it dense), the whole network through
    the DMA (each layer's cycles the model's) or in one start of the sequencer."""
    config = pynq_z2_engine()
    monkeypatch.setattr(compiler, "_space_to_depth", _forced((0, 0)))
    model = small_mobilenet
    x = zoo.calibration_data(zoo.build("mobilenet_v1_025", hw=32), 2, seed=400)
    x8 = model.quantize_input(x)
    acc = Accelerator(model, config=config, board=pynq_z2_board, sequencer=sequencer)
    assert _first(acc.program(len(x8))).mapping == "s2d"
    want = ReferenceBackend().run_int8(model, x8)
    assert_array_equal(acc.run_int8(x8), want)
    if sequencer:
        _sequenced_as_predicted(acc, len(x8), config, warm=False)
        assert_array_equal(acc.run(x), model.dequantize_output(want))  # quantized into memory
        assert_array_equal(acc.run_int8(x8), want)
        _sequenced_as_predicted(acc, len(x8), config, warm=True)
        return
    for layer in acc.report["layers"]:
        if layer["engine"]:
            assert layer["cycles"] == layer["predicted_cycles"], layer["name"]


#: A ``kmax = 4`` engine (SMALL_ENGINE's buffers): ResNet-18's 7x7 stride-2 stem as
#: blocks takes a 4x4 kernel, which no board's ``kmax = 3`` window takes.
KMAX4_ENGINE = dataclasses.replace(SMALL_ENGINE, kmax=4)


@pytest.mark.slow  # two Verilator builds of their own (~1 min)
@pytest.mark.parametrize("sequencer", [False, True], ids=["dma", "sequencer"])
def test_resnet18_stem_as_blocks_on_a_kmax4_engine(program_boards, sequencer):
    """ResNet-18's stem and first block at 32x32 on a ``kmax = 4`` engine: the cycle
    model keeps the stem's blocks (a 4x4 kernel over 12 channels) against its taps
    folded (147 channels), bit-exact through the DMA (each layer the model's cycles)
    and in one start of the sequencer."""
    from fpgacnn.host.accelerator import open_board
    written = zoo.write_zoo(_tmp(), ["resnet18_stem"], n_calibration=4,
                            sizes={"resnet18_stem": {"hw": 32}})
    model = load_onnx(written["resnet18_stem"]["int8"])
    x8 = model.quantize_input(zoo.calibration_data(zoo.build("resnet18_stem", hw=32), 2,
                                                   seed=500))
    board = program_boards(KMAX4_ENGINE) if sequencer else open_board("sim", KMAX4_ENGINE)
    try:
        acc = Accelerator(model, config=KMAX4_ENGINE, board=board, sequencer=sequencer)
        step = _first(acc.program(len(x8)))
        assert step.mapping.startswith("s2d") and step.runs[0].descriptor["ci_tiles"] == 3
        want = ReferenceBackend().run_int8(model, x8)
        assert_array_equal(acc.run_int8(x8), want)
        if sequencer:
            _sequenced_as_predicted(acc, len(x8), KMAX4_ENGINE, warm=False)
            return
        for layer in acc.report["layers"]:
            if layer["engine"]:
                assert layer["cycles"] == layer["predicted_cycles"], layer["name"]
    finally:
        if not sequencer:
            board.close()


# -- the figures of docs/runtime.md --------------------------------------------------------

#: The engines of the docs' table: the default, the Zynq boards' sized engines and
#: the biggest open board's (the smaller open boards', ``pin`` 1 or 2, keep today's
#: mappings as it does), and the PYNQ-Z2's and the default with ``kmax = 4``.
TABLE_BOARDS = ("pynq-z2", "ultra96-v2", "kv260", "zcu104", "ulx3s-85f")


def _table_engines():
    from fpgacnn.boards.board import load_board
    from fpgacnn.boards.engine_sizing import size_engine
    from fpgacnn.core.config import EngineConfig
    engines = {"`EngineConfig()` (default)": EngineConfig()}
    engines.update({b: size_engine(load_board(b)).config for b in TABLE_BOARDS})
    engines["pynq-z2, `kmax = 4`"] = dataclasses.replace(engines["pynq-z2"], kmax=4)
    engines["default, `kmax = 4`"] = EngineConfig(kmax=4)
    return engines


def s2d_table():
    """docs/runtime.md's space-to-depth table: per engine, the first layer's mapping and
    predicted cycles (the cycle model, equal to the RTL's) of MobileNetV1-0.25 (96x96)
    and ResNet-18's stem (224x224), and the network's, without and with the blocks."""
    written = zoo.write_zoo(_tmp(), ["mobilenet_v1_025", "resnet18_stem"], n_calibration=4)
    models = {n: load_onnx(written[n]["int8"]) for n in written}
    rows = ["| engine | model | first layer before | after | network before | after "
            "| warm before | after |", "|---|---|---|---|---:|---:|---:|---:|"]
    real = compiler._space_to_depth
    for label, config in _table_engines().items():
        for name, model in models.items():
            figures = []
            for hook in (lambda config, layer, best, *a: best, real):
                compiler._space_to_depth = hook
                try:
                    program = compile_model(model, config)
                finally:
                    compiler._space_to_depth = real
                steps = [s for s in program.steps if isinstance(s, EngineStep)]
                warm = sum(r.warm_predicted_cycles if program.resident else r.predicted_cycles
                           for s in steps for r in s.runs)
                figures.append((steps[0].mapping, _predicted(steps[0]),
                                sum(_predicted(s) for s in steps), warm))
            (m0, c0, t0, w0), (m1, c1, t1, w1) = figures
            rows.append(f"| {label} | {name} | `{m0}` {c0:,} | `{m1}` {c1:,} | {t0:,} | {t1:,} "
                        f"| {w0:,} | {w1:,} |")
    return "\n".join(rows)


def test_docs_s2d_table_is_current():
    text = (Path(__file__).resolve().parents[1] / "docs" / "runtime.md").read_text()
    import re
    match = re.search(r"<!-- s2d:begin -->\n(.*?)\n<!-- s2d:end -->", text, re.S)
    assert match, "docs/runtime.md has no s2d table"
    assert match.group(1) == s2d_table()
