"""Boards as data: loading, listing, validation errors, default engine sizing, CLI."""

import dataclasses
import json
import re

import pytest

from fpgacnn.core.contract import engine_contract
from fpgacnn.hdl.verilog import ZYNQ_TOP_NAME

from fpgacnn.boards.board import BOARD_DIR, BoardError, list_boards, load_board, load_board_file
from fpgacnn.core.contract import requant_product_parts
from fpgacnn.boards.engine_sizing import (bram_blocks_needed, fifo_reserve, multipliers_needed,
                                          size_engine)
from fpgacnn.core.config import EngineConfig
from fpgacnn.host.cli import main

REQUIRED = {"ulx3s-12f", "ulx3s-25f", "ulx3s-45f", "ulx3s-85f", "orangecrab-25f",
            "ecpix5-85f", "icebreaker", "pynq-z1", "pynq-z2", "zcu104", "kv260", "ultra96-v2"}

GOOD = """\
title = "Test board"
family = "ecp5"
device = "LFE5U-25F"
package = "BG381"
speed = "6"
toolchain = "open"
host_link = "uart"
platform = "amaranth_boards.ulx3s:ULX3S_25F_Platform"

[resources]
luts = 24288
multipliers = 28
multiplier_kind = "MULT18X18D"
multiplier_shape = "18x18"
bram_blocks = 56
bram_block_bits = 18432
bram_aspects = ["16384x1", "512x36"]

[clock]
resource = "clk25"
input_mhz = 25
target_mhz = 100
"""


def test_required_boards_are_shipped():
    assert REQUIRED <= {b.name for b in list_boards()}


def test_list_is_sorted_and_every_file_is_a_board():
    boards = list_boards()
    assert [b.name for b in boards] == sorted(p.stem for p in BOARD_DIR.glob("*.toml"))


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_board_facts_are_consistent(name):
    b = load_board(name)
    r = b.resources
    assert r.luts > 0 and r.bram_blocks > 0 and r.multipliers > 0
    for depth, width in r.bram_aspects:
        assert depth * width <= r.bram_block_bits
    assert b.clock.target_mhz > 0 and b.clock.input_mhz > 0
    if b.toolchain == "vivado":
        assert b.vivado is not None and b.host_link == "zynq-axi"
    else:
        assert b.vivado is None and b.platform is not None


@pytest.mark.parametrize("name", sorted(b.name for b in list_boards() if b.toolchain == "open"))
def test_open_board_matches_its_amaranth_platform(name):
    b = load_board(name)
    cls = b.platform_class()
    assert cls.device == b.device
    assert cls.package == b.package
    if b.family == "ecp5":
        assert cls.speed == b.speed
    platform = cls()
    resource_names = {r.name for r in platform.resources.values()}
    assert b.clock.resource in resource_names
    clock = platform.lookup(b.clock.resource)
    assert clock.clock.frequency == pytest.approx(b.clock.input_mhz * 1e6)


def test_known_part_figures():
    # ECP5 data sheet table 1.1 and the Zynq selection guides.
    b = load_board("ulx3s-85f")
    assert (b.device, b.resources.multipliers, b.resources.bram_blocks) == ("LFE5U-85F", 156, 208)
    b = load_board("icebreaker")
    assert (b.device, b.resources.multipliers, b.resources.bram_blocks, b.resources.luts) == \
        ("iCE40UP5K", 8, 30, 5280)
    b = load_board("pynq-z2")
    assert (b.part, b.resources.multipliers, b.resources.bram_blocks) == \
        ("xc7z020clg400-1", 220, 140)
    assert b.vivado.pynq == "3.1"


def test_load_is_case_insensitive():
    assert load_board("ULX3S-85F").name == "ulx3s-85f"


def test_unknown_board_lists_known_ones():
    with pytest.raises(BoardError, match=r"^unknown board 'nope' \(known: .*\bulx3s-85f\b.*\)$"):
        load_board("nope")


def _write(tmp_path, text, name="test-board"):
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return path


def test_good_file_loads(tmp_path):
    b = load_board_file(_write(tmp_path, GOOD))
    assert b.name == "test-board" and b.resources.bram_aspects == ((16384, 1), (512, 36))


def test_uart_baud_defaults_and_can_be_set(tmp_path):
    assert load_board_file(_write(tmp_path, GOOD)).uart_baud == 3_000_000
    b = load_board_file(_write(tmp_path, GOOD.replace('host_link = "uart"',
                                                      'host_link = "uart"\nuart_baud = 115200')))
    assert b.uart_baud == 115_200
    assert load_board("pynq-z2").uart_baud is None


def test_sizing_choices_default_and_can_be_set(tmp_path):
    from fpgacnn.boards.board import SizingChoices
    assert load_board_file(_write(tmp_path, GOOD)).sizing == SizingChoices(False, 2)
    b = load_board_file(_write(tmp_path, GOOD + '\n[sizing]\nfused_block = true\n'
                                               'depthwise_pixels = 1\n'))
    assert b.sizing == SizingChoices(fused_block=True, depthwise_pixels=1)


def test_adding_a_board_is_adding_a_file(tmp_path):
    _write(tmp_path, GOOD, "my-board")
    assert [b.name for b in list_boards(tmp_path)] == ["my-board"]
    assert load_board("my-board", tmp_path).title == "Test board"


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.replace('luts = 24288\n', ''), r"resources\.luts: missing"),
    (lambda t: t.replace('title = "Test board"\n', 'title = "x"\ncolour = "red"\n'),
     r"colour: unknown field"),
    (lambda t: t.replace('luts = 24288', 'luts = "many"'), r"resources\.luts: must be int, not 'many'"),
    (lambda t: t.replace('luts = 24288', 'luts = 0'), r"resources\.luts: must be positive, not 0"),
    (lambda t: t.replace('family = "ecp5"', 'family = "virtex"'),
     r"family: must be one of ecp5, ice40, zynq7, zynqmp, not 'virtex'"),
    (lambda t: t.replace('toolchain = "open"', 'toolchain = "vivado"'),
     r"toolchain: must be 'open' for family 'ecp5', not 'vivado'"),
    (lambda t: t.replace('"512x36"', '"512by36"'),
     r"resources\.bram_aspects\[1\]: must be 'DEPTHxWIDTH' like '512x36', not '512by36'"),
    (lambda t: t.replace('"512x36"', '"1024x36"'),
     r"resources\.bram_aspects\[1\]: 1024x36 holds more than bram_block_bits \(18432\)"),
    (lambda t: t.replace('bram_aspects = [', 'bram_half_aspects = ["512x36"]\nbram_aspects = ['),
     r"resources\.bram_half_aspects\[0\]: 512x36 holds more than half of bram_block_bits"),
    (lambda t: t.replace('host_link = "uart"', 'host_link = "carrier-pigeon"'),
     r"host_link: must be one of uart, spi, usb-acm, zynq-axi, not 'carrier-pigeon'"),
    (lambda t: t.replace('platform = "amaranth_boards.ulx3s:ULX3S_25F_Platform"\n', ''),
     r"platform: missing \(the open flow takes pins"),
    (lambda t: t.replace('target_mhz = 100', 'target_mhz = true'),
     r"clock\.target_mhz: must be int or float, not True"),
    (lambda t: t + '\n[vivado]\nboard_part = "x"\n',
     r"vivado: only for Vivado boards, not family 'ecp5'"),
    (lambda t: t.replace('[clock]', '[clock'), r"not valid TOML"),
    (lambda t: t.replace('platform =', 'uart_baud = 0\nplatform ='), r"uart_baud: must be positive, not 0"),
    (lambda t: t.replace('host_link = "uart"', 'host_link = "spi"\nuart_baud = 115200'),
     r"uart_baud: only for host_link = 'uart', not 'spi'"),
    (lambda t: t + '\n[sizing]\nfused_block = 1\n',
     r"sizing\.fused_block: must be bool, not 1"),
    (lambda t: t + '\n[sizing]\nfused_block = true\ndepthwise_pixels = 3\n',
     r"sizing\.depthwise_pixels: must be 1 or 2, not 3"),
    (lambda t: t + '\n[sizing]\ndepthwise_pixels = 1\n',
     r"sizing\.depthwise_pixels: only with sizing\.fused_block = true"),
    (lambda t: t + '\n[sizing]\nfused_block = true\nblocks = 4\n',
     r"sizing\.blocks: unknown field"),
])
def test_validation_errors_name_file_and_field(tmp_path, edit, message):
    path = _write(tmp_path, edit(GOOD))
    with pytest.raises(BoardError, match="^" + re.escape(str(path)) + ": " + message):
        load_board_file(path)


def test_vivado_board_needs_vivado_table(tmp_path):
    text = (BOARD_DIR / "pynq-z2.toml").read_text()
    text = text[:text.index("[vivado]")]
    path = _write(tmp_path, text)
    with pytest.raises(BoardError,
                       match="^" + re.escape(str(path)) + r": vivado: missing \(needed by family 'zynq7'\)$"):
        load_board_file(path)


def test_bad_file_name(tmp_path):
    path = _write(tmp_path, GOOD, "Bad_Name")
    with pytest.raises(BoardError, match=r": board file names are lower-case letters"):
        load_board_file(path)


def test_broken_file_is_not_skipped_when_listing(tmp_path):
    _write(tmp_path, GOOD, "good")
    _write(tmp_path, GOOD.replace("luts = 24288\n", ""), "broken")
    with pytest.raises(BoardError, match=r"broken\.toml: resources\.luts: missing$"):
        list_boards(tmp_path)


def test_block_ram_counting():
    r = load_board("ulx3s-85f").resources
    assert r.blocks_for(352, 32) == 1     # 512x36
    assert r.blocks_for(704, 32) == 2     # 1024x18 twice, or 512x36 twice
    assert r.blocks_for(256, 1152) == 32  # 512x36, 32 side by side
    assert r.blocks_for(16384, 1) == 1
    assert r.multipliers_for(8, 8) == 1 and r.multipliers_for(32, 17) == 2


def test_block_ram_halves_on_xilinx_parts():
    # A RAMB36 tile holds two RAMB18s of any two memories: an odd number of
    # halves counts half a block; ECP5 blocks do not split.
    r = load_board("pynq-z2").resources
    assert r.blocks_for(1376, 32) == 1.5   # a 1024x36 RAMB36 and a 512x36 RAMB18
    assert r.blocks_for(2752, 32) == 3     # whole blocks, as before
    assert r.blocks_for(512, 36) == 0.5 and r.blocks_for(1024, 36) == 1
    assert r.blocks_for(512, 72) == 1      # 72 bits wide: a RAMB36 only
    assert load_board("ulx3s-85f").resources.blocks_for(300, 32) == 1


def test_pair_writer_costs_no_block_ram_on_zynq():
    # The pair writer's halves of a line-buffer bank take the blocks the
    # whole bank takes (RAMB18 halves), so the PYNQ-Z2's buffers stay.
    s = size_engine(load_board("pynq-z2"))
    assert s.config.writer_words == 2
    single = dataclasses.replace(s.config, writer_words=1)
    board = load_board("pynq-z2")
    assert (bram_blocks_needed(s.config, board)["line_buffer"]
            == bram_blocks_needed(single, board)["line_buffer"])
    # (max_width 128: the kmax spare banks' blocks, rule 4b)
    assert (s.config.max_width, s.config.max_channels, s.config.max_out_channels) == \
        (128, 128, 256)
    for name in ("ulx3s-85f", "icebreaker"):  # one word a beat, or a small part
        assert size_engine(load_board(name)).config.writer_words == 1, name
    # The ZCU104's pin = 8 in a 128-bit beat: two words, stored both a cycle, in
    # the block RAMs its buffers took with one (the same sizes).
    s = size_engine(load_board("zcu104"))
    assert (s.config.stream_width, s.config.writer_words) == (128, 2)
    assert (s.config.max_width, s.config.max_channels, s.config.max_out_channels) == \
        (256, 256, 256)
    assert s.bram_blocks["total"] == 294  # 246 with one spare bank (rule 4b)


#: The sized engines' stream widths (rule 3): the HP port's on the Zynq boards,
#: at most two input words a beat (the Ultra96-V2's pin = 4: 64 bits); 64 bits
#: on the open boards of 10k LUTs or more, 32 on the iCEBreaker.
STREAM_WIDTHS = {"zcu104": 128, "kv260": 128, "ultra96-v2": 64, "pynq-z1": 64, "pynq-z2": 64,
                 "ulx3s-12f": 64, "ulx3s-25f": 64, "ulx3s-45f": 64, "ulx3s-85f": 64,
                 "orangecrab-25f": 64, "ecpix5-85f": 64, "icebreaker": 32}


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_stream_width_is_the_hp_ports_on_zynq_boards(name):
    from fpgacnn.boards.zynq_design import DESIGN
    board = load_board(name)
    c = size_engine(board).config
    assert c.stream_width == STREAM_WIDTHS[name]
    if board.family in DESIGN.families:
        hp = DESIGN.ps(board.family).hp_max_width
        assert c.stream_width == min(hp, 16 * c.pin)
        # The design's HP port is as wide as the engine's beat, and the simulated
        # board's memory moves that a cycle each way.
        assert DESIGN.memory_width(board.family, c) == c.stream_width
        assert DESIGN.memory_bytes_per_cycle(board.family, c) == c.stream_bytes


def test_spare_bank_and_pixel_pairs_on_xilinx_parts_only_and_fewer_blocks():
    # The Xilinx boards' sized engines take pixel pairs and kmax + 1 column
    # banks in the sizing (the same buffers, fewer block RAMs by the model);
    # the ECP5 and iCE40 ones keep kmax banks and one pixel a window.
    for board in list_boards():
        s = size_engine(board)
        xilinx = board.resources.multiplier_kind.startswith("DSP48")
        assert s.config.pixel_pairs == int(xilinx), board.name
        assert (s.config.spare_bank >= 1) == xilinx, board.name
        if xilinx:
            # (at the width the buffers were sized at with one spare bank)
            one = dataclasses.replace(s.config, spare_bank=1, max_width=256)
            none = dataclasses.replace(one, spare_bank=0, pixel_pairs=0, fused_blocks=0,
                                       depthwise_pixels=2)
            assert (bram_blocks_needed(one, board)["line_buffer"]
                    < bram_blocks_needed(none, board)["line_buffer"]), board.name


def test_more_spare_banks_where_they_fit():
    # Rule 4b: as many spare banks as fit beside the buffers of one spare bank's
    # sizing -- the same parallelism and channel capacities, max_width kept or
    # halved, never below 128 -- with the block RAMs in budget.
    for board in list_boards():
        s = size_engine(board)
        c = s.config
        if not c.pixel_pairs:
            continue
        budget = board.resources.bram_blocks - fifo_reserve(board.resources.bram_blocks)
        assert s.bram_blocks == bram_blocks_needed(c, board)
        assert s.bram_blocks["total"] <= budget, board.name
        assert c.max_width >= 128, board.name
        if c.spare_bank < c.kmax:
            # one more spare bank fits at neither width
            for width in (c.max_width, c.max_width // 2):
                more = dataclasses.replace(c, spare_bank=c.spare_bank + 1, max_width=width)
                assert (width < 128 or bram_blocks_needed(more, board)["total"] > budget), \
                    board.name
    wanted = {"pynq-z2": (3, 128, 128, 256), "zcu104": (3, 256, 256, 256),
              "kv260": (2, 128, 128, 256), "ultra96-v2": (3, 256, 256, 128)}
    for name, (spare, width, cin, cout) in wanted.items():
        c = size_engine(load_board(name)).config
        assert (c.spare_bank, c.max_width, c.max_channels, c.max_out_channels) == \
            (spare, width, cin, cout), name
        assert engine_contract(c).pair_stride == spare
    board = load_board("pynq-z2")
    plain = size_engine(board, fused_block=False).config
    assert bram_blocks_needed(plain, board) == {
        "line_buffer": 36, "weight_buffer": 64, "param_buffer": 4, "pool_row": 4,
        "depthwise_memory": 0, "total": 108}


def test_ecp5_loader_buffers_counted_as_built():
    # With deep_pipeline the ECP5 build stores each 64-bit stream lane of
    # the weight words in blocks of its own (hdl/tech/ecp5_block_ram.py): 1152-bit
    # words take 2 x 18 blocks per 512 words, not yosys's 32; the compact
    # arrangement keeps the inferred memories, counted as yosys packs them.
    board = load_board("ulx3s-85f")
    c = EngineConfig(pin=8, pout=2, kmax=3, stream_width=64, max_width=256,
                     max_channels=128, max_out_channels=128, deep_pipeline=1)
    weights = engine_contract(c).weights
    assert weights.word_bytes * 8 == 1152 and weights.words == 1024
    assert bram_blocks_needed(c, board)["weight_buffer"] == 2 * 36
    compact = dataclasses.replace(c, deep_pipeline=0)
    assert bram_blocks_needed(compact, board)["weight_buffer"] == 2 * 32
    # Other families: as yosys packs them, either way.
    pynq = load_board("pynq-z2")
    assert (bram_blocks_needed(c, pynq)["weight_buffer"]
            == pynq.resources.blocks_for(weights.words, 1152))


# -- default engine sizing ----------------------------------------------------

@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_sizing_fits_the_board(name):
    board = load_board(name)
    s = size_engine(board)
    c = s.config
    assert isinstance(c, EngineConfig) and c.kmax == 3
    r = board.resources
    budget = r.bram_blocks - fifo_reserve(r.bram_blocks)
    assert s.bram_blocks == bram_blocks_needed(c, board)
    assert s.bram_blocks["total"] <= budget
    assert s.multipliers == multipliers_needed(c, board)
    if s.multipliers > r.multipliers:
        # Only when even the smallest engine does not fit the DSPs.
        assert (c.pin, c.pout) == (1, 1)
        assert re.search(r"builds the other \d+ from LUTs", s.describe())
    else:
        # Maximal: doubling either parallelism breaks a budget.
        for bigger in (dict(pin=c.pin * 2), dict(pout=c.pout * 2)):
            try:
                trial = EngineConfig(**{**c.as_dict(), **bigger, "max_width": 16,
                                        "max_channels": 8, "max_out_channels": 8})
            except Exception:
                continue
            assert (multipliers_needed(trial, board) > r.multipliers
                    or bram_blocks_needed(trial, board)["total"] > budget)
    # Maximal buffers: doubling any limit breaks the block RAM budget or a cap.
    for key in ("max_channels", "max_out_channels", "max_width"):
        value = getattr(c, key)
        if value >= 512:
            continue
        trial = EngineConfig(**{**c.as_dict(), key: value * 2})
        assert bram_blocks_needed(trial, board)["total"] > budget, key


def test_sizing_ulx3s_85f_is_the_144_mac_array():
    # 144 MACs + 2 lanes x 4 DSPs of 33x24-bit requantization + the descriptor
    # check's product = 153 of 156 DSPs (BENCHMARKS.md 3.1)
    board = load_board("ulx3s-85f")
    s = size_engine(board)
    c = s.config
    assert (c.kmax, c.pin, c.pout, c.peak_macs_per_cycle) == (3, 8, 2, 144)
    assert s.multipliers == 144 + 2 * 4 + 1


def test_sizing_pynq_z2_pairs_count_the_dsps_as_built():
    # 144 DSP48E1 for the 288 products (PairProducts: a tap's two in one 25 x 8
    # multiply) + 2 requantizers x 4 lanes x 2 partial products (17-bit parts of
    # the 33-bit sum times the whole 24-bit multiplier: the program engine's) +
    # the descriptor check's product + the vector unit's 8 lanes x 3 = 185, as
    # synth_xilinx maps the Zynq top (tests/test_program_dsp.py, docs/boards.md);
    # one pixel a window takes 144 + 8 + 1 + 24.
    board = load_board("pynq-z2")
    s = size_engine(board)
    c = s.config
    assert (c.pin, c.pout, c.pixel_pairs, c.peak_macs_per_cycle) == (4, 4, 1, 288)
    assert len(requant_product_parts(c)) == 4
    assert len(requant_product_parts(c, whole_multiplier=True)) == 2
    assert s.multipliers == multipliers_needed(c, board) == 144 + 2 * 4 * 2 + 1 + 8 * 3
    assert multipliers_needed(dataclasses.replace(c, pixel_pairs=0, fused_blocks=0,
                                                  depthwise_pixels=2),
                              board) == 144 + 4 * 2 + 1 + 8 * 3
    assert "pixel_pairs=1" in s.describe()


def test_sizing_explains_itself():
    text = size_engine(load_board("ulx3s-85f")).describe()
    assert re.match(r"^engine: kmax=3 pin=8 pout=2 \(144 MACs/cycle\)", text)
    assert "153 of 156 MULT18X18D" in text
    assert re.search(r"of 208 block RAMs", text)


def test_sizing_rejects_non_board():
    with pytest.raises(TypeError, match=r"^Board must be a fpgacnn\.boards\.board\.Board, not 'x'$"):
        size_engine("x")
    with pytest.raises(TypeError, match=r"^fused_block must be a bool or None, not 1$"):
        size_engine(load_board("pynq-z2"), fused_block=1)
    for bad in (0, 3, True):
        with pytest.raises(ValueError, match=rf"^depthwise_pixels must be 1 or 2, not {bad}$"):
            size_engine(load_board("pynq-z2"), fused_block=True, depthwise_pixels=bad)
    with pytest.raises(ValueError, match=r"^depthwise_pixels 1 needs fused_block=True \(it "
                                         r"sets the fused block's depthwise unit\)$"):
        size_engine(load_board("pynq-z2"), fused_block=False, depthwise_pixels=1)
    with pytest.raises(ValueError, match=r"^depthwise_pixels 1 needs fused_block=True"):
        size_engine(load_board("zcu104"), depthwise_pixels=1)  # (its file chooses no block)


def test_sizing_the_half_rate_unit_as_chosen_or_asked():
    """``depthwise_pixels``: the fused sizing with the half-rate unit, all else equal
    (its block RAMs, DSPs and blocks); the PYNQ-Z2's file chooses the block at the half
    rate (its top within the LUT margin), so that is its default and what
    ``fused_block=True`` gives; the full rate where asked, and on a board whose file
    says nothing."""
    board = load_board("pynq-z2")
    full = size_engine(board, fused_block=True, depthwise_pixels=2)
    half = size_engine(board, fused_block=True, depthwise_pixels=1)
    assert full.config.depthwise_pixels == 2 and half.config.depthwise_pixels == 1
    assert dataclasses.replace(half.config, depthwise_pixels=2) == full.config
    assert (half.bram_blocks, half.multipliers) == (full.bram_blocks, full.multipliers)
    assert "depthwise_pixels=1: the half-rate depthwise unit, as asked" in half.describe()
    assert board.sizing.fused_block and board.sizing.depthwise_pixels == 1
    chosen = size_engine(board)
    assert chosen.config == half.config == size_engine(board, fused_block=True).config
    assert ("depthwise_pixels=1: the half-rate depthwise unit, as pynq-z2's file chooses "
            "([sizing])") in chosen.describe()
    assert size_engine(board, fused_block=False).config.fused_blocks == 0
    # The Ultra96-V2's file chooses the half rate too (its top 82.4 % of the LUTs),
    # the KV260's the full rate (74.9 %), the ZCU104's none (no block fits).
    ultra = load_board("ultra96-v2")
    assert ultra.sizing.fused_block and ultra.sizing.depthwise_pixels == 1
    assert size_engine(ultra).config.depthwise_pixels == 1
    kv260 = load_board("kv260")
    assert kv260.sizing.fused_block and kv260.sizing.depthwise_pixels == 2
    assert size_engine(kv260).config.depthwise_pixels == 2
    assert not load_board("zcu104").sizing.fused_block


# -- CLI ------------------------------------------------------------------------

def test_cli_boards_table(capsys):
    assert main(["boards"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["board", "part", "LUTs"]
    for name in REQUIRED:
        assert re.search(rf"^{re.escape(name)}\s", out, re.M)
    assert re.search(r"^ulx3s-85f\s+LFE5U-85F\s+83,640\s+156 MULT18X18D\s+208 x 18 Kbit\s+100 MHz"
                     r"\s+open\s+uart$", out, re.M)


def test_cli_boards_json(capsys):
    assert main(["boards", "--json"]) == 0
    data = {b["name"]: b for b in json.loads(capsys.readouterr().out)}
    assert REQUIRED <= set(data)
    assert data["kv260"]["resources"]["multipliers"] == 1248


def test_cli_build_unknown_board(tmp_path, capsys):
    assert main(["build", "--board", "nope", "-o", str(tmp_path / "out")]) == 1
    assert re.match(r"^fpgacnn: error: unknown board 'nope' \(known: ", capsys.readouterr().err)


def test_cli_build_zynq_without_vivado(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    out_dir = tmp_path / "out"
    config = tmp_path / "engine.toml"
    config.write_text("[engine]\npin = 1\npout = 1\nmax_width = 8\nmax_channels = 8\n"
                      "max_out_channels = 8\n")
    status = main(["build", "--board", "pynq-z2", "--config", str(config), "-o", str(out_dir)])
    out = capsys.readouterr().out
    assert status == 3
    assert (out_dir / "fpgacnn.tcl").is_file()
    assert (out_dir / "rtl" / f"{ZYNQ_TOP_NAME}.v").is_file()
    assert (out_dir / "rtl" / "fpgacnn_axi.v").is_file()
    assert EngineConfig.from_toml(out_dir / "engine.toml") == EngineConfig.from_toml(config)
    assert re.search(r"^vivado is not on PATH, so nothing was built\. To build, run:\n"
                     rf"  cd {re.escape(str(out_dir.resolve()))} && vivado -mode batch .*"
                     r"-source fpgacnn\.tcl$", out, re.M)


def test_cli_build_fused_block_with_a_config_is_one_line(tmp_path, capsys):
    config = tmp_path / "engine.toml"
    config.write_text("[engine]\npin = 1\npout = 1\n")
    out_dir = tmp_path / "out"
    assert main(["build", "--board", "pynq-z2", "--config", str(config), "--fused-block",
                 "-o", str(out_dir)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--[no-]fused-block sizes the engine" in err
    assert not out_dir.exists()


@pytest.mark.slow  # generates the Verilog of a 144-MAC engine with the block (~1 min)
def test_cli_build_fused_block_sizes_the_engine_with_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    out_dir = tmp_path / "out"
    assert main(["build", "--board", "pynq-z2", "--fused-block", "-o", str(out_dir)]) == 3
    want = size_engine(load_board("pynq-z2"), fused_block=True).config
    assert EngineConfig.from_toml(out_dir / "engine.toml") == want and want.fused_blocks > 0
    assert f"fused_blocks={want.fused_blocks}" in capsys.readouterr().out


@pytest.mark.slow  # generates the Verilog of a 144-MAC engine (~30 s)
def test_cli_build_prints_default_engine(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert main(["build", "--board", "pynq-z1", "-o", str(tmp_path / "out")]) == 3
    out = capsys.readouterr().out
    assert re.search(r"^no --config: default engine for pynq-z1\nengine: kmax=3 pin=4 pout=4 ",
                     out, re.M)


# -- the fused block (rule 4d) ------------------------------------------------

#: The fused blocks rule 4d gives where asked: 13 or more where MobileNetV1's fit the block
#: RAMs beside the buffers (the memory's depth to the end of its blocks), the
#: KV260's 4 (DS-CNN's) in LUT RAM, none on the ZCU104 (2 blocks left) nor on
#: the open boards (no pixel pairs).
FUSED_BLOCKS = {"pynq-z1": 16, "pynq-z2": 16, "ultra96-v2": 16, "kv260": 4, "zcu104": 0}


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_fused_blocks_where_their_memory_fits(name):
    from fpgacnn.boards.engine_sizing import _FUSED_BLOCKS_LEAST, _FUSED_BLOCKS_WANTED
    from fpgacnn.core.fused_block import depthwise_on_vector_lanes
    board = load_board(name)
    # Where the board's file chooses it (the PYNQ-Z1/Z2: their top with the half-rate
    # unit within 85 % of the LUTs by yosys, docs/boards.md) or where asked.
    default = size_engine(board)
    s = size_engine(board, fused_block=True)
    c = s.config
    if board.sizing.fused_block:
        assert default.config == c and default.config.fused_blocks > 0
    else:
        assert default.config.fused_blocks == 0
        if default.config.pixel_pairs:
            assert ("fused_blocks=0: the fused block where a board's file chooses it or where "
                    "asked") in default.describe()
    plain = size_engine(board, fused_block=False).config
    assert dataclasses.replace(c, fused_blocks=0, depthwise_pixels=2) == plain
    budget = board.resources.bram_blocks - fifo_reserve(board.resources.bram_blocks)
    assert c.fused_blocks == FUSED_BLOCKS.get(name, 0)
    assert s.bram_blocks == bram_blocks_needed(c, board) and s.bram_blocks["total"] <= budget

    def blocks(n):
        return bram_blocks_needed(dataclasses.replace(c, fused_blocks=n), board)

    if not c.pixel_pairs:
        assert "fused_blocks" not in s.describe()
        return
    if not c.fused_blocks:
        # even the fewest do not fit beside the buffers
        assert blocks(_FUSED_BLOCKS_LEAST)["total"] > budget
        assert re.search(rf"fused_blocks=0: even {_FUSED_BLOCKS_LEAST} fused blocks' depthwise "
                         rf"memory \(\d+ block RAMs\) does not fit", s.describe())
        return
    # The shipped (Zynq) top lends the block the vector unit's lanes: no DSP more.
    assert depthwise_on_vector_lanes(c) and s.multipliers == multipliers_needed(
        dataclasses.replace(c, fused_blocks=0, depthwise_pixels=2), board)
    assert c.fused_blocks >= _FUSED_BLOCKS_LEAST
    if c.fused_blocks < _FUSED_BLOCKS_WANTED:
        assert blocks(c.fused_blocks + 1)["total"] > budget
    # One more block takes more block RAMs or breaks the budget.
    more = blocks(c.fused_blocks + 1)
    assert (more["depthwise_memory"] > s.bram_blocks["depthwise_memory"]
            or more["total"] > budget)
    assert re.search(rf"fused_blocks={c.fused_blocks}: the fused depthwise \+ pointwise block",
                     s.describe())


def test_depthwise_memory_in_block_ram_past_lut_ram_depth():
    # At, under and over LUT_RAM_MAX_WORDS: a memory that deep is LUT RAM and
    # takes no block RAM; one word deeper is block RAM, each 64-bit beat of
    # the 576-bit words in blocks of its own (9 beats).
    from fpgacnn.core.technology import LUT_RAM_MAX_WORDS, in_block_ram, ram_style
    assert not in_block_ram(LUT_RAM_MAX_WORDS) and in_block_ram(LUT_RAM_MAX_WORDS + 1)
    assert ram_style(LUT_RAM_MAX_WORDS) == "distributed"
    assert ram_style(LUT_RAM_MAX_WORDS + 1) == "block"
    board = load_board("pynq-z2")
    c = size_engine(board, fused_block=True).config
    tiles = engine_contract(dataclasses.replace(c, fused_blocks=1)).fused.depthwise_memory.words
    at = LUT_RAM_MAX_WORDS // tiles
    beats = engine_contract(c).depthwise_beats
    for n in (1, at - 1, at, at + 1, c.fused_blocks):
        trial = dataclasses.replace(c, fused_blocks=n)
        words = engine_contract(trial).fused.depthwise_memory.words
        counted = bram_blocks_needed(trial, board)["depthwise_memory"]
        if words <= LUT_RAM_MAX_WORDS:
            assert counted == 0, n
        else:
            assert counted == beats * board.resources.blocks_for(words, c.stream_width), n
            assert counted >= board.resources.blocks_for(words, 8 * engine_contract(
                trial).fused.depthwise_memory.word_bytes), n
