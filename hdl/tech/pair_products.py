"""Two int8 products per multiplier: pairs of products that share an operand.

Two adjacent windows of an output row meet the same weights (docs/engine.md,
"The memory bound, and the plan: two output pixels a cycle"), so a lane's
tap needs ``a0*w`` and ``a1*w``. One multiplication of the 25-bit
``a0*2**16 + a1`` by ``w`` holds both: the product is
``a0*w*2**16 + a1*w`` with ``|a1*w| <= 2**14``, so ``a1*w`` is its low 16
bits read as signed, and ``a0*w`` its bits 31..16 read as signed, plus bit
15 (the borrow a negative ``a1*w`` took from them). A 25 x 8 product is one
Xilinx DSP48E1/E2 (25 x 18 and 27 x 18 multipliers): twice the products for
the same DSPs. :class:`PairProducts` writes it as plain Verilog, which the
Zynq flow maps itself. ``tests/test_hdl_pair_products.py`` checks it against
numpy on every triple of extreme operands and on random ones, proves with
yosys's SAT solver that :func:`take_apart` recovers both products of every
sum in their range (a miter of the multiplier itself would take SAT many
minutes), and counts the DSP48E1 blocks ``synth_xilinx`` makes of it.
"""

from amaranth.hdl import Module, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ...core.contract import products_latency

__all__ = ["PairProducts", "PACKED_WIDTH", "PACKED_SHIFT", "take_apart"]

#: Where the first operand of a pair sits in the packed operand: above the
#: 16 bits the second product takes.
PACKED_SHIFT = 16
#: Bits of the packed operand ``a0*2**16 + a1`` (it reaches ``-128*2**16 - 128``).
PACKED_WIDTH = 25


def take_apart(product):
    """``(a0*w, a1*w)`` out of ``product = (a0*2**16 + a1)*w``, as Amaranth values.

    Right for any ``product = hi*2**16 + lo`` with ``-2**15 <= lo < 2**15`` and
    ``hi`` of 16 bits: ``lo`` is the low 16 bits read as signed, ``hi`` the next
    16 read as signed plus bit 15 (set where ``lo`` is negative, i.e. borrowed
    from ``hi``). Products of int8 operands stay within ``[-2**14 + 128, 2**14]``.
    """
    return (product[PACKED_SHIFT:2 * PACKED_SHIFT].as_signed() + product[PACKED_SHIFT - 1],
            product[:PACKED_SHIFT].as_signed())


class PairProducts(wiring.Component):
    """``count`` pairs of signed 8x8 products, ``a0[i]*b[i]`` and ``a1[i]*b[i]``, one multiplier a pair.

    Parameters
    ----------
    count : int
        Number of pairs (at least 1).
    registered_operands : bool
        Register the (packed) operands too, as
        :class:`~fpgacnn.hdl.tech.int8_products.Int8Products` does.

    Members
    -------
    i_a0, i_a1, i_b : In(data.ArrayLayout(signed(8), count))
    o_p0, o_p1 : Out(data.ArrayLayout(signed(16), count))
        ``i_a0[i]*i_b[i]`` and ``i_a1[i]*i_b[i]`` of :attr:`latency` cycles before.

    Latency
    -------
    That of :class:`~fpgacnn.hdl.tech.int8_products.Int8Products`
    (:func:`~fpgacnn.core.contract.products_latency`): the operand registers
    (with ``registered_operands``) and the product register, which a DSP48
    holds inside. The products are taken apart behind the product register
    (:func:`take_apart`: the low half as it is, the high half plus one bit),
    so a pair engine's MAC array has the latency of a plain one; the adder
    tree's first level then adds that bit as a carry in, a three-input sum
    one carry chain takes on Xilinx parts.
    """

    def __init__(self, count, *, registered_operands=True):
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"count must be a positive integer, not {count!r}")
        self._count = count
        self._registered = bool(registered_operands)
        pair = data.ArrayLayout(signed(8), count)
        super().__init__({
            "i_a0": In(pair), "i_a1": In(pair), "i_b": In(pair),
            "o_p0": Out(data.ArrayLayout(signed(16), count)),
            "o_p1": Out(data.ArrayLayout(signed(16), count)),
        })

    @property
    def latency(self):
        return products_latency(self._registered)

    def elaborate(self, platform):
        m = Module()
        n = self._count
        for i in range(n):
            # a0*2**16 + a1: a1's low 16 bits, above them a0 less a1's borrow.
            packed = Signal(signed(PACKED_WIDTH), name=f"packed{i}", reset_less=True)
            b = Signal(signed(8), name=f"b{i}", reset_less=True)
            operands = m.d.sync if self._registered else m.d.comb
            operands += [packed.eq((self.i_a0[i] << PACKED_SHIFT) + self.i_a1[i]),
                         b.eq(self.i_b[i])]
            product = Signal(signed(PACKED_WIDTH + 8), name=f"product{i}", reset_less=True)
            m.d.sync += product.eq(packed * b)
            p0, p1 = take_apart(product)
            m.d.comb += [self.o_p0[i].eq(p0), self.o_p1[i].eq(p1)]
        return m
