"""A :class:`~.pipelined_memory.PipelinedMemory` as ECP5 ``DP16KD`` blocks.

Yosys maps an inferred memory onto ``DP16KD`` blocks with their output
registers off (``REGMODE = "NOREG"``): a read then takes about 5.6 ns from
the clock to the block's output pins (nextpnr's timing model, speed 6), and
the flip-flop the memory's read data is registered in sits after that,
wherever the placer puts it. Worse, for a read port that is not transparent
yosys adds a read-during-write bypass (an address compare and a multiplexer
per bit) between the block and that register, because the block itself
cannot return the old word when both ports meet. With the block's own
output register (``REGMODE = "OUTREG"``) the data leave the block 0.97 ns
after the clock: the register behind the block moves into it, and the
bypass goes away.

That is only correct for callers that never use a read made as the word is
written (the block's output is then undefined, not the old word), hence
:class:`~.pipelined_memory.PipelinedMemory`'s ``collision_free`` switch.

Two of the block's modes are used, as yosys uses them (the test suite
checks every pin against yosys's own mapping of the same memory):

- 512 x 36 (pseudo dual port): port A writes 36 bits (DIA, DIB), port B
  reads them (DOA, DOB); the word address on address pins 5-13, the four
  9-bit byte enables on port A's pins 0-3.
- 1024 x 18 (true dual port, port A writing, port B reading): the address
  on pins 4-13, the two byte enables on port A's pins 0-1 and WEA.

A block takes one write enable per byte group, so each write lane of a
word is cut into blocks of its own. A memory of 513 to 1024 words is built
in the 18-bit mode, which takes no more blocks than two 36-bit parts
(64-bit lanes: 4 blocks either way): one part, so no multiplexer over parts
and no part select fanning out to every bit of the word (the weight
buffer's was the most congested net of the 85F build).
"""

import math
from dataclasses import dataclass

from amaranth.hdl import C, Cat, ClockSignal, Instance, Signal

__all__ = ["BlockMode", "WIDE", "DEEP", "block_plan", "block_ram_slices", "blocks_in_parts",
           "ecp5_block_ram_part"]

_ADDR_PINS = 14


@dataclass(frozen=True)
class BlockMode:
    """One aspect ratio of a ``DP16KD``: ``depth`` words of ``width`` bits."""
    width: int
    depth: int

    @property
    def addr_lsb(self):
        """First address pin of the word address (the pins below select within 36 bits)."""
        return _ADDR_PINS - (self.depth - 1).bit_length()


#: The 36-bit, 512-word pseudo-dual-port mode.
WIDE = BlockMode(36, 512)
#: The 18-bit, 1024-word mode.
DEEP = BlockMode(18, 1024)


def block_ram_slices(width, granularity, mode=WIDE):
    """Bit ranges ``(lane, start, stop)`` of the blocks a ``width``-bit word is stored in.

    A block takes one write enable, so a block never straddles two write
    lanes of ``granularity`` bits: each lane is cut into blocks of
    ``mode.width`` bits on its own.
    """
    slices = []
    for lane in range(width // granularity):
        base = lane * granularity
        for start in range(0, granularity, mode.width):
            slices.append((lane, base + start, base + min(start + mode.width, granularity)))
    return slices


def block_plan(width, depth, granularity):
    """``(mode, parts)``: how a memory of these parameters is built from blocks.

    Parts of :data:`WIDE`'s 512 words; one :data:`DEEP` part instead for
    513 to 1024 words, which never takes more blocks (``ceil(lane/18) <=
    2*ceil(lane/36)``) and needs no part select.
    """
    if WIDE.depth < depth <= DEEP.depth:
        return DEEP, 1
    return WIDE, math.ceil(depth / WIDE.depth)


def blocks_in_parts(width, depth, granularity):
    """Blocks a ``PipelinedMemory`` of these parameters takes when built from them.

    Lanes not a multiple of the block's width take more blocks than yosys's
    packing of the whole word would (1152-bit words in 64-bit lanes: 72
    blocks per 1024 words, not 64).
    """
    mode, parts = block_plan(width, depth, granularity)
    return parts * len(block_ram_slices(width, granularity, mode))


def _pins(prefix, value, count):
    return {f"i_{prefix}{i}": value[i] if i < len(value) else C(0) for i in range(count)}


def ecp5_block_ram_part(m, name, *, width, granularity, w_addr, w_data, w_en, r_addr,
                        mode=WIDE):
    """Add the blocks of one memory part to ``m``; return its registered read data.

    Parameters
    ----------
    m : amaranth.hdl.Module
        Module the blocks are added to (as submodules ``{name}_{i}``).
    name : str
        Prefix of the blocks' names.
    width, granularity : int
        Bits per word and per write-enable lane (``width`` a multiple of it).
    w_addr, r_addr : amaranth values
        Word addresses, at most ``mode.depth`` words.
    w_data : amaranth value
        ``width`` bits.
    w_en : amaranth value
        One bit per lane.
    mode : BlockMode
        :data:`WIDE` or :data:`DEEP`.

    Returns
    -------
    amaranth.hdl.Signal
        The word at ``r_addr`` of two cycles before (``sync`` domain; the
        blocks' output registers hold it, no reset).
    """
    if mode not in (WIDE, DEEP):
        raise ValueError(f"{name}: mode must be WIDE or DEEP, not {mode!r}")
    if max(len(w_addr), len(r_addr)) > _ADDR_PINS - mode.addr_lsb:
        raise ValueError(f"{name}: a part is at most {mode.depth} words deep in the "
                         f"{mode.width}-bit mode")
    r_data = Signal(width, name=f"{name}_q")
    read_addr = Cat(C(0, mode.addr_lsb), r_addr)
    for i, (lane, start, stop) in enumerate(block_ram_slices(width, granularity, mode)):
        data_in = w_data[start:stop]
        data_out = Signal(mode.width, name=f"{name}_do{i}")
        enable = w_en[lane]
        if mode is WIDE:
            # Four byte enables; the read word leaves on DOA (bits 0-17)
            # and DOB (18-35), so both halves' output registers are on.
            write_addr = Cat(enable.replicate(4), C(0, 1), w_addr)
            ports = dict(i_WEA=C(1), p_REGMODE_A="OUTREG", i_OCEA=C(1),
                         **{f"o_DOA{b}": data_out[b] for b in range(18)},
                         **{f"o_DOB{b}": data_out[18 + b] for b in range(18)},
                         **_pins("DIB", data_in[18:], 18))
        else:
            # Two byte enables and the write enable; port B reads on DOB.
            write_addr = Cat(enable.replicate(2), C(0, 2), w_addr)
            ports = dict(i_WEA=enable, p_REGMODE_A="NOREG", i_OCEA=C(1),
                         p_WRITEMODE_A="READBEFOREWRITE", p_WRITEMODE_B="READBEFOREWRITE",
                         **{f"o_DOB{b}": data_out[b] for b in range(18)},
                         **_pins("DIB", C(0, 0), 18))
        m.submodules[f"{name}_{i}"] = Instance(
            "DP16KD",
            p_DATA_WIDTH_A=mode.width, p_DATA_WIDTH_B=mode.width, p_REGMODE_B="OUTREG",
            p_RESETMODE="SYNC", p_ASYNC_RESET_RELEASE="SYNC",
            p_CSDECODE_A="0b000", p_CSDECODE_B="0b000",
            p_CLKAMUX="CLKA", p_CLKBMUX="CLKB", p_GSR="DISABLED",
            i_CLKA=ClockSignal(), i_CLKB=ClockSignal(),
            i_CEA=C(1), i_CEB=C(1), i_OCEB=C(1), i_WEB=C(0), i_RSTA=C(0), i_RSTB=C(0),
            i_CSA0=C(0), i_CSA1=C(0), i_CSA2=C(0), i_CSB0=C(0), i_CSB1=C(0), i_CSB2=C(0),
            **_pins("ADA", write_addr, _ADDR_PINS),
            **_pins("ADB", read_addr, _ADDR_PINS),
            **_pins("DIA", data_in[:18], 18),
            **ports,
        )
        m.d.comb += r_data[start:stop].eq(data_out[:stop - start])
    return r_data
