"""AXI4-Stream wiring signature (``tdata``, ``tvalid``, ``tready``, ``tlast``).

Port names come out as ``s_axis__tdata`` ... on the engine's top, which
cocotbext-axi binds with ``AxiStreamBus.from_prefix(dut, "s_axis",
bus_separator="__")``. There is no ``tkeep``: every beat is whole (the stream
formats pad to beat boundaries, docs/engine.md), and a DMA without ``tkeep``
ties it to all ones.
"""

from amaranth.hdl import Cat, Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .register_slice import StreamRegisterSlice

__all__ = ["AXI4StreamSignature", "AXI4StreamRegisterSlice"]


class AXI4StreamSignature(wiring.Signature):
    """AXI4-Stream from the transmitter's side (``Out`` on a source, ``In`` on a sink).

    Parameters
    ----------
    data_width : int
        ``tdata`` width in bits, a positive multiple of 8.

    Members
    -------
    tdata : Out(data_width)
    tvalid : Out(1)
    tready : In(1)
    tlast : Out(1)
    """

    def __init__(self, data_width):
        if isinstance(data_width, bool) or not isinstance(data_width, int) \
                or data_width < 8 or data_width % 8:
            raise TypeError(f"data_width must be a positive multiple of 8, not {data_width!r}")
        self.data_width = data_width
        super().__init__({
            "tdata": Out(data_width),
            "tvalid": Out(1),
            "tready": In(1),
            "tlast": Out(1),
        })

    def __eq__(self, other):
        return isinstance(other, AXI4StreamSignature) and other.data_width == self.data_width

    def __repr__(self):
        return f"AXI4StreamSignature({self.data_width})"


class AXI4StreamRegisterSlice(wiring.Component):
    """A full register slice: :class:`~fpgacnn.hdl.bus.register_slice.StreamRegisterSlice`
    for AXI4-Stream beats (``tdata`` with ``tlast``).

    Beats pass through unchanged, in order, one per cycle at full rate, a
    cycle later; ``s_axis.tready`` is a register.

    Parameters
    ----------
    data_width : int

    Members
    -------
    s_axis : In(AXI4StreamSignature(data_width))
    m_axis : Out(AXI4StreamSignature(data_width))
    """

    def __init__(self, data_width):
        super().__init__({"s_axis": In(AXI4StreamSignature(data_width)),
                          "m_axis": Out(AXI4StreamSignature(data_width))})

    def elaborate(self, platform):
        m = Module()
        s, o = self.s_axis, self.m_axis
        m.submodules.slice = beats = StreamRegisterSlice(len(s.tdata) + 1)
        m.d.comb += [beats.i_stream.payload.eq(Cat(s.tdata, s.tlast)),
                     beats.i_stream.valid.eq(s.tvalid), s.tready.eq(beats.i_stream.ready),
                     Cat(o.tdata, o.tlast).eq(beats.o_stream.payload),
                     o.tvalid.eq(beats.o_stream.valid), beats.o_stream.ready.eq(o.tready)]
        return m
