"""AXI4-Stream wiring signature (``tdata``, ``tvalid``, ``tready``, ``tlast``).

Port names come out as ``s_axis__tdata`` ... on the engine's top, which
cocotbext-axi binds with ``AxiStreamBus.from_prefix(dut, "s_axis",
bus_separator="__")``. There is no ``tkeep``: every beat is whole (the stream
formats pad to beat boundaries, docs/engine.md), and a DMA without ``tkeep``
ties it to all ones.
"""

from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["AXI4StreamSignature"]


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
