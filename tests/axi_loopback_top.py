"""A small AXI top for testing the simulated board's harness by itself.

AXI4-Lite: one read/write register ``key`` at 0x0 and a read-only beat counter
at 0x4. AXI4-Stream: every input beat comes out XORed with ``key``, TLAST kept,
through one register stage that honours back-pressure. The ports have the
names the engine top uses (``s_axil__*``, ``s_axis__*``, ``m_axis__*``).
"""

from amaranth import Module, Signal
from amaranth.back import verilog
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out, Signature


def _axil():
    return Signature({
        "awaddr": Out(12), "awvalid": Out(1), "awready": In(1),
        "wdata": Out(32), "wstrb": Out(4), "wvalid": Out(1), "wready": In(1),
        "bresp": In(2), "bvalid": In(1), "bready": Out(1),
        "araddr": Out(12), "arvalid": Out(1), "arready": In(1),
        "rdata": In(32), "rresp": In(2), "rvalid": In(1), "rready": Out(1),
    })


def _axis(width):
    return Signature({"tdata": Out(width), "tvalid": Out(1), "tready": In(1), "tlast": Out(1)})


class AxiLoopbackTop(wiring.Component):
    def __init__(self, stream_width):
        super().__init__({"s_axil": In(_axil()), "s_axis": In(_axis(stream_width)),
                          "m_axis": Out(_axis(stream_width))})

    def elaborate(self, platform):
        m = Module()
        a, s, o = self.s_axil, self.s_axis, self.m_axis
        key, beats = Signal(32), Signal(32)
        # Address and data may come in either order (cocotbpynq sends the
        # address first and waits for AWREADY before it raises WVALID).
        awaddr, aw_held = Signal(12), Signal()
        with m.If(a.awvalid & ~aw_held & ~a.bvalid):
            m.d.comb += a.awready.eq(1)
            m.d.sync += [awaddr.eq(a.awaddr), aw_held.eq(1)]
        with m.If(aw_held & a.wvalid & ~a.bvalid):
            m.d.comb += a.wready.eq(1)
            m.d.sync += [a.bvalid.eq(1), aw_held.eq(0)]
            with m.If(awaddr == 0):
                m.d.sync += [key.eq(a.wdata), a.bresp.eq(0)]
            with m.Else():
                m.d.sync += a.bresp.eq(2)
        with m.If(a.bvalid & a.bready):
            m.d.sync += a.bvalid.eq(0)
        with m.If(a.arvalid & ~a.rvalid):
            m.d.comb += a.arready.eq(1)
            m.d.sync += [a.rvalid.eq(1), a.rresp.eq(0),
                         a.rdata.eq(key), ]
            with m.If(a.araddr == 4):
                m.d.sync += a.rdata.eq(beats)
        with m.If(a.rvalid & a.rready):
            m.d.sync += a.rvalid.eq(0)
        m.d.comb += s.tready.eq(~o.tvalid | o.tready)
        with m.If(s.tready):
            m.d.sync += [o.tvalid.eq(s.tvalid), o.tdata.eq(s.tdata ^ key.replicate(len(s.tdata) // 32)),
                         o.tlast.eq(s.tlast)]
        with m.If(s.tvalid & s.tready):
            m.d.sync += beats.eq(beats + 1)
        return m


def loopback_verilog(stream_width):
    return verilog.convert(AxiLoopbackTop(stream_width), name="top")
