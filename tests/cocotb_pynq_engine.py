"""cocotb tests: the pynq backend's code on the Zynq wrapper RTL, cocotbpynq standing in for pynq.

The top is ``fpgacnn_axi``, the wrapper the Vivado script adds to the block
design, around the generated engine; ``design.hwh`` is the simulated handoff
of that block design (fpgacnn.sim.pynq_hwh). Everything above the PYNQ API is
the code a PYNQ-Z2 runs: Accelerator, the compiler, the stream packing, the
EngineDriver and PynqBoard (the engine and DMA found in the .hwh, Overlay,
the DMA's channels, MMIO).
"""

import json
import os

import cocotb
import cocotbpynq
import numpy as np
from cocotb.task import bridge

from fpgacnn.core.config import EngineConfig
from fpgacnn.core.regmap import MAGIC, build_regmap
from fpgacnn.host.accelerator import Accelerator
from fpgacnn.host.examples import load_example
from fpgacnn.host.pynq_board import PynqBoard
from fpgacnn.host.reference import ReferenceBackend


def synctest(func):
    """``cocotbpynq.synctest`` under the function's own name.

    cocotbpynq 0.2 registers every synctest as ``async_test_func``, so a run
    could not pick one test; this is its wrapper (the PYNQ calls block, as on
    a board) with ``cocotb.test(name=...)``, and a limit in simulated time
    (the example model takes about 4.4 us) so that a broken handshake fails
    instead of hanging.
    """
    blocking = bridge(func)

    async def run(dut):
        await blocking(dut)
    return cocotb.test(name=func.__name__, timeout_time=100, timeout_unit="us")(run)


def _config():
    return EngineConfig(**json.loads(os.environ["FPGACNN_CONFIG"]))


@synctest
def pynq_board_reads_and_writes_the_engine_registers(dut):
    config = _config()
    regs = build_regmap(config)
    board = PynqBoard("design.bit", pynq=cocotbpynq)
    assert board.mmio_read(regs["magic"].address) == MAGIC
    assert board.mmio_read(regs["cfg_stream_width"].address) == config.stream_width
    board.mmio_write(regs["desc_in_w"].address, 13)
    assert board.mmio_read(regs["desc_in_w"].address) == 13


@synctest
def pynq_backend_runs_the_example_model(dut):
    config = _config()
    board = PynqBoard("design.bit", pynq=cocotbpynq)
    digits = load_example("digits")
    accelerator = Accelerator(digits.model, backend="pynq", config=config, board=board)
    x = digits.x[:2]
    y = accelerator.run(x)
    np.testing.assert_array_equal(y, ReferenceBackend().run(accelerator.model, x))
    assert accelerator.report["total_cycles"] > 0
