"""Shared fixtures: one simulated board per engine configuration, per test session."""

import pytest

from fpgacnn.core.config import EngineConfig

#: A small engine for the end-to-end tests: it builds quickly, and its buffers
#: are small enough that real models need output-channel groups, column strips
#: and Gemm batch chunks, so the compiler's tiling runs on the RTL too.
#: 32-bit streams, because cocotbpynq's DMA model moves 32-bit words. The same
#: configuration as tests/test_engine_rtl.py's "k3", so that the cocotb build
#: of the pynq-path test is shared with the engine tests.
SMALL_ENGINE = EngineConfig(pin=4, pout=4, kmax=3, stream_width=32, max_width=16,
                            max_channels=16, max_out_channels=16)


@pytest.fixture(scope="session")
def small_engine_board():
    """A SimulatedBoard of SMALL_ENGINE (built once; Verilator builds are cached on disk)."""
    from fpgacnn.host.accelerator import open_board
    board = open_board("sim", SMALL_ENGINE)
    yield board
    board.close()
