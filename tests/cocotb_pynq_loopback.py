"""cocotb test: PynqBoard's code path, with cocotbpynq standing in for pynq, on a loopback top."""

import os

import cocotbpynq
import numpy as np

from fpgacnn.host.pynq_board import PynqBoard


@cocotbpynq.synctest
def pynq_board_mmio_and_dma(dut):
    board = PynqBoard("design.bit", pynq=cocotbpynq, modtype=os.environ["FPGACNN_TOP"])
    board.mmio_write(0x0, 0x0F0F_00FF)
    assert board.mmio_read(0x0) == 0x0F0F_00FF
    data = board.allocate(64)
    data[:] = np.arange(64, dtype=np.uint8)
    out = board.allocate(64)
    board.dma_recv(out)
    board.dma_send(data)
    assert board.dma_wait(timeout=1.0)
    key = np.frombuffer(np.uint32(0x0F0F_00FF).tobytes() * 16, np.uint8)
    np.testing.assert_array_equal(out, data ^ key)
