"""Streaming batches on the engine's sequencer (issue 16 item 5, docs/program.md "Batches").

``Accelerator.run_stream`` on the ProgramEngine RTL in Verilator: the program
twice in board memory, batch ``n + 1``'s input written into one copy while
the engine runs batch ``n`` from the other. Every output is bit-exact with
the reference backend, batch for batch (distinct inputs, so a batch read
from the wrong copy or an output overwritten before it was read fails);
the engine's cycles are those of the same batches run one at a time; an
early stop, a bad batch, a smaller last batch and a program that stops the
sequencer for the host each end as documented, and the board runs the next
program as before.
"""

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from fpgacnn.core.errors import InputError
from fpgacnn.host.accelerator import Accelerator
from fpgacnn.host.compiler import compile_model
from fpgacnn.host.examples import load_example
from fpgacnn.host.program_image import build_image
from fpgacnn.host.program_slots import ProgramSlots
from fpgacnn.host.reference import ReferenceBackend
from fpgacnn.host.sequencer_table import SequencerProgram

# The sequencer's board fixture (its k3, k2 and pairs engines), one per module.
from test_sequencer_rtl import ENGINES, _input, _models, board  # noqa: F401

BATCHES = 5


def _split(config, *, one_start, batch=2):
    """The test models that run in one start of the sequencer (or do not), on ``config``."""
    found = []
    for name, model in _models():
        span = SequencerProgram(build_image(compile_model(model, config, batch=batch))).one_start
        if all(span.values()) == one_start:
            found.append((name, model))
    assert found, f"no test model {'runs' if one_start else 'stops'} in one start"
    return found


def _batches(model, seed, sizes):
    return [_input(model, n, seed=seed + k) for k, n in enumerate(sizes)]


def _reference(model, xs):
    return [ReferenceBackend().run_int8(model, x) for x in xs]


def test_copies_are_whole_programs_in_buffers_of_their_own():
    config = ENGINES["k3"]
    image = build_image(compile_model(next(_models())[1], config, batch=2))
    slots = ProgramSlots(image)
    assert len(slots) == 2 and slots[1].memory is not slots[0].memory
    assert_array_equal(slots[1].memory, slots[0].memory)
    assert_array_equal(slots[0].memory[:image.nbytes], image.data)
    x8 = np.ones(slots[1].image.input.view(slots[1].image.data).shape, np.int8)
    slots[1].image.write_input(x8)
    assert not np.array_equal(slots[1].memory, slots[0].memory)  # two arenas
    assert slots[1].one_start == slots[0].one_start and slots[1].counters == slots[0].counters


def test_a_stream_is_bit_exact_and_alternates_the_copies(board):
    config = ENGINES[board.config_name]
    for i, (name, model) in enumerate(_split(config, one_start=True)):
        xs = _batches(model, 100 * i, [2] * BATCHES)
        acc = Accelerator(model, config=config, board=board)
        ys = list(acc.run_stream(xs, int8=True))
        assert len(ys) == BATCHES
        for k, (y, want) in enumerate(zip(ys, _reference(model, xs))):
            assert_array_equal(y, want, err_msg=f"{name}, batch {k}")
        report = acc.report
        assert report["overlapped"] is True and report["stream"] is True
        assert (report["batches"], report["images"], report["batch"]) == (BATCHES, 2 * BATCHES, 2)
        # The last two batches ran from one copy each: their outputs are still there.
        slots = acc.slots(2)
        for k in (BATCHES - 2, BATCHES - 1):
            assert_array_equal(slots[k % 2].image.read_output(), ys[k], err_msg=name)
        # The engine's time is the same batches' run one at a time (cold, then warm).
        alone = Accelerator(model, config=config, board=board)
        cycles = []
        for x in xs:
            alone.run_int8(x)
            cycles.append(alone.report["total_cycles"])
        assert [b["cycles"] for b in report["per_batch"]] == cycles, name
        assert report["total_cycles"] == sum(cycles)
        assert report["engine_seconds"] == pytest.approx(sum(cycles) / acc.clock_hz)
        _timeline_adds_up(report)


def _timeline_adds_up(report):
    """End to end is the sum over batches of the host's time while the engine did
    not run plus the longer of the engine's and the host's beside it."""
    per = report["per_batch"]
    assert report["end_to_end_seconds"] == pytest.approx(
        sum(b["host_serial_seconds"] + max(b["engine_seconds"], b["host_overlapped_seconds"])
            for b in per))
    assert report["host_seconds"] == pytest.approx(
        report["host_overlapped_seconds"] + report["host_serial_seconds"])
    assert report["images_per_second"] == pytest.approx(
        report["images"] / report["end_to_end_seconds"])
    assert all(b["host_serial_seconds"] > 0 for b in per)


def test_float_batches_stream_as_run_takes_them(board):
    """A float model (the digits example): float batches in, each output what the
    reference gives for its batch, the softmax head included."""
    config = ENGINES[board.config_name]
    digits = load_example("digits")
    acc = Accelerator(digits.model, config=config, board=board)
    xs = [digits.x[k:k + 3] for k in range(0, 12, 3)]
    ys = list(acc.run_stream(xs))
    for k, (x, y) in enumerate(zip(xs, ys)):
        assert y.dtype == digits.x.dtype
        assert_array_equal(y, ReferenceBackend().run(acc.model, x), err_msg=f"batch {k}")
    # Overlapped where the program runs in one start: on k3 and pairs (on k2 the
    # digits' first layer stops the sequencer for the host, batch after batch).
    overlapped = all(acc.slots(3)[0].one_start.values())
    assert overlapped is (board.config_name in ("k3", "pairs"))
    assert acc.report["overlapped"] is overlapped and acc.report["images"] == 12


def test_a_smaller_last_batch_runs_after_the_stream(board):
    config = ENGINES[board.config_name]
    name, model = _split(config, one_start=True)[0]
    xs = _batches(model, 7, [3, 3, 3, 1])
    acc = Accelerator(model, config=config, board=board)
    for k, (y, want) in enumerate(zip(acc.run_stream(xs, int8=True), _reference(model, xs))):
        assert_array_equal(y, want, err_msg=f"{name}, batch {k}")
    report = acc.report
    assert (report["batches"], report["images"], report["batch"]) == (4, 10, 3)
    assert report["overlapped"] is True
    _timeline_adds_up(report)


def test_a_program_that_stops_for_the_host_runs_batch_after_batch(board):
    config = ENGINES[board.config_name]
    name, model = _split(config, one_start=False)[0]
    xs = _batches(model, 11, [2] * 3)
    acc = Accelerator(model, config=config, board=board)
    for k, (y, want) in enumerate(zip(acc.run_stream(xs, int8=True), _reference(model, xs))):
        assert_array_equal(y, want, err_msg=f"{name}, batch {k}")
    report = acc.report
    assert report["overlapped"] is False and report["batches"] == 3
    assert all(b["host_overlapped_seconds"] == 0 for b in report["per_batch"])
    _timeline_adds_up(report)


def test_a_stream_stopped_early_leaves_the_board_idle(board):
    """A caller that stops asking (``break``) closes the stream: the batch the
    engine was running is waited for, and the next run is bit-exact."""
    config = ENGINES[board.config_name]
    name, model = _split(config, one_start=True)[0]
    xs = _batches(model, 21, [2] * 4)
    acc = Accelerator(model, config=config, board=board)
    stream = acc.run_stream(xs, int8=True)
    assert_array_equal(next(stream), _reference(model, xs[:1])[0])
    stream.close()  # batch 1 was running
    assert acc.sequencer.read("seq_status")["busy"] == 0
    assert_array_equal(acc.run_int8(xs[3]), _reference(model, xs[3:])[0], err_msg=name)


def test_a_bad_batch_ends_the_stream_naming_it(board):
    config = ENGINES[board.config_name]
    name, model = _split(config, one_start=True)[0]
    xs = _batches(model, 31, [2, 2, 2])
    bad = np.zeros((2, *model.input.shape[:-1], model.input.shape[-1] + 1), np.int8)
    acc = Accelerator(model, config=config, board=board)
    got = []
    with pytest.raises(InputError, match=r"^the program was compiled for input \(2, "):
        for y in acc.run_stream([xs[0], xs[1], bad, xs[2]], int8=True):
            got.append(y)
    # The outputs before the bad batch's stand: batch 0's; batch 1 was running.
    assert len(got) == 1
    assert_array_equal(got[0], _reference(model, xs[:1])[0], err_msg=name)
    assert acc.sequencer.read("seq_status")["busy"] == 0
    assert_array_equal(acc.run_int8(xs[1]), _reference(model, xs[1:])[0], err_msg=name)


def test_accelerators_that_share_a_board_each_run_their_own_program(board):
    """Two programs on one board, in turn, one with resident weights and one
    whose runs stream theirs: each start points the sequencer at its own
    buffer, and the streaming program's weights evict the resident ones, so the
    resident program runs cold again (it ran warm on the other's weights, a
    silent wrong answer, before the sequencer's starts said so)."""
    config = ENGINES[board.config_name]
    models = dict(_models())
    resident, streaming = models["conv_depthwise"], models["conv_strips"]
    a1 = Accelerator(resident, config=config, board=board)
    a2 = Accelerator(streaming, config=config, board=board)
    assert a1.program(1).resident and not a2.program(1).resident
    x1, x2 = _input(resident, 1, 41), _input(streaming, 1, 42)
    want1, want2 = _reference(resident, [x1])[0], _reference(streaming, [x2])[0]
    assert_array_equal(a1.run_int8(x1), want1)
    assert_array_equal(a1.run_int8(x1), want1)
    assert a1.report["weights"] == "resident"
    for _ in range(2):
        assert_array_equal(a2.run_int8(x2), want2)
        assert_array_equal(a1.run_int8(x1), want1)
        assert a1.report["weights"] == "loaded, now resident"
    assert_array_equal(a2.run_int8(x2), want2)
    assert_array_equal(list(a1.run_stream([x1, x1], int8=True))[1], want1)
    assert_array_equal(a2.run_int8(x2), want2)
    assert_array_equal(list(a1.run_stream([x1, x1], int8=True))[0], want1)


def test_streams_run_on_every_backend():
    """The reference backend (no engine) streams batch after batch too."""
    name, model = next(_models())
    xs = _batches(model, 51, [2, 2])
    acc = Accelerator(model, backend="reference")
    for y, want in zip(acc.run_stream(xs, int8=True), _reference(model, xs)):
        assert_array_equal(y, want, err_msg=name)
    assert acc.report["overlapped"] is False and acc.report["images"] == 4
    empty = Accelerator(model, backend="reference")
    assert list(empty.run_stream([])) == [] and empty.report["images"] == 0


@pytest.mark.parametrize("dtype", [np.int16, np.int32, np.float32, np.uint8])
def test_int8_batches_of_another_dtype_are_refused(dtype):
    """Not cast: values past int8 would wrap into a wrong answer."""
    name, model = next(_models())
    x = np.full((2, *model.input.shape), 200).astype(dtype)
    acc = Accelerator(model, backend="reference")
    message = rf"^int8 graph inputs must be int8, not {np.dtype(dtype)} \(run\(\) "
    with pytest.raises(InputError, match=message):
        acc.run_int8(x)
    with pytest.raises(InputError, match=message):
        list(acc.run_stream([x], int8=True))
