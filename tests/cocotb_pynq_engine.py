"""cocotb test: the pynq backend's code path on the engine RTL, cocotbpynq standing in for pynq.

Everything above the PYNQ API is the code a PYNQ-Z2 runs: Accelerator, the
compiler, the stream packing, the EngineDriver and PynqBoard (Overlay from the
.hwh, AXI DMA channels, MMIO).
"""

import json
import os

import cocotbpynq
import numpy as np

from fpgacnn.core.config import EngineConfig
from fpgacnn.host.accelerator import Accelerator
from fpgacnn.host.examples import load_example
from fpgacnn.host.pynq_board import PynqBoard
from fpgacnn.host.reference import ReferenceBackend


@cocotbpynq.synctest
def pynq_backend_runs_the_example_model(dut):
    config = EngineConfig(**json.loads(os.environ["FPGACNN_CONFIG"]))
    board = PynqBoard("design.bit", pynq=cocotbpynq)
    digits = load_example("digits")
    accelerator = Accelerator(digits.model, backend="pynq", config=config, board=board)
    x = digits.x[:2]
    y = accelerator.run(x)
    np.testing.assert_array_equal(y, ReferenceBackend().run(accelerator.model, x))
    assert accelerator.report["total_cycles"] > 0
