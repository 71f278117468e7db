"""ProgramEngine: the engine that runs a network program from board memory (issue 16).

The top for boards with memory (the simulated board; on the Zynq boards inside
:class:`~fpgacnn.hdl.program.zynq_top.ZynqProgramTop`, with an AXI4 master):
the :class:`~fpgacnn.hdl.engine.ConvEngine` unchanged, behind the
:class:`~fpgacnn.hdl.program.sequencer.Sequencer`, the
:class:`~fpgacnn.hdl.program.pixel_reader.PixelReader` and the
:class:`~fpgacnn.hdl.program.pixel_writer.PixelWriter`::

    s_axil --> AXI4-Lite slave --+--> sequencer registers (0x800 up)
                                 +--> engine registers  <--+-- sequencer (while it owns them)
    s_axis --+------------------------> engine --+--------------> m_axis
             |   (host runs: idle)               |
    memory --+--> pixel reader --> (program) ----+--> pixel writer --> fused Add --> memory
             +--> b (a fused Add's other operand) -----------------------^
             +--> vector unit (Add, pools, copy) -----------------> memory
             +--> record fetch --> sequencer --> counters ---------> memory

While the sequencer is idle the top is the ConvEngine as the host knows it
(the same registers, ID ROM and streams: per-run mode, and the runs the host
does for a program). While it owns the engine, the engine's streams are the
reader's and the writer's and the DMA ports are held off (``s_axis.tready``
and ``m_axis.tvalid`` low).

A run whose record enables the fused Add
(:class:`~fpgacnn.hdl.program.fused_add.FusedAdd`, where
:func:`~fpgacnn.core.fused_add_fields.has_fused_add`) writes a residual Add's
output instead of its own, reading the Add's other operand on the read port
beside the reader's reads (the reader first; a tag per read routes the
responses).

The memory interface is :mod:`fpgacnn.core.memory_port`'s: reads of ``R``
bytes (the beat, or ``pin`` where that is wider) at R-aligned byte
addresses, writes of ``W`` bytes with strobes. ``seq_memory`` must be a
multiple of ``R``.
"""

from amaranth.back import verilog
from amaranth.hdl import Cat, Module, Mux, ResetInserter, Signal
from amaranth.lib.fifo import SyncFIFO
from amaranth.utils import exact_log2
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ...core.config import require_config
from ...core.fused_add_fields import has_fused_add
from ...core.fused_block import depthwise_on_vector_lanes
from ...core.memory_port import ADDRESS_BITS, read_bytes, words_per_read, write_bytes
from ...core.program_products import PROGRAM_WHOLE_MULTIPLIER
from ...core.regmap import ADDR_WIDTH
from ...core.sequencer import SEQUENCER_BASE, build_sequencer_regmap, record_bytes
from ..bus.axi_lite import AXI4LiteSignature, AXI4LiteSlave
from ..bus.axi_stream import AXI4StreamSignature
from ..bus.csr_bank import CSRBank
from ..bus.memory_port import (memory_fault_signature, memory_read_signature,
                               memory_response_signature, memory_write_signature)
from ..engine import ConvEngine
from ..verilog import PROGRAM_TOP_NAME
from .fused_add import FusedAdd
from .pixel_reader import PixelReader
from .pixel_writer import PixelWriter
from .sequencer import Sequencer
from .vector_unit import VectorUnit

__all__ = ["ProgramEngine", "program_engine_verilog"]


class ProgramEngine(wiring.Component):
    """The convolution engine with its own program sequencer and memory port.

    Parameters
    ----------
    config : EngineConfig
    outstanding : int
        Memory reads the pixel reader keeps in flight, at most (its
        ``outstanding``): full rate needs the memory's latency plus 3.

    Members
    -------
    s_axil : In(AXI4LiteSignature(ADDR_WIDTH, 32))
        The engine's registers (:func:`fpgacnn.core.regmap.build_regmap`) and
        the sequencer's (:func:`fpgacnn.core.sequencer.build_sequencer_regmap`).
    s_axis, m_axis
        The engine's streams for runs the host makes (as ConvEngine's).
    mem_rd : Out(memory_read_signature())
        Read requests (every address is ``seq_memory`` plus an offset into
        the program image): ``addr``, ``valid``, ``ready``.
    mem_rdata : In(memory_response_signature(8 * R))
        Read responses in request order: ``data`` (``R`` bytes), ``valid``,
        ``ready``.
    mem_wr : Out(memory_write_signature(W))
        Writes: ``addr``, ``data``, ``strb`` (``W`` bytes), ``valid``, ``ready``;
        ``pending`` (in): writes taken and not yet done, which the sequencer
        waits for between records and before it stops.
    mem_fault : Out(memory_fault_signature())
        The memory's first failed access: ``kind``
        (:data:`~fpgacnn.core.memory_port.FAULT_READ` or ``FAULT_WRITE``),
        ``addr``; ``clear`` (out) forgets it. Shown in ``seq_fault`` and
        ``seq_fault_addr``, cleared with ``seq_control.clear_fault``.
    irq : Out(1)
        The sequencer stopped since its last start.
    """

    def __init__(self, config, *, outstanding=64):
        require_config(config)
        self._config = config
        self._outstanding = outstanding
        self._seq_regmap = build_sequencer_regmap(config)
        super().__init__({
            "s_axil": In(AXI4LiteSignature(ADDR_WIDTH, 32)),
            "s_axis": In(AXI4StreamSignature(config.stream_width)),
            "m_axis": Out(AXI4StreamSignature(config.stream_width)),
            "mem_rd": Out(memory_read_signature()),
            "mem_rdata": In(memory_response_signature(8 * read_bytes(config))),
            "mem_wr": Out(memory_write_signature(write_bytes(config))),
            "mem_fault": Out(memory_fault_signature()),
            "irq": Out(1),
        })

    @property
    def config(self):
        return self._config

    def elaborate(self, platform):
        cfg = self._config
        m = Module()
        m.submodules.axil = axil = AXI4LiteSlave(addr_width=ADDR_WIDTH)
        # The fused block's depthwise half requantizes on the vector unit's lanes
        # where it can (no DSP blocks of its own: the XC7Z020 has too few).
        lent = depthwise_on_vector_lanes(cfg)
        # Its tops are Zynq's: the requantizers' products as DSP48s' 25 x 18 ones.
        m.submodules.engine = engine = ConvEngine(cfg, register_bus=True, lent_lanes=lent,
                                                  whole_multiplier=PROGRAM_WHOLE_MULTIPLIER)
        m.submodules.seq_csr = csr = CSRBank(self._seq_regmap)
        m.submodules.sequencer = seq = Sequencer(cfg)
        reader_core = PixelReader(cfg, outstanding=self._outstanding)
        writer_core = PixelWriter(cfg)
        vector = VectorUnit(cfg, outstanding=self._outstanding)
        fused = has_fused_add(cfg)
        # An abort clears the reader, the writer, the fused Add and the vector unit
        # with the engine's soft reset.
        m.submodules.reader = ResetInserter(seq.clear)(reader_core)
        m.submodules.writer = ResetInserter(seq.clear)(writer_core)
        m.submodules.vector = ResetInserter(seq.clear)(vector)
        if fused:
            add = FusedAdd(cfg, outstanding=self._outstanding)
            m.submodules.fused_add = ResetInserter(seq.clear)(add)
        reader, writer = reader_core, writer_core
        wiring.connect(m, wiring.flipped(self.s_axil), axil.axi)

        # -- registers: the sequencer's above SEQUENCER_BASE, the engine's below ----------
        host = axil.bus
        upper = SEQUENCER_BASE >> 2
        w_seq, r_seq = host.w_addr >= upper, host.r_addr >= upper
        m.d.comb += [
            csr.bus.w_stb.eq(host.w_stb & w_seq), csr.bus.w_addr.eq(host.w_addr),
            csr.bus.w_data.eq(host.w_data), csr.bus.w_strb.eq(host.w_strb),
            csr.bus.r_stb.eq(host.r_stb & r_seq), csr.bus.r_addr.eq(host.r_addr),
        ]
        with m.If(seq.owns):
            m.d.comb += [
                engine.bus.w_stb.eq(seq.engine.w_stb), engine.bus.w_addr.eq(seq.engine.w_addr),
                engine.bus.w_data.eq(seq.engine.w_data), engine.bus.w_strb.eq(seq.engine.w_strb),
                engine.bus.r_stb.eq(seq.engine.r_stb), engine.bus.r_addr.eq(seq.engine.r_addr),
            ]
        with m.Else():
            m.d.comb += [
                engine.bus.w_stb.eq(host.w_stb & ~w_seq), engine.bus.w_addr.eq(host.w_addr),
                engine.bus.w_data.eq(host.w_data), engine.bus.w_strb.eq(host.w_strb),
                engine.bus.r_stb.eq(host.r_stb & ~r_seq), engine.bus.r_addr.eq(host.r_addr),
            ]
        m.d.comb += [
            seq.engine.r_data.eq(engine.bus.r_data),
            # The host reads the engine only while it is the host's (else 0).
            host.r_data.eq(Mux(r_seq, csr.bus.r_data, Mux(seq.owns, 0, engine.bus.r_data))),
        ]
        m.d.comb += [
            seq.table.eq(csr.seq_table.value),
            seq.first.eq(csr.seq_range.first), seq.count.eq(csr.seq_range.count),
            seq.start.eq(csr.seq_control.start), seq.abort.eq(csr.seq_control.abort),
            csr.seq_status.busy.eq(seq.busy), csr.seq_status.done.eq(seq.done),
            csr.seq_status.host.eq(seq.host), csr.seq_status.error.eq(seq.error),
            csr.seq_status.index.eq(seq.index), csr.seq_cycles.value.eq(seq.cycles),
            self.irq.eq(seq.stopped),
            seq.writes_pending.eq(self.mem_wr.pending),
            csr.seq_fault.kind.eq(self.mem_fault.kind),
            csr.seq_fault_addr.value.eq(self.mem_fault.addr),
            self.mem_fault.clear.eq(csr.seq_control.clear_fault),
        ]

        # -- the reader and the writer ------------------------------------------------
        m.d.comb += [
            reader.fields.eq(seq.reader_fields), reader.start.eq(seq.reader_start),
            seq.reader_issued.eq(reader.issued), seq.reader_valid.eq(reader.o_stream.valid),
            seq.reader_done.eq(reader.done),
            writer.fields.eq(seq.writer_fields), writer.start.eq(seq.writer_start),
            vector.fields.eq(seq.vector_fields), vector.start.eq(seq.vector_start),
            seq.vector_done.eq(vector.done),
            seq.vector_counters.eq(Cat(vector.busy_cycles, vector.stall_in_cycles,
                                       vector.stall_out_cycles)),
        ]

        # The writer's writes go through the fused Add (unchanged where a record does not
        # enable it); the run's writes are done when its are.
        if fused:
            m.d.comb += [add.fields.eq(seq.add_fields), add.writer_done.eq(writer.done),
                         seq.writer_done.eq(add.done)]
            wiring.connect(m, writer.o_write, add.i_write)
            # The Add computes on the vector unit's lanes, idle while a convolution runs.
            wiring.connect(m, add.lanes, vector.lanes)
            writes = add.o_write
        else:
            m.d.comb += seq.writer_done.eq(writer.done)
            writes = writer.o_write
        if lent:
            # (a convolution leaves the vector unit idle)
            wiring.connect(m, engine.dw_lanes, vector.dw_lanes)

        # -- streams: the host's DMA, or the program's reader and writer --------------------
        with m.If(seq.owns):
            m.d.comb += [
                engine.s_axis.tdata.eq(reader.o_stream.payload),
                engine.s_axis.tvalid.eq(reader.o_stream.valid),
                reader.o_stream.ready.eq(engine.s_axis.tready),
                writer.i_stream.payload.eq(engine.m_axis.tdata),
                writer.i_stream.valid.eq(engine.m_axis.tvalid),
                engine.m_axis.tready.eq(writer.i_stream.ready),
            ]
        with m.Else():
            m.d.comb += [
                engine.s_axis.tdata.eq(self.s_axis.tdata),
                engine.s_axis.tvalid.eq(self.s_axis.tvalid),
                engine.s_axis.tlast.eq(self.s_axis.tlast),
                self.s_axis.tready.eq(engine.s_axis.tready),
                self.m_axis.tdata.eq(engine.m_axis.tdata),
                self.m_axis.tlast.eq(engine.m_axis.tlast),
                self.m_axis.tvalid.eq(engine.m_axis.tvalid),
                engine.m_axis.tready.eq(self.m_axis.tready),
            ]

        # -- memory reads: the record fetch, the pixel reader or the vector unit (one at a
        # time: the primary client), and the fused Add's reads of b beside them --------------
        pin, rb = cfg.pin, read_bytes(cfg)
        image = csr.seq_memory.value  # every address is an offset into the image (R-aligned)
        # Reads in flight: the reader's or the vector unit's (at most `outstanding`) or a
        # record fetch's (all of its words at once), never two of them but after an abort,
        # and the fused Add's (at most `outstanding`).
        fetch_words = record_bytes(cfg) // pin
        most = self._outstanding * (2 if fused else 1) + fetch_words
        inflight = Signal(range(most + 1))
        req_fire = self.mem_rd.valid & self.mem_rd.ready
        rsp_fire = self.mem_rdata.valid & self.mem_rdata.ready
        m.d.sync += inflight.eq(inflight + req_fire - rsp_fire)
        m.d.comb += seq.drained.eq((inflight == 0) & ~req_fire)

        # Clients ask for pin-byte words; the port reads R bytes at R-aligned addresses
        # (R: the beat, where pin is narrower). Each read's word within its R bytes goes
        # into a FIFO as the read is taken and shifts its response down when it comes
        # back (responses are in order), so a client finds its word in the low bytes; a
        # wide read of the pixel reader is R-aligned and keeps all R, as do the fused
        # Add's reads. The same FIFO holds each read's client (the fused Add's or the
        # primary's), which routes its response.
        per_read = words_per_read(cfg)
        lane_bits = exact_log2(per_read) if per_read > 1 else 0
        req_byte = Signal(ADDRESS_BITS)
        req_lane = Signal(max(lane_bits, 1))
        req_add = Signal()  # the read taken this cycle is the fused Add's
        rsp_lane = Signal(max(lane_bits, 1))
        rsp_add = Signal()
        if lane_bits or fused:
            m.submodules.read_tags = tags = SyncFIFO(width=lane_bits + 1, depth=most)
            m.d.comb += [
                tags.w_en.eq(req_fire), tags.w_data.eq(Cat(req_lane[:lane_bits], req_add)),
                tags.r_en.eq(rsp_fire),
                rsp_add.eq(tags.r_data[lane_bits]),
            ]
            if lane_bits:
                m.d.comb += [req_lane.eq(req_byte[exact_log2(pin):exact_log2(rb)]),
                             rsp_lane.eq(tags.r_data[:lane_bits])]
        rsp_data = Signal(8 * rb)
        primary_valid = Signal()  # the primary client asks for a read
        m.d.comb += self.mem_rd.valid.eq(primary_valid)
        m.d.comb += rsp_data.eq(self.mem_rdata.data >> (rsp_lane * (8 * pin)))

        def read_port(o_addr, i_data, hold=None):
            """The memory's read port to a primary client's requests (word addresses)
            and responses; ``hold`` keeps its requests back (an abort)."""
            valid, ready = o_addr.valid, self.mem_rd.ready
            if hold is not None:
                valid, ready = valid & ~hold, ready & ~hold
            return [
                req_byte.eq(image + o_addr.payload * pin),
                # The R bytes around the word; where R is pin (which need not be a
                # power of two) the word's own address.
                self.mem_rd.addr.eq(req_byte & ~(rb - 1) if per_read > 1 else req_byte),
                primary_valid.eq(valid),
                o_addr.ready.eq(ready),
                i_data.payload.eq(rsp_data),
                i_data.valid.eq(self.mem_rdata.valid & ~rsp_add),
                self.mem_rdata.ready.eq(i_data.ready),
            ]

        with m.If(seq.fetching):
            m.d.comb += read_port(seq.fetch_addr, seq.fetch_data, hold=seq.clear)
        with m.Elif(seq.vector_active):
            m.d.comb += read_port(vector.o_addr, vector.i_data)
        with m.Else():
            m.d.comb += read_port(reader.o_addr, reader.i_data)
        if fused:
            # The fused Add's reads go where the primary client asks for none, and before
            # the record fetch's (which starts while the run's writes still come: the
            # engine waits for none of its reads); the reader goes first, so a run's
            # input keeps its pace and the Add's reads wait in its pending FIFO.
            b_req = add.o_addr.valid & ~seq.clear
            add_turn = b_req & (seq.fetching | ~primary_valid)
            with m.If(add_turn):
                m.d.comb += [
                    req_byte.eq(image + add.o_addr.payload),
                    self.mem_rd.addr.eq(image + add.o_addr.payload),
                    self.mem_rd.valid.eq(1),
                    req_add.eq(1),
                ]
                # The primary waits this cycle.
                for client in (seq.fetch_addr, vector.o_addr, reader.o_addr):
                    m.d.comb += client.ready.eq(0)
            m.d.comb += [
                add.o_addr.ready.eq(self.mem_rd.ready & add_turn),
                add.i_data.payload.eq(self.mem_rdata.data),
                add.i_data.valid.eq(self.mem_rdata.valid & rsp_add),
            ]
            with m.If(rsp_add):
                m.d.comb += self.mem_rdata.ready.eq(add.i_data.ready)
            with m.If(seq.clear):  # an abort: every response drained
                m.d.comb += self.mem_rdata.ready.eq(1)

        # -- memory writes: the pixel writer's units or the counter words, as W bytes ------
        wb = write_bytes(cfg)
        u = writer_core.unit
        unit_byte = Signal(ADDRESS_BITS)
        m.d.comb += unit_byte.eq(writes.payload.addr * u)
        with m.If(writes.valid):
            lane = unit_byte % wb if u < wb else 0
            m.d.comb += [
                self.mem_wr.addr.eq(image + unit_byte - lane),
                self.mem_wr.data.eq(writes.payload.data << (8 * lane)),
                self.mem_wr.strb.eq(writes.payload.strb << lane),
                self.mem_wr.valid.eq(1),
                writes.ready.eq(self.mem_wr.ready),
            ]
        with m.Elif(vector.o_write.valid):
            m.d.comb += [
                self.mem_wr.addr.eq(image + vector.o_write.payload.addr),
                self.mem_wr.data.eq(vector.o_write.payload.data),
                self.mem_wr.strb.eq(vector.o_write.payload.strb),
                self.mem_wr.valid.eq(1),
                vector.o_write.ready.eq(self.mem_wr.ready),
            ]
        with m.Else():
            addr = seq.counter_write.payload.addr
            lane = addr % wb if wb > 4 else 0
            m.d.comb += [
                self.mem_wr.addr.eq(image + addr - lane),
                self.mem_wr.data.eq(seq.counter_write.payload.data << (8 * lane)),
                self.mem_wr.strb.eq(0xF << lane),
                self.mem_wr.valid.eq(seq.counter_write.valid),
                seq.counter_write.ready.eq(self.mem_wr.ready),
            ]
        return m


def program_engine_verilog(config, *, name=PROGRAM_TOP_NAME):
    """Verilog text of :class:`ProgramEngine` for ``config`` (source locations left
    out, as :func:`fpgacnn.hdl.verilog.engine_verilog` does)."""
    require_config(config)
    return verilog.convert(ProgramEngine(config), name=name, emit_src=False)
