"""Shared fixtures: one simulated board per engine configuration, per test session.

A cold Verilator build of an engine top takes 15 to 60 seconds, so the
default run builds as few distinct tops as it can: the tests of one
configuration share one board. A program-engine top (the engine with its
sequencer, pixel reader and writer and memory port) also streams layers
through the DMA as the bare engine does, so tests that stream layers on a
configuration that also has sequencer tests run on the program top with
``Accelerator(..., sequencer=False)``.
"""

import pytest

from fpgacnn.core.config import EngineConfig

#: A small engine for the end-to-end tests: it builds quickly, and its buffers
#: are small enough that real models need output-channel groups, column strips
#: and Gemm batch chunks, so the compiler's tiling runs on the RTL too.
#: 32-bit streams, because cocotbpynq's DMA model moves 32-bit words (the
#: pynq-path test's Zynq wrapper is built around this engine). The same
#: configuration as tests/test_engine_rtl.py's "k3".
SMALL_ENGINE = EngineConfig(pin=4, pout=4, kmax=3, stream_width=32, max_width=16,
                            max_channels=16, max_out_channels=16)


#: SMALL_ENGINE with a parameter buffer of 6 words, more than its 4 output tiles
#: (``param_words``): resident parameters (``param_base``) on the small engine. Six,
#: so that a small program's parameters fit and a slightly bigger one's do not
#: (tests/test_resident_weights.py), and a run's 4 tiles can end at the buffer's
#: end from a base other than 0 (tests/test_descriptor_refusal.py).
DEEP_PARAMS_ENGINE = EngineConfig(pin=4, pout=4, kmax=3, stream_width=32, max_width=16,
                                  max_channels=16, max_out_channels=16, param_words=6)


def pynq_z2_engine():
    """The PYNQ-Z2's sized engine (:func:`fpgacnn.boards.engine_sizing.size_engine`)."""
    from fpgacnn.boards.board import load_board
    from fpgacnn.boards.engine_sizing import size_engine
    return size_engine(load_board("pynq-z2")).config


@pytest.fixture(scope="session")
def small_engine_board():
    """A SimulatedBoard of SMALL_ENGINE (built once; Verilator builds are cached on disk)."""
    from fpgacnn.host.accelerator import open_board
    board = open_board("sim", SMALL_ENGINE)
    yield board
    board.close()


@pytest.fixture(scope="session")
def program_boards():
    """``program_boards(config)``: the simulated board of ``config``'s program engine
    (sequencer, memory model), opened on first use and kept for the session.

    Its memory timing is the board's default (a Zynq-7000 HP port) whenever a
    test gets it: tests that change it set it back.
    """
    from fpgacnn.host.accelerator import open_board
    opened = {}

    def board(config):
        key = tuple(sorted(config.as_dict().items()))
        if key not in opened:
            opened[key] = open_board("sim", config, sequencer=True)
        return opened[key]

    yield board
    for b in opened.values():
        b.close()


@pytest.fixture(scope="session")
def pynq_z2_board(program_boards):
    """The PYNQ-Z2's engine with its program sequencer (the top a Zynq build ships),
    shared by the model zoo, the resident-weights and the sequencer tests; the
    tests that stream layers through the DMA say ``sequencer=False``."""
    return program_boards(pynq_z2_engine())
