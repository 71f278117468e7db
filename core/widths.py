"""Widths of the integer contract (DESIGN.md section 2), read by every layer.

Kept apart from :mod:`fpgacnn.core.contract` because the configuration
itself is validated against them (the contract is built from a configuration).
"""

__all__ = ["MULT_BITS", "MAX_SHIFT", "SHIFT_BITS"]

#: Width of the unsigned requantization multiplier: ``2**23 <= m < 2**24``. It
#: matches float32's 24-bit mantissa, in which onnxruntime computes its scales:
#: with 16 bits the rounding error compounds over a network to ~98% exact
#: agreement with onnxruntime; with 24 bits it is 100% on the tested models.
MULT_BITS = 24
#: Largest right shift; smaller scales lose multiplier bits (and round to 0).
MAX_SHIFT = 63
#: Bits of the shift field: ``0..MAX_SHIFT``.
SHIFT_BITS = MAX_SHIFT.bit_length()
