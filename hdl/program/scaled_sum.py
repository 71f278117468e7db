"""One byte lane of the vector unit's arithmetic after its sums: two scaled terms, rounded,
offset and clamped (docs/semantics.md's Add and average pool).

Shared by :class:`~fpgacnn.hdl.program.vector_unit.VectorUnit` (its lanes
after the pixel sum) and :class:`~fpgacnn.hdl.program.fused_add.FusedAdd`
(an Add on a convolution's output on its way to memory), so both compute
the same integers by one definition::

    y = clamp(round_shift(a_term * ma + b_term * mb, shift, ties) + zy, lo, hi)

``round_shift`` is ``(v + 2**(shift - 1)) >> shift`` (exact halves up), with
``ties_to_even`` an exact half to the even neighbour.
"""

from amaranth.hdl import Cat, Const, Mux, Signal, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ...core.fused_add_fields import fused_add_layout
from ...core.program_products import SCALED_SUM_MULT_BITS, scaled_sum_term_parts

__all__ = ["SCALED_SUM_STAGES", "TERM_BITS", "lane_client_signature", "scaled_sum"]

#: Bits of a lane client's terms: an int8 less an int8 zero point.
TERM_BITS = 9


def lane_client_signature(lanes):
    """The vector unit's ``lanes`` lent to the fused Add, from the Add's side (Out):
    its ``fields`` (:func:`~fpgacnn.core.fused_add_fields.fused_add_layout`; with
    ``enable`` the lanes are its), per lane ``a_terms`` and ``b_terms`` (``a - za``,
    ``b - zb``, taken every cycle), and ``y`` back (``lanes`` bytes, In)."""
    return wiring.Signature({
        "fields": Out(fused_add_layout()),
        "a_terms": Out(data.ArrayLayout(signed(TERM_BITS), lanes)),
        "b_terms": Out(data.ArrayLayout(signed(TERM_BITS), lanes)),
        "y": In(unsigned(8 * lanes)),
    })

#: Registered stages from the terms to ``y``: the products, their sum, the rounding
#: shift, the zero point and clamp.
SCALED_SUM_STAGES = 4
#: Bits of the sum of the products (at most a 32-bit term times a MULT_BITS
#: multiplier, plus a narrower one), with room for the rounding's half.
_SUM_BITS = 66


def scaled_sum(m, a_term, b_term, p, name=""):
    """Add the lane's stages to module ``m``; return its 8-bit ``y`` (two's complement).

    Parameters
    ----------
    m : Module
    a_term, b_term : Value
        Signed terms, registered by the caller (the stages start from them).
    p : View or object
        ``ma``, ``mb`` (unsigned ``MULT_BITS``), ``shift``, ``ties_to_even`` (a
        Value or 0), ``zy``, ``lo``, ``hi`` (signed 8 bits): held while the
        lane works.
    name : str
        Suffix of the lane's signal names.

    Latency
    -------
    ``y`` holds the result for terms registered :data:`SCALED_SUM_STAGES`
    cycles earlier (one result a cycle).
    """
    ma = Cat(p.ma, Const(0, 1)).as_signed()
    mb = Cat(p.mb, Const(0, 1)).as_signed()
    # a_term * ma in parts of a_term, one hard multiplier each (a 33 x 25 product as
    # one `*` takes four DSP48s in yosys's tiling, its parts two): their sum is
    # the same integer (core/program_products.py).
    a_parts = []
    for i, (offset, width, is_signed) in enumerate(scaled_sum_term_parts(len(a_term))):
        part = a_term[offset:offset + width]
        operand = part.as_signed() if is_signed else Cat(part, Const(0, 1)).as_signed()
        p_a = Signal(signed(len(operand) + SCALED_SUM_MULT_BITS), name=f"p_a{i}_{name}")
        m.d.sync += p_a.eq(operand * ma)
        a_parts.append(p_a << offset)
    p_b = Signal(signed(len(b_term) + SCALED_SUM_MULT_BITS), name=f"p_b{name}")
    v = Signal(signed(_SUM_BITS), name=f"v{name}")
    r = Signal(signed(_SUM_BITS), name=f"r{name}")
    y = Signal(8, name=f"y{name}")
    m.d.sync += [p_b.eq(b_term * mb), v.eq(sum(a_parts) + p_b)]
    # round_shift: (v + half) >> shift; ties to even: an exact half to the even one.
    half = (Const(1, _SUM_BITS) << p.shift) >> 1
    up = (v + half.as_signed()) >> p.shift
    low = v & ((Const(1, _SUM_BITS) << p.shift) - 1)
    tie = p.ties_to_even & (p.shift != 0) & (low == half) & up[0]
    m.d.sync += r.eq(up - tie)
    q = r + p.zy
    m.d.sync += y.eq(Mux(q < p.lo, p.lo, Mux(q > p.hi, p.hi, q))[:8])
    return y
