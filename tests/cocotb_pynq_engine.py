"""cocotb tests: the pynq backend's code on the Zynq wrapper RTL, cocotbpynq standing in for pynq.

The top is ``fpgacnn_axi``, the wrapper the Vivado script adds to the block
design, around the generated Zynq top (the program engine and its AXI4
memory master); ``design.hwh`` is the simulated handoff of that block design
(fpgacnn.sim.pynq_hwh). The program test puts a DDR model on the wrapper's
``m_axi`` (:mod:`cocotbpynq_ddr`). Everything above the PYNQ API is
the code a PYNQ-Z2 runs: Accelerator, the compiler, the stream packing, the
EngineDriver and PynqBoard (the engine and DMA found in the .hwh, Overlay,
the DMA's channels, MMIO).
"""

import json
import os

import cocotb
import cocotbpynq
import numpy as np

import cocotbpynq_ddr
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


def ddr_synctest(func):
    """:func:`synctest` with a DDR on the wrapper's AXI4 master
    (:mod:`cocotbpynq_ddr`), bound before the overlay resets the design."""
    blocking = bridge(func)

    async def run(dut):
        ddr = cocotbpynq_ddr.attach_ddr(dut)
        cocotb.start_soon(ddr.commit_on_b())
        await blocking(dut)
    return cocotb.test(name=func.__name__, timeout_time=2000, timeout_unit="us")(run)


@synctest
def pynq_backend_runs_the_example_model(dut):
    config = _config()
    board = PynqBoard("design.bit", pynq=cocotbpynq)
    digits = load_example("digits")
    accelerator = Accelerator(digits.model, backend="pynq", config=config, board=board,
                              sequencer=False)
    assert accelerator.sequencer is None
    x = digits.x[:2]
    y = accelerator.run(x)
    np.testing.assert_array_equal(y, ReferenceBackend().run(accelerator.model, x))
    assert accelerator.report["total_cycles"] > 0


@ddr_synctest
def pynq_backend_runs_the_example_program(dut):
    config = _config()
    board = PynqBoard("design.bit", pynq=cocotbpynq_ddr)
    assert board.has_memory
    digits = load_example("digits")
    accelerator = Accelerator(digits.model, backend="pynq", config=config, board=board)
    assert accelerator.sequencer is not None  # a board with memory runs the program
    reference = ReferenceBackend()
    for x in (digits.x[:2], digits.x[2:4]):  # the second: a new input into the same buffer
        y = accelerator.run(x)
        np.testing.assert_array_equal(y, reference.run(accelerator.model, x))
        totals = accelerator.report["sequencer"]
        assert totals["sequencer_starts"] == 1, totals  # the whole network in one start
        assert totals["sequencer_runs"] > 0
    # Streaming: each next batch written into the other copy of the program and
    # written back from the cache while the engine runs this one.
    xs = [digits.x[k:k + 2] for k in range(4, 10, 2)]
    for k, (x, y) in enumerate(zip(xs, accelerator.run_stream(xs))):
        np.testing.assert_array_equal(y, reference.run(accelerator.model, x),
                                      err_msg=f"streamed batch {k}")
    assert accelerator.report["overlapped"] is True and accelerator.report["batches"] == 3
    assert cocotbpynq_ddr._ddr.bad_accesses == 0


@ddr_synctest
def a_memory_access_the_ddr_refuses_is_reported(dut):
    config = _config()
    board = PynqBoard("design.bit", pynq=cocotbpynq_ddr)
    digits = load_example("digits")
    accelerator = Accelerator(digits.model, backend="pynq", config=config, board=board)
    accelerator.run(digits.x[:1])
    seq = accelerator.sequencer
    assert seq.memory_fault() is None
    below = cocotbpynq_ddr.CMA_BASE - 0x10_0000  # not DDR: the model answers SLVERR
    seq.write("seq_memory", below)
    seq.start(0, 1)
    assert seq.wait(1.0)  # the engine does not hang on the error
    fault = seq.memory_fault()
    first = below + seq.read("seq_table")["value"] * config.pin  # the record fetch's burst
    assert fault == f"a memory read at 0x{first:08x} was answered with an error", fault
    assert seq.memory_fault() is None  # cleared
