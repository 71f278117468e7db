"""The compiler's fused depthwise + pointwise blocks (docs/engine.md, "Step 4").

On an engine with ``fused_blocks`` a depthwise Conv whose output only the next
pointwise 1x1 Conv reads compiles with it into one step of fused runs. Here:
reduced DS-CNN-like and MobileNet-like models (the zoo's torch-style graphs,
quantized by onnxruntime's quantizer) compile with fused steps and run on the
simulated board run by run (Verilator, :class:`~fpgacnn.host.engine_driver.
EngineDriver`), bit-exact against the integer reference, cold and warm (resident
constants), with and without stream back-pressure, every run's
``perf_busy_cycles`` the cycle model's; and the pairs the block cannot take
(at and over each limit) compile unfused, saying why.
"""

import dataclasses
import re
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from numpy.testing import assert_array_equal

from fpgacnn.core.contract import descriptor_violations, engine_contract
from fpgacnn.core.errors import InputError, MappingError
from fpgacnn.core.fused_block import pair_buffer_shape
from fpgacnn.host.compiler import EngineStep, compile_model
from fpgacnn.host.cycle_model import layer_cycles
from fpgacnn.host.onnx_import import load_onnx
from fpgacnn.host.program_image import build_image
from fpgacnn.host.quantize import quantize_model
from fpgacnn.host.reference import ReferenceBackend

from conftest import pynq_z2_engine
from test_fused_core import FUSED

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from bench_report import load_zoo  # noqa: E402

ZOO = load_zoo()


def ds_cnn_like(c=16, blocks=2, hw=(25, 10), classes=12, seed=0):
    """DS-CNN (the zoo's ``ds_cnn``) reduced: ``c`` channels, ``blocks`` blocks."""
    g = ZOO._TorchStyleGraph(seed, opset=17)
    x = g.relu(g.bn(g.conv("input", "conv1", 1, c, (10, 4), 2, (5, 1), bias=True), "bn1", c),
               "relu1")
    oh, ow = hw[0] // 2 + 1, (hw[1] - 2) // 2 + 1
    for i in range(blocks):
        s = f"blocks/{i}"
        x = g.relu(g.bn(g.conv(x, f"{s}/depthwise", c, c, 3, 1, 1, group=c, bias=True),
                        f"{s}/bn_dw", c), f"{s}/relu_dw")
        x = g.relu(g.bn(g.conv(x, f"{s}/pointwise", c, c, 1, bias=True), f"{s}/bn_pw", c),
                   f"{s}/relu_pw")
    x = g.flatten(g.avgpool(x, "avgpool", (oh, ow)), "flatten")
    x = g.softmax(g.linear(x, "fc", c, classes), "softmax")
    return g.model("ds_cnn_like", (1, *hw), x, (classes,))


def mobilenet_like(blocks, stem=8, hw=36, classes=2, seed=0, kernel=3, pad=1):
    """MobileNetV1 (the zoo's ``mobilenet_v1_025``) reduced: a stride-2 stem of ``stem``
    channels, then ``blocks``, ``(cout, stride)`` each (ReLU6 as torch writes it)."""
    g = ZOO._TorchStyleGraph(seed, opset=13)
    x = g.relu6(g.bn(g.conv("input", "features/0/0", 3, stem, 3, 2, 1), "features/0/1", stem),
                "features/0/2")
    cin = stem
    for i, (cout, stride) in enumerate(blocks, start=1):
        s = f"features/{i}"
        x = g.relu6(g.bn(g.conv(x, f"{s}/dw", cin, cin, kernel, stride, pad, group=cin),
                         f"{s}/dw_bn", cin), f"{s}/dw_relu")
        x = g.relu6(g.bn(g.conv(x, f"{s}/pw", cin, cout, 1), f"{s}/pw_bn", cout),
                    f"{s}/pw_relu")
        cin = cout
    x = g.softmax(g.linear(g.mean_hw(x, "pool"), "classifier", cin, classes), "softmax")
    return g.model("mobilenet_like", (3, hw, hw), x, (classes,))


def quantized(graph, tmp_path, n=8):
    """The int8 model of the float graph ``graph`` (onnxruntime's static quantizer) and
    ``n`` seeded float inputs."""
    float_path = tmp_path / f"{graph.graph.name}_float.onnx"
    onnx.save(graph, str(float_path))
    x = ZOO.calibration_data(graph, n, 1)
    path = quantize_model(float_path, x, tmp_path / f"{graph.graph.name}_int8.onnx")
    return load_onnx(path), x


#: On FUSED (max_channels 32, max_out_channels 16, max_width 16, two blocks of
#: depthwise memory): block 1 has two output-channel groups (8 -> 32); block 2
#: is at the pair buffer's channels (32) and runs in column strips with halos
#: (22 columns; the line buffer holds 20 of 8 tiles); block 3 is stride 2; the four
#: blocks' 20 depthwise words exceed the memory's 16, so one block's are streamed.
MOBILENET_BLOCKS = [(32, 1), (16, 1), (24, 2), (32, 1)]
MOBILENET_HW = 44


def fused_steps(program):
    return [s for s in program.steps if isinstance(s, EngineStep) and s.fused]


def run_per_run(board, program, x8, *, warm=False, exact_cycles=True):
    """Run ``program`` on ``board`` run by run (EngineDriver.run_layer, the host steps in
    numpy): its int8 output; every run's busy cycles the cycle model's where
    ``exact_cycles`` (no back-pressure)."""
    from fpgacnn.host.engine_driver import EngineDriver
    driver = EngineDriver(board)
    model = program.model
    tensors = {model.input_tensor: x8}
    for step in program.steps:
        if not isinstance(step, EngineStep):
            tensors[step.output] = step.layer.evaluate(*(tensors[t] for t in step.inputs))
            continue
        x = tensors[step.inputs[0]]
        y = np.empty((len(x8), *step.output_shape), np.int8)
        for run in step.runs:
            desc = run.warm_descriptor if warm else run.descriptor
            predicted = run.warm_predicted_cycles if warm else run.predicted_cycles
            result = driver.run_layer(dict(desc), run.stream(x, warm=warm), run.out_nbytes,
                                      timeout=1.0, name=step.name)
            run.store(y, result.output)
            if exact_cycles:
                assert result.busy_cycles == predicted, (step.name, desc)
        tensors[step.output] = y
    return tensors[model.output_tensor]


def unplaced(desc):
    """A descriptor without the places of its constants (weight_base, param_base)."""
    return {k: v for k, v in desc.items() if k not in ("weight_base", "param_base")}


def check_program(program):
    """Every fused run's descriptors pass the contract and are predicted by the cycle
    model; the step's MACs are the two layers'."""
    config = program.config
    for step in fused_steps(program):
        assert step.mapping == "fused" and step.name == f"{step.layer.name}+{step.pointwise.name}"
        assert step.macs == step.layer.macs + step.pointwise.macs
        assert step.output == step.pointwise.output
        for run in step.runs:
            descs = [run.descriptor] + ([run.warm_descriptor] if program.resident else [])
            for desc in descs:
                assert desc["fused"] == 1 and descriptor_violations(config, desc) == []
            assert run.predicted_cycles == layer_cycles(config, run.descriptor).cycles


# -- compile only --------------------------------------------------------------

def test_ds_cnn_and_mobilenet_like_compile_with_fused_steps(tmp_path):
    ds, _ = quantized(ds_cnn_like(), tmp_path)
    program = compile_model(ds, FUSED, fuse="always")
    assert [s.mapping for s in fused_steps(program)] == ["fused", "fused"]
    assert len([s for s in program.steps if isinstance(s, EngineStep)]) == 4  # conv1, 2, fc
    check_program(program)
    mobile, _ = quantized(mobilenet_like(MOBILENET_BLOCKS, hw=MOBILENET_HW), tmp_path)
    program = compile_model(mobile, FUSED, fuse="always")
    steps = fused_steps(program)
    assert len(steps) == 4
    check_program(program)
    first, wide = steps[0], steps[1]
    assert {r.channels for r in first.runs} == {(0, 16), (16, 32)}  # two output groups
    assert len({r.in_cols for r in wide.runs}) > 1                  # column strips
    assert wide.runs[0].descriptor["ci_tiles"] == pair_buffer_shape(FUSED).tiles
    # the four blocks' depthwise words (2 + 8 + 4 + 6) exceed the memory's 16: the
    # first fit stay, the others are streamed, on their first warm run too
    memory = engine_contract(FUSED).fused.depthwise_memory.words
    assert program.resident and program.depthwise_words <= memory
    streamed = [s for s in steps if s.runs[0].warm_descriptor["load_weights"]]
    assert streamed and all(s.runs[0].warm_descriptor["dw_base"] + s.runs[0].descriptor[
        "ci_tiles"] <= memory for s in streamed)
    assert all(not r.warm_descriptor["load_weights"] for s in streamed for r in s.runs[1:]
               if r.channels == s.runs[0].channels)


def test_the_cycle_model_chooses_between_a_block_and_its_two_layers(tmp_path):
    """``fuse=True`` keeps, pair by pair, the fewer predicted cycles: the block or the
    two layers as without it (whose step then names both counts)."""
    mobile, _ = quantized(mobilenet_like(MOBILENET_BLOCKS, hw=MOBILENET_HW), tmp_path, n=2)
    chosen, always, plain = (compile_model(mobile, FUSED, fuse=f) for f in (True, "always", False))

    def cycles(program):
        return sum(r.predicted_cycles for s in program.steps for r in getattr(s, "runs", ()))
    assert cycles(chosen) <= min(cycles(always), cycles(plain))
    check_program(chosen)
    kept = {s.layer.name for s in fused_steps(chosen)}
    assert 0 < len(kept) < len(fused_steps(always))  # both choices made on this model
    for step in plain.steps:
        if isinstance(step, EngineStep) and step.layer.name not in kept \
                and getattr(step.layer, "depthwise", False):
            (mine,) = [s for s in chosen.steps if getattr(s, "layer", None) is step.layer]
            assert re.fullmatch(r"layer '.*': the cycle model predicts [\d,]+ cycles fused, "
                                r"[\d,]+ unfused", mine.unfused_reason)
            # as without the block (where the program placed its constants apart)
            assert [unplaced(r.descriptor) for r in mine.runs] == \
                [unplaced(r.descriptor) for r in step.runs]
    with pytest.raises(InputError, match="fuse must be True, False or 'always'"):
        compile_model(mobile, FUSED, fuse="yes")


def test_fpgacnn_compile_shows_the_fused_steps_and_why_a_pair_is_not(tmp_path, capsys):
    """``fpgacnn compile`` on an engine with the block: a fused step's row says
    ``fused``, an unfused pair's the reason under its depthwise row."""
    from fpgacnn.host.cli import main
    config = tmp_path / "fused.toml"
    config.write_text("[engine]\n" + "".join(f"{k} = {v}\n" for k, v in FUSED.as_dict().items()))
    widths = [(CHANNELS, 1)] * (FUSED.fused_blocks - 1) + [(2 * FUSED.pin, 1), (FUSED.pout, 1)]
    quantized(mobilenet_like(widths, stem=CHANNELS, hw=8), tmp_path, n=2)
    onnx_path = tmp_path / "mobilenet_like_int8.onnx"  # (written by quantized)
    assert main(["compile", str(onnx_path), "--config", str(config)]) == 0
    rows = capsys.readouterr().out.splitlines()
    fused = [r for r in rows if " engine  fused " in r]
    assert len(fused) == FUSED.fused_blocks
    (why,) = [i for i, r in enumerate(rows) if r.startswith("      not fused: ")]
    assert "/features/3/dw/Conv " in rows[why - 1] and "depthwise memory has left" in rows[why]


def test_fuse_false_and_engines_without_the_block_compile_unfused(tmp_path):
    """The same model unfused: with ``fuse=False``, and on an engine without
    ``fused_blocks``; every one of them laid out as a program image."""
    mobile, _ = quantized(mobilenet_like(MOBILENET_BLOCKS[:2], hw=MOBILENET_HW), tmp_path)
    fused = compile_model(mobile, FUSED, fuse="always")
    plain = compile_model(mobile, FUSED, fuse=False)
    without = compile_model(mobile, dataclasses.replace(FUSED, fused_blocks=0))
    assert len(fused_steps(fused)) == 2
    for program in (plain, without):
        assert fused_steps(program) == []
        assert len([s for s in program.steps if isinstance(s, EngineStep)]) == 6
        assert all(not s.unfused_reason for s in program.steps if isinstance(s, EngineStep))
    for program in (fused, plain, without):
        build_image(program)


def test_the_image_refuses_a_block_streamed_on_its_warm_runs(tmp_path):
    """A block past the depthwise memory (``fuse="always"``) streams its depthwise
    words with its first warm run, which a program image's record cannot say
    (its warm run streams the parameters at most): refused, naming the block."""
    model, _ = quantized(mobilenet_like(MOBILENET_BLOCKS, hw=MOBILENET_HW), tmp_path, n=2)
    program = compile_model(model, FUSED, fuse="always")
    (streamed, *_) = [s for s in fused_steps(program)
                      if s.runs[0].warm_descriptor["load_weights"]]
    with pytest.raises(MappingError, match=rf"layer {re.escape(repr(streamed.name))}: the "
                                           r"program image cannot stream a block's depthwise"):
        build_image(program)
    build_image(compile_model(model, FUSED))  # (fuse=True keeps such a block unfused)


def _pair_step(program):
    """The depthwise step of a one-block program and whether it fused."""
    (step,) = [s for s in program.steps if isinstance(s, EngineStep)
               and getattr(s.layer, "depthwise", False)]
    return step


#: The block's limits on FUSED, read from the contract: the pair buffer's channels
#: (max_channels), the pairs' stride (spare_bank), the kernel (kmax), the pads
#: (kmax - 1, as every run's).
CHANNELS = pair_buffer_shape(FUSED).channels
STRIDE = engine_contract(FUSED).pair_stride
KMAX = FUSED.kmax


@pytest.mark.parametrize("what, blocks, kwargs, reason", [
    ("channels at the limit", [(8, 1)], dict(stem=CHANNELS), None),
    ("channels over the limit", [(8, 1)], dict(stem=CHANNELS + 1),
     rf"{CHANNELS + 1} depthwise channels exceed the pair buffer's {CHANNELS} \(max_channels\)"),
    ("stride at the limit", [(8, STRIDE)], {}, None),
    ("stride over the limit", [(8, STRIDE + 1)], {}, rf"stride {STRIDE + 1} \(at most {STRIDE}"),
    ("pads at the limit", [(8, 1)], dict(pad=KMAX - 1), None),
    ("a smaller kernel", [(8, 1)], dict(kernel=KMAX - 1, pad=0), None),
    ("kernel over kmax", [(8, 1)], dict(kernel=KMAX + 1, pad=1),
     rf"kernel {KMAX + 1}x{KMAX + 1} exceeds the engine's kmax {KMAX}"),
])
def test_limits_fuse_at_and_fall_back_over(what, blocks, kwargs, reason, tmp_path):
    model, _ = quantized(mobilenet_like(blocks, hw=16, **kwargs), tmp_path, n=2)
    try:
        program = compile_model(model, FUSED, fuse="always")
    except MappingError as e:  # the unfused layers' own limits are not the test's
        pytest.fail(f"{what}: {e}")
    step = _pair_step(program) if reason else fused_steps(program)[0]
    if reason is None:
        assert step.fused, what
        check_program(program)
    else:
        assert not step.fused and step.pointwise is None
        assert step.unfused_reason.startswith("layer '/features/1/dw/Conv+/features/1/pw/Conv'")
        assert re.search(reason, step.unfused_reason), step.unfused_reason


@pytest.mark.parametrize("blocks", [FUSED.fused_blocks, FUSED.fused_blocks + 1])
def test_depthwise_memory_holds_fused_blocks_blocks_of_max_channels(blocks, tmp_path):
    """``fused_blocks`` blocks of ``max_channels`` stay in the depthwise memory (each
    warm run streams nothing but pixels). With one more, the words of one block
    are the streamed blocks' to share: ``fused_blocks - 1`` stay, and each of the
    other two streams its depthwise words with its first warm run."""
    # (the last pointwise thin, so that every weight fits the weight buffer: resident)
    widths = [(CHANNELS, 1)] * (blocks - 1) + [(FUSED.pout, 1)]
    model, _ = quantized(mobilenet_like(widths, stem=CHANNELS, hw=8), tmp_path, n=2)
    program = compile_model(model, FUSED, fuse="always")
    steps = fused_steps(program)
    assert len(steps) == blocks and program.resident
    check_program(program)
    tiles = pair_buffer_shape(FUSED).tiles
    stay = FUSED.fused_blocks if blocks == FUSED.fused_blocks else FUSED.fused_blocks - 1
    assert program.depthwise_words == stay * tiles
    bases = [s.runs[0].descriptor["dw_base"] for s in steps]
    assert bases[:stay] == [i * tiles for i in range(stay)]
    assert set(bases[stay:]) <= {stay * tiles}
    first_warm = [s.runs[0].warm_descriptor["load_weights"] for s in steps]
    assert first_warm == [0] * stay + [1] * (blocks - stay)
    assert not any(r.warm_descriptor["load_weights"] for s in steps for r in s.runs[1:])


def test_by_default_blocks_past_the_depthwise_memory_stay_unfused(tmp_path, fused_board):
    """``fuse=True`` fuses no more blocks than the depthwise memory holds (a streamed
    block's depthwise words would come with its pointwise weights on every warm
    run); the block past it compiles unfused, saying why; the mixed program runs
    bit-exact, its cycles the model's."""
    # the memory filled by blocks of max_channels, then a thin one (two input tiles),
    # so that every weight fits the weight buffer (resident)
    widths = [(CHANNELS, 1)] * (FUSED.fused_blocks - 1) + [(2 * FUSED.pin, 1), (FUSED.pout, 1)]
    model, x = quantized(mobilenet_like(widths, stem=CHANNELS, hw=8), tmp_path, n=2)
    program = compile_model(model, FUSED)
    pairs = [s for s in program.steps if isinstance(s, EngineStep)
             and getattr(s.layer, "depthwise", False)]
    assert [s.fused for s in pairs] == [True] * FUSED.fused_blocks + [False]
    memory = engine_contract(FUSED).fused.depthwise_memory.words
    assert re.fullmatch(r"layer '.*': its 2 depthwise words "
                        rf"exceed the 0 the depthwise memory has left \(fused_blocks "
                        rf"{FUSED.fused_blocks}\)", pairs[-1].unfused_reason)
    assert program.resident and program.depthwise_words == memory
    assert not any(r.warm_descriptor["load_weights"] for s in program.steps
                   for r in getattr(s, "runs", ()))
    _check_on_board(fused_board, program, model, x[:1])


def test_pads_over_the_limit_run_unfused_their_taps_folded(fused_board, tmp_path):
    """Pads past ``kmax - 1``: no fused run takes them; the pair compiles as on an
    engine without the block (as ``fuse=False``), the depthwise's views with their
    taps folded into channels (``grouped/<k>/im2col``, docs/runtime.md; refused
    before 2026-12-07), the reason naming the pad: bit-exact on the RTL."""
    model, x = quantized(mobilenet_like([(8, 1)], hw=16, pad=KMAX), tmp_path, n=2)
    plain = compile_model(model, FUSED, fuse=False)
    program = compile_model(model, FUSED)
    step = _pair_step(program)
    assert not step.fused and step.mapping.endswith("/im2col"), step.mapping
    assert re.match(rf"layer '/features/1/dw/Conv\+/features/1/pw/Conv': pad_top = {KMAX} ",
                    step.unfused_reason), step.unfused_reason
    assert [getattr(s, "mapping", None) for s in program.steps] == \
        [getattr(s, "mapping", None) for s in plain.steps]
    _check_on_board(fused_board, program, model, x[:1])


def test_a_pool_or_a_second_reader_keeps_the_pair_unfused(tmp_path):
    """A max-pool the engine fuses behind the pointwise, and an Add that reads the
    depthwise output too: the pair compiles as without the block."""
    from onnx import helper
    graph = mobilenet_like([(8, 1)], hw=16)
    nodes = list(graph.graph.node)
    pw_relu = next(n for n in nodes if n.name == "/features/1/pw_relu/Clip")
    mean = next(n for n in nodes if n.op_type == "ReduceMean")
    pool = helper.make_node("MaxPool", [pw_relu.output[0]], ["pooled"], name="/pool2",
                            kernel_shape=[2, 2], strides=[2, 2])
    mean.input[0] = "pooled"
    graph.graph.node.insert(list(graph.graph.node).index(mean), pool)
    model, _ = quantized(graph, tmp_path, n=2)
    step = _pair_step(compile_model(model, FUSED, fuse="always"))
    assert not step.fused and "the max-pool" in step.unfused_reason

    graph = mobilenet_like([(8, 1)], hw=16)
    nodes = list(graph.graph.node)
    dw_relu = next(n for n in nodes if n.name == "/features/1/dw_relu/Clip")
    pw_relu = next(n for n in nodes if n.name == "/features/1/pw_relu/Clip")
    add = helper.make_node("Add", [dw_relu.output[0], pw_relu.output[0]], ["sum"], name="/add")
    mean = next(n for n in nodes if n.op_type == "ReduceMean")
    mean.input[0] = "sum"
    graph.graph.node.insert(list(graph.graph.node).index(mean), add)
    model, _ = quantized(graph, tmp_path, n=2)
    program = compile_model(model, FUSED, fuse="always")
    assert fused_steps(program) == []  # the depthwise output has two readers: no block


# -- on the RTL ----------------------------------------------------------------

@pytest.fixture(scope="module")
def fused_board():
    from fpgacnn.host.accelerator import open_board
    board = open_board("sim", FUSED)
    yield board
    board.close()


def _check_on_board(board, program, model, x):
    x8 = model.quantize_input(x)
    want = ReferenceBackend().run_int8(model, x8)
    board.set_backpressure(0, 0)
    assert_array_equal(run_per_run(board, program, x8), want, err_msg="cold")
    if program.resident:
        assert_array_equal(run_per_run(board, program, x8, warm=True), want, err_msg="warm")
    board.set_backpressure(300, 400, seed=7)
    try:
        assert_array_equal(run_per_run(board, program, x8, exact_cycles=False), want,
                           err_msg="back-pressure")
    finally:
        board.set_backpressure(0, 0)


def test_ds_cnn_like_runs_fused_on_the_rtl(fused_board, tmp_path):
    model, x = quantized(ds_cnn_like(), tmp_path, n=2)
    program = compile_model(model, FUSED, batch=2, fuse="always")
    assert len(fused_steps(program)) == 2
    _check_on_board(fused_board, program, model, x[:2])


def test_mobilenet_like_runs_fused_on_the_rtl(fused_board, tmp_path):
    """Output-channel groups, column strips, stride 2, the pair buffer full, a block's
    depthwise words streamed on its warm run; and a block over the channel limit
    unfused beside fused ones (block 1: 33 channels), all bit-exact."""
    model, x = quantized(mobilenet_like(MOBILENET_BLOCKS, hw=MOBILENET_HW), tmp_path, n=1)
    program = compile_model(model, FUSED, fuse="always")
    assert len(fused_steps(program)) == 4
    _check_on_board(fused_board, program, model, x[:1])
    model, x = quantized(mobilenet_like([(8, 1), (16, 1)], stem=33, hw=12), tmp_path, n=1)
    program = compile_model(model, FUSED, fuse="always")
    assert [s.fused for s in program.steps if isinstance(s, EngineStep)
            and getattr(s.layer, "depthwise", False)] == [False, True]
    _check_on_board(fused_board, program, model, x[:1])


# (through the sequencer: slow, as the default run's ten minutes ask; the PYNQ-Z2's
# sized engine has the block since b434fc3, so test_zoo_on_rtl runs the Accelerator's
# fused steps through the sequencer in the default run, MobileNetV1's and DS-CNN's)
@pytest.mark.parametrize("sequencer", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_the_accelerator_runs_fused_steps_from_the_program_image(sequencer, fused_board,
                                                                 program_boards, tmp_path):
    """The Accelerator's paths, the program image (format 9.0) record by record
    through the DMA and from board memory through the sequencer: a model with
    fused and unfused blocks, bit-exact cold and warm; through the DMA each fused
    step's cycles the model's."""
    from fpgacnn.host.accelerator import Accelerator
    blocks = [(32, 2), (16, 1), (8, 1)]
    model, x = quantized(mobilenet_like(blocks, hw=20), tmp_path, n=1)
    board = program_boards(FUSED) if sequencer else fused_board
    acc = Accelerator(model, config=FUSED, board=board, sequencer=sequencer)
    program = acc.program(1)
    assert program.resident
    assert 0 < len(fused_steps(program)) < len(blocks)  # the cycle model's choice
    x8 = model.quantize_input(x[:1])
    want = ReferenceBackend().run_int8(model, x8)
    for _ in range(2):  # cold, then warm (resident constants)
        assert_array_equal(acc.run_int8(x8), want)
        if not sequencer:
            layers = {l["name"]: l for l in acc.report["layers"] if l["engine"]}
            for step in fused_steps(program):
                assert layers[step.name]["cycles"] == layers[step.name]["predicted_cycles"]
    assert acc.report["weights"] == "resident"


PYNQ_FUSED = dataclasses.replace(pynq_z2_engine(), fused_blocks=4)


@pytest.mark.slow
def test_zoo_like_models_run_fused_on_the_pynq_z2_engine(tmp_path):
    """The PYNQ-Z2's sized engine with four blocks of depthwise memory: DS-CNN's four
    64-channel blocks (full size) and a MobileNet-like model, bit-exact, cycles the
    model's."""
    from fpgacnn.host.accelerator import open_board
    board = open_board("sim", PYNQ_FUSED)
    try:
        model, x = quantized(ds_cnn_like(c=64, blocks=4, hw=(49, 10)), tmp_path, n=1)
        program = compile_model(model, PYNQ_FUSED, fuse="always")
        assert len(fused_steps(program)) == 4
        check_program(program)
        _check_on_board(board, program, model, x[:1])
        model, x = quantized(mobilenet_like([(16, 1), (32, 2), (32, 1), (64, 2), (128, 1)],
                                            hw=32), tmp_path, n=1)
        program = compile_model(model, PYNQ_FUSED, fuse="always")
        assert len(fused_steps(program)) == 5
        check_program(program)
        _check_on_board(board, program, model, x[:1])
    finally:
        board.close()


def test_memory_bound_reads_a_fused_step(tmp_path):
    """bench/memory_bound.py's rows of a program with fused steps: one a step, a fused
    step's cycles its runs' (steady state), its bytes the depthwise's input and
    the pointwise's output, and no fused step counted again as a fusable pair."""
    from math import prod

    from bench_helpers import load_bench
    bench = load_bench("memory_bound")
    model, _ = quantized(ds_cnn_like(), tmp_path, n=2)
    program = compile_model(model, FUSED, fuse="always")
    engine_steps = [s for s in program.steps if isinstance(s, EngineStep)]
    rows = bench._bounds_and_blocks(program, FUSED.stream_bytes)
    assert [r[0][0] for r in rows] == [s.name for s in engine_steps]
    for step, ((name, macs, in_bytes, out_bytes, cycles, *_), fusable) in zip(engine_steps,
                                                                               rows):
        assert cycles == sum(r.warm_predicted_cycles for r in step.runs)
        if step.fused:
            assert not fusable and macs == step.layer.macs + step.pointwise.macs
            assert (in_bytes, out_bytes) == (prod(step.layer.input_shape),
                                             prod(step.pointwise.output_shape))
