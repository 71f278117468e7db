"""One part of a :class:`~.pipelined_memory.PipelinedMemory` as ECP5 ``DP16KD`` blocks.

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

That is only correct for callers that never read a word in the cycle it is
written (the block's output is then undefined, not the old word), hence
:class:`~.pipelined_memory.PipelinedMemory`'s ``collision_free`` switch.
The blocks are used as yosys uses them for 36-bit words (pseudo dual port:
port A writes, port B reads, the word address on address pins 5-13, the
four 9-bit byte enables on port A's address pins 0-3); the test suite
checks the connections against yosys's own mapping of the same memory.
"""

import math

from amaranth.hdl import C, Cat, ClockSignal, Instance, Signal

__all__ = ["BLOCK_WIDTH", "BLOCK_DEPTH", "block_ram_slices", "blocks_in_parts",
           "ecp5_block_ram_part"]

#: Bits of one block in the 36-bit (512-word) pseudo-dual-port mode.
BLOCK_WIDTH = 36
#: Words of one block in that mode.
BLOCK_DEPTH = 512
_ADDR_LSB = 5   # word address on pins 5..13 in the 36-bit mode
_ADDR_PINS = 14


def block_ram_slices(width, granularity):
    """Bit ranges ``(lane, start, stop)`` of the blocks a ``width``-bit word is stored in.

    A block takes one write enable, so a block never straddles two write
    lanes of ``granularity`` bits: each lane is cut into blocks of
    :data:`BLOCK_WIDTH` bits on its own.
    """
    slices = []
    for lane in range(width // granularity):
        base = lane * granularity
        for start in range(0, granularity, BLOCK_WIDTH):
            slices.append((lane, base + start, base + min(start + BLOCK_WIDTH, granularity)))
    return slices


def blocks_in_parts(width, depth, granularity):
    """Blocks a ``PipelinedMemory`` of these parameters takes when built from them.

    It is split in depth into parts of :data:`BLOCK_DEPTH` words, each part
    into :func:`block_ram_slices`. Lanes not a multiple of 36 bits take more
    blocks than yosys's packing of the whole word would (1152-bit words in
    64-bit lanes: 36 blocks per part, not 32).
    """
    return math.ceil(depth / BLOCK_DEPTH) * len(block_ram_slices(width, granularity))


def _pins(prefix, value, count):
    return {f"i_{prefix}{i}": value[i] if i < len(value) else C(0) for i in range(count)}


def ecp5_block_ram_part(m, name, *, width, granularity, w_addr, w_data, w_en, r_addr):
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
        Word addresses, at most 9 bits (one block's depth, :data:`BLOCK_DEPTH`).
    w_data : amaranth value
        ``width`` bits.
    w_en : amaranth value
        One bit per lane.

    Returns
    -------
    amaranth.hdl.Signal
        The word at ``r_addr`` of two cycles before (``sync`` domain; the
        blocks' output registers hold it, no reset).
    """
    if len(w_addr) > _ADDR_PINS - _ADDR_LSB or len(r_addr) > _ADDR_PINS - _ADDR_LSB:
        raise ValueError(f"{name}: a part is at most {BLOCK_DEPTH} words deep in the 36-bit mode")
    r_data = Signal(width, name=f"{name}_q")
    for i, (lane, start, stop) in enumerate(block_ram_slices(width, granularity)):
        data_in = w_data[start:stop]
        data_out = Signal(BLOCK_WIDTH, name=f"{name}_do{i}")
        enable = w_en[lane]
        write_addr = Cat(enable.replicate(4), C(0, 1), w_addr)
        read_addr = Cat(C(0, _ADDR_LSB), r_addr)
        m.submodules[f"{name}_{i}"] = Instance(
            "DP16KD",
            p_DATA_WIDTH_A=BLOCK_WIDTH, p_DATA_WIDTH_B=BLOCK_WIDTH,
            # Both halves' output registers: in this mode the read word
            # leaves on DOA (bits 0-17) and DOB (18-35).
            p_REGMODE_A="OUTREG", p_REGMODE_B="OUTREG",
            p_RESETMODE="SYNC", p_ASYNC_RESET_RELEASE="SYNC",
            p_CSDECODE_A="0b000", p_CSDECODE_B="0b000",
            p_CLKAMUX="CLKA", p_CLKBMUX="CLKB", p_GSR="DISABLED",
            i_CLKA=ClockSignal(), i_CLKB=ClockSignal(),
            i_CEA=C(1), i_CEB=C(1), i_OCEA=C(1), i_OCEB=C(1),
            i_WEA=C(1), i_WEB=C(0), i_RSTA=C(0), i_RSTB=C(0),
            i_CSA0=C(0), i_CSA1=C(0), i_CSA2=C(0), i_CSB0=C(0), i_CSB1=C(0), i_CSB2=C(0),
            **_pins("ADA", write_addr, _ADDR_PINS),
            **_pins("ADB", read_addr, _ADDR_PINS),
            **_pins("DIA", data_in[:18], 18),
            **_pins("DIB", data_in[18:], 18),
            **{f"o_DOA{b}": data_out[b] for b in range(18)},
            **{f"o_DOB{b}": data_out[18 + b] for b in range(18)},
        )
        m.d.comb += r_data[start:stop].eq(data_out[:stop - start])
    return r_data
