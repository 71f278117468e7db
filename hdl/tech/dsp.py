"""Registered multipliers that become whole ECP5 DSP blocks, and platform tests.

Yosys maps a ``*`` to an ECP5 ``MULT18X18D`` but leaves the registers around
it in the fabric, so each product pays a fabric-to-DSP route, the multiplier
and a DSP-to-fabric route in one cycle. The block has input and output
registers of its own; :class:`PipelinedMultiplier` instantiates it with both
enabled when elaborated for an ECP5 platform, and writes the same two
register stages around a generic ``*`` everywhere else (simulation,
Verilator, the Zynq flow, iCE40). Both have the same latency and products.
No simulation model of the block ships with the PyPI tools, so
``tests/test_hdl_dsp.py`` checks the generic form against numpy in the
simulator and the ECP5 netlist's blocks (both registers clocked, operands
sign-extended) as text.
"""

from amaranth.hdl import ClockSignal, Instance, Module, Signal, signed, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ...core.contract import MULTIPLIER_LATENCY

__all__ = ["PipelinedMultiplier", "DSP18_WIDTH", "is_ecp5"]

#: Operand width of the ECP5 ``MULT18X18D`` (signed).
DSP18_WIDTH = 18


def is_ecp5(platform):
    """Whether ``platform`` is an Amaranth Lattice ECP5 platform."""
    return getattr(platform, "family", None) == "ecp5"


def _fits_dsp18(shape):
    return shape.width + (0 if shape.signed else 1) <= DSP18_WIDTH


class PipelinedMultiplier(wiring.Component):
    """``p = a * b`` with registered operands and a registered product.

    Parameters
    ----------
    a_shape, b_shape : amaranth Shape
        Operand shapes, signed or unsigned. For the ECP5 block both must fit
        an 18-bit signed operand (17 bits when unsigned); wider operands take
        the generic path there too (yosys then splits the product over
        several blocks and adds the parts in the fabric, slower).

    Members
    -------
    a : In(a_shape)
    b : In(b_shape)
    p : Out(a.width + b.width), signed if either operand is
        ``a * b`` of the operands :attr:`latency` cycles earlier, exact.

    Notes
    -----
    The registers have no reset (the block's are used without one); callers
    qualify ``p`` with a valid bit of their own.

    Latency
    -------
    :attr:`latency` = 2: operand registers, product register.
    """

    def __init__(self, a_shape, b_shape):
        self._a_shape = signed(a_shape.width) if a_shape.signed else unsigned(a_shape.width)
        self._b_shape = signed(b_shape.width) if b_shape.signed else unsigned(b_shape.width)
        width = self._a_shape.width + self._b_shape.width
        p_shape = signed(width) if (a_shape.signed or b_shape.signed) else unsigned(width)
        super().__init__({"a": In(self._a_shape), "b": In(self._b_shape), "p": Out(p_shape)})

    #: Cycles from the operands to their product (known before any instance is built).
    LATENCY = MULTIPLIER_LATENCY

    @property
    def latency(self):
        return self.LATENCY

    def uses_dsp18(self, platform):
        """Whether :meth:`elaborate` instantiates a ``MULT18X18D`` for ``platform``."""
        return is_ecp5(platform) and _fits_dsp18(self._a_shape) and _fits_dsp18(self._b_shape)

    def elaborate(self, platform):
        m = Module()
        if self.uses_dsp18(platform):
            self._mult18x18d(m)
        else:
            a = Signal(self._a_shape, name="a_q", reset_less=True)
            b = Signal(self._b_shape, name="b_q", reset_less=True)
            p = Signal.like(self.p, name="p_q", reset_less=True)
            m.d.sync += [a.eq(self.a), b.eq(self.b), p.eq(a * b)]
            m.d.comb += self.p.eq(p)
        return m

    def _mult18x18d(self, m):
        # Both operands sign-extended to 18 bits (an unsigned one gains a zero
        # sign bit), so the block always multiplies signed by signed.
        a18, b18 = Signal(signed(DSP18_WIDTH)), Signal(signed(DSP18_WIDTH))
        p36 = Signal(signed(2 * DSP18_WIDTH))
        m.d.comb += [a18.eq(self.a), b18.eq(self.b), self.p.eq(p36[:len(self.p)])]
        ports = {
            "p_REG_INPUTA_CLK": "CLK0", "p_REG_INPUTA_CE": "CE0", "p_REG_INPUTA_RST": "RST0",
            "p_REG_INPUTB_CLK": "CLK0", "p_REG_INPUTB_CE": "CE0", "p_REG_INPUTB_RST": "RST0",
            "p_REG_INPUTC_CLK": "NONE", "p_REG_PIPELINE_CLK": "NONE",
            "p_REG_OUTPUT_CLK": "CLK0", "p_REG_OUTPUT_CE": "CE0", "p_REG_OUTPUT_RST": "RST0",
            "p_CLK0_DIV": "ENABLED", "p_CLK1_DIV": "ENABLED", "p_CLK2_DIV": "ENABLED",
            "p_CLK3_DIV": "ENABLED", "p_HIGHSPEED_CLK": "NONE",
            "p_GSR": "DISABLED", "p_CAS_MATCH_REG": "FALSE", "p_SOURCEB_MODE": "B_SHIFT",
            "p_MULT_BYPASS": "DISABLED", "p_RESETMODE": "SYNC",
            "i_CLK0": ClockSignal("sync"), "i_CE0": 1, "i_RST0": 0,
            "i_SIGNEDA": 1, "i_SIGNEDB": 1, "i_SOURCEA": 0, "i_SOURCEB": 0,
        }
        for i in range(DSP18_WIDTH):
            ports[f"i_A{i}"] = a18[i]
            ports[f"i_B{i}"] = b18[i]
            ports[f"i_C{i}"] = 0
        for i in range(2 * DSP18_WIDTH):
            ports[f"o_P{i}"] = p36[i]
        m.submodules.dsp = Instance("MULT18X18D", **ports)
