"""A two-stage pipelined multiplier that becomes one registered ECP5 DSP block.

Yosys maps a ``*`` to a MULT18X18D on ECP5 but leaves the registers around
it in the fabric, so every product pays a fabric-to-DSP and a DSP-to-fabric
route plus the multiplier itself in one cycle (about 100 MHz for the MAC
array of the ULX3S-85F engine). The DSP block has input and output registers
of its own; using them takes the routes out of the multiplier's cycle.
Yosys does not do that by itself, so :class:`PipelinedMultiplier` instantiates
the block when it is elaborated for an ECP5 platform and writes the same two
register stages around a generic ``*`` otherwise (simulation, Verilator,
other vendors). Both have the same latency and give the same products.
"""

from amaranth.hdl import ClockSignal, Instance, Module, Signal, signed, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["PipelinedMultiplier", "is_ecp5"]

#: Operand width of the MULT18X18D (signed).
DSP_WIDTH = 18


def is_ecp5(platform):
    """True when elaborating for an Amaranth Lattice ECP5 platform."""
    return platform is not None and getattr(platform, "family", None) == "ecp5"


def _fits_dsp(width, is_signed):
    return width + (0 if is_signed else 1) <= DSP_WIDTH


class PipelinedMultiplier(wiring.Component):
    """``p = a * b`` with registered operands and a registered product.

    Parameters
    ----------
    a_shape, b_shape : amaranth Shape
        Operand shapes (signed or unsigned). On ECP5 both must fit an 18-bit
        signed operand (17 bits when unsigned); wider operands fall back to
        the generic path (still two stages, but yosys splits the product over
        several DSPs and adds the parts in the fabric).

    Members
    -------
    a : In(a_shape)
    b : In(b_shape)
    p : Out(signed or unsigned(a.width + b.width))
        ``a * b`` of the operands :attr:`latency` cycles earlier, exact
        (signed if either operand is).

    Latency
    -------
    :attr:`latency` = 2: operand registers, product register. The registers
    have no reset (their content only matters when the caller's valid says
    so), as the DSP's registers are used without one.
    """

    def __init__(self, a_shape, b_shape):
        self._a_shape = a_shape = signed(a_shape.width) if a_shape.signed else unsigned(a_shape.width)
        self._b_shape = b_shape = signed(b_shape.width) if b_shape.signed else unsigned(b_shape.width)
        width = a_shape.width + b_shape.width
        p_shape = signed(width) if (a_shape.signed or b_shape.signed) else unsigned(width)
        super().__init__({"a": In(a_shape), "b": In(b_shape), "p": Out(p_shape)})

    @property
    def latency(self):
        """Cycles from the operands to their product on ``p``."""
        return 2

    def uses_dsp_primitive(self, platform):
        """Whether :meth:`elaborate` instantiates a MULT18X18D for ``platform``."""
        return (is_ecp5(platform) and _fits_dsp(self._a_shape.width, self._a_shape.signed)
                and _fits_dsp(self._b_shape.width, self._b_shape.signed))

    def elaborate(self, platform):
        m = Module()
        if self.uses_dsp_primitive(platform):
            self._ecp5_dsp(m)
        else:
            a = Signal(self._a_shape, reset_less=True)
            b = Signal(self._b_shape, reset_less=True)
            p = Signal.like(self.p, reset_less=True)
            m.d.sync += [a.eq(self.a), b.eq(self.b), p.eq(a * b)]
            m.d.comb += self.p.eq(p)
        return m

    def _ecp5_dsp(self, m):
        # Both operands are sign-extended to 18 bits (an unsigned one gains a
        # zero sign bit), so the block always multiplies signed by signed.
        a18 = Signal(signed(DSP_WIDTH))
        b18 = Signal(signed(DSP_WIDTH))
        p36 = Signal(signed(2 * DSP_WIDTH))
        m.d.comb += [a18.eq(self.a), b18.eq(self.b), self.p.eq(p36[:len(self.p)])]
        ports = {
            "p_REG_INPUTA_CLK": "CLK0", "p_REG_INPUTA_CE": "CE0", "p_REG_INPUTA_RST": "RST0",
            "p_REG_INPUTB_CLK": "CLK0", "p_REG_INPUTB_CE": "CE0", "p_REG_INPUTB_RST": "RST0",
            "p_REG_INPUTC_CLK": "NONE",
            "p_REG_PIPELINE_CLK": "NONE",
            "p_REG_OUTPUT_CLK": "CLK0", "p_REG_OUTPUT_CE": "CE0", "p_REG_OUTPUT_RST": "RST0",
            "p_CLK0_DIV": "ENABLED", "p_CLK1_DIV": "ENABLED", "p_CLK2_DIV": "ENABLED",
            "p_CLK3_DIV": "ENABLED", "p_HIGHSPEED_CLK": "NONE",
            "p_GSR": "DISABLED", "p_CAS_MATCH_REG": "FALSE", "p_SOURCEB_MODE": "B_SHIFT",
            "p_MULT_BYPASS": "DISABLED", "p_RESETMODE": "SYNC",
            "i_CLK0": ClockSignal("sync"), "i_CE0": 1, "i_RST0": 0,
            "i_SIGNEDA": 1, "i_SIGNEDB": 1, "i_SOURCEA": 0, "i_SOURCEB": 0,
        }
        for i in range(DSP_WIDTH):
            ports[f"i_A{i}"] = a18[i]
            ports[f"i_B{i}"] = b18[i]
            ports[f"i_C{i}"] = 0
        for i in range(2 * DSP_WIDTH):
            ports[f"o_P{i}"] = p36[i]
        m.submodules.dsp = Instance("MULT18X18D", **ports)
