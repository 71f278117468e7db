"""The fused Add: a residual Add done on a convolution's writes on their way to memory (issue 16).

Between the :class:`~fpgacnn.hdl.program.pixel_writer.PixelWriter` and the
memory's write port of the
:class:`~fpgacnn.hdl.program.program_engine.ProgramEngine`. With its field
``enable`` clear (every run but a fused one) a write passes through
unchanged, in the same cycle. With it set, each write's ``u`` bytes are the
Add's operand ``a`` (the convolution's requantized output); the stage reads
operand ``b`` at the write's address plus ``b_delta`` and writes ``y``, the
Add of :mod:`fpgacnn.core.fused_add_fields`, in its place::

    i_write --+--> b's read FIFO (R bytes around addr + b_delta) --> o_addr --> memory
              |                                                           |
              +--> pending FIFO (addr, a, strobes, b's place in R)        |
                        |          response FIFO <------------------------+ i_data
                        v               v
                 a - za, b - zb per byte --> the vector unit's lanes (idle):
                 stage 1 their terms' register, stages 2-5 scaled_sum
                        --> output FIFO --> o_write --> memory

The b addresses need no counter nest of their own: they are the writer's
own addresses, moved by one constant (b and the Add's output have one
layout), so whatever destination the writer takes (channel groups, column
strips, a batch) reads b in the same pattern. A write is taken while the
pending FIFO has room; its read waits in a FIFO of its own for the read port
(the reader goes first) and issues while fewer than ``outstanding``
responses are owed (so the response FIFO always has room); the pending FIFO
holds ``outstanding`` writes, so the memory's latency (up to ``outstanding -
3``) is paid once a run, not per write, and a stretch of reader reads holds
the writer back only once it is full.
"""

from amaranth.hdl import Cat, Module, Signal, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFO, SyncFIFOBuffered
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ...core.config import require_config
from ...core.fused_add_fields import fused_add_layout, fused_add_unit, has_fused_add
from ...core.memory_port import ADDRESS_BITS, read_bytes
from .pixel_reader import require_outstanding
from .pixel_writer import write_layout
from .scaled_sum import SCALED_SUM_STAGES, lane_client_signature

__all__ = ["FusedAdd", "FUSED_ADD_STAGES"]

#: Registered stages from a pending write and its b taken to ``y`` in the output
#: FIFO: the operands less their zero points, then the scaled sum's.
FUSED_ADD_STAGES = 1 + SCALED_SUM_STAGES
#: Writes the output FIFO holds; the stage stops taking operands before the writes
#: in the pipeline could overfill it.
_OUT_DEPTH = 16


class FusedAdd(wiring.Component):
    """Turns the pixel writer's writes into a residual Add's (module docstring).

    Parameters
    ----------
    config : EngineConfig
        An engine with :func:`~fpgacnn.core.fused_add_fields.has_fused_add`.
    outstanding : int
        Reads of b in flight, at most (and writes pending): full rate needs the
        memory's latency plus 3.

    Members
    -------
    fields : In(fused_add_layout())
        Held stable while the run's writes pass.
    i_write : In(stream.Signature(write_layout(u)))
        The writer's writes (``u``: :func:`~fpgacnn.core.fused_add_fields.fused_add_unit`
        bytes at unit address ``addr``).
    o_write : Out(stream.Signature(write_layout(u)))
        The writes to memory: ``i_write`` itself, or with ``enable`` the Add's
        output, in order, with the writer's strobes.
    o_addr : Out(stream.Signature(unsigned(ADDRESS_BITS)))
        Byte addresses (multiples of R) of b's reads, R bytes each
        (:func:`~fpgacnn.core.memory_port.read_bytes`).
    i_data : In(stream.Signature(unsigned(8 * R)))
        Their responses, in order.
    writer_done : In(1)
        The writer's ``done`` (its run's last write left it).
    done : Out(1)
        ``writer_done`` itself, or with ``enable`` one cycle in which the run's
        last write has been taken by the memory (and nothing is left inside).
    lanes : Out(lane_client_signature(R))
        To the :class:`~fpgacnn.hdl.program.vector_unit.VectorUnit`'s ``lanes``:
        the stage computes on the unit's lanes (the first ``u``), which are
        idle while a convolution runs, so the Add costs no multipliers of its
        own.

    Latency
    -------
    With ``enable``, a write taken in cycle ``t`` whose read is answered ``L``
    cycles after it is taken leaves (``o_write.valid``) in cycle ``t + L +
    FUSED_ADD_STAGES + 5`` (the read FIFO's register, the response FIFO's and
    the output FIFO's two each), writes one a cycle after it while nothing
    pauses: a run's writes end that much later than the writer's. Without
    ``enable``: the same cycle.
    """

    def __init__(self, config, *, outstanding=64):
        require_config(config)
        require_outstanding(outstanding)
        if not has_fused_add(config):
            raise ValueError("this engine's writes are not inside one memory read "
                             "(core.fused_add_fields.has_fused_add): it has no fused Add")
        self._config = config
        self._outstanding = outstanding
        unit = fused_add_unit(config)
        super().__init__({
            "fields": In(fused_add_layout()),
            "i_write": In(stream.Signature(write_layout(unit))),
            "o_write": Out(stream.Signature(write_layout(unit))),
            "o_addr": Out(stream.Signature(unsigned(ADDRESS_BITS))),
            "i_data": In(stream.Signature(unsigned(8 * read_bytes(config)))),
            "writer_done": In(1),
            "done": Out(1),
            "lanes": Out(lane_client_signature(read_bytes(config))),
        })

    def elaborate(self, platform):
        cfg = self._config
        u, rb = fused_add_unit(cfg), read_bytes(cfg)
        f = self.fields
        depth = self._outstanding
        m = Module()
        meta = write_layout(u)
        sel_bits = exact_log2(rb // u)
        m.submodules.pending = pending = SyncFIFOBuffered(
            width=meta.size + sel_bits, depth=depth)
        m.submodules.responses = responses = SyncFIFOBuffered(width=8 * rb, depth=depth + 1)
        m.submodules.out = out = SyncFIFOBuffered(width=meta.size, depth=_OUT_DEPTH)

        # -- a write arrives: its place in the pending FIFO, b's address in its own --------
        # The reads wait in a FIFO of their own, not in the writer's: the pixel reader
        # goes first on the read port, and a write must not wait for a free cycle of the
        # port (the engine's output would stall behind its input); the pending FIFO
        # absorbs such stretches.
        m.submodules.b_reads = b_reads = SyncFIFO(width=ADDRESS_BITS, depth=depth)
        w = self.i_write
        b_byte = Signal(ADDRESS_BITS)
        m.d.comb += b_byte.eq(w.payload.addr * u + f.b_delta)
        owed = Signal(range(depth + 2))  # reads issued whose data the stage has not taken
        pop = Signal()
        m.d.comb += [
            b_reads.w_data.eq(b_byte & ~(rb - 1)),
            pending.w_data.eq(Cat(w.payload.as_value(), b_byte[exact_log2(u):exact_log2(rb)])
                              if sel_bits else w.payload.as_value()),
            self.o_addr.payload.eq(b_reads.r_data),
            self.o_addr.valid.eq(b_reads.r_rdy & (owed < depth)),
            b_reads.r_en.eq(self.o_addr.valid & self.o_addr.ready),
        ]
        with m.If(f.enable):
            take = w.valid & pending.w_rdy & b_reads.w_rdy
            m.d.comb += [
                w.ready.eq(pending.w_rdy & b_reads.w_rdy),
                pending.w_en.eq(take),
                b_reads.w_en.eq(take),
            ]
        m.d.sync += owed.eq(owed + (self.o_addr.valid & self.o_addr.ready) - pop)
        m.d.comb += [
            responses.w_data.eq(self.i_data.payload),
            responses.w_en.eq(self.i_data.valid),
            self.i_data.ready.eq(responses.w_rdy),
        ]

        # -- the lanes: one write a cycle while the output FIFO has room --------------------
        valid = [Signal(name=f"valid{s}") for s in range(FUSED_ADD_STAGES)]
        in_pipe = sum(valid)
        room = out.level + in_pipe <= _OUT_DEPTH - FUSED_ADD_STAGES - 1
        m.d.comb += [pop.eq(pending.r_rdy & responses.r_rdy & room),
                     pending.r_en.eq(pop), responses.r_en.eq(pop)]
        m.d.sync += valid[0].eq(pop)
        for s in range(1, FUSED_ADD_STAGES):
            m.d.sync += valid[s].eq(valid[s - 1])
        head = meta(pending.r_data[:meta.size])
        b_unit = responses.r_data
        if sel_bits:
            b_unit = b_unit.word_select(pending.r_data[meta.size:], 8 * u)
        # The write's address and strobes travel beside its bytes.
        places = [Signal(meta.size - 8 * u, name=f"place{s}") for s in range(FUSED_ADD_STAGES)]
        m.d.sync += places[0].eq(Cat(head.addr, head.strb))
        for s in range(1, FUSED_ADD_STAGES):
            m.d.sync += places[s].eq(places[s - 1])
        # The terms go to the vector unit's lanes (idle while a convolution runs), which
        # register them (stage 1) and give y SCALED_SUM_STAGES cycles later.
        lanes = self.lanes
        m.d.comb += lanes.fields.eq(f)
        for k in range(u):
            m.d.comb += [lanes.a_terms[k].eq(head.data[8 * k:8 * k + 8].as_signed() - f.za),
                         lanes.b_terms[k].eq(b_unit[8 * k:8 * k + 8].as_signed() - f.zb)]
        last = places[-1]
        result = meta(Signal(meta.size))
        m.d.comb += [result.addr.eq(last[:ADDRESS_BITS]), result.data.eq(lanes.y[:8 * u]),
                     result.strb.eq(last[ADDRESS_BITS:])]
        m.d.comb += [out.w_data.eq(result.as_value()), out.w_en.eq(valid[-1])]

        # -- writes out: the Add's, or the writer's own --------------------------------------
        ended = Signal()  # the writer's last write is in
        with m.If(f.enable):
            m.d.comb += [
                self.o_write.payload.eq(out.r_data),
                self.o_write.valid.eq(out.r_rdy),
                out.r_en.eq(self.o_write.ready),
            ]
            idle = (pending.level == 0) & (in_pipe == 0) & (out.level == 0)
            with m.If(self.writer_done):
                m.d.sync += ended.eq(1)
            with m.If(ended & idle):
                m.d.sync += ended.eq(0)
                m.d.comb += self.done.eq(1)
        with m.Else():
            m.d.comb += [
                self.o_write.payload.eq(w.payload),
                self.o_write.valid.eq(w.valid),
                w.ready.eq(self.o_write.ready),
                self.done.eq(self.writer_done),
            ]
        return m
