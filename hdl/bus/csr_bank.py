"""The register file behind the AXI4-Lite slave, decoded from a :class:`RegisterMap`.

Each register of the map becomes a port named after it, a struct of its
fields (so ``bank.desc_in_h.value``, ``bank.control.start``):

- ``const``: no port; reads return the ROM word.
- ``ro``: ``In``; reads return what the hardware drives.
- ``rw``: ``Out``; the stored value (reset 0), honouring byte strobes.
- ``pulse``: ``Out``; each field is high for the one cycle of a write of 1
  to it; reads return 0.
"""

from amaranth.hdl import Module, Const, Cat, Mux, unsigned, signed
from amaranth.lib import wiring, data
from amaranth.lib.wiring import In, Out

from .axi_lite import RegisterBusSignature
from ...core.regmap import RegisterMap

__all__ = ["CSRBank"]


def _layout(reg):
    return data.StructLayout({
        f.name: (signed(f.width) if f.signed else unsigned(f.width)) for f in reg.fields
    })


class CSRBank(wiring.Component):
    """Registers of a :class:`~fpgacnn.core.regmap.RegisterMap` on a register bus.

    Parameters
    ----------
    regmap : RegisterMap

    Members
    -------
    bus : In(RegisterBusSignature(regmap.addr_width - 2, regmap.data_width))
    <register name> : In or Out(StructLayout of its fields)
        One per non-``const`` register, see the module docstring.

    Raises
    ------
    TypeError
        If ``regmap`` is not a RegisterMap.
    """

    def __init__(self, regmap):
        if not isinstance(regmap, RegisterMap):
            raise TypeError(f"regmap must be a RegisterMap, not {regmap!r}")
        self._regmap = regmap
        self._lsb = (regmap.data_width // 8).bit_length() - 1
        members = {"bus": In(RegisterBusSignature(regmap.addr_width - self._lsb, regmap.data_width))}
        for reg in regmap:
            if reg.name == "bus":
                raise ValueError("a register may not be called 'bus'")
            if reg.access == "ro":
                members[reg.name] = In(_layout(reg))
            elif reg.access in ("rw", "pulse"):
                members[reg.name] = Out(_layout(reg))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        bus = self.bus
        dw = self._regmap.data_width

        def merge(old):
            # The written word, disabled byte lanes keeping `old`.
            return _merge(bus.w_data, bus.w_strb, old, dw)

        with m.Switch(bus.r_addr):
            for reg in self._regmap:
                word = reg.address >> self._lsb
                with m.Case(word):
                    if reg.access == "const":
                        m.d.comb += bus.r_data.eq(Const(reg.value, dw))
                    elif reg.access in ("ro", "rw"):
                        m.d.comb += bus.r_data.eq(getattr(self, reg.name).as_value())
                    # pulse registers read 0
            with m.Default():
                m.d.comb += bus.r_data.eq(0)

        for reg in self._regmap:
            port = getattr(self, reg.name, None)
            hit = bus.w_stb & (bus.w_addr == (reg.address >> self._lsb))
            if reg.access == "rw":
                value = port.as_value()
                with m.If(hit):
                    m.d.sync += value.eq(merge(value)[:len(value)])
            elif reg.access == "pulse":
                with m.If(hit):
                    m.d.comb += port.as_value().eq(merge(Const(0, dw))[:reg.width])
        return m


def _merge(wdata, wstrb, old, width):
    """``wdata`` where the byte strobe is set, ``old`` (zero-extended) elsewhere."""
    old = old.as_unsigned() if hasattr(old, "as_unsigned") else old
    if len(old) < width:
        old = Cat(old, Const(0, width - len(old)))
    return Cat(*(Mux(wstrb[i], wdata[8 * i:8 * i + 8], old[8 * i:8 * i + 8])
                 for i in range(width // 8)))
