"""The network program's memory image (issue 16, docs/program.md): its records
are the compiled runs, written down.

Compile-only (no RTL: every ``Accelerator`` test on a simulated board runs
through the image, record by record, see host/program_runner.py):

- for every engine record of many programs (random CNNs, single convolutions
  of every mapping, on four engines, batches 1 and 3), the input stream made
  from the arena by the record's source pattern and constants equals the
  compiled run's stream byte for byte, cold and warm; its destination pattern
  writes an output exactly where the run's scatter does;
- the image reads back as it was written; a wrong magic, version or length
  is refused;
- tensors alive at the same time never share bytes, and space is reused;
- the memory budget is refused at one byte under the image, not at it.
"""

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from fpgacnn.core.config import EngineConfig
from fpgacnn.core.errors import InputError, MappingError
from fpgacnn.host.compiler import EngineStep, compile_model
from fpgacnn.host.pixel_reader_setup import reader_fields
from fpgacnn.host.program_image import (ALIGN, FORMAT_VERSION, SOURCE_BATCH, SOURCE_STRIP,
                                        SOURCE_ZERO_COLUMN, EngineRecord, FoldRecord,
                                        ProgramImage, alignment, build_image, tensor_names)
from fpgacnn.host.program_runner import record_stream, run_record, store_output

from conftest import SMALL_ENGINE
from limit_layers import CONFIGS
from random_models import convolution_model, folded_cnn, random_cnn

ENGINES = {
    "k3": SMALL_ENGINE,
    "k2": CONFIGS["k2"],
    "default": EngineConfig(),
    "pynq-z2": EngineConfig(pin=4, pout=4, kmax=3, max_width=256, max_channels=128,
                            max_out_channels=256, stream_width=64),
}

#: Single convolutions that reach the engine by every mapping: (cin, cout, group,
#: kernel, stride, dilation, pads, hw).
CONVOLUTIONS = [
    (8, 8, 8, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), (9, 9)),     # depthwise
    (12, 6, 3, (3, 3), (2, 2), (1, 1), (1, 1, 0, 0), (8, 10)),   # grouped, unaligned slices
    (3, 5, 1, (7, 7), (2, 2), (1, 1), (3, 3, 3, 3), (15, 13)),   # folded taps (im2col)
    (2, 4, 1, (10, 4), (2, 1), (1, 1), (4, 1, 5, 2), (14, 9)),   # 10x4, non-square stride
    (5, 7, 1, (3, 3), (1, 1), (2, 2), (2, 2, 2, 2), (9, 8)),     # dilated past kmax: folded
    (5, 7, 1, (2, 2), (1, 1), (2, 2), (1, 1, 1, 1), (9, 8)),     # dilated within kmax
    (30, 20, 10, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), (6, 7)),  # groups of 3 channels
    (20, 9, 1, (1, 1), (2, 2), (1, 1), (0, 0, 0, 0), (7, 9)),    # 1x1 (the remap)
    (4, 6, 1, (1, 1), (1, 1), (1, 1), (0, 73, 0, 0), (2, 8)),    # a strip in the padding (k3)
    (6, 40, 1, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), (6, 40)),   # channel groups, column strips
]


def _models():
    yield "middle_fold", folded_cnn("middle")
    for seed in range(4):
        yield f"random_cnn_{seed}", random_cnn(seed)
    for i, case in enumerate(CONVOLUTIONS):
        yield f"conv_{i}", convolution_model(np.random.default_rng(i), *case)


def _tensors(program, x):
    """Every tensor of the program for the input ``x`` (the reference semantics)."""
    values = {program.model.input_tensor: x}
    for layer in program.model.layers:
        values[layer.output] = layer.evaluate(*(values[t] for t in layer.inputs))
    return values


def _step_input(values, step):
    return values[step.inputs[0]]


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.parametrize("batch", [1, 3])
def test_records_make_the_compiled_streams_and_scatters(engine, batch):
    config = ENGINES[engine]
    checked, seen, input_folds, rows_seen = 0, set(), 0, 0
    for name, model in _models():
        try:
            program = compile_model(model, config, batch=batch)
        except MappingError:
            continue  # a model too big for this engine: refused, nothing to compare
        image = build_image(program)
        rng = np.random.default_rng(checked)
        x = rng.integers(-128, 128, (batch, *model.input.shape), dtype=np.int64).astype(np.int8)
        values = _tensors(program, x)
        records = iter(r for r in image.records if isinstance(r, EngineRecord))
        names = tensor_names(program)
        for step in program.steps:
            if not isinstance(step, EngineStep):
                continue
            x_step = _step_input(values, step)
            for run in step.runs:
                record = next(records)
                seen.add((step.mapping, record.source.kind, record.source.fold,
                          record.source.c0 % config.pin != 0, record.layout.remap))
                assert record.descriptor == dict(run.descriptor, depthwise=run.descriptor.get(
                    "depthwise", 0))
                # The arena holds the step's input where the record reads it: the
                # network input's folds are written with it.
                # A run reads its step's input, an input fold of it, or a pixel-row
                # view of it (the same bytes as rows of another width).
                source = names[record.source.tensor]
                row_view = source.startswith(step.inputs[0] + "/rows")
                rows_seen += row_view
                if step.inputs[0] == program.model.input_tensor:
                    image.write_input(x_step)
                    folded = source != step.inputs[0] and not row_view
                    assert not folded or source.startswith(step.inputs[0] + "/fold")
                    assert not record.source.fold
                    input_folds += folded
                else:
                    image.tensors[names.index(step.inputs[0])].view(image.data)[...] = x_step
                    assert source == step.inputs[0] or row_view, source
                assert_array_equal(record_stream(image, record), run.stream(x_step),
                                   err_msg=f"{name} {step.name} cold")
                if program.resident:
                    assert_array_equal(record_stream(image, record, warm=True),
                                       run.stream(x_step, warm=True),
                                       err_msg=f"{name} {step.name} warm")
                # An output stream lands where the run's scatter puts it.
                raw = rng.integers(0, 256, run.out_nbytes, dtype=np.int64).astype(np.uint8)
                dest = image.tensors[record.dest.tensor].view(image.data)
                dest[...] = rng.integers(-128, 128, dest.shape).astype(np.int8)
                want = np.array(dest, copy=True)
                run.store(want, raw)
                store_output(image, record, raw)
                assert_array_equal(dest, want, err_msg=f"{name} {step.name} scatter")
                checked += 1
        assert next(records, None) is None
    assert checked > 20
    if engine == "k3":  # every pattern the format has appears
        kinds = {(s, k, f, u, r) for s, k, f, u, r in seen}
        assert {m for m, *_ in kinds} >= {"dense", "dilated", "im2col", "gemm", "depthwise/8"}
        assert any(m.startswith("grouped/") for m, *_ in kinds)
        assert {k for _, k, *_ in kinds} == {SOURCE_STRIP, SOURCE_ZERO_COLUMN, SOURCE_BATCH}
        assert any(u for *_, u, _ in kinds), "no channel slice off the lane boundary"
        assert {r for *_, r in kinds} == {0, 2, 3}  # no remap, and each block on kmax 3
        assert {f for _, _, f, *_ in kinds} == {0, 1}
        assert input_folds, "no run reads a fold of the network input"
        assert rows_seen, "no run reads a pixel-row view of a tensor"


@pytest.mark.parametrize("model", ["input_fold", "random_cnn_0"])
def test_every_record_kind_reads_back(model):
    """Engine, host, vector (Add, pool, copy) and input-fold records: each reads back
    as it was written (formats 1.1 and 1.2)."""
    m = folded_cnn("input") if model == "input_fold" else random_cnn(0)
    image = build_image(compile_model(m, SMALL_ENGINE, batch=2))
    kinds = {type(r).__name__ for r in image.records}
    assert kinds >= ({"FoldRecord", "EngineRecord"} if model == "input_fold"
                     else {"EngineRecord", "VectorRecord"})
    again = ProgramImage(image.data.tobytes())
    assert again.records == image.records and again.tensors == image.tensors


def test_image_reads_back_and_refuses_what_is_not_one():
    program = compile_model(random_cnn(1), SMALL_ENGINE, batch=2)
    image = build_image(program)
    again = ProgramImage(image.data.tobytes())
    assert again.header == image.header
    assert again.tensors == image.tensors
    assert again.records == image.records
    assert again.config == SMALL_ENGINE
    assert image.header.batch == 2 and image.header.total_nbytes == image.nbytes
    bad = image.data.copy()
    bad[0] ^= 1
    with pytest.raises(InputError, match="bad magic"):
        ProgramImage(bad)
    bad = image.data.copy()
    bad[4] += 1  # the major version
    with pytest.raises(InputError, match=rf"format {FORMAT_VERSION[0] + 1}\.{FORMAT_VERSION[1]}, "
                                         rf"this reader takes {FORMAT_VERSION[0]}\.x"):
        ProgramImage(bad)
    with pytest.raises(InputError, match="header says"):
        ProgramImage(image.data[:-1])


@pytest.mark.parametrize("model", [0, 1, 2, 3, "input", "middle"])
def test_live_tensors_never_share_bytes_and_space_is_reused(model):
    model = random_cnn(model) if isinstance(model, int) else folded_cnn(model)
    program = compile_model(model, SMALL_ENGINE, batch=2)
    image = build_image(program)
    names = tensor_names(program)
    # A pixel-row view is its tensor's bytes as rows of another width, nothing else.
    views = {t: t.rsplit("/rows", 1)[0] for t in names if "/rows" in t}
    for t, base in views.items():
        v, b = image.tensors[names.index(t)], image.tensors[names.index(base)]
        assert (v.offset, v.image_stride, v.cp, v.channels, v.batch, v.height * v.width) == \
            (b.offset, b.image_stride, b.cp, b.channels, b.batch, b.height * b.width), t
    place = {t: image.tensors[i] for i, t in enumerate(names)
             if image.tensors[i].nbytes and t not in views}
    last = {program.model.output_tensor: len(program.steps)}
    born = {program.model.input_tensor: -1}
    for r in image.records:  # an input fold: written with the input, read by its step
        if isinstance(r, FoldRecord):
            born[names[r.out]], last[names[r.out]] = -1, r.step
    for i, step in enumerate(program.steps):
        born.setdefault(step.output, i)
        for t in step.inputs:
            last[t] = max(last.get(t, i), i)
    for i in range(len(program.steps)):
        # Alive during step i: written before or by it, read by it or later.
        alive = [t for t in place if born[t] <= i <= last.get(t, born[t])]
        spans = sorted((place[t].offset, place[t].offset + place[t].nbytes, t) for t in alive)
        for (a0, a1, ta), (b0, b1, tb) in zip(spans, spans[1:]):
            assert a1 <= b0, f"step {i}: {ta!r} and {tb!r} overlap"
    for p in place.values():
        assert p.offset % ALIGN == 0 and p.image_stride % ALIGN == 0
        assert image.header.arena_offset <= p.offset
        assert p.offset + p.nbytes <= image.header.arena_offset + image.header.arena_nbytes
    assert image.header.arena_nbytes < sum(p.nbytes for p in place.values())


def test_memory_budget_is_refused_just_over_it_naming_the_layer():
    program = compile_model(random_cnn(2), SMALL_ENGINE, batch=2)
    total = build_image(program).nbytes
    assert build_image(program, memory_bytes=total).nbytes == total
    with pytest.raises(MappingError, match=r"layer '.*': its output .* over the board memory "
                                           rf"budget of {total - 1:,} bytes"):
        build_image(program, memory_bytes=total - 1)
    constants = build_image(program).header.arena_offset
    with pytest.raises(MappingError, match="records and constants take"):
        build_image(program, memory_bytes=constants - 1)


def test_words_that_do_not_divide_the_burst_still_align():
    # pin 12: every region and tensor image on lcm(64, 12) = 192 bytes, so every
    # address of the arena is a whole input word (the pixel reader counts words).
    config = EngineConfig(pin=12, pout=4, kmax=3, stream_width=32, max_width=16,
                          max_channels=24, max_out_channels=16)
    program = compile_model(random_cnn(0), config, batch=2)
    image = build_image(program)
    assert alignment(config) == 192
    h = image.header
    for offset in (h.tensors_offset, h.records_offset, h.constants_offset, h.arena_offset,
                   h.total_nbytes):
        assert offset % 192 == 0
    for place in image.tensors:
        assert place.offset % 192 == 0 and place.image_stride % 192 == 0
    plain = [r for r in image.records if isinstance(r, EngineRecord) and not r.source.fold
             and not r.layout.remap and r.source.kind == SOURCE_STRIP]
    assert plain and all(reader_fields(image, r) is not None for r in plain)


def test_an_input_of_another_shape_is_refused_before_anything_is_written():
    image = build_image(compile_model(folded_cnn("input"), SMALL_ENGINE, batch=2))
    before = image.data.copy()
    x = np.zeros((1, 3, 11, 10), np.int8)  # batch 1 for a program of batch 2
    with pytest.raises(InputError, match=r"^the program was compiled for input \(2, 3, 11, 10\), "
                                         r"not \(1, 3, 11, 10\) \(compile the program for this "
                                         r"batch\)$"):
        image.write_input(x)
    assert_array_equal(image.data, before)
    # And the folds follow the input: each the tap-by-tap gather of it (the image
    # gathers all taps at once, its padding x_zp).
    x = np.random.default_rng(4).integers(-128, 128, (2, 3, 11, 10)).astype(np.int8)
    image.write_input(x)
    folds = [r for r in image.records if isinstance(r, FoldRecord)]
    assert folds and any(r.top or r.left for r in folds)
    for fold in folds:
        assert_array_equal(image.tensors[fold.out].view(image.data), fold.gather()(x))


def test_an_input_fold_is_not_run_as_a_record():
    program = compile_model(folded_cnn("input"), SMALL_ENGINE)
    image = build_image(program)
    fold = image.records[0]
    assert isinstance(fold, FoldRecord)
    with pytest.raises(InputError, match=r"^layer '.*': an input fold is written with the "
                                         r"input \(ProgramImage.write_input\), not run as a "
                                         r"record$"):
        run_record(image, program, fold, None, {}, warm=False, timeout_of=None)


@pytest.mark.parametrize("engine", ["k3", "pynq-z2"])
def test_pixel_row_views_stream_and_land_as_compiled(engine):
    """A 1x1 layer's runs forced onto every pixel-row width and remap block
    (output-channel groups on k3; a row view is never wider than ``max_width``,
    so it needs no column strips): each record streams the compiled
    run's bytes from the tensor's row view, and the engine's output (by the engine
    model) lands in the arena as the layer's output, bit-exact."""
    from fpgacnn.host import compiler
    from fpgacnn.host.conv_views import row_widths, rows_view
    from engine_model_helpers import emulate_engine
    config = ENGINES[engine]
    rng = np.random.default_rng(8)
    model = convolution_model(rng, 16, 24, 1, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0), (3, 45))
    program = compile_model(model, config, batch=2, resident=False)
    layer = program.steps[0].layer
    x = rng.integers(-128, 128, (2, *layer.input_shape), dtype=np.int64).astype(np.int8)
    want = layer.evaluate(x)
    seen = set()
    for width in row_widths(layer, config):
        for block in (None, 0, 2, 3):
            candidate = (f"dense/rows{width}", [rows_view(layer, width)], None, block)
            try:
                step = compiler._step_of_candidate(config, layer, candidate, 2, {})
            except MappingError:
                continue
            program.steps[0] = step
            image = build_image(program)
            names = tensor_names(program)
            image.tensors[names.index(step.inputs[0])].view(image.data)[...] = x
            for run, record in zip(step.runs, image.records):
                assert names[record.source.tensor] == f"{step.inputs[0]}/rows{width}"
                assert_array_equal(record_stream(image, record), run.stream(x),
                                   err_msg=f"rows {width}, block {block}")
                store_output(image, record, emulate_engine(config, dict(run.descriptor),
                                                           run.stream(x)))
            out = image.tensors[names.index(step.output)].view(image.data)
            assert_array_equal(out, want, err_msg=f"rows {width}, block {block}")
            seen.add((len({r.scatter.cols for r in step.runs}) > 1,
                      len({r.channels for r in step.runs}) > 1, step.runs[0].pack_pixels.remap))
    assert not any(strips for strips, _, _ in seen), seen
    assert any(groups for _, groups, _ in seen) == (engine == "k3"), seen
    assert {remap for *_, remap in seen} >= {0, 2, 3}, seen
