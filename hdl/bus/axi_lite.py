"""AXI4-Lite: the wiring signature and a slave that turns it into a register bus.

Port names come out of Amaranth as ``<member>__<signal>`` (``s_axil__awaddr``,
...), which cocotbext-axi binds with
``AxiLiteBus.from_prefix(dut, "s_axil", bus_separator="__")`` and Vivado's
interface inference recognises once the separator is mapped.
"""

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["AXI4LiteSignature", "RegisterBusSignature", "AXI4LiteSlave"]


def _check_width(name, value, choices=None, lo=1):
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise TypeError(f"{name} must be an integer of at least {lo}, not {value!r}")
    if choices is not None and value not in choices:
        raise ValueError(f"{name} must be one of {choices}, not {value!r}")


class AXI4LiteSignature(wiring.Signature):
    """AXI4-Lite, from the manager's side (``In(AXI4LiteSignature(...))`` on a subordinate).

    Parameters
    ----------
    addr_width : int
        Byte-address width.
    data_width : int
        32 or 64.

    Members
    -------
    awaddr, awprot, awvalid, awready, wdata, wstrb, wvalid, wready,
    bresp, bvalid, bready, araddr, arprot, arvalid, arready,
    rdata, rresp, rvalid, rready
        The AXI4-Lite channel signals of the same names.
    """

    def __init__(self, addr_width, data_width=32):
        _check_width("addr_width", addr_width, lo=3)
        _check_width("data_width", data_width, choices=(32, 64))
        self.addr_width = addr_width
        self.data_width = data_width
        super().__init__({
            "awaddr": Out(addr_width), "awprot": Out(3), "awvalid": Out(1), "awready": In(1),
            "wdata": Out(data_width), "wstrb": Out(data_width // 8), "wvalid": Out(1), "wready": In(1),
            "bresp": In(2), "bvalid": In(1), "bready": Out(1),
            "araddr": Out(addr_width), "arprot": Out(3), "arvalid": Out(1), "arready": In(1),
            "rdata": In(data_width), "rresp": In(2), "rvalid": In(1), "rready": Out(1),
        })

    def __eq__(self, other):
        return (isinstance(other, AXI4LiteSignature) and other.addr_width == self.addr_width
                and other.data_width == self.data_width)

    def __repr__(self):
        return f"AXI4LiteSignature({self.addr_width}, {self.data_width})"


class RegisterBusSignature(wiring.Signature):
    """A one-cycle register bus, from the initiator's side.

    Members
    -------
    w_stb : Out(1)
        Write ``w_data`` (bytes enabled by ``w_strb``) to word ``w_addr`` this cycle.
    w_addr, w_data, w_strb : Out
    r_stb : Out(1)
        A read of word ``r_addr`` is sampled this cycle.
    r_addr : Out
    r_data : In
        The word at ``r_addr``, combinationally (no read side effects).
    """

    def __init__(self, addr_width, data_width=32):
        _check_width("addr_width", addr_width)
        _check_width("data_width", data_width, choices=(32, 64))
        self.addr_width = addr_width
        self.data_width = data_width
        super().__init__({
            "w_stb": Out(1), "w_addr": Out(addr_width), "w_data": Out(data_width),
            "w_strb": Out(data_width // 8),
            "r_stb": Out(1), "r_addr": Out(addr_width), "r_data": In(data_width),
        })

    def __eq__(self, other):
        return (isinstance(other, RegisterBusSignature) and other.addr_width == self.addr_width
                and other.data_width == self.data_width)

    def __repr__(self):
        return f"RegisterBusSignature({self.addr_width}, {self.data_width})"


class AXI4LiteSlave(wiring.Component):
    """AXI4-Lite subordinate onto a :class:`RegisterBusSignature` register bus.

    Write address and write data are captured independently, in either order
    or together; the register write happens once both are held, and the next
    write is accepted only after its response was taken (``bready``). A read
    is accepted when no read response is pending. Every response is OKAY;
    unmapped addresses read 0 (the register file decides).

    Parameters
    ----------
    addr_width : int
        Byte-address width of the AXI4-Lite port; the register bus gets
        ``addr_width - log2(data_width/8)`` word-address bits.
    data_width : int
        32 or 64.

    Members
    -------
    axi : In(AXI4LiteSignature(addr_width, data_width))
    bus : Out(RegisterBusSignature(...))

    Latency
    -------
    A write strobes the bus one cycle after the later of its AW and W
    handshakes and raises ``bvalid`` the cycle after. A read samples the bus
    in its AR handshake cycle and raises ``rvalid`` the cycle after.
    """

    def __init__(self, *, addr_width, data_width=32):
        _check_width("addr_width", addr_width, lo=3)
        _check_width("data_width", data_width, choices=(32, 64))
        self._lsb = (data_width // 8).bit_length() - 1
        super().__init__({
            "axi": In(AXI4LiteSignature(addr_width, data_width)),
            "bus": Out(RegisterBusSignature(addr_width - self._lsb, data_width)),
        })

    def elaborate(self, platform):
        m = Module()
        axi, bus = self.axi, self.bus
        lsb = self._lsb

        # Write: hold AW and W separately until both are here (any order).
        aw_full = Signal()
        aw_addr = Signal.like(bus.w_addr)
        w_full = Signal()
        w_data = Signal.like(bus.w_data)
        w_strb = Signal.like(bus.w_strb)
        bvalid = Signal()
        m.d.comb += [
            axi.awready.eq(~aw_full),
            axi.wready.eq(~w_full),
            axi.bvalid.eq(bvalid),
            axi.bresp.eq(0),
        ]
        with m.If(axi.awvalid & ~aw_full):
            m.d.sync += [aw_full.eq(1), aw_addr.eq(axi.awaddr[lsb:])]
        with m.If(axi.wvalid & ~w_full):
            m.d.sync += [w_full.eq(1), w_data.eq(axi.wdata), w_strb.eq(axi.wstrb)]
        do_write = aw_full & w_full & ~bvalid
        m.d.comb += [
            bus.w_stb.eq(do_write),
            bus.w_addr.eq(aw_addr),
            bus.w_data.eq(w_data),
            bus.w_strb.eq(w_strb),
        ]
        with m.If(do_write):
            m.d.sync += [aw_full.eq(0), w_full.eq(0), bvalid.eq(1)]
        with m.If(bvalid & axi.bready):
            m.d.sync += bvalid.eq(0)

        # Read: one outstanding read; the data is sampled in the AR handshake.
        rvalid = Signal()
        rdata = Signal.like(axi.rdata)
        ar_take = axi.arvalid & ~rvalid
        m.d.comb += [
            axi.arready.eq(~rvalid),
            axi.rvalid.eq(rvalid),
            axi.rdata.eq(rdata),
            axi.rresp.eq(0),
            bus.r_stb.eq(ar_take),
            bus.r_addr.eq(axi.araddr[lsb:]),
        ]
        with m.If(ar_take):
            m.d.sync += [rvalid.eq(1), rdata.eq(bus.r_data)]
        with m.Elif(rvalid & axi.rready):
            m.d.sync += rvalid.eq(0)
        return m
