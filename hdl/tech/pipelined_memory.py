"""A block-RAM memory whose read data is registered right behind each block.

An ECP5 ``DP16KD`` takes about 6 ns from its clock to its output when its
own output register is not used, and yosys neither uses that register nor
keeps a deep memory's word select (the multiplexer over the blocks stacked
in depth) away from the output: a read followed by any logic then misses
100 MHz. :class:`PipelinedMemory` splits the memory in depth into parts of
at most one block's depth, registers every part's read data (a flip-flop
that nextpnr places beside its block) and selects the part after that
register, from a registered copy of the address. The read thus takes two
cycles, with the part multiplexer at the start of the second. Where the
caller never uses a read that meets a write (``collision_free``), an ECP5
build instantiates the blocks with their own output registers instead
(:mod:`.ecp5_block_ram`): same latency, 4.6 ns less from the clock.
"""

from amaranth.hdl import Array, Module, Signal, unsigned
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ...core.contract import (MEMORY_READ_LATENCY, memory_latency, memory_part_depth,
                              memory_parts)
from .dsp import is_ecp5
from .ecp5_block_ram import DEEP, WIDE, block_plan, ecp5_block_ram_part
from .register_copies import register_copy

__all__ = ["PipelinedMemory", "MemoryPorts", "parts", "part_depth", "memory_latency", "in_ecp5_blocks"]


# Parts, part depth and read latency are the engine contract's (the
# latencies of the blocks built from these memories follow from them).
parts = memory_parts
part_depth = memory_part_depth


def in_ecp5_blocks(width):
    """Whether a ``collision_free`` memory of ``width``-bit words is built from ``DP16KD`` instances on ECP5.

    Words wider than 18 bits (parts of the blocks' 512 x 36 depth); narrower
    words stay inferred memories.
    """
    return part_depth(width) == WIDE.depth


class PipelinedMemory(wiring.Component):
    """One write port, one read port; read data two cycles after the address.

    Parameters
    ----------
    width : int
        Bits per word.
    depth : int
        Words.
    granularity : int, optional
        Bits per write-enable lane (default: the whole word).
    register_output : bool
        Register the selected word too (a third cycle), for users with logic
        of their own right behind the read. Without parts to select from
        (one block's depth), there is nothing to register and the read
        takes two cycles regardless.
    register_write : bool
        Register the write port's inputs: a write lands a cycle after it is
        presented (for writers whose handshake logic is deep, in front of
        block RAMs spread over the die).
    collision_free : bool
        The caller promises never to use a read of a word made in the
        cycle its write lands (:attr:`write_latency` counted): what such a
        read returns is then left undefined, which lets an ECP5 build put
        words wider than 18 bits in ``DP16KD`` blocks with their own output
        registers (see :mod:`.ecp5_block_ram`). Elsewhere, and in
        simulation, the read returns the old word either way.

    Members
    -------
    w_addr : In(range(depth))
    w_data : In(width)
    w_en : In(width // granularity)
    r_addr : In(range(depth))
    r_data : Out(width)
        The word at ``r_addr`` of :attr:`latency` cycles before (a write in
        the first of them is not seen: the parts' read ports are not
        transparent).

    Latency
    -------
    :attr:`latency` = 2: the block's read, the register behind it; 3 with
    ``register_output`` and more than one part.
    """

    #: The latency without ``register_output``.
    LATENCY = MEMORY_READ_LATENCY

    def __init__(self, width, depth, *, granularity=None, register_output=False,
                 register_write=False, collision_free=False):
        granularity = width if granularity is None else granularity
        self._register_write = register_write
        self._collision_free = collision_free
        if width % granularity:
            raise ValueError(f"width {width} is not a multiple of granularity {granularity}")
        self._width, self._depth, self._granularity = width, depth, granularity
        self._register_output = register_output and self.parts > 1
        super().__init__({
            "w_addr": In(range(depth)),
            "w_data": In(width),
            "w_en": In(width // granularity),
            "r_addr": In(range(depth)),
            "r_data": Out(width),
        })

    @property
    def latency(self):
        return memory_latency(self._width, self._depth, register_output=self._register_output)

    @property
    def write_latency(self):
        """Cycles from presenting a write to the memory holding it: 1 with ``register_write``, else 0."""
        return int(self._register_write)

    @property
    def parts(self):
        """Memories the words are split over, in depth."""
        return parts(self._width, self._depth)

    def elaborate(self, platform):
        m = Module()
        per_part = part_depth(self._width) if self.parts > 1 else self._depth
        low_bits = (per_part - 1).bit_length() if self.parts > 1 else len(self.w_addr)
        w_addr, w_data, w_en = self.w_addr, self.w_data, self.w_en
        if self._register_write:
            # Copies of their own: memories written with the same word
            # (the line buffer's banks) would otherwise share one register
            # routed to all of their block RAMs.
            w_addr = register_copy(m, self.w_addr, "w_addr_q")
            w_data = register_copy(m, self.w_data, "w_data_q")
            w_en = register_copy(m, self.w_en, "w_en_q", reset_less=False)
        in_blocks = self._collision_free and is_ecp5(platform) and in_ecp5_blocks(self._width)
        if in_blocks and block_plan(self._width, self._depth, self._granularity)[0] is DEEP:
            # One part of 18-bit blocks: no parts to select from, the same
            # latency (the select's register kept with register_output).
            q = ecp5_block_ram_part(m, "part0", width=self._width, granularity=self._granularity,
                                    w_addr=w_addr, w_data=w_data, w_en=w_en,
                                    r_addr=self.r_addr, mode=DEEP)
            if self._register_output:
                out = Signal(self._width, name="r_data_q", reset_less=True)
                m.d.sync += out.eq(q)
                q = out
            m.d.comb += self.r_data.eq(q)
            return m
        outputs = []
        for i in range(self.parts):
            en = w_en
            if self.parts > 1:
                en = en & ((w_addr >> low_bits) == i).replicate(len(en))
            if in_blocks:
                outputs.append(ecp5_block_ram_part(
                    m, f"part{i}", width=self._width, granularity=self._granularity,
                    w_addr=w_addr[:low_bits], w_data=w_data, w_en=en,
                    r_addr=self.r_addr[:low_bits]))
                continue
            words = min(per_part, self._depth - i * per_part)
            mem = m.submodules[f"part{i}"] = Memory(shape=self._width, depth=words, init=[])
            wr = mem.write_port(granularity=self._granularity)
            rd = mem.read_port()
            m.d.comb += [wr.addr.eq(w_addr[:low_bits]), wr.data.eq(w_data),
                         wr.en.eq(en), rd.addr.eq(self.r_addr[:low_bits])]
            # No reset: the caller's valid says when the data matters.
            q = Signal(self._width, name=f"part{i}_q", reset_less=True)
            m.d.sync += q.eq(rd.data)
            outputs.append(q)
        if self.parts == 1:
            m.d.comb += self.r_data.eq(outputs[0])
        else:
            # The part of the address of two cycles before.
            # (Registers of this memory's own, beside its parts.)
            part = Signal(range(self.parts), name="r_part")
            m.d.comb += part.eq(self.r_addr >> low_bits)
            sel1 = register_copy(m, part, "part_sel1")
            sel2 = register_copy(m, sel1, "part_sel2")
            if self._register_output:
                out = Signal(self._width, name="r_data_q", reset_less=True)
                m.d.sync += out.eq(Array(outputs)[sel2])
                m.d.comb += self.r_data.eq(out)
            else:
                m.d.comb += self.r_data.eq(Array(outputs)[sel2])
        return m


class MemoryPorts:
    """A memory added to ``m`` as ``name``, by the same port names either way.

    ``pipelined``: a :class:`PipelinedMemory` (read data two cycles after the
    address); else a plain Amaranth memory (one cycle; ``register_write``
    only applies to the pipelined one). Attributes ``w_addr``, ``w_data``,
    ``w_en``, ``r_addr``, ``r_data``, ``latency``, ``write_latency``.
    """

    def __init__(self, m, name, width, depth, *, pipelined, granularity=None,
                 register_output=False, register_write=False, collision_free=False):
        if pipelined:
            mem = m.submodules[name] = PipelinedMemory(width, depth, granularity=granularity,
                                                       register_output=register_output,
                                                       register_write=register_write,
                                                       collision_free=collision_free)
            self.w_addr, self.w_data, self.w_en = mem.w_addr, mem.w_data, mem.w_en
            self.r_addr, self.r_data = mem.r_addr, mem.r_data
            self.latency, self.write_latency = mem.latency, mem.write_latency
        else:
            mem = m.submodules[name] = Memory(shape=unsigned(width), depth=depth, init=[])
            # Ports bound to names, so the netlist does not call them "$signature".
            wport, rport = mem.write_port(granularity=granularity), mem.read_port()
            self.w_addr, self.w_data, self.w_en = wport.addr, wport.data, wport.en
            self.r_addr, self.r_data = rport.addr, rport.data
            self.latency, self.write_latency = 1, 0
