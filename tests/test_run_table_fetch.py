"""The run table's records and the sequencer's record fetch (docs/program.md,
"The sequencer's own cycles and the fused block's record").

The sequencer fetches a record R bytes a read (the memory port's
:func:`~fpgacnn.core.memory_port.read_bytes`) only where the record starts on
an R boundary, else a ``pin``-byte word a read
(:class:`~fpgacnn.hdl.program.sequencer.Sequencer`): a table one word off
would cost every fetch twice its reads or more. The host's tables start on
:func:`~fpgacnn.host.program_image.alignment` and a record is whole R-byte
reads (:func:`~fpgacnn.core.sequencer.record_bytes`), so every record is on
an R boundary wherever the image's header, tensors or records end: the header
growing a word (program image 9.0's ``depthwise_pixels``) moves no record.
What a record costs is its reads: the fused block's five descriptor words
make the PYNQ-Z2's record two reads longer.
"""

import itertools

import pytest

from fpgacnn.boards.board import load_board
from fpgacnn.boards.engine_sizing import size_engine
from fpgacnn.core.config import ConfigError, EngineConfig
from fpgacnn.core.memory_port import read_bytes
from fpgacnn.core.sequencer import descriptor_words, record_bytes, record_fields
from fpgacnn.host.compiler import compile_model
from fpgacnn.host.program_image import Header, alignment, build_image
from fpgacnn.host.sequencer_table import SequencerProgram

from limit_layers import COMPILE_CONFIGS
from random_models import random_cnn


def _engines():
    # (the compile-only engines random_cnn(0) fits: k1's and acc20's buffers are too small)
    engines = {k: COMPILE_CONFIGS[k] for k in ("k3", "k2", "default", "p4x16")}
    for name in ("pynq-z2", "zcu104", "kv260"):
        engines[name] = size_engine(load_board(name)).config
    engines["pynq-z2 without the block"] = size_engine(load_board("pynq-z2"),
                                                       fused_block=False).config
    return engines


ENGINES = _engines()


def test_every_valid_engine_aligns_its_regions_to_whole_reads():
    """R divides the regions' alignment on every engine the configuration allows, so
    a table on a region boundary starts on an R boundary (fails where a wider beat
    or a word that does not divide it is allowed and the alignment not widened)."""
    checked = 0
    for pin, pout, width in itertools.product(range(1, 65), range(1, 65), (32, 64, 128)):
        try:
            config = EngineConfig(pin=pin, pout=pout, stream_width=width)
        except ConfigError:
            continue
        assert alignment(config) % read_bytes(config) == 0, (pin, pout, width)
        assert record_bytes(config) % read_bytes(config) == 0, (pin, pout, width)
        checked += 1
    assert checked > 100


@pytest.mark.parametrize("name", list(ENGINES))
def test_every_record_of_both_tables_starts_on_a_read(name):
    """Each record of the cold and the warm table is at an R-aligned byte offset of
    the program's buffer: the sequencer fetches it R bytes a read."""
    config = ENGINES[name]
    sequenced = SequencerProgram(build_image(compile_model(random_cnn(0), config, batch=2)))
    r = read_bytes(config)
    assert sequenced.image.header.records > 1
    for warm in (False, True):
        first = sequenced.table_words[warm] * config.pin
        for i in range(sequenced.image.header.records):
            assert (first + i * record_bytes(config)) % r == 0, (warm, i)


def test_the_header_word_of_format_9_moved_no_region():
    """The header's 35 words (format 9.0; 34 in 8.0) end inside the same three 64-byte
    blocks on the PYNQ-Z2's engine: the tensor table, and every region after it, starts
    at byte 192 in both formats."""
    config = ENGINES["pynq-z2"]
    image = build_image(compile_model(random_cnn(0), config, batch=1))
    assert Header.nwords() == 35 and alignment(config) == 64
    assert image.header.tensors_offset == 192
    assert 2 * 64 < 4 * (Header.nwords() - 1) < 4 * Header.nwords() <= 3 * 64


def test_the_fused_blocks_words_are_two_reads_of_the_pynq_z2_record():
    """The figures of docs/program.md: the PYNQ-Z2's record is 65 words (264 bytes,
    33 eight-byte reads) without the block and 70 with it (280 bytes, 35 reads):
    the block's five descriptor registers, which the sequencer writes too (21 -> 26,
    hidden behind the reader's first read)."""
    with_block, without = ENGINES["pynq-z2"], ENGINES["pynq-z2 without the block"]
    assert with_block.fused_blocks and not without.fused_blocks
    assert read_bytes(with_block) == read_bytes(without) == 8
    assert (len(record_fields(without)), record_bytes(without)) == (65, 264)
    assert (len(record_fields(with_block)), record_bytes(with_block)) == (70, 280)
    assert (len(descriptor_words(without)), len(descriptor_words(with_block))) == (21, 26)


@pytest.mark.slow
def test_the_blocks_record_costs_its_reads_where_no_run_hides_the_fetch(program_boards,
                                                                        tmp_path):
    """On the RTL, the AutoEncoder (batch 1, warm, the bench's memory) on the PYNQ-Z2's
    engine with and without the block: every record's busy cycles the same, and the
    sequencer's own cycles two reads longer at each fetch nothing overlaps, which are
    two (the start's first record, and the one after ``/encoder/4``, whose run ends
    within a fetch of its last read): docs/program.md, 3,445 -> 3,449."""
    import importlib.util
    from pathlib import Path

    from numpy.testing import assert_array_equal

    from fpgacnn.boards.zynq_design import DESIGN
    from fpgacnn.host.accelerator import Accelerator
    from fpgacnn.host.onnx_import import load_onnx
    from fpgacnn.host.reference import ReferenceBackend

    spec = importlib.util.spec_from_file_location(
        "model_zoo", Path(__file__).resolve().parents[1] / "examples" / "model_zoo.py")
    zoo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(zoo)
    qm = load_onnx(zoo.write_zoo(tmp_path, names=["autoencoder"],
                                 n_calibration=16)["autoencoder"]["int8"])
    x8 = qm.quantize_input(zoo.calibration_data(zoo.build("autoencoder"), 1, seed=200))
    want = ReferenceBackend().run_int8(qm, x8)
    family = load_board("pynq-z2").family
    own, busy, reads = {}, {}, {}
    for name in ("pynq-z2 without the block", "pynq-z2"):
        config = ENGINES[name]
        board = program_boards(config)
        board.set_memory_timing(bytes_per_cycle=DESIGN.memory_bytes_per_cycle(family, config))
        try:
            acc = Accelerator(qm, config=config, board=board)
            acc.run_int8(x8)
            assert_array_equal(acc.run_int8(x8), want)  # warm: the weights resident
        finally:
            board.set_memory_timing()
        seq = acc.report["sequencer"]
        assert seq["sequencer_starts"] == 1
        own[name] = seq["sequencer_cycles"] - seq["sequenced_busy_cycles"]
        sequenced = acc.sequenced(1)
        busy[name] = [sequenced.counter_words(i) for i in range(len(sequenced.image.records))]
        reads[name] = record_bytes(config) // read_bytes(config)
    assert busy["pynq-z2"] == busy["pynq-z2 without the block"]
    extra = reads["pynq-z2"] - reads["pynq-z2 without the block"]
    assert extra == 2
    assert own["pynq-z2"] - own["pynq-z2 without the block"] == 2 * extra
