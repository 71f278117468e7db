"""The program sequencer: a network program's engine runs, one after another (issue 16).

It walks a range of the run table (:func:`fpgacnn.core.sequencer.record_fields`
of its engine) in board memory. For each record::

    FETCH    read the record into a register, R bytes a read (the memory port's
             read_bytes) where the table is R-aligned (the host's always is),
             else a pin-byte word a read (the first record of a start: the
             next ones are fetched while the run before them ends)
    DESC     write the run's descriptor registers on the engine's register bus
             (the engine's own list, register order: with fused_blocks the
             fused block's five too, :func:`~fpgacnn.core.sequencer.descriptor_words`)
             (the pixel reader started as the record was decoded, on the run's
             constants or its pixels: its reads go out meanwhile),
    START    once the reader has its first beat (or has sent all it will),
             control.start: the engine's descriptor check judges the run, and
             the run finds its input there and streaming (the reader's
             latency is the sequencer's time, not the run's)
    ACCEPT   read status: refused -> REFUSED (the reader cleared and its reads
             drained, then stop: error; the engine keeps the refusal for the
             host to read); taken -> stream
    STREAM   the pixel reader streams the constants, then the pixels, into the
             engine while the pixel writer writes its output into memory (the
             pixels started as soon as the constants' reads are all issued,
             so their reads follow while the constants drain)
    FINISH   read status until the engine is done
    COUNT    read the engine's three performance counters ...
    STORE    ... and write them to the record's counters address
    NEXT     once the memory has done every write taken (``writes_pending``
             low): the next record, or stop (done). The next record's fetch
             starts once the run's reads are done (the reader's last word
             delivered, the vector unit done) and goes on through FINISH,
             COUNT, STORE and NEXT, so NEXT finds it fetched or waits for it

A record whose op is RECORD_VECTOR runs on the vector unit instead
(VECTOR: its fields from the record, start, wait for done; then COUNT
takes the unit's three counters and STORE writes them). A record whose op is
RECORD_SKIP (an Add fused into the engine record before it) runs nothing,
its counters left as they are: the fetch ahead passes over it to the record
after it (where the range goes on past it), or DECODE goes straight to NEXT. A record whose op
is RECORD_HOST stops the sequencer before it (status
``host``, ``index``): the host runs it and starts the sequencer at the next
record. Writing the descriptor through the engine's own registers means the
check that refuses a bad run from the host refuses it from a program too.

The sequencer drives the reader's and the writer's ``fields`` from the
fetched record and pulses their ``start``; the top
(:class:`~fpgacnn.hdl.program.program_engine.ProgramEngine`) connects their
memory sides and the streams.
"""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ...core.config import require_config
from ...core.memory_port import read_bytes, words_per_read
from ...core.pixel_reader_fields import READER_FIELDS, reader_layout
from ...core.fused_add_fields import FUSED_ADD_FIELDS, fused_add_layout
from ...core.pixel_writer_fields import WRITER_FIELDS, writer_layout
from ...core.regmap import ADDR_WIDTH, build_regmap
from ...core.sequencer import (COUNTER_WORDS, RECORD_ENGINE, RECORD_HOST, RECORD_INDEX_BITS,
                               RECORD_SKIP, RECORD_VECTOR, descriptor_words, lanes_conflict,
                               record_bytes, record_word)
from ...core.vector_fields import VECTOR_FIELDS, vector_layout
from ..bus.axi_lite import RegisterBusSignature

__all__ = ["Sequencer", "counter_write_layout"]


def counter_write_layout():
    """A counter word's write: its byte address and its 32 bits."""
    return data.StructLayout({"addr": unsigned(32), "data": unsigned(32)})


class Sequencer(wiring.Component):
    """Runs the records ``[first, first + count)`` of a run table on the engine.

    Parameters
    ----------
    config : EngineConfig

    Members
    -------
    table, first, count : In
        The run table's word address (pin-byte words), the first record and
        how many; sampled at ``start``.
    start, abort : In(1)
        Pulses. ``start`` is ignored while ``busy``; ``abort`` stops at once
        (the engine soft-reset, the reader and writer cleared with ``clear``,
        reads in flight waited for with ``drained``).
    busy, done, host, error : Out(1)
        As ``seq_status`` (:mod:`fpgacnn.core.sequencer`); ``done``, ``host``
        and ``error`` hold until the next start.
    owns : Out(1)
        The sequencer drives the engine's registers and streams (running or
        aborting).
    stopped : Out(1)
        Stopped since the last start (the interrupt).
    index : Out(RECORD_INDEX_BITS)
        The record it is at, or stopped at.
    cycles : Out(32)
        Cycles from the last start to its stop.
    engine : Out(RegisterBusSignature(ADDR_WIDTH - 2, 32))
        The engine's register bus.
    fetch_addr : Out(stream.Signature(unsigned(32)))
        Word addresses (``pin``-byte words) of the record's memory reads.
    fetch_data : In(stream.Signature(unsigned(8 * R)))
        Their responses, in order: R bytes (the memory port's
        :func:`~fpgacnn.core.memory_port.read_bytes`), the addressed word in
        the low ``pin`` bytes; all R read at once where the table is
        R-aligned.
    fetching : Out(1)
        The memory read port is the fetcher's (else the pixel reader's).
    reader_fields, writer_fields : Out
        The current run's pixel reader fields (the constants' while they
        stream) and pixel writer fields.
    add_fields : Out(fused_add_layout())
        The current run's fused Add (:mod:`fpgacnn.core.fused_add_fields`).
    reader_start, writer_start : Out(1)
    reader_issued : In(1)
        The reader has issued every word of its section (the next may start).
    reader_valid : In(1)
        The reader offers a beat to the engine.
    reader_done, writer_done : In(1)
    vector_fields : Out(vector_layout())
        The current vector record's fields.
    vector_start : Out(1)
    vector_done : In(1)
    vector_active : Out(1)
        The memory read port is the vector unit's.
    vector_counters : In(unsigned(32 * COUNTER_WORDS))
        The vector unit's counters of its last run (busy, stall-in, stall-out).
    counter_write : Out(stream.Signature(counter_write_layout()))
        The run's counter words.
    clear : Out(1)
        Resets the reader and the writer (abort).
    drained : In(1)
        No memory read is in flight.
    writes_pending : In(1)
        The memory has taken writes it has not done yet (an AXI4 port's
        writes before their B responses). The sequencer waits for it to fall
        before the next record (whose reads may be of what this one wrote:
        AXI orders no read after a write) and before it stops (the host
        reads the output next); a memory whose writes are done when taken
        holds it low, and then the wait costs no cycle.
    """

    def __init__(self, config):
        require_config(config)
        self._config = config
        super().__init__({
            "table": In(32), "first": In(RECORD_INDEX_BITS), "count": In(RECORD_INDEX_BITS),
            "start": In(1), "abort": In(1),
            "busy": Out(1), "done": Out(1), "host": Out(1), "error": Out(1),
            "owns": Out(1), "stopped": Out(1), "index": Out(RECORD_INDEX_BITS),
            "cycles": Out(32),
            "engine": Out(RegisterBusSignature(ADDR_WIDTH - 2, 32)),
            "fetch_addr": Out(stream.Signature(unsigned(32))),
            "fetch_data": In(stream.Signature(unsigned(8 * read_bytes(config)))),
            "fetching": Out(1),
            "reader_fields": Out(reader_layout()), "reader_start": Out(1),
            "reader_issued": In(1), "reader_valid": In(1), "reader_done": In(1),
            "writer_fields": Out(writer_layout()), "writer_start": Out(1), "writer_done": In(1),
            "add_fields": Out(fused_add_layout()),
            "vector_fields": Out(vector_layout()), "vector_start": Out(1),
            "vector_done": In(1), "vector_active": Out(1),
            "vector_counters": In(unsigned(32 * COUNTER_WORDS)),
            "counter_write": Out(stream.Signature(counter_write_layout())),
            "clear": Out(1), "drained": In(1), "writes_pending": In(1),
        })

    def elaborate(self, platform):
        cfg = self._config
        regs = build_regmap(cfg)
        pin, rb = cfg.pin, read_bytes(cfg)
        nwords = record_bytes(cfg) // pin  # memory words of a record
        # first * nwords as shifted adds of the constant's bits: a `*` is a DSP48 to
        # synth_xilinx, which the board sizing does not count
        # (core/program_products.py).
        first_offset = sum(self.first << b for b in range(nwords.bit_length()) if nwords >> b & 1)
        m = Module()

        # The record, shifted in a memory word at a time: its first byte ends lowest.
        rec = Signal(8 * record_bytes(cfg))

        def word(name, k=0):
            i = record_word(name, cfg) + k
            return rec[32 * i:32 * i + 32]

        def reg_word(name):
            return regs[name].address >> 2

        def field(reg, name):
            f = regs[reg].field(name)
            return slice(f.offset, f.offset + f.width)

        # -- fields of the reader (constants or pixels) and of the writer ----------------
        pixels_phase = Signal()
        reading = Signal()  # an engine run's reader sections are under way
        # The constants stream as wide words (R bytes, a beat a cycle) where the port
        # is wider than pin and their base and length are whole R-byte words
        # (core/pixel_reader_fields.py); they always are in an image the host builds
        # (its sections start on a beat), and the host's cycle model assumes so.
        per_read = words_per_read(cfg)
        const_base, const_words = word("const_base"), word("const_words")[:16]
        if per_read > 1:
            shift = exact_log2(per_read)
            const_wide = (const_base[:shift] == 0) & (const_words[:shift] == 0)
            const_base = Mux(const_wide, const_base >> shift, const_base)
            const_words = Mux(const_wide, const_words >> shift, const_words)
        else:
            const_wide = 0
        for f in READER_FIELDS:
            target = self.reader_fields[f.name]
            value = word(f"reader_{f.name}")[:f.width]
            constant = {"base": const_base, "images": 1, "rows": 1, "cols": 1,
                        "words": const_words, "wide": const_wide,
                        # Every byte of the constants is kept: more channels than words.
                        "channels": (1 << 32) - 1, "blocks": 1, "last_cols": 1}.get(f.name, 0)
            with m.If(pixels_phase):
                m.d.comb += target.eq(value)
            with m.Else():
                m.d.comb += target.eq(constant)
        for f in WRITER_FIELDS:
            m.d.comb += self.writer_fields[f.name].eq(word(f"writer_{f.name}")[:f.width])
        for f in FUSED_ADD_FIELDS:
            m.d.comb += self.add_fields[f.name].eq(word(f"add_{f.name}")[:f.width])
        for f in VECTOR_FIELDS:
            m.d.comb += self.vector_fields[f.name].eq(word(f"vector_{f.name}")[:f.width])

        # -- state ----------------------------------------------------------------------
        rec_base = Signal(32)  # word address of the record in rec
        remaining = Signal(RECORD_INDEX_BITS)
        # The fetcher reads a record into nxt: the current one in FETCH, the next one
        # while the current run ends (its reads done) and its counters are stored.
        nxt = Signal(8 * record_bytes(cfg))
        f_base = Signal(32)  # word address of the record it fetches
        issued = Signal(range(nwords + 1))
        received = Signal(range(nwords + 1))
        fetched = Signal()  # nxt holds the record at f_base
        skipped = Signal()  # f_base is two records on: the one between is a RECORD_SKIP
        # The engine's descriptor registers, in register order, and their record words.
        desc_fields = descriptor_words(cfg)
        j = Signal(range(max(len(desc_fields), COUNTER_WORDS) + 1))
        kick = Signal()  # start the reader next cycle (its fields settle first)
        reader_finished, writer_finished = Signal(), Signal()
        counters = Array(Signal(32, name=f"counter{i}") for i in range(COUNTER_WORDS))
        desc_words = Array(rec[32 * i:32 * i + 32] for _, i in desc_fields)
        desc_addrs = Array(Const(reg_word(f"desc_{f.name}"), ADDR_WIDTH - 2)
                           for f, _ in desc_fields)
        perf_addrs = Array(Const(reg_word(n), ADDR_WIDTH - 2) for n in
                           ("perf_busy_cycles", "perf_stall_in_cycles", "perf_stall_out_cycles"))
        status = self.engine.r_data
        st_busy, st_done = status[field("status", "busy")], status[field("status", "done")]
        st_error = status[field("status", "error")]
        st_pending = status[field("status", "pending")]

        kick_vector = Signal()  # start the vector unit next cycle (its fields settle first)
        m.d.comb += [self.reader_start.eq(kick), self.vector_start.eq(kick_vector)]
        m.d.sync += [kick.eq(0), kick_vector.eq(0)]
        with m.If(self.busy):
            m.d.sync += self.cycles.eq(self.cycles + 1)

        def stop(flag=None):
            m.d.sync += [self.busy.eq(0), self.stopped.eq(1)]
            if flag is not None:
                m.d.sync += flag.eq(1)
            m.next = "IDLE"

        # -- the fetcher ------------------------------------------------------------------
        fetch_go, fetch_last = Signal(), Signal()
        prefetch = Signal()  # the next record may be fetched (the run's reads are done)
        data = self.fetch_data.payload
        if per_read > 1:
            # R bytes a read where the record starts on an R boundary (every record
            # then does: a record is whole reads), else a word a read.
            wide_fetch = f_base[:exact_log2(per_read)] == 0
            reads = Mux(wide_fetch, nwords // per_read, nwords)
            addr = f_base + Mux(wide_fetch, issued << exact_log2(per_read), issued)
            shifted = Mux(wide_fetch, Cat(nxt[8 * rb:], data),
                          Cat(nxt[8 * pin:], data[:8 * pin]))
        else:
            reads, addr, shifted = nwords, f_base + issued, Cat(nxt[8 * pin:], data)
        with m.If(fetch_go):
            m.d.comb += [
                self.fetching.eq(1),
                self.fetch_addr.payload.eq(addr),
                self.fetch_addr.valid.eq(issued != reads),
                self.fetch_data.ready.eq(1),
                fetch_last.eq(self.fetch_data.valid & (received == reads - 1)),
            ]
            with m.If(self.fetch_addr.valid & self.fetch_addr.ready):
                m.d.sync += issued.eq(issued + 1)
            with m.If(self.fetch_data.valid):
                m.d.sync += [nxt.eq(shifted), received.eq(received + 1)]
            with m.If(fetch_last):
                # A RECORD_SKIP fetched ahead (an Add the run before it did): fetch the
                # record after it instead, so the skip costs no fetch of its own.
                with m.If(prefetch & (shifted[:32] == RECORD_SKIP) & ~skipped
                          & (remaining > 2)):
                    m.d.sync += [f_base.eq(f_base + nwords), issued.eq(0), received.eq(0),
                                 skipped.eq(1)]
                with m.Else():
                    m.d.sync += fetched.eq(1)

        def fetch_from(base):
            m.d.sync += [f_base.eq(base), issued.eq(0), received.eq(0), fetched.eq(0),
                         skipped.eq(0)]

        def fetch_next(base):
            fetch_from(base)
            m.d.sync += rec_base.eq(base)
            m.next = "FETCH"

        # The next record is fetched once the run's reads are done (the port is free:
        # the reader has delivered its last word, or the vector unit is done), while
        # the run ends, its counters are read and stored and its writes complete: NEXT
        # then takes it at once. Nothing writes the run table, so no write of the run
        # orders before these reads.
        m.d.comb += fetch_go.eq(prefetch & (remaining > 1 + skipped) & ~fetched)

        def abortable():
            # Last in a running state: an abort wins over what the state does.
            with m.If(self.abort):
                m.next = "ABORT"

        m.d.comb += self.owns.eq(self.busy)
        with m.FSM(name="sequencer") as fsm:
            with m.State("IDLE"):
                with m.If(self.start):
                    m.d.sync += [self.busy.eq(1), self.stopped.eq(0), self.done.eq(0),
                                 self.host.eq(0), self.error.eq(0), self.cycles.eq(0),
                                 self.index.eq(self.first), remaining.eq(self.count)]
                    with m.If(self.count == 0):
                        m.d.sync += [self.busy.eq(0), self.stopped.eq(1), self.done.eq(1)]
                    with m.Else():
                        fetch_next(self.table + first_offset)

            with m.State("FETCH"):
                m.d.comb += fetch_go.eq(1)
                with m.If(fetch_last):
                    m.d.sync += rec.eq(shifted)
                    m.next = "DECODE"
                abortable()

            with m.State("DECODE"):
                fetch_from(rec_base + nwords)  # the next record, when the run allows
                op = word("op")
                engine_op = op == RECORD_ENGINE
                if lanes_conflict(cfg, True, True):
                    # A fused block on the vector unit's lanes with a fused Add on them
                    # too: refused as an unknown op is (error), the engine not started.
                    engine_op &= ~(word("desc_fused")[0] & word("add_enable")[0])
                with m.If(engine_op):
                    # The reader starts now: its reads are in flight while the
                    # descriptor is written, and the engine starts on its first beat.
                    has_constants = word("const_words") != 0
                    m.d.sync += [j.eq(0), pixels_phase.eq(~has_constants), kick.eq(1),
                                 reading.eq(1), reader_finished.eq(0)]
                    m.next = "DESC"
                with m.Elif(op == RECORD_VECTOR):
                    m.d.sync += kick_vector.eq(1)
                    m.next = "VECTOR"
                with m.Elif(op == RECORD_SKIP):
                    m.next = "NEXT"  # an Add the engine record before it did
                with m.Elif(op == RECORD_HOST):
                    stop(self.host)
                with m.Else():
                    stop(self.error)
                abortable()

            with m.State("DESC"):
                m.d.comb += [self.engine.w_stb.eq(1), self.engine.w_strb.eq(0xF),
                             self.engine.w_addr.eq(desc_addrs[j]),
                             self.engine.w_data.eq(desc_words[j])]
                m.d.sync += j.eq(j + 1)
                with m.If(j == len(desc_fields) - 1):
                    m.next = "START"
                abortable()

            with m.State("START"):
                # The run's input is there (or the reader has sent all it will):
                # the run streams from its start, as from the DMA.
                with m.If(self.reader_valid | reader_finished):
                    m.d.comb += [self.engine.w_stb.eq(1), self.engine.w_strb.eq(0xF),
                                 self.engine.w_addr.eq(reg_word("control")),
                                 self.engine.w_data.eq(regs.encode("control", start=1))]
                    m.next = "ACCEPT"
                abortable()

            with m.State("ACCEPT"):
                m.d.comb += [self.engine.r_stb.eq(1), self.engine.r_addr.eq(reg_word("status"))]
                with m.If(st_error):
                    m.next = "REFUSED"
                with m.Elif(st_busy & ~st_pending):
                    m.d.sync += writer_finished.eq(0)
                    m.d.comb += self.writer_start.eq(1)
                    m.next = "STREAM"
                abortable()

            with m.State("REFUSED"):
                # The reader started on a run the engine refused: cleared, and its
                # reads in flight drained, as an abort's, but the engine left as it
                # is (its status keeps the refusal for the host to read).
                m.d.comb += [self.clear.eq(1), self.fetch_data.ready.eq(1), self.fetching.eq(1)]
                with m.If(self.drained):
                    stop(self.error)

            with m.State("STREAM"):
                m.d.comb += prefetch.eq(reader_finished)
                with m.If(self.writer_done):
                    m.d.sync += writer_finished.eq(1)
                with m.If(reader_finished & writer_finished):
                    m.next = "FINISH"
                abortable()

            with m.State("VECTOR"):
                m.d.comb += self.vector_active.eq(1)
                with m.If(self.vector_done):
                    m.next = "VECTOR_COUNT"
                abortable()

            with m.State("VECTOR_COUNT"):
                m.d.comb += prefetch.eq(1)
                # The unit's counters hold the run's totals from the cycle after done.
                m.d.sync += [counters[i].eq(self.vector_counters[32 * i:32 * i + 32])
                             for i in range(COUNTER_WORDS)]
                m.d.sync += j.eq(0)
                m.next = "STORE"
                abortable()

            with m.State("FINISH"):
                m.d.comb += prefetch.eq(1)
                m.d.comb += [self.engine.r_stb.eq(1), self.engine.r_addr.eq(reg_word("status"))]
                with m.If(st_done & ~st_busy):
                    m.d.sync += j.eq(0)
                    m.next = "COUNT"
                abortable()

            with m.State("COUNT"):
                m.d.comb += prefetch.eq(1)
                m.d.comb += [self.engine.r_stb.eq(1), self.engine.r_addr.eq(perf_addrs[j])]
                m.d.sync += [counters[j].eq(self.engine.r_data), j.eq(j + 1)]
                with m.If(j == COUNTER_WORDS - 1):
                    m.d.sync += j.eq(0)
                    m.next = "STORE"
                abortable()

            with m.State("STORE"):
                m.d.comb += prefetch.eq(1)
                m.d.comb += [self.counter_write.valid.eq(1),
                             self.counter_write.payload.addr.eq(word("counters") + 4 * j),
                             self.counter_write.payload.data.eq(counters[j])]
                with m.If(self.counter_write.ready):
                    m.d.sync += j.eq(j + 1)
                    with m.If(j == COUNTER_WORDS - 1):
                        m.next = "NEXT"
                abortable()

            with m.State("NEXT"):
                m.d.comb += prefetch.eq(1)
                with m.If(self.writes_pending):
                    pass  # the record's writes are not all in memory yet
                with m.Elif(remaining == 1):
                    stop(self.done)
                with m.Elif(fetched):  # the next record (past a skipped one), fetched already
                    m.d.sync += [self.index.eq(self.index + 1 + skipped),
                                 remaining.eq(remaining - 1 - skipped),
                                 rec.eq(nxt), rec_base.eq(f_base)]
                    m.next = "DECODE"
                abortable()

            with m.State("ABORT"):
                # The engine back to idle; then wait for the reads in flight (and the
                # writes taken: a next start must not race them).
                m.d.comb += [self.engine.w_stb.eq(1), self.engine.w_strb.eq(0xF),
                             self.engine.w_addr.eq(reg_word("control")),
                             self.engine.w_data.eq(regs.encode("control", soft_reset=1)),
                             self.clear.eq(1), self.fetch_data.ready.eq(1), self.fetching.eq(1)]
                m.next = "DRAIN"

            with m.State("DRAIN"):
                m.d.comb += [self.clear.eq(1), self.fetch_data.ready.eq(1), self.fetching.eq(1)]
                with m.If(self.drained & ~self.writes_pending):
                    stop()

        # The reader's sections of an engine run, from DECODE on: the pixels start
        # once the constants are issued (or done), the reader's fields the pixels'
        # from the cycle of that start on. An abort or a refusal clears the reader.
        with m.If(reading & ~kick):
            with m.If(~pixels_phase & (self.reader_issued | self.reader_done)):
                m.d.sync += [pixels_phase.eq(1), kick.eq(1)]
            with m.If(pixels_phase & self.reader_done):
                m.d.sync += [reader_finished.eq(1), reading.eq(0)]
        with m.If(self.clear):
            m.d.sync += [reading.eq(0), kick.eq(0)]
        with m.If(fsm.ongoing("ABORT") | fsm.ongoing("DRAIN")):
            m.d.comb += self.owns.eq(1)
        return m
