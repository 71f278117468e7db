"""ECP5 block RAMs with their own output registers (hdl/tech/ecp5_block_ram.py).

No simulation model of ``DP16KD`` can run here (yosys's is a parameter
list), so the instantiated blocks are checked against yosys's own mapping of
the same memory: every pin must be driven by the same bit of the same port,
and only the output-register settings may differ.
"""

import json
import subprocess

import pytest
from amaranth.back import rtlil
from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth_boards.ulx3s import ULX3S_85F_Platform

from fpgacnn.hdl.tech.ecp5_block_ram import (DEEP, WIDE, block_plan, block_ram_slices, blocks_in_parts,
                                     ecp5_block_ram_part)
from fpgacnn.hdl.tech.pipelined_memory import PipelinedMemory
from fpgacnn.boards.synth_stats import yosys_command


# Memories as yosys maps them: one DP16KD each, 512 x 36 (its 36-bit
# pseudo-dual-port mode) and 1024 x 18. The read is synchronous and its
# output not transparent (`no_rw_check`: no bypass logic), so every block
# pin is wired straight to a port.
REFERENCE = """
module top(input clk, input [{a}:0] w_addr, input [{w}:0] w_data, input w_en,
           input [{a}:0] r_addr, output reg [{w}:0] r_data);
(* no_rw_check *) reg [{w}:0] mem [0:{d}];
always @(posedge clk) begin
  if (w_en) mem[w_addr] <= w_data;
  r_data <= mem[r_addr];
end
endmodule
"""


class _OneBlock(wiring.Component):
    """One part in the given mode, the block's ports as the reference's."""

    def __init__(self, mode):
        self._mode = mode
        abits = (mode.depth - 1).bit_length()
        super().__init__({"w_addr": In(abits), "w_data": In(mode.width), "w_en": In(1),
                          "r_addr": In(abits), "r_data": Out(mode.width)})

    def elaborate(self, platform):
        m = Module()
        q = ecp5_block_ram_part(m, "part0", width=self._mode.width, granularity=self._mode.width,
                                w_addr=self.w_addr, w_data=self.w_data, w_en=self.w_en,
                                r_addr=self.r_addr, mode=self._mode)
        m.d.comb += self.r_data.eq(q)
        return m


# Settings that differ by design: the output registers and their enables.
_OUTPUT_REGISTER = {"REGMODE_A", "REGMODE_B", "OCEA"}
# Reset style of the (unused) output reset, and global set/reset.
_IRRELEVANT = {"RESETMODE", "ASYNC_RESET_RELEASE", "GSR"}


def _synth(tmp_path, name, read_cmd):
    subprocess.run(yosys_command() + ["-q", "-p", f"{read_cmd}; synth_ecp5 -top top; write_json {name}.json"],
                   cwd=tmp_path, check=True, capture_output=True)
    module = json.loads((tmp_path / f"{name}.json").read_text())["modules"]["top"]
    bit_names = {}
    for port, info in module["ports"].items():
        for i, bit in enumerate(info["bits"]):
            bit_names[bit] = f"{port}[{i}]"
    blocks = [c for c in module["cells"].values() if c["type"] == "DP16KD"]
    return blocks, bit_names, module


def _pins(block, bit_names):
    """Pin -> what drives it: a port bit, a constant, or 'internal'."""
    return {pin: tuple(bit if isinstance(bit, str) else bit_names.get(bit, "internal")
                       for bit in bits)
            for pin, bits in block["connections"].items()}


def _param(value):
    """A yosys JSON parameter: integers as bit strings, strings as themselves."""
    if value is None:
        return None
    return int(value, 2) if value and set(value) <= {"0", "1"} else value.strip()


def _ecp5_rtlil(memory):
    return rtlil.convert(memory, name="top", platform=ULX3S_85F_Platform())


@pytest.mark.parametrize("mode", [WIDE, DEEP], ids=["512x36", "1024x18"])
def test_block_wired_as_yosys_maps_the_same_memory(tmp_path, mode):
    (tmp_path / "reference.v").write_text(REFERENCE.format(
        a=(mode.depth - 1).bit_length() - 1, w=mode.width - 1, d=mode.depth - 1))
    ref_blocks, ref_bits, _ = _synth(tmp_path, "reference", "read_verilog reference.v")
    (tmp_path / "ours.il").write_text(_ecp5_rtlil(_OneBlock(mode)))
    our_blocks, our_bits, module = _synth(tmp_path, "ours", "read_rtlil ours.il")
    assert len(ref_blocks) == len(our_blocks) == 1
    ref, ours = ref_blocks[0], our_blocks[0]
    assert ref["parameters"]["REGMODE_B"] == "NOREG"
    assert ours["parameters"]["REGMODE_B"] == "OUTREG"
    ref_pins, our_pins = _pins(ref, ref_bits), _pins(ours, our_bits)
    # Outputs nothing reads (port A's in the 18-bit mode) may be left off.
    unread = set(ref_pins) - set(our_pins)
    assert all(ref["port_directions"][p] == "output" and set(ref_pins[p]) == {"internal"}
               for p in unread), unread
    assert set(our_pins) <= set(ref_pins)
    ref_pins = {p: v for p, v in ref_pins.items() if p not in unread}
    # Undriven inputs: yosys leaves them x, the instance ties them to 0.
    differing = {pin for pin in ref_pins
                 if ref_pins[pin] != our_pins[pin]
                 and not (set(ref_pins[pin]) == {"x"} and set(our_pins[pin]) == {"0"})}
    assert differing <= _OUTPUT_REGISTER, {p: (ref_pins[p], our_pins[p]) for p in differing}
    assert our_pins["OCEB"] == ("1",)
    # Every parameter yosys sets is set alike, but for the output register
    # (and the unused output reset's style).
    for param, value in ref["parameters"].items():
        if param not in _OUTPUT_REGISTER | _IRRELEVANT:
            # Initial contents: zeros either way (unset means zero).
            default = "0" if param.startswith("INITVAL_") else None
            assert _param(ours["parameters"].get(param, default)) == _param(value), param
    # The block's register replaces the flip-flops behind it: none left.
    assert not [c for c in module["cells"].values() if c["type"] == "TRELLIS_FF"]


def test_pipelined_memory_in_one_block(tmp_path):
    # The smallest collision-free PipelinedMemory above 18 bits: one
    # 36-bit-mode block, its read data straight from the block's register.
    (tmp_path / "mem.il").write_text(_ecp5_rtlil(PipelinedMemory(36, 512, collision_free=True)))
    blocks, bits, module = _synth(tmp_path, "mem", "read_rtlil mem.il")
    assert len(blocks) == 1 and blocks[0]["parameters"]["DATA_WIDTH_B"] == f"{36:032b}"
    pins = _pins(blocks[0], bits)
    assert [pins[f"DOA{b}"] for b in range(18)] + [pins[f"DOB{b}"] for b in range(18)] \
        == [(f"r_data[{b}]",) for b in range(36)]
    assert not [c for c in module["cells"].values() if c["type"] == "TRELLIS_FF"]


@pytest.mark.parametrize("depth, plan", [
    (1000, (DEEP, 1)),   # 513..1024 words: one part of 18-bit blocks (4 per lane, as 2 x 2)
    (1376, (WIDE, 3)),   # deeper: 36-bit parts of 512 words (the line buffer's banks)
])
def test_lanes_in_blocks_of_their_own(tmp_path, depth, plan):
    # 128-bit words in two 64-bit write lanes: each lane in blocks of its
    # own, each block enabled by its lane, every data bit in each part once.
    assert block_plan(128, depth, 64) == plan
    mode, parts = plan
    memory = PipelinedMemory(128, depth, granularity=64, collision_free=True,
                             register_output=True)
    (tmp_path / "mem.il").write_text(_ecp5_rtlil(memory))
    blocks, bits, _ = _synth(tmp_path, "mem", "read_rtlil mem.il")
    slices = block_ram_slices(128, 64, mode)
    assert len(blocks) == parts * len(slices) == parts * (8 if mode is DEEP else 4)
    assert all(b["parameters"]["REGMODE_B"] == "OUTREG" for b in blocks)
    assert all(_param(b["parameters"]["DATA_WIDTH_A"]) == mode.width for b in blocks)
    data_bits = sorted(name for b in blocks for pin, name in _pins(b, bits).items()
                       if pin.startswith("DI") and name[0].startswith("w_data"))
    assert data_bits == sorted([(f"w_data[{i}]",) for i in range(128)] * parts)
    enables = {}
    for b in blocks:
        pins = b["connections"]
        lane = int(_pins(b, bits)["DIA0"][0][len("w_data["):-1]) // 64
        enables.setdefault(lane, set()).add(tuple(pins["ADA0"]))
        assert pins["ADA0"] == pins["ADA1"]
    # One enable net per (lane, part): the lanes never share one.
    assert not enables[0] & enables[1]
    # The memory's latency does not depend on the plan.
    assert memory.latency == 3


def test_inferred_memory_unless_collision_free_on_ecp5():
    # Without the promise, or off the ECP5, the memory stays an inferred
    # one (read-old semantics, simulated as such).
    assert "DP16KD" not in _ecp5_rtlil(PipelinedMemory(36, 512))
    assert "DP16KD" not in rtlil.convert(PipelinedMemory(36, 512, collision_free=True), name="top")
    # Words of up to 18 bits use the 1024-word mode, which the blocks do not cover.
    assert "DP16KD" not in _ecp5_rtlil(PipelinedMemory(16, 2048, collision_free=True))
    assert "DP16KD" in _ecp5_rtlil(PipelinedMemory(36, 512, collision_free=True))


@pytest.mark.parametrize("mode", [WIDE, DEEP], ids=["512x36", "1024x18"])
def test_lane_slices_cover_the_word_once(mode):
    for width, granularity in [(64, 64), (1152, 64), (36, 36), (100, 50), (8, 8)]:
        slices = block_ram_slices(width, granularity, mode)
        assert [bit for _, start, stop in slices for bit in range(start, stop)] == list(range(width))
        assert all(stop - start <= mode.width and start // granularity == (stop - 1) // granularity
                   for _, start, stop in slices)


def test_block_plan_never_takes_more_blocks():
    # The weight buffer of the ULX3S-85F default engine: 1024 words of
    # 1152 bits in 64-bit lanes, 72 blocks either way, one part in 18-bit blocks.
    assert block_plan(1152, 1024, 64) == (DEEP, 1)
    assert block_plan(64, 512, 64) == (WIDE, 1)
    assert block_plan(64, 1025, 64) == (WIDE, 3)
    for lane in (18, 20, 30, 36, 40, 64):
        wide = 2 * len(block_ram_slices(lane, lane, WIDE))
        assert blocks_in_parts(lane, 1024, lane) == len(block_ram_slices(lane, lane, DEEP)) <= wide
