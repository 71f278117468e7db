"""The integers of a scaled sum of two int8 operands, as fields (issue 16).

``y = clamp(round_shift((a - za) * ma + (b - zb) * mb, shift) + zy, lo, hi)``:
the residual Add's parameters (docs/semantics.md), which the vector unit's
fields (:data:`fpgacnn.core.vector_fields.VECTOR_FIELDS`, where a pool's
``a`` is a sum of pixels) and the fused Add's
(:data:`fpgacnn.core.fused_add_fields.FUSED_ADD_FIELDS`) both hold, in this
order; the gateware of both computes them with one lane
(:func:`fpgacnn.hdl.program.scaled_sum.scaled_sum`).
"""

from .fields import Field
from .widths import MULT_BITS, SHIFT_BITS

__all__ = ["SCALED_SUM_FIELDS"]

#: In record order (one 32-bit word each).
SCALED_SUM_FIELDS = (
    Field("za", 8, True, "a's zero point"),
    Field("zb", 8, True, "b's zero point"),
    Field("ma", MULT_BITS, False, "a's multiplier"),
    Field("mb", MULT_BITS, False, "b's multiplier"),
    Field("shift", SHIFT_BITS, False, "the right shift, with rounding"),
    Field("zy", 8, True, "the output zero point"),
    Field("lo", 8, True, "the clamp's lower bound"),
    Field("hi", 8, True, "the clamp's upper bound"),
)
