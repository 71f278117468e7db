"""A run-table record that asks for the vector unit's lanes twice is refused, never run.

On a program engine whose fused block requantizes its depthwise half on the
vector unit's lanes (:func:`~fpgacnn.core.fused_block.depthwise_on_vector_lanes`),
a fused residual Add (``add_enable``), which computes on the same lanes, cannot
be fused into the block's run: one of the two would compute on the other's
operands. The host never writes such a record (:func:`fpgacnn.host.fused_add.fusions`
leaves the Add a vector record), :func:`~fpgacnn.host.sequencer_table.hardware_record`
refuses to, and the sequencer stops on one in board memory with ``error``
before it starts the engine (:func:`fpgacnn.core.sequencer.lanes_conflict`),
the host's error naming the layer.
"""

import dataclasses

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from fpgacnn.core.config import EngineConfig
from fpgacnn.core.errors import BackendError, MappingError
from fpgacnn.core.fused_block import depthwise_on_vector_lanes
from fpgacnn.core.sequencer import lanes_conflict, record_bytes, record_word
from fpgacnn.host.accelerator import open_board
from fpgacnn.host.engine_driver import EngineDriver
from fpgacnn.host.fused_add import Fusion
from fpgacnn.host.program_image import build_image
from fpgacnn.host.sequencer_runner import SequencerDriver, run_sequenced
from fpgacnn.host.sequencer_table import SequencerProgram, hardware_record

from fused_program_helpers import Block, fused_program

#: tests/test_fused_program.py's "fused" engine: the program engine lends the block
#: the vector unit's lanes (eight lanes of a 64-bit read, 2 * pin needed).
FUSED = EngineConfig(pin=4, pout=4, kmax=3, stream_width=64, max_width=16, max_channels=32,
                     max_out_channels=16, spare_bank=2, pixel_pairs=1, fused_blocks=2)

#: A chain of two blocks: the record under test is the second block's.
CHAIN = (8, 5, 6, [Block(12, relu=True), Block(5)], 1)


def _timeout(cycles):
    return (4 * cycles + 200_000) / 100e6


def _program(seed=0):
    c, h, w, blocks, batch = CHAIN
    program, x8, want = fused_program(FUSED, c, h, w, blocks, batch=batch, seed=seed)
    return program, build_image(program), x8, want


def test_the_rule_holds_only_where_the_block_has_the_lanes():
    assert depthwise_on_vector_lanes(FUSED)
    assert lanes_conflict(FUSED, 1, 1)
    assert not lanes_conflict(FUSED, 1, 0) and not lanes_conflict(FUSED, 0, 1)
    assert not lanes_conflict(FUSED, 0, 0)
    # Without the block, or with a block on lanes of its own (a 32-bit read has four
    # lanes, the block's half needs eight), a fused Add has the lanes to itself.
    assert not lanes_conflict(dataclasses.replace(FUSED, fused_blocks=0), 1, 1)
    narrow = dataclasses.replace(FUSED, stream_width=32)
    assert not depthwise_on_vector_lanes(narrow) and not lanes_conflict(narrow, 1, 1)


def test_hardware_record_refuses_a_fused_add_on_a_block_on_the_lanes():
    _, image, _, _ = _program()
    record = image.records[1]
    assert record.descriptor["fused"] == 1
    words, hw = hardware_record(image, record, warm=False, counters=0)
    assert hw  # the record alone runs on the sequencer
    fusion = Fusion(runs=(1,), add=0, out=0, fields={})
    with pytest.raises(MappingError, match=r"step 1: a fused Add cannot be fused into a fused "
                                           r"block's run"):
        hardware_record(image, record, warm=False, counters=0, fusion=fusion)


@pytest.fixture(scope="module")
def board():
    b = open_board("sim", FUSED, sequencer=True)
    yield b
    b.close()


def _set_table_word(sequenced, index, name, value):
    """Record ``index``'s word ``name`` in the cold run table, as board memory holds it."""
    config = sequenced.config
    at = (sequenced.table_words[False] * config.pin + index * record_bytes(config)
          + 4 * record_word(name, config))
    sequenced.memory[at:at + 4] = np.array([value], "<u4").view(np.uint8)


def test_the_sequencer_refuses_a_record_with_both_and_runs_the_next(board):
    """add_enable set in the fused record of a table in board memory: the sequencer
    stops with error at that record, the host's error names the layer; with the
    word clear again the same table runs bit-exact (the board as before)."""
    driver = EngineDriver(board, expected=FUSED)
    seq_driver = SequencerDriver(board, FUSED)
    program, image, x8, want = _program()
    sequenced = SequencerProgram(image)
    assert not sequenced.lanes_conflict(1)
    _set_table_word(sequenced, 1, "add_enable", 1)
    assert sequenced.lanes_conflict(1) and not sequenced.lanes_conflict(0)
    with pytest.raises(BackendError, match=r"layer 'block1': the sequencer refused record 1: "
                                           r"a fused Add on a fused block's run"):
        run_sequenced(sequenced, program, driver, seq_driver, x8, timeout_of=_timeout)
    _set_table_word(sequenced, 1, "add_enable", 0)
    y, _ = run_sequenced(sequenced, program, driver, seq_driver, x8, timeout_of=_timeout)
    assert_array_equal(y, want)
