"""The engine's own program sequencer on the RTL (issue 16 item 2, docs/program.md).

The :class:`~fpgacnn.hdl.program.program_engine.ProgramEngine` top in
Verilator on the simulated board with its memory model: whole networks run
from board memory, the host running only the records the sequencer stops
at. Every output is bit-exact with the reference backend, cold and warm, at
several memory latencies and bandwidths (a narrow memory is the program's
back-pressure: it stalls the reader and the writer); with the memory never
short of bandwidth, every run the sequencer makes whose reader gives the
engine a beat a cycle takes exactly the DMA's cycles, the engine started on
the reader's first beat and the last beat taken by the pixel writer
(:func:`fpgacnn.host.cycle_model.sequenced_run_cycles`; with a fused Add,
:func:`~fpgacnn.host.cycle_model.fused_run_cycles`). A descriptor the
engine refuses, a run that never ends and a read outside the program each
stop the network with one line naming the layer or the address, and the
board runs the next program as before.
"""

import dataclasses
import re

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from fpgacnn.boards.zynq_design import DESIGN
from fpgacnn.core.errors import BackendError, MappingError
from fpgacnn.core.contract import engine_contract
from fpgacnn.core.memory_port import read_bytes, write_bytes, writer_has_wide
from fpgacnn.core.regmap import build_regmap
from fpgacnn.core.sequencer import (COUNTER_WORDS, MAX_RECORDS, RECORD_INDEX_BITS, RECORD_SKIP,
                                    build_sequencer_regmap, record_bytes, record_word)
from fpgacnn.host.accelerator import Accelerator, open_board
from fpgacnn.host.compiler import compile_model
from fpgacnn.host.cycle_model import fused_run_cycles, layer_cycles, sequenced_run_cycles
from fpgacnn.host.pixel_reader_setup import beat_a_cycle
from fpgacnn.host.program_image import EngineRecord, VectorRecord, build_image
from fpgacnn.host.reference import ReferenceBackend
from fpgacnn.host.sequencer_runner import SequencerDriver
from fpgacnn.host.sequencer_table import SequencerProgram, check_record_count

from conftest import SMALL_ENGINE
from limit_layers import CONFIGS
from random_models import (convolution_model, random_cnn, residual_block_cnn,
                           shared_residual_cnn)
from test_hdl_pixel_writer import ENGINES as WRITER_ENGINES

#: k2's program engine takes 128-bit beats, as a Zynq UltraScale+ board's does
#: (boards/engine_sizing.py rule 3): two of its 8-channel words a beat, stored
#: both a cycle (writer_words 2), and 16-byte memory reads (R = 2 words).
#: "pairs" runs stride-1 layers two pixels a window with two output words a beat, as
#: the PYNQ-Z2's sized engine: its pair runs of an even co_tiles send a beat a cycle,
#: which the pixel writer's wide mode takes (core.memory_port.writer_has_wide).
ENGINES = {"k3": SMALL_ENGINE,
           "k2": dataclasses.replace(CONFIGS["k2"], stream_width=128, writer_words=2),
           "pairs": WRITER_ENGINES["pairs"]}

#: (latency, bytes per cycle) of the memory model: a Zynq UltraScale+ HP port as
#: the design sets it for the engine ("hp": 8 bytes a cycle on k3, whose beats
#: are narrower than the port's 64 bits, 16 on k2), a quick one, a narrow one.
MEMORIES = [(40, "hp"), (1, 64.0), (7, 0.7)]


@pytest.fixture(scope="module", params=list(ENGINES))
def board(request):
    b = open_board("sim", ENGINES[request.param], sequencer=True)
    b.config_name = request.param
    yield b
    b.close()


def _models():
    for seed in range(5):
        yield f"random_cnn_{seed}", random_cnn(seed)
    yield "conv_depthwise", convolution_model(np.random.default_rng(0), 8, 8, 8, (3, 3), (1, 1),
                                              (1, 1), (1, 1, 1, 1), (9, 9))
    yield "conv_strips", convolution_model(np.random.default_rng(9), 6, 40, 1, (3, 3), (1, 1),
                                           (1, 1), (1, 1, 1, 1), (6, 40))
    # Residual blocks of whole beats: the fused runs read and write a beat a cycle on
    # the pairs engine (on k2, whose kmax is 2, the 3x3 convolutions are not sequenced
    # and their Adds stay vector records).
    for channels in (8, 16):
        yield f"residual_block_{channels}", residual_block_cnn(channels, channels, 8)


def _input(model, batch, seed):
    rng = np.random.default_rng(seed)
    return rng.integers(-128, 128, (batch, *model.input.shape)).astype(np.int8)


@pytest.mark.parametrize("memory", MEMORIES, ids=lambda m: f"L{m[0]}-B{m[1]}")
@pytest.mark.parametrize("batch", [1, 3])
def test_networks_run_from_memory_bit_exact(board, batch, memory):
    config = ENGINES[board.config_name]
    latency, bandwidth = memory
    if bandwidth == "hp":
        bandwidth = DESIGN.memory_bytes_per_cycle("zynqmp", config)
    board.set_memory_timing(latency=latency, bytes_per_cycle=bandwidth)
    sequenced_somewhere = modelled = beats = fused_modelled = held = narrow = 0
    try:
        for i, (name, model) in enumerate(_models()):
            x8 = _input(model, batch, seed=100 * batch + i)
            want = ReferenceBackend().run_int8(model, x8)
            acc = Accelerator(model, config=config, board=board)
            assert acc.sequencer is not None
            if bandwidth < read_bytes(config):
                # A memory narrower than a read: a run may take R / bandwidth cycles a
                # read, which the accelerator's timeout (4 times the engine's cycles)
                # does not know of (k2's narrow runs read 16 bytes for an 8-byte word).
                timeout = acc._timeout
                acc._timeout = lambda cycles, t=timeout: t(cycles * read_bytes(config)
                                                           / bandwidth)
            y = acc.run_int8(x8)
            assert_array_equal(y, want, err_msg=f"{name} (cold)")
            report = acc.report
            sequenced_somewhere += report["sequencer"]["sequencer_runs"]
            if report["weights"] != "streamed":  # warm: the weights stayed in the engine
                assert_array_equal(acc.run_int8(x8), want, err_msg=f"{name} (warm)")
                assert acc.report["weights"] == "resident"
            if bandwidth >= config.stream_bytes:  # each channel a beat a cycle
                runs, paced, fused, held_back, slow = _cycles_as_modelled(
                    acc, latency, vector=bandwidth >= max(read_bytes(config),
                                                          write_bytes(config)))
                modelled += runs
                narrow += slow
                beats += paced
                fused_modelled += fused
                held += held_back
    finally:
        board.set_memory_timing()
    assert sequenced_somewhere > 0
    assert modelled > 0 or bandwidth < config.stream_bytes
    # The pairs engine's runs that send a beat a cycle were written a beat a cycle.
    assert beats > 0 or bandwidth < config.stream_bytes or not writer_has_wide(config)
    # The random CNNs' Adds fuse into the convolutions before them (every engine here
    # has the fused Add); on k3 and on the pairs engine (wide runs: a beat a cycle in
    # and out) some in the model's cycles.
    assert (fused_modelled > 0 or bandwidth < config.stream_bytes
            or board.config_name not in ("k3", "pairs"))
    # A run whose last beat waited for the narrow writer, in the model's cycles: on k2
    # (four units a beat) random_cnn_3's Gemm chunk of three pixels at batch 3 (nine
    # words, the last alone in its beat).
    assert held > 0 or bandwidth < config.stream_bytes or (board.config_name, batch) != ("k2", 3)
    # Runs the reader gives less than a beat a cycle, in the model's cycles: on k2 and
    # the pairs engine (words narrower than a beat: strips of one word a pixel, 1x1
    # remaps of several words a block position or of 3x3 blocks); none on k3, whose
    # word is a beat.
    assert (narrow > 0) == (board.config_name != "k3" and bandwidth >= config.stream_bytes)


def _cycles_as_modelled(acc, latency, vector):
    """Each engine run the sequencer made took exactly the model's cycles: the DMA's, the
    engine started on the reader's first beat, its input at the reader's pace, its
    output taken by the pixel writer (``sequenced_run_cycles``). Where the reader gives
    the engine a beat a cycle (:func:`~fpgacnn.host.pixel_reader_setup.beat_a_cycle`:
    every run on k3, whose word is a beat; on k2 and the pairs engine the wide runs
    and the narrow ones whose words all pair into beats) the input is the DMA's; the
    other narrow runs on k2 and the pairs engine take a beat of narrow words in a cycle
    a word (until 2026-12-07 left out of the model; until then also the reader's
    latency per section it streamed was the run's; a batch's output-bound runs on the
    k2 engine took a cycle more an image past the second while the pixel writer spent
    a cycle on each image's beat padding; and one of k2's narrow runs took a cycle
    more than the model while its last beat, a lone word, waited for the writer to
    finish the four units of the beat before: the model's writer term since). With
    ``vector`` (a memory whose channels take a read and a write every cycle), each
    vector run took exactly its model's cycles. Returns how many engine runs it held
    to the model, how many of them sent their output a beat a cycle (pixel-pair runs
    of beat entries), which the writer's wide mode must take at that pace, how many
    had a fused Add, how many ended later than the DMA's run would, their last beat
    waiting for the writer, and how many took less than a beat a cycle from the
    reader."""
    sequenced = acc.sequenced(acc.report["batch"])
    warm = acc.report["weights"] == "resident"
    modelled = paced = 0
    contract = engine_contract(sequenced.config)
    skipped = {f.add for f in sequenced.fused[warm]}
    fused = {i for f in sequenced.fused[warm] for i in f.runs}
    fused_modelled = held_back = narrow = 0
    for i, (record, on_engine) in enumerate(zip(sequenced.image.records,
                                                sequenced.on_engine[warm])):
        if not on_engine:
            continue
        busy = sequenced.counter_words(i)[0]
        if i in skipped:  # an Add the engine run before it did: no run of its own
            assert busy == 0 and sequenced.table_word(i, "op", warm=warm) == RECORD_SKIP
            continue
        if isinstance(record, VectorRecord):
            if vector:
                assert busy == sequenced.predicted_cycles(i) + latency, (i, record.step, busy)
            continue
        desc = record.warm_descriptor() if warm else record.descriptor
        predicted = record.warm_predicted_cycles if warm else record.predicted_cycles
        assert predicted == layer_cycles(sequenced.config, desc).cycles
        writer = sequenced.table_writer_fields(i, warm=warm)
        reader = sequenced.table_reader_fields(i, warm=warm)
        model = sequenced_run_cycles(sequenced.config, desc, writer=writer, reader=reader)
        if i in fused:
            # With its Add: the run's cycles while the read port has a cycle for each
            # read; port-bound (not modelled), at most a cycle more for each of b's.
            modelled_fused = fused_run_cycles(sequenced.config, desc,
                                              reads=sequenced.run_reads(i, warm=warm),
                                              writer=writer, reader=reader)
            if modelled_fused is None:
                writes = np.prod([sequenced.table_word(i, f"writer_{name}", warm=warm)
                                  for name in ("images", "rows", "cols", "kept_units")])
                assert model <= busy <= model + writes, (i, record.step, busy, model)
                continue
            assert modelled_fused == model
            fused_modelled += 1
        assert busy == model, (i, record.step, busy, model, i in fused,
                               sequenced.run_reads(i, warm=warm), warm)
        modelled += 1
        narrow += not beat_a_cycle(sequenced.config, reader)
        held_back += model > layer_cycles(sequenced.config, desc, reader=reader).cycles
        if contract.output_entry_words(desc) == 2:
            assert writer["wide"], (i, record.step)
            paced += 1
    return modelled, paced, fused_modelled, held_back, narrow


def test_most_records_of_a_network_run_on_the_sequencer(board):
    """The host stops only for host layers and the patterns neither half takes."""
    config = ENGINES[board.config_name]
    model = random_cnn(1)
    acc = Accelerator(model, config=config, board=board)
    sequenced = acc.sequenced(1)
    engine_records = [r for r in sequenced.image.records if isinstance(r, EngineRecord)]
    assert sum(sequenced.on_engine[False]) >= len(engine_records) // 2
    acc.run_int8(_input(model, 1, 5))
    assert acc.report["sequencer"]["sequencer_runs"] == sum(sequenced.on_engine[False])


def test_a_report_read_late_holds_its_own_runs_counters(board):
    """The report is made when read, from the counters its inference copied out of
    board memory: zeroing them afterwards (as the next start does) changes nothing,
    and the next inference's report is its own."""
    config = ENGINES[board.config_name]
    model = random_cnn(2)
    acc = Accelerator(model, config=config, board=board)
    x8 = _input(model, 1, 6)
    acc.run_int8(x8)
    acc.run_int8(x8)  # warm from here
    first = acc.report
    acc.run_int8(x8)
    acc.sequenced(1).clear_counters()
    late = acc.report
    assert first["sequencer"]["sequencer_runs"] > 0
    assert [l.get("cycles") for l in late["layers"]] == [l.get("cycles") for l in first["layers"]]
    assert late["total_cycles"] == first["total_cycles"] > 0
    assert late["host_seconds"] > 0
    acc.run_int8(x8)
    assert acc.report is not late and acc.report["total_cycles"] == first["total_cycles"]


def test_kept_counters_are_read_in_memory_until_the_next_clear_copies_them():
    """A stopped range's counters stay in board memory for the report (no copy in the
    inference); clearing them for the next run copies those nobody read first."""
    image = build_image(compile_model(random_cnn(2), SMALL_ENGINE, batch=1))
    sequenced = SequencerProgram(image)
    n = len(image.records)
    region = sequenced.memory[sequenced.counters:sequenced.counters + 4 * COUNTER_WORDS * n]
    region.view("<u4")[:] = np.arange(COUNTER_WORDS * n)
    want = np.arange(COUNTER_WORDS * n).reshape(n, COUNTER_WORDS)
    unread, read = sequenced.keep_counters(0, n), sequenced.keep_counters(1, n)
    assert_array_equal(read.words(), want[1:])
    sequenced.clear_counters()
    assert not region.any()
    assert_array_equal(unread.words(), want)
    assert_array_equal(read.words(), want[1:])


def test_run_returns_an_output_of_its_own(board):
    """``run`` of an int8-in, int8-out model writes its input straight into board
    memory and returns a copy of the output: the next inference does not change it."""
    config = ENGINES[board.config_name]
    model = random_cnn(3)
    acc = Accelerator(model, config=config, board=board)
    xs = [_input(model, 1, seed) for seed in (7, 8)]
    wants = [ReferenceBackend().run_int8(model, x8) for x8 in xs]
    ys = [acc.run(x8) for x8 in xs]
    for y, want in zip(ys, wants):
        assert_array_equal(y, want)
        assert not np.shares_memory(y, acc.sequenced(1).memory)


def test_adds_pools_and_copies_run_on_the_vector_unit(board):
    """A residual network's Add, global pool and Flatten are vector records the
    sequencer runs: with every convolution's patterns taken (on the k3 engine;
    the k2 engine's thin first layers are strips the reader does not take yet),
    the whole network is one start of the sequencer, bit-exact."""
    config = ENGINES[board.config_name]
    whole = 0
    for seed in (1, 3):
        model = random_cnn(seed)
        acc = Accelerator(model, config=config, board=board)
        sequenced = acc.sequenced(1)
        records = sequenced.image.records
        kinds = {acc.program(1).steps[r.step].op for r in records if isinstance(r, VectorRecord)}
        assert kinds == {"Add", "GlobalAveragePool", "Flatten"}, kinds
        assert all(on for r, on in zip(records, sequenced.on_engine[False])
                   if isinstance(r, VectorRecord))
        x8 = _input(model, 1, seed)
        assert_array_equal(acc.run_int8(x8), ReferenceBackend().run_int8(model, x8))
        report = acc.report
        fused = {acc.program(1).steps[records[f.add].step].name for f in sequenced.fused[False]}
        for layer in report["layers"]:
            if layer["op"] in kinds:
                # An Add fused into the convolution before it takes no run of its own.
                assert layer["engine"] and (layer["cycles"] > 0) != (layer["name"] in fused), \
                    layer
        if all(sequenced.on_engine[False]):
            assert report["sequencer"]["sequencer_starts"] == 1
            whole += 1
    assert whole >= (1 if board.config_name == "k3" else 0)


def test_an_add_fuses_into_the_convolution_that_makes_its_operand(board):
    """A residual Add whose operand is the output of the convolution just before it,
    read by nothing else, runs on that convolution's writes (the fused Add): its
    record is skipped (RECORD_SKIP, no counters), the convolution's runs write the
    Add's output, bit-exact cold and warm at batches 1 and 2. A convolution output
    read twice (by the block's Add and a second Add) fuses nothing: both Adds run
    on the vector unit, bit-exact."""
    config = ENGINES[board.config_name]
    for model, want_fused in [(random_cnn(seed), 1) for seed in (0, 2)] + [
            (shared_residual_cnn(seed), 0) for seed in (0, 1)]:
        for batch in (1, 2):
            acc = Accelerator(model, config=config, board=board)
            x8 = _input(model, batch, seed=batch)
            want = ReferenceBackend().run_int8(model, x8)
            assert_array_equal(acc.run_int8(x8), want, err_msg=model.name)
            sequenced = acc.sequenced(batch)
            for warm in (False, True):
                fused = sequenced.fused[warm]
                assert len(fused) == want_fused, (model.name, warm)
                for f in fused:
                    assert sequenced.table_word(f.add, "op", warm=warm) == RECORD_SKIP
                    assert all(sequenced.table_word(i, "add_enable", warm=warm)
                               for i in f.runs)
            adds = [r for r in sequenced.image.records if isinstance(r, VectorRecord)
                    and r.has_b]
            assert len(adds) == (1 if want_fused else 2)
            assert all(sequenced.on_engine[False][k] for k, r in enumerate(
                sequenced.image.records) if isinstance(r, VectorRecord))
            if acc.report["weights"] != "streamed":
                assert_array_equal(acc.run_int8(x8), want, err_msg=f"{model.name} (warm)")


def test_a_vector_run_that_never_ends_is_aborted(board):
    model = random_cnn(1)
    acc, sequenced = _fresh(board, model)
    skipped = {f.add for f in sequenced.fused[False]}
    i = next(k for k, r in enumerate(sequenced.image.records)
             if isinstance(r, VectorRecord) and k not in skipped)
    # A window of no rows and columns: its tap counters never reach the end.
    _poke(sequenced, i, "vector_kernel_rows", 0)
    _poke(sequenced, i, "vector_kernel_cols", 0)
    _aborted_at(board, model, acc, sequenced, i, seed=1)


def _runs_the_next_program(board, config, seed):
    """After a failure, the board runs another network bit-exact, as before."""
    other = random_cnn(seed)
    x8 = _input(other, 1, seed + 10)
    assert_array_equal(Accelerator(other, config=config, board=board).run_int8(x8),
                       ReferenceBackend().run_int8(other, x8))


def _first_sequenced(sequenced, warm=False):
    return sequenced.on_engine[warm].index(True)


def _poke(sequenced, index, field, value, warm=False):
    """Overwrite one word of run-table record ``index`` in board memory."""
    config = sequenced.config
    at = sequenced.table_words[warm] * config.pin + index * record_bytes(config) \
        + 4 * record_word(field)
    sequenced.memory[at:at + 4] = np.array([value & 0xFFFF_FFFF], "<u4").view(np.uint8)


def _fresh(board, model):
    config = ENGINES[board.config_name]
    acc = Accelerator(model, config=config, board=board)
    return acc, acc.sequenced(1)


def _sequenced_model(board, not_seed):
    """A random CNN other than seed ``not_seed`` with a record the sequencer runs."""
    for seed in range(10):
        if seed != not_seed:
            acc, sequenced = _fresh(board, random_cnn(seed))
            if any(sequenced.on_engine[False]):
                return acc.model, acc, sequenced
    raise AssertionError("no random CNN with a sequenced record")


def test_a_descriptor_the_engine_refuses_stops_the_program_naming_the_layer(board):
    model, acc, sequenced = _sequenced_model(board, 3)
    i = _first_sequenced(sequenced)
    regs = build_regmap(ENGINES[board.config_name])
    _poke(sequenced, i, "desc_stride", regs.encode("desc_stride", 0))
    name = re.escape(repr(acc.program(1).steps[sequenced.image.records[i].step].name))
    with pytest.raises(BackendError, match=rf"^layer {name}: the engine refused the "
                                           r"descriptor \(status\.error\): stride = 0 \(range"):
        acc.run_int8(_input(model, 1, 1))
    _runs_the_next_program(board, acc.config, seed=3)


def test_a_refused_run_whose_reader_reads_outside_the_program_stops_cleanly(board):
    """The reader starts on a record as it is decoded, before the engine judges the
    descriptor: a refused record whose reader fields point far outside the program
    has its reads drained, the host's error names the layer (the memory's fault,
    which the reads made first, or the refusal), and the board runs the next
    program."""
    model, acc, sequenced = _sequenced_model(board, 5)
    i = _first_sequenced(sequenced)
    regs = build_regmap(ENGINES[board.config_name])
    _poke(sequenced, i, "desc_stride", regs.encode("desc_stride", 0))
    _poke(sequenced, i, "reader_base", 0x0FFF_0000)
    name = re.escape(repr(acc.program(1).steps[sequenced.image.records[i].step].name))
    with pytest.raises(BackendError, match=rf"^layer {name}: "):
        acc.run_int8(_input(model, 1, 1))
    _runs_the_next_program(board, acc.config, seed=5)


def test_a_run_that_never_ends_is_aborted_and_the_board_recovers(board):
    model, acc, sequenced = _sequenced_model(board, 0)
    i = _first_sequenced(sequenced)
    # A reader that reads no image: the engine waits for its pixels forever.
    _poke(sequenced, i, "reader_images", 0)
    _aborted_at(board, model, acc, sequenced, i, seed=0)


def test_a_fused_run_that_never_ends_is_aborted_and_the_board_recovers(board):
    """A run with a fused Add whose writer waits for an image more than the engine
    sends: aborted, its Add cleared with the writer, and the next program (whose
    Add fuses too) bit-exact."""
    model = random_cnn(4)
    acc, sequenced = _fresh(board, model)
    i = sequenced.fused[False][0].runs[-1]
    _poke(sequenced, i, "writer_images", 2)
    _aborted_at(board, model, acc, sequenced, i, seed=2)


def _aborted_at(board, model, acc, sequenced, i, seed):
    """The run of record ``i`` (its table poked not to end) times out: the sequencer is
    aborted, the error names the layer, and the board runs the next program."""
    name = re.escape(repr(acc.program(1).steps[sequenced.image.records[i].step].name))
    acc._timeout = lambda cycles: 50_000 / acc.clock_hz
    with pytest.raises(BackendError, match=rf"^layer {name}: the sequencer did not stop "
                                           r"within .* s \(at record \d+\); aborted$"):
        acc.run_int8(_input(model, 1, 3))
    _runs_the_next_program(board, acc.config, seed=seed)


def test_a_read_outside_the_program_is_reported_with_its_address(board):
    model, acc, sequenced = _sequenced_model(board, 2)
    i = _first_sequenced(sequenced)
    _poke(sequenced, i, "reader_base", 1 << 28)
    # reader_base is in words of pin bytes (R bytes in a wide record: the pairs
    # engine's first); the read is R bytes around the word.
    pin, r = acc.config.pin, read_bytes(acc.config)
    word = r if sequenced.table_word(i, "reader_wide") else pin
    with pytest.raises(BackendError, match=r"^layers '.+' to '.+' \(records \d+-\d+\): the "
                                           r"sequencer's memory access failed: memory read of "
                                           rf"{r} bytes at 0x{word << 28:08x} is outside"):
        acc.run_int8(_input(model, 1, 6))
    _runs_the_next_program(board, acc.config, seed=2)


class _MemoryAt:
    """The simulated board with its memory seen at bus address ``offset`` (a buffer
    that is not where the engine's reads fall: it reads R-byte words, R-aligned)."""

    def __init__(self, board, offset):
        self._board, self._offset = board, offset

    def __getattr__(self, name):
        return getattr(self._board, name)

    def attach_memory(self, buf):
        return self._board.attach_memory(buf) + self._offset


def test_a_program_buffer_off_the_read_boundary_is_refused(board):
    _, acc, sequenced = _sequenced_model(board, 1)
    r = read_bytes(acc.config)
    driver = SequencerDriver(_MemoryAt(board, r // 2), acc.config)
    with pytest.raises(BackendError, match=rf"^the program's buffer is at 0x{r // 2:08x}, not "
                                           rf"on a {r}-byte boundary \(the engine's memory "
                                           rf"read\)$"):
        driver.attach(sequenced)
    assert driver.attached is None


def test_an_empty_range_is_done_at_once(board):
    driver = SequencerDriver(board, ENGINES[board.config_name])
    driver.write("seq_range", first=0, count=0)
    driver.write("seq_control", start=1)
    assert board.wait_irq(1e-5)
    status = driver.read("seq_status")
    assert (status["busy"], status["done"], status["host"], status["error"]) == (0, 1, 0, 0)


def test_an_engine_without_a_sequencer_is_refused(small_engine_board):
    with pytest.raises(BackendError, match=r"^this board has no memory port"):
        SequencerDriver(small_engine_board, SMALL_ENGINE)


def test_fpgacnn_run_with_the_sequencer(capsys, tmp_path):
    """``fpgacnn run --sequencer``: the example on the sequencer, its report saying so."""
    import json
    from fpgacnn.host.cli import main
    config = tmp_path / "k3.toml"
    config.write_text("".join(f"{k} = {v}\n" for k, v in SMALL_ENGINE.as_dict().items()))
    report = tmp_path / "r.json"
    assert main(["run", "--example", "digits", "--sequencer", "--config", str(config),
                 "--report", str(report)]) == 0
    out = capsys.readouterr().out
    assert re.search(r"accuracy", out)
    r = json.loads(report.read_text())
    assert r["sequencer"]["sequencer_runs"] > 0


def test_a_program_past_the_record_index_is_refused_before_it_runs():
    """The 16-bit record index (seq_range, seq_status.index): at it, fine; one over,
    one line that names the limit."""
    assert MAX_RECORDS == 2 ** RECORD_INDEX_BITS - 1
    regs = build_sequencer_regmap(ENGINES["k3"])
    assert regs.encode("seq_range", first=MAX_RECORDS, count=MAX_RECORDS)
    check_record_count(MAX_RECORDS)
    with pytest.raises(MappingError, match=r"^the program has 65,536 records, over the 65,535 "):
        check_record_count(MAX_RECORDS + 1)


def test_the_next_record_is_fetched_while_a_run_ends(board):
    """The sequencer's own cycles (its cycles less the runs' busy cycles), less the
    reader's latency at each engine run's start (the engine starts on the reader's
    first beat: at most ``latency + 4`` cycles after the record is decoded), are
    fewer than the records' fetches alone would take one after another (the
    memory's latency and a record's reads, each): a record's fetch overlaps the end
    of the run before it, so only the first record of a start is fetched with
    nothing beside it. (Not on k2: its record's fetch, 54 cycles, is too short
    beside its other cycles a record for the bound to say anything.)"""
    if board.config_name == "k2":
        pytest.skip("a 54-cycle fetch: the bound has no room")
    config = ENGINES[board.config_name]
    latency = 40
    board.set_memory_timing(latency=latency,
                            bytes_per_cycle=DESIGN.memory_bytes_per_cycle("zynqmp", config))
    try:
        model = random_cnn(1)
        acc = Accelerator(model, config=config, board=board)
        x8 = _input(model, 1, 7)
        acc.run_int8(x8)
        assert_array_equal(acc.run_int8(x8), ReferenceBackend().run_int8(model, x8))
    finally:
        board.set_memory_timing()
    seq = acc.report["sequencer"]
    own = seq["sequencer_cycles"] - seq["sequenced_busy_cycles"]
    fetch = latency + record_bytes(config) // read_bytes(config)  # a table on an R boundary
    assert seq["sequencer_runs"] >= 4 and seq["sequencer_starts"] == 1
    sequenced = acc.sequenced(1)
    engine_runs = sum(isinstance(r, EngineRecord) and on for r, on in
                      zip(sequenced.image.records, sequenced.on_engine[True]))
    assert own - engine_runs * (latency + 4) < seq["sequencer_runs"] * fetch
