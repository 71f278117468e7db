"""Integer requantization: the multiplier-and-shift form of a real scale.

DESIGN.md section 2: ``y = clamp(round(acc * M) + zy, lo, hi)`` is realised as an
integer multiplier ``m`` and a right shift ``s`` with rounding, so that
``M ~= m / 2**s``. This module is the only place where that conversion and the
rounding rule are written down; the reference backend and the RTL both obey it.

Rounding is *half up* (add ``2**(s-1)``, arithmetic shift right), the cheapest
rounding in hardware. onnxruntime rounds half to even in float; the two differ
only on exact ties and by the multiplier's 2**-16 relative error, which is why
the reference is checked against onnxruntime to within 1 LSB.
"""

import numpy as np

from ..core.widths import MAX_SHIFT, MULT_BITS

__all__ = ["MULT_BITS", "MAX_SHIFT", "requant_params", "round_shift", "requantize"]



def requant_params(scale):
    """Split positive real scales into integer multipliers and right shifts.

    Parameters
    ----------
    scale : array_like of float
        Real multipliers ``M > 0`` (any shape).

    Returns
    -------
    mult : numpy.ndarray of int64
        ``MULT_BITS``-bit unsigned multipliers, normalised to ``[2**23, 2**24)``
        unless the shift saturated at ``MAX_SHIFT``.
    shift : numpy.ndarray of int64
        Right shifts in ``[0, MAX_SHIFT]``.

    Raises
    ------
    ValueError
        If a scale is not finite and positive, or so large (``>= 2**16``) that
        no non-negative shift can represent it.
    """
    scale = np.asarray(scale, dtype=np.float64)
    if not np.all(np.isfinite(scale)) or np.any(scale <= 0):
        raise ValueError(f"requantization scale must be finite and positive, got {scale.ravel()[:4]!r}...")
    mant, exp = np.frexp(scale)  # scale = mant * 2**exp, mant in [0.5, 1)
    mult = np.round(mant * (1 << MULT_BITS)).astype(np.int64)
    shift = (MULT_BITS - exp).astype(np.int64)
    carry = mult == (1 << MULT_BITS)  # mantissa rounded up to 1.0
    mult = np.where(carry, mult >> 1, mult)
    shift = np.where(carry, shift - 1, shift)
    if np.any(shift < 0):
        raise ValueError(f"requantization scale {float(scale.max())!r} is too large (limit 2**{MULT_BITS})")
    over = shift > MAX_SHIFT
    if np.any(over):
        mult = mult.copy()
        mult[over] = np.round(scale[over] * 2.0**MAX_SHIFT).astype(np.int64)
        shift = np.where(over, MAX_SHIFT, shift)
    return mult, shift


def round_shift(value, shift, ties_to_even=False):
    """``round(value / 2**shift)`` on int64 arrays, ties rounded up (or, with
    ``ties_to_even``, to the even neighbour, as the average-pooling layers do)."""
    value = np.asarray(value, dtype=np.int64)
    shift = np.asarray(shift, dtype=np.int64)
    half = np.where(shift > 0, np.left_shift(np.int64(1), np.maximum(shift - 1, 0)), 0)
    out = np.right_shift(value + half, shift)
    if ties_to_even:
        low = value & (np.left_shift(np.int64(1), shift) - 1)
        out = out - ((shift > 0) & (low == half) & (out & 1 == 1))
    return out


def requantize(acc, mult, shift, zero_point, lo=-128, hi=127, ties_to_even=False):
    """Requantize int32 accumulators to int8: ``clamp(round(acc*m/2**s) + zp, lo, hi)``.

    Parameters
    ----------
    acc : array_like of int
        Accumulators; ``mult`` and ``shift`` broadcast against it (for a
        per-channel scale, shape them to the channel axis).
    mult, shift : array_like of int
        From :func:`requant_params`.
    zero_point : int
        Output zero point.
    lo, hi : int
        Clamp bounds (a fused Relu raises ``lo`` to the zero point).
    ties_to_even : bool
        Round exact halves to even instead of up (average pooling only, where
        halves are frequent: ``sum / 4`` with equal in and out scales).

    Returns
    -------
    numpy.ndarray of int8
    """
    prod = np.asarray(acc, dtype=np.int64) * np.asarray(mult, dtype=np.int64)
    return np.clip(round_shift(prod, shift, ties_to_even) + int(zero_point), lo, hi).astype(np.int8)
