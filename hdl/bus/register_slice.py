"""A full register slice (skid buffer) for an Amaranth ``lib.stream`` stream."""

from amaranth.hdl import Module, Signal, Value
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["StreamRegisterSlice"]


class StreamRegisterSlice(wiring.Component):
    """Every output and ``i_stream.ready`` registered; payloads pass unchanged, in order.

    One payload per cycle at full rate, a cycle later. Neither side's
    handshake reaches the other combinationally: ``i_stream.ready`` is a
    register (the spare register is empty) and ``o_stream.ready`` only
    enables registers. Used where a stream crosses the die between two
    blocks with deep handshake logic of their own.

    Parameters
    ----------
    shape : shape-castable
        The payload's shape.

    Members
    -------
    i_stream : In(stream.Signature(shape))
    o_stream : Out(stream.Signature(shape))
    """

    def __init__(self, shape):
        super().__init__({"i_stream": In(stream.Signature(shape)),
                          "o_stream": Out(stream.Signature(shape))})

    def elaborate(self, platform):
        m = Module()
        i, o = self.i_stream, self.o_stream
        payload = Value.cast(i.payload)
        out, out_valid = Signal(len(payload), reset_less=True), Signal()
        spare, spare_valid = Signal(len(payload), reset_less=True), Signal()
        take = i.valid & ~spare_valid
        m.d.comb += [i.ready.eq(~spare_valid), o.valid.eq(out_valid),
                     Value.cast(o.payload).eq(out)]
        with m.If(o.ready | ~out_valid):
            # The output register is free (or leaving): the spare first.
            with m.If(spare_valid):
                m.d.sync += [out.eq(spare), out_valid.eq(1), spare_valid.eq(0)]
            with m.Else():
                m.d.sync += [out.eq(payload), out_valid.eq(take)]
        with m.Elif(take):
            m.d.sync += [spare.eq(payload), spare_valid.eq(1)]
        return m
