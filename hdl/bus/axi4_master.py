"""MemoryPortAXI4Master: the program engine's memory port as an AXI4 manager (a Zynq HP port).

The engine's reads and writes (:mod:`fpgacnn.core.memory_port`) become
narrow INCR bursts on a full AXI4 port; consecutive accesses are merged into
bursts of up to 16 beats, so that the port, which moves a beat per cycle at
most, moves one per cycle when the engine streams.
"""

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for, exact_log2

from ...core.memory_port import (ADDRESS_BITS, AXI_MAX_BURST, FAULT_KIND_BITS, FAULT_NONE,
                                  FAULT_READ, FAULT_WRITE)
from .memory_port import (AXI4Signature, memory_read_signature, memory_response_signature,
                          memory_write_signature)

__all__ = ["MemoryPortAXI4Master", "AXI_BURST_INCR", "AXI_CACHE", "AXI_RESP_OKAY",
           "AXI_PAGE_BYTES"]

#: AxBURST of every burst: INCR.
AXI_BURST_INCR = 1
#: AxCACHE of every burst: normal non-cacheable bufferable (Xilinx's advice for HP ports).
AXI_CACHE = 0b0011
#: RRESP / BRESP OKAY.
AXI_RESP_OKAY = 0
#: No burst crosses a boundary of this many bytes (AXI).
AXI_PAGE_BYTES = 4096

_DATA_WIDTHS = (32, 64, 128)


def _positive(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise TypeError(f"{name} must be a positive integer, not {value!r}")


def _power_of_two(name, value):
    _positive(name, value)
    if value & (value - 1):
        raise ValueError(f"{name} must be a power of two, not {value}")


class _Bursts:
    """Merges a stream of accesses of ``unit`` bytes into INCR bursts (logic added to ``m``).

    A burst is open while accesses continue it; it goes to a one-deep address
    register (``ax_valid``, ``ax_addr``, ``ax_len``) when it is full, when it
    ends at a 4 KiB boundary (both in the cycle of its last access), or in a
    cycle in which no access continues it: the next one is elsewhere, there is
    none, or it cannot be taken (``room`` low). The register is free for a
    new burst when it is empty or handed over (``handshake``) in this cycle.

    ``take``: the access offered this cycle (``valid``, ``addr``) is taken.
    ``is_open``: a burst is being collected.
    """

    def __init__(self, m, name, *, valid, addr, room, unit, max_burst, handshake):
        shift = exact_log2(unit)
        self.is_open = is_open = Signal(name=f"{name}_open")
        start = Signal(ADDRESS_BITS, name=f"{name}_start")
        beats = Signal(range(max_burst + 1), name=f"{name}_beats")
        expect = Signal(ADDRESS_BITS, name=f"{name}_expect")
        self.ax_valid = Signal(name=f"{name}_ax_valid")
        self.ax_addr = Signal(ADDRESS_BITS, name=f"{name}_ax_addr")
        self.ax_len = Signal(8, name=f"{name}_ax_len")
        self.take = take = Signal(name=f"{name}_take")

        free = ~self.ax_valid | handshake
        join = is_open & (addr == expect)
        # The access fills the last bytes of its 4 KiB page: its burst ends there.
        page_end = addr[shift:exact_log2(AXI_PAGE_BYTES)].all()
        fills = Mux(join, beats == max_burst - 1, int(max_burst == 1)) | page_end

        # A burst closes this cycle: it enters the address register next cycle.
        self.load = load = Signal(name=f"{name}_load")
        load_addr = Signal(ADDRESS_BITS, name=f"{name}_load_addr")
        self.load_len = load_len = Signal(8, name=f"{name}_load_len")

        def close_open():
            return [load.eq(1), load_addr.eq(start), load_len.eq(beats - 1)]

        with m.If(valid & room):
            with m.If(join):
                m.d.comb += take.eq(~fills | free)
                with m.If(take & fills):
                    m.d.comb += [load.eq(1), load_addr.eq(start), load_len.eq(beats)]
                    m.d.sync += is_open.eq(0)
                with m.Elif(take):
                    m.d.sync += [beats.eq(beats + 1), expect.eq(expect + unit)]
            with m.Else():
                with m.If(is_open):
                    # The open burst goes first; an access that would also close its own
                    # burst at once (two loads in a cycle) waits a cycle.
                    m.d.comb += take.eq(free & ~fills)
                    with m.If(free):
                        m.d.comb += close_open()
                        m.d.sync += is_open.eq(0)
                with m.Else():
                    m.d.comb += take.eq(~fills | free)
                with m.If(take & fills):
                    m.d.comb += [load.eq(1), load_addr.eq(addr), load_len.eq(0)]
                with m.Elif(take):
                    m.d.sync += [is_open.eq(1), start.eq(addr), beats.eq(1),
                                 expect.eq(addr + unit)]
        with m.Elif(is_open & free):
            # Nothing continues the burst this cycle: send it, so that a client that
            # waits for its responses before asking again is not kept waiting.
            m.d.comb += close_open()
            m.d.sync += is_open.eq(0)

        with m.If(load):
            m.d.sync += [self.ax_valid.eq(1), self.ax_addr.eq(load_addr),
                         self.ax_len.eq(load_len)]
        with m.Elif(handshake):
            m.d.sync += self.ax_valid.eq(0)


class MemoryPortAXI4Master(wiring.Component):
    """The program engine's memory port as an AXI4 manager, for a Zynq HP port.

    Every memory-port access is one beat of a narrow INCR burst of its own
    size (AxSIZE = log2 R for reads, log2 W for writes), so a beat's bytes
    sit in the byte lanes of its address (``addr mod D/8`` up). Accesses at
    consecutive addresses (``addr`` = the previous one plus R, or W) are
    merged into one burst of up to ``max_burst`` beats that never crosses a
    4 KiB boundary (an AXI rule). A burst is closed, and its address issued,
    when it is full or ends at a 4 KiB boundary (in the cycle of its last
    access), when the next access is elsewhere, or in a cycle in which no
    access continues it (none offered, or none can be taken): a client that
    waits for responses before asking again is never deadlocked, at the
    price of a short burst after every pause.

    Each direction holds a burst being collected plus one in a one-deep
    address register waiting for AxREADY, so the request side is stalled
    only when a second burst closes before the first is accepted (and for
    one cycle when, with a burst open, an access elsewhere lands in the last
    word of a page: both bursts would need the address register at once).

    Reads: the responses wait in a FIFO of ``read_depth`` entries of R bytes,
    selected out of their lanes as they arrive; a read is taken only while
    the reads taken and not yet answered to the client are fewer than
    ``read_depth``, so the FIFO always has room and ``rready`` is always high
    (the memory is never made to wait on R), and reads in flight are bounded.
    The lane of each beat follows from its burst's address (kept in a FIFO of
    bursts in flight for ``fault_addr``) and its place in the burst.

    Writes: the beats wait in a FIFO of ``write_depth`` beats (W bytes, the
    strobes and the lane); the W beats of a burst are offered from the cycle
    its AW is (AWVALID high, or taken before), with ``wlast`` on its last
    beat: never before the address, so no subordinate holds data for an
    address it has not been offered, and never waiting for AWREADY, which
    AXI lets a subordinate hold back until it sees WVALID. The data is
    repeated across all lanes (only the strobed lanes count, and it spares a
    shifter); ``wstrb`` is ``strb`` in the beat's lanes, all zero when
    ``strb`` is (a legal beat, passed on). At most ``write_depth`` bursts
    wait for their B responses.

    Reads are not ordered after writes (AXI does not order the two
    directions): a client reads back what it wrote, or reports completion,
    only once ``writes_pending`` is low.

    Constant fields: AxID 0, AxBURST INCR, AxLOCK 0, AxCACHE 0b0011 (normal
    non-cacheable bufferable, as Xilinx recommends for HP ports), AxPROT 0,
    AxQOS 0. ARVALID, AWVALID and WVALID are registers or FIFO levels, never
    functions of the ready they wait for; ``rready`` and ``bready`` are
    always high. ``mem_rd.ready`` and ``mem_wr.ready`` may depend on
    ARREADY / AWREADY in the cycle a burst is closed (the address register
    is free when it is being handed over).

    Parameters
    ----------
    read_bytes : int
        R, bytes of a memory-port read: a power of two, ``8 * R <= data_width``.
    write_bytes : int
        W, bytes of a memory-port write: a power of two, ``8 * W <= data_width``.
    data_width : int
        D, the AXI data width: 32, 64 (the Zynq HP ports' default) or 128.
    max_burst : int
        Beats of a burst, 1 to 16 (the Zynq-7000 HP ports are AXI3: 16 beats
        at most; the interconnect Vivado inserts converts AXI4 to AXI3).
    read_depth : int
        Reads in flight, at most: the depth of the response FIFO (and of the
        FIFO of read bursts in flight). Full read rate needs at least
        ``max_burst + L + 2``, for a memory whose first R beat comes ``L``
        cycles after the AR handshake (the default, 64, covers ``L`` up to
        46 with 16-beat bursts).
    write_depth : int
        Write beats buffered, at most, and write bursts awaiting B, at most.
        Full write rate needs at least ``max_burst + 2``, and as many bursts
        as are in flight from AW to B (with one-beat bursts: the B latency
        plus 3).

    Members
    -------
    mem_rd : In(memory_read_signature())
        Read requests: ``addr`` (a multiple of R), ``valid``, ``ready``.
    mem_rdata : Out(memory_response_signature(8 * read_bytes))
        Read responses in request order: ``data``, ``valid``, ``ready``.
    mem_wr : In(memory_write_signature(write_bytes))
        Writes: ``addr`` (a multiple of W), ``data``, ``strb``, ``valid``, ``ready``.
    m_axi : Out(AXI4Signature(32, data_width, 1))
        The AXI4 manager port (``m_axi__araddr`` ... in Verilog).
    writes_pending : Out(1)
        A write taken has not had its B response yet (it is being collected,
        is buffered, or is in flight): a register, high from the cycle after
        the first write taken to the cycle after the last B handshake.
    fault : Out(2)
        :data:`~fpgacnn.core.memory_port.FAULT_NONE`, ``FAULT_READ`` (an RRESP
        not OKAY) or ``FAULT_WRITE`` (a BRESP not OKAY): the first since the last
        ``clear_fault``, sticky (a read's if both come in one cycle). The
        data of a failed read is still delivered, so the client does not hang.
    fault_addr : Out(32)
        The address (AxADDR) of the burst of that first fault; 0 when none.
    clear_fault : In(1)
        Clear ``fault`` and ``fault_addr`` (a fault in the same cycle is kept).

    Raises
    ------
    TypeError
        A parameter is not an integer, or (but ``max_burst``) not positive.
    ValueError
        ``read_bytes`` or ``write_bytes`` is not a power of two or is wider
        than ``data_width``; ``data_width`` is not 32, 64 or 128;
        ``max_burst`` is not 1 to 16.

    Latency
    -------
    Reads: a burst's AR is offered the cycle after it closes; a burst closes
    in the cycle of its last read when full or at a page end, else in the
    next cycle with no read continuing it. A response is offered on
    ``mem_rdata`` the cycle after its R beat. An isolated read taken in cycle
    ``t`` is answered at ``t + 3 + L`` when the memory's first R beat for an
    AR taken in cycle ``u`` comes at ``u + L``. In steady state (consecutive
    reads, ARREADY high, the memory streaming R beats) one read is taken and
    one answered per cycle: ``N`` consecutive reads from ``t0``, a multiple
    of ``max_burst`` from a 4 KiB boundary, are answered by
    ``t0 + N + L + max_burst`` (the last burst is asked for only once its
    last read is taken, and its beats come one a cycle).

    Writes: AW is offered the cycle after the burst closes, its first W beat
    the cycle after the AW handshake; one write is taken per cycle in steady
    state while the memory takes a W beat per cycle.
    """

    def __init__(self, *, read_bytes, write_bytes, data_width=64, max_burst=AXI_MAX_BURST,
                 read_depth=64, write_depth=32):
        _power_of_two("read_bytes", read_bytes)
        _power_of_two("write_bytes", write_bytes)
        _positive("data_width", data_width)
        if data_width not in _DATA_WIDTHS:
            raise ValueError(f"data_width must be one of {_DATA_WIDTHS}, not {data_width}")
        for name, nbytes in (("read_bytes", read_bytes), ("write_bytes", write_bytes)):
            if 8 * nbytes > data_width:
                raise ValueError(f"{name} {nbytes} ({8 * nbytes} bits) is wider than "
                                 f"data_width {data_width}")
        if isinstance(max_burst, bool) or not isinstance(max_burst, int):
            raise TypeError(f"max_burst must be an integer, not {max_burst!r}")
        if not 1 <= max_burst <= AXI_MAX_BURST:
            raise ValueError(f"max_burst must be 1 to {AXI_MAX_BURST} beats (AXI3 HP ports), "
                             f"not {max_burst}")
        _positive("read_depth", read_depth)
        _positive("write_depth", write_depth)
        self._read_bytes = read_bytes
        self._write_bytes = write_bytes
        self._data_width = data_width
        self._max_burst = max_burst
        self._read_depth = read_depth
        self._write_depth = write_depth
        super().__init__({
            "mem_rd": In(memory_read_signature()),
            "mem_rdata": Out(memory_response_signature(8 * read_bytes)),
            "mem_wr": In(memory_write_signature(write_bytes)),
            "m_axi": Out(AXI4Signature(ADDRESS_BITS, data_width, 1)),
            "writes_pending": Out(1),
            "fault": Out(FAULT_KIND_BITS),
            "fault_addr": Out(ADDRESS_BITS),
            "clear_fault": In(1),
        })

    read_bytes = property(lambda self: self._read_bytes)
    write_bytes = property(lambda self: self._write_bytes)
    data_width = property(lambda self: self._data_width)
    max_burst = property(lambda self: self._max_burst)
    read_depth = property(lambda self: self._read_depth)
    write_depth = property(lambda self: self._write_depth)

    def elaborate(self, platform):
        m = Module()
        axi = self.m_axi
        R, W, D = self._read_bytes, self._write_bytes, self._data_width
        lane_lsb_bits = exact_log2(D // 8)  # address bits that pick a byte lane

        m.d.comb += [
            axi.arid.eq(0), axi.arburst.eq(AXI_BURST_INCR), axi.arlock.eq(0),
            axi.arcache.eq(AXI_CACHE), axi.arprot.eq(0), axi.arqos.eq(0),
            axi.arsize.eq(exact_log2(R)),
            axi.awid.eq(0), axi.awburst.eq(AXI_BURST_INCR), axi.awlock.eq(0),
            axi.awcache.eq(AXI_CACHE), axi.awprot.eq(0), axi.awqos.eq(0),
            axi.awsize.eq(exact_log2(W)),
            axi.rready.eq(1), axi.bready.eq(1),
        ]

        # -- reads ----------------------------------------------------------------------
        rsp_fire = self.mem_rdata.valid & self.mem_rdata.ready
        # Reads taken and not yet answered to the client: bounded by the response FIFO's
        # depth, so that every R beat finds room and rready can stay high.
        inflight = Signal(range(self._read_depth + 1))
        ar_fire = axi.arvalid & axi.arready
        rd = _Bursts(m, "rd", valid=self.mem_rd.valid, addr=self.mem_rd.addr,
                     room=inflight != self._read_depth, unit=R, max_burst=self._max_burst,
                     handshake=ar_fire)
        m.d.comb += [
            self.mem_rd.ready.eq(rd.take),
            axi.arvalid.eq(rd.ax_valid), axi.araddr.eq(rd.ax_addr), axi.arlen.eq(rd.ax_len),
        ]
        m.d.sync += inflight.eq(inflight + rd.take - rsp_fire)

        # Addresses of the read bursts in flight: the head is the burst R beats are from.
        m.submodules.read_bursts = read_bursts = SyncFIFO(width=ADDRESS_BITS,
                                                          depth=self._read_depth)
        r_fire = axi.rvalid  # rready is always high
        m.d.comb += [
            read_bursts.w_en.eq(ar_fire), read_bursts.w_data.eq(axi.araddr),
            read_bursts.r_en.eq(r_fire & axi.rlast),
        ]
        m.submodules.responses = responses = SyncFIFO(width=8 * R, depth=self._read_depth)
        lanes = D // (8 * R)
        if lanes > 1:
            # Beat i of a burst at A is at A + i*R: its lane is A's plus i, modulo the lanes.
            beat = Signal(exact_log2(lanes))
            with m.If(r_fire):
                m.d.sync += beat.eq(Mux(axi.rlast, 0, beat + 1))
            lane = Signal(exact_log2(lanes))
            m.d.comb += lane.eq(read_bursts.r_data[exact_log2(R):lane_lsb_bits] + beat)
            m.d.comb += responses.w_data.eq(axi.rdata.word_select(lane, 8 * R))
        else:
            m.d.comb += responses.w_data.eq(axi.rdata)
        m.d.comb += [
            responses.w_en.eq(r_fire),
            self.mem_rdata.valid.eq(responses.r_rdy),
            self.mem_rdata.data.eq(responses.r_data),
            responses.r_en.eq(self.mem_rdata.ready),
        ]

        # -- writes ---------------------------------------------------------------------
        w_lanes = D // (8 * W)
        w_lane_bits = exact_log2(w_lanes)
        m.submodules.write_beats = beats = SyncFIFO(width=9 * W + w_lane_bits,
                                                    depth=self._write_depth)
        # Addresses of the write bursts whose B is awaited (for fault_addr); its room
        # bounds the bursts in flight.
        m.submodules.write_bursts = write_bursts = SyncFIFO(width=ADDRESS_BITS,
                                                            depth=self._write_depth)
        # Lengths of the bursts closed whose W beats are not all sent. Each such burst
        # still has a beat in `beats`, so `write_depth` entries are enough.
        m.submodules.write_lengths = lengths = SyncFIFO(
            width=max(1, bits_for(self._max_burst - 1)), depth=self._write_depth)
        aw_fire = axi.awvalid & axi.awready
        wr = _Bursts(m, "wr", valid=self.mem_wr.valid, addr=self.mem_wr.addr,
                     room=beats.w_rdy, unit=W, max_burst=self._max_burst, handshake=aw_fire)
        w_lane = self.mem_wr.addr[exact_log2(W):lane_lsb_bits]
        m.d.comb += [
            self.mem_wr.ready.eq(wr.take),
            beats.w_en.eq(wr.take),
            beats.w_data.eq(Cat(self.mem_wr.data, self.mem_wr.strb, w_lane)),
            axi.awvalid.eq(wr.ax_valid & write_bursts.w_rdy),
            axi.awaddr.eq(wr.ax_addr), axi.awlen.eq(wr.ax_len),
            write_bursts.w_en.eq(aw_fire), write_bursts.w_data.eq(axi.awaddr),
            lengths.w_en.eq(wr.load), lengths.w_data.eq(wr.load_len),
        ]
        # A burst's W beats are offered once its AW is (AWVALID, not the handshake: a
        # subordinate may wait for WVALID before it raises AWREADY), never before.
        # `aw_lead`: bursts whose AW was taken less those whose W beats are all sent;
        # -1 when the head burst's beats went out while its AW still waits.
        aw_lead = Signal(range(-1, self._write_depth + 2))
        w_beat = Signal.like(lengths.r_data)
        head_data = beats.r_data[:8 * W]
        head_strb = beats.r_data[8 * W:9 * W]
        w_fire = axi.wvalid & axi.wready
        m.d.sync += aw_lead.eq(aw_lead + aw_fire - (w_fire & axi.wlast))
        m.d.comb += [
            axi.wvalid.eq(beats.r_rdy & lengths.r_rdy
                          & ((aw_lead > 0) | ((aw_lead == 0) & axi.awvalid))),
            axi.wdata.eq(Cat(*[head_data] * w_lanes)),
            axi.wlast.eq(w_beat == lengths.r_data),
            beats.r_en.eq(w_fire),
            lengths.r_en.eq(w_fire & axi.wlast),
        ]
        if w_lanes > 1:
            m.d.comb += axi.wstrb.word_select(beats.r_data[9 * W:], W).eq(head_strb)
        else:
            m.d.comb += axi.wstrb.eq(head_strb)
        if self._max_burst > 1:
            with m.If(w_fire):
                m.d.sync += w_beat.eq(Mux(axi.wlast, 0, w_beat + 1))
        b_fire = axi.bvalid  # bready is always high
        m.d.comb += [
            write_bursts.r_en.eq(b_fire),
            self.writes_pending.eq(wr.is_open | wr.ax_valid | write_bursts.r_rdy),
            self.mem_wr.pending.eq(self.writes_pending),
        ]

        # -- faults ---------------------------------------------------------------------
        fault = Signal(FAULT_KIND_BITS)
        fault_addr = Signal(ADDRESS_BITS)
        first = (fault == FAULT_NONE) | self.clear_fault
        with m.If(first & r_fire & (axi.rresp != AXI_RESP_OKAY)):
            m.d.sync += [fault.eq(FAULT_READ), fault_addr.eq(read_bursts.r_data)]
        with m.Elif(first & b_fire & (axi.bresp != AXI_RESP_OKAY)):
            m.d.sync += [fault.eq(FAULT_WRITE), fault_addr.eq(write_bursts.r_data)]
        with m.Elif(self.clear_fault):
            m.d.sync += [fault.eq(FAULT_NONE), fault_addr.eq(0)]
        m.d.comb += [self.fault.eq(fault), self.fault_addr.eq(fault_addr)]
        return m
