"""A small top with the memory port, for testing the simulated board's memory model.

A copy machine: the host writes ``src``, ``dst``, ``count`` (and ``keep``)
over AXI4-Lite and pulses ``control.start``; the top reads ``count`` R-byte
words from ``src`` and writes the same bytes to ``dst`` as W-byte writes (R
words packed into one write when R < W, one read split into several writes
when R > W), then raises ``irq`` (``status.done``) until the next start.
``keep`` bit ``k % 32`` set leaves byte ``k`` of every write unwritten (a
strobe cleared), so the strobes are tested too. Reads in flight are bounded
by a FIFO of ``depth`` words: a read is requested only when its response has
a place, so ``mem_rdata.ready`` could always be high; with ``stall.enable``
it is low in pseudo-random cycles (about half), so that responses must wait.

The ports are named as the engine tops name them (``s_axil__*``,
``s_axis__*``, ``m_axis__*``, ``mem_rd__*``, ``mem_rdata__*``, ``mem_wr__*``,
``irq``, widths from :data:`fpgacnn.core.memory_port.MEMORY_PORTS`). The
streams are tied off: the board only needs them to exist.
"""

from amaranth import Cat, Module, Mux, Signal
from amaranth.back import verilog
from amaranth.lib import wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out, Signature

from fpgacnn.core.memory_port import ADDRESS_BITS
from fpgacnn.core.regmap import RegisterMapBuilder
from fpgacnn.hdl.bus.axi_lite import AXI4LiteSignature, AXI4LiteSlave
from fpgacnn.hdl.bus.csr_bank import CSRBank
from fpgacnn.hdl.bus.memory_port import (memory_fault_signature, memory_read_signature,
                                         memory_response_signature, memory_write_signature)


#: Reads in flight at most, by default (enough for a latency of 40 at one read a cycle).
DEPTH = 64


def copy_regmap():
    """The copy machine's registers (one group at 0x0)."""
    b = RegisterMapBuilder()
    b.begin_group("copy")
    b.add("src", "rw", [("addr", 32)])
    b.add("dst", "rw", [("addr", 32)])
    b.add("count", "rw", [("words", 32)])
    b.add("keep", "rw", [("mask", 32)])
    b.add("stall", "rw", [("enable", 1)])
    b.add("control", "pulse", [("start", 1)])
    b.add("status", "ro", [("busy", 1), ("done", 1)])
    return b.build()


def _axis(width):
    return Signature({"tdata": Out(width), "tvalid": Out(1), "tready": In(1), "tlast": Out(1)})


class MemoryCopyTop(wiring.Component):
    """The copy machine (see the module docstring).

    Parameters
    ----------
    read_bytes : int
        R, bytes of one memory read.
    write_bytes : int
        W, bytes of one memory write, a power of two of at least 4; W a
        multiple of R or R a multiple of W.
    depth : int
        Reads in flight at most (and the response FIFO's depth).
    """

    def __init__(self, read_bytes, write_bytes, depth=DEPTH):
        r, w = read_bytes, write_bytes
        if w % r and r % w:
            raise ValueError(f"R={r} and W={w}: one must be a multiple of the other")
        self.r, self.w, self.depth = r, w, depth
        self.regmap = copy_regmap()
        super().__init__({
            "s_axil": In(AXI4LiteSignature(12)),
            "s_axis": In(_axis(32)), "m_axis": Out(_axis(32)),
            "mem_rd": Out(memory_read_signature()),
            "mem_rdata": In(memory_response_signature(8 * r)),
            "mem_wr": Out(memory_write_signature(w)),
            "mem_fault": Out(memory_fault_signature()),
            "irq": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        r, w = self.r, self.w
        m.submodules.axil = axil = AXI4LiteSlave(addr_width=12)
        m.submodules.bank = bank = CSRBank(self.regmap)
        m.submodules.fifo = fifo = SyncFIFO(width=8 * r, depth=self.depth)
        wiring.connect(m, wiring.flipped(self.s_axil), axil.axi)
        wiring.connect(m, axil.bus, bank.bus)
        rd, rdata, wr = self.mem_rd, self.mem_rdata, self.mem_wr

        busy, done = Signal(), Signal()
        rd_addr, wr_addr = Signal(ADDRESS_BITS), Signal(ADDRESS_BITS)
        reads_left = Signal(32)
        bytes_left = Signal(40)  # bytes still to write: count * R
        used = Signal(range(self.depth + 1))  # FIFO places taken: in flight or stored
        m.d.comb += [bank.status.busy.eq(busy), bank.status.done.eq(done), self.irq.eq(done)]

        # Reads: a request only when its response has a place; its valid
        # depends on state alone, never on ready.
        m.d.comb += [rd.addr.eq(rd_addr), rd.valid.eq(busy & (reads_left != 0) & (used < self.depth))]
        rd_fire = rd.valid & rd.ready
        with m.If(rd_fire):
            m.d.sync += [rd_addr.eq(rd_addr + r), reads_left.eq(reads_left - 1)]
        lfsr = Signal(16, init=0xACE1)  # x^16 + x^14 + x^13 + x^11 + 1
        m.d.sync += lfsr.eq(Cat(lfsr[1:], lfsr[0] ^ lfsr[2] ^ lfsr[3] ^ lfsr[5]))
        m.d.comb += [rdata.ready.eq(~bank.stall.enable | lfsr[0]),
                     fifo.w_en.eq(rdata.valid & rdata.ready), fifo.w_data.eq(rdata.data)]
        pop = fifo.r_en & fifo.r_rdy
        m.d.sync += used.eq(used + rd_fire - pop)

        # Writes: W bytes assembled from R-byte words (R <= W) or cut from one (R > W).
        keep = Cat(*(bank.keep.mask[k % 32] for k in range(w)))
        m.d.comb += [wr.addr.eq(wr_addr), wr.strb.eq(~keep)]
        wr_fire = wr.valid & wr.ready
        if r <= w:
            k = w // r
            acc = Signal(8 * w)
            n = Signal(range(k + 1))  # words in acc
            m.d.comb += [wr.data.eq(acc), wr.valid.eq(n == k)]
            # A word may come in the cycle the full one is written.
            m.d.comb += fifo.r_en.eq((n < k) | wr_fire)
            slot = Signal(range(k + 1))
            m.d.comb += slot.eq(Mux(wr_fire, 0, n))
            with m.If(pop):
                m.d.sync += acc.word_select(slot, 8 * r).eq(fifo.r_data) if k > 1 else acc.eq(fifo.r_data)
            m.d.sync += n.eq(slot + pop)
        else:
            k = r // w
            hold = Signal(8 * r)
            held = Signal()
            part = Signal(range(k))
            m.d.comb += [wr.data.eq(hold.word_select(part, 8 * w)), wr.valid.eq(held)]
            last = wr_fire & (part == k - 1)
            m.d.comb += fifo.r_en.eq(~held | last)
            with m.If(wr_fire):
                m.d.sync += part.eq(Mux(part == k - 1, 0, part + 1))
            with m.If(pop):
                m.d.sync += [hold.eq(fifo.r_data), held.eq(1)]
            with m.Elif(last):
                m.d.sync += held.eq(0)
        with m.If(wr_fire):
            m.d.sync += [wr_addr.eq(wr_addr + w), bytes_left.eq(bytes_left - w)]
            with m.If(bytes_left == w):
                m.d.sync += [busy.eq(0), done.eq(1)]

        with m.If(bank.control.start & ~busy):
            m.d.sync += [rd_addr.eq(bank.src.addr), wr_addr.eq(bank.dst.addr),
                         reads_left.eq(bank.count.words), bytes_left.eq(bank.count.words * r),
                         done.eq(bank.count.words == 0), busy.eq(bank.count.words != 0)]

        # The streams are not used.
        m.d.comb += [self.s_axis.tready.eq(0), self.m_axis.tvalid.eq(0)]
        return m


def memory_copy_verilog(read_bytes, write_bytes, depth=DEPTH):
    """Verilog of :class:`MemoryCopyTop` as module ``top``."""
    return verilog.convert(MemoryCopyTop(read_bytes, write_bytes, depth), name="top")
