"""Registered int8 x int8 products, two per DSP on iCE40 UltraPlus parts.

The iCEBreaker's UP5K has 8 ``SB_MAC16`` DSPs; yosys's ``ice40_dsp`` maps
every 8x8 ``$mul`` to a whole DSP, so the 9 products of a 3x3 window and the
requantizer's 4 would need 13. An ``SB_MAC16`` in its 8x8 mode multiplies
both byte pairs of its operands independently (``A[15:8]*B[15:8]`` and
``A[7:0]*B[7:0]``, optionally signed, each with an output register), so
:class:`Int8Products` puts two products in each DSP when elaborated for a
device that has them, and an odd last product in LUTs (a whole DSP for one
8x8 product is what the budget cannot afford). With registered operands
(``EngineConfig.deep_pipeline``) each product on ECP5 is a
:class:`~fpgacnn.hdl.tech.dsp.PipelinedMultiplier` (a ``MULT18X18D`` with its
input and output registers). Everywhere else -- simulation, Verilog for the
Zynq flow -- it is the plain ``a * b`` after the registers, which the tools
map themselves. All forms of one latency give the same results;
``tests/test_hdl_int8_products.py`` proves the iCE40 netlist equal to the
generic one with yosys, using the ``SB_MAC16`` simulation model.
"""

from amaranth.hdl import Cat, ClockSignal, Const, Instance, Module, Mux, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ...core.contract import products_latency
from .dsp import PipelinedMultiplier, is_ecp5

__all__ = ["Int8Products", "has_sb_mac16", "latency_of"]


#: Cycles of :class:`Int8Products` (known before any instance is built): the contract's.
latency_of = products_latency


def has_sb_mac16(platform):
    """Whether ``platform`` is an iCE40 part with ``SB_MAC16`` DSPs (UltraPlus, iCE5LP)."""
    device = getattr(platform, "device", None)
    return isinstance(device, str) and device.startswith(("iCE40UP", "iCE5LP"))


class Int8Products(wiring.Component):
    """``count`` signed 8x8 products: ``o_p[i]`` = ``i_a[i] * i_b[i]`` of :attr:`latency` cycles before.

    Parameters
    ----------
    count : int
        Number of products (at least 1).
    registered_operands : bool
        Register the operands too (inside the DSPs where there are any):
        2 cycles instead of 1 (``EngineConfig.deep_pipeline``).

    Members
    -------
    i_a, i_b : In(data.ArrayLayout(signed(8), count))
    o_p : Out(data.ArrayLayout(signed(16), count))

    Notes
    -----
    On iCE40 UltraPlus and ECP5 parts the registers are those of the DSPs,
    which the ``sync`` reset does not clear; the registers hold don't-care
    values after a reset on every platform as far as the callers are
    concerned (they qualify them with a valid bit).

    Latency
    -------
    2 cycles with ``registered_operands`` (operand registers, product
    registers: the routes into and out of a DSP then each get a cycle of their
    own), else 1 (product registers).
    """

    def __init__(self, count, *, registered_operands=True):
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"count must be a positive integer, not {count!r}")
        self._count = count
        self._registered = bool(registered_operands)
        super().__init__({
            "i_a": In(data.ArrayLayout(signed(8), count)),
            "i_b": In(data.ArrayLayout(signed(8), count)),
            "o_p": Out(data.ArrayLayout(signed(16), count)),
        })

    @property
    def latency(self):
        return latency_of(self._registered)

    def elaborate(self, platform):
        m = Module()
        n = self._count
        if is_ecp5(platform) and self._registered:
            for i in range(n):
                mul = m.submodules[f"dsp{i}"] = PipelinedMultiplier(signed(8), signed(8))
                m.d.comb += [mul.a.eq(self.i_a[i]), mul.b.eq(self.i_b[i]),
                             self.o_p[i].eq(mul.p)]
            return m
        if not has_sb_mac16(platform):
            a, b = self.i_a, self.i_b
            if self._registered:
                a = Signal(data.ArrayLayout(signed(8), n), name="a_q", reset_less=True)
                b = Signal(data.ArrayLayout(signed(8), n), name="b_q", reset_less=True)
                m.d.sync += [a.eq(self.i_a), b.eq(self.i_b)]
            for i in range(n):
                m.d.sync += self.o_p[i].eq(a[i] * b[i])
            return m

        for pair in range(n // 2):
            lo, hi = 2 * pair, 2 * pair + 1
            out = Signal(32, name=f"dsp{pair}_o")
            m.submodules[f"dsp{pair}"] = Instance(
                "SB_MAC16",
                # 8x8 mode, both operands signed and registered; the top and
                # bottom products registered and selected as the outputs
                # (O[31:16], O[15:0]).
                p_MODE_8x8=Const(1, 1), p_A_SIGNED=Const(1, 1), p_B_SIGNED=Const(1, 1),
                p_A_REG=Const(self._registered, 1), p_B_REG=Const(self._registered, 1),
                p_TOP_8x8_MULT_REG=Const(1, 1), p_BOT_8x8_MULT_REG=Const(1, 1),
                p_TOPOUTPUT_SELECT=Const(2, 2), p_BOTOUTPUT_SELECT=Const(2, 2),
                i_CLK=ClockSignal("sync"), i_CE=Const(1, 1),
                i_A=Cat(self.i_a[lo], self.i_a[hi]), i_B=Cat(self.i_b[lo], self.i_b[hi]),
                i_C=Const(0, 16), i_D=Const(0, 16),
                i_AHOLD=0, i_BHOLD=0, i_CHOLD=0, i_DHOLD=0,
                i_IRSTTOP=0, i_IRSTBOT=0, i_ORSTTOP=0, i_ORSTBOT=0,
                i_OLOADTOP=0, i_OLOADBOT=0, i_ADDSUBTOP=0, i_ADDSUBBOT=0,
                i_OHOLDTOP=0, i_OHOLDBOT=0, i_CI=0, i_ACCUMCI=0, i_SIGNEXTIN=0,
                o_O=out,
            )
            m.d.comb += [self.o_p[lo].eq(out[:16]), self.o_p[hi].eq(out[16:])]
        if n % 2:
            a, b = self.i_a[n - 1], self.i_b[n - 1]
            if self._registered:
                a, b = Signal(signed(8), name="odd_a_q", reset_less=True), Signal(signed(8), name="odd_b_q", reset_less=True)
                m.d.sync += [a.eq(self.i_a[n - 1]), b.eq(self.i_b[n - 1])]
            m.d.sync += self.o_p[n - 1].eq(_lut_product(a, b))
        return m


def _lut_product(a, b):
    """``a * b`` (signed 8x8) as radix-4 Booth partial products, which yosys never maps to a DSP.

    ``b = sum(d_i * 4**i)`` with digits ``d_i = -2*b[2i+1] + b[2i] + b[2i-1]``
    in ``-2..2``, so four partial products ``d_i * a`` (``a`` or ``2a``,
    complemented when negative) and the +1s of the complements are summed:
    four adders where a partial product per bit of ``b`` would take seven
    (~100 LUT4 less on the iCE40).
    """
    b = b.as_unsigned()
    bits = [Const(0, 1)] + [b[j] for j in range(8)]  # bits[j + 1] = b[j], b[-1] = 0
    pps, negs = [], []
    for i in range(4):
        lo, mid, hi = bits[2 * i], bits[2 * i + 1], bits[2 * i + 2]
        one = mid ^ lo
        two = (hi & ~mid & ~lo) | (~hi & mid & lo)
        mag = Mux(one, a, Mux(two, a << 1, 0))  # 9 bits signed: -256..254
        pp = Mux(hi, ~mag, mag)  # ~x = -x - 1 (no wider); the 1 is added below
        pps.append(pp)
        negs.append(hi)
    correction = Cat(negs[0], Const(0, 1), negs[1], Const(0, 1), negs[2], Const(0, 1), negs[3])
    low = pps[0] + (pps[1] << 2)
    high = pps[2] + (pps[3] << 2)
    return (low + (high << 4)) + correction
