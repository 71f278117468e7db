"""A narrow, saturating arithmetic right shift for the requantizer.

The requantizer's result is clamped to int8, so of ``round(p / 2**s)`` only
the low bits matter, plus whether the value is beyond them (and its sign).
A full-width barrel shifter of the 58-bit product and a 64-bit rounding add
(the obvious datapath) cost ~1,000 LUT4 + carries per lane on an iCE40; this
shifter narrows at every level instead:

- the rounding is folded into the shift: for ``s >= 0``,
  ``(p + (2**s >> 1)) >> s == ((2*p >> s) + 1) >> 1``, so the rounding add is
  done after the shift, on a few bits (:func:`round_half_up`);
- a level that shifts by ``2**k`` (shift bits from the top) only keeps the bits
  the remaining levels can still bring down into the result, ``2**k - 1 +
  width``; if the dropped bits are not copies of the kept sign bit, the
  value is out of range whatever the remaining shift, which an ``overflow``
  flag remembers (:func:`shift_levels`), and :func:`saturate` replaces the
  value by the bound of its sign at the end.

Every function builds combinational logic only, so that the caller chooses
where the pipeline registers go.
"""

from amaranth.hdl import Cat, Const, Mux, signed

__all__ = ["double", "shift_levels", "saturate", "round_half_up"]


def shift_levels(value, overflow, shift, levels, width):
    """Apply some bits of an arithmetic right shift, dropping bits that cannot matter.

    Parameters
    ----------
    value : signed Value
        The value shifted so far.
    overflow : Value (1 bit)
        Set when the final result is known to be outside ``width`` signed bits.
    shift : Value
        The whole shift amount; only its bits ``levels`` are applied here.
    levels : iterable of int
        Shift bits to apply now. Levels must be applied from the most
        significant bit down, across calls too: the width kept after level
        ``k`` assumes that only the levels below ``k`` remain.
    width : int
        Width of the final (saturated) result.

    Returns
    -------
    (signed Value, Value)
        The shifted value, at most ``2**min(levels) - 1 + width`` bits wide,
        and the updated overflow flag.
    """
    for k in sorted(levels, reverse=True):
        shifted = Mux(shift[k], value >> (1 << k), value)
        keep = (1 << k) - 1 + width
        if len(shifted) > keep:
            # The kept sign bit and everything above it must agree, else
            # |value| >= 2**(keep-1) and no remaining shift brings it in range.
            top = shifted.as_unsigned()[keep - 1:]
            fits = (top == 0) | (top == Const(-1, len(top)).as_unsigned())
            overflow = overflow | ~fits
            shifted = shifted.as_unsigned()[:keep].as_signed()
        value = shifted
    return value, overflow


def saturate(value, overflow, sign, width):
    """``value`` as ``width`` signed bits, or the bound of ``sign`` when ``overflow``.

    ``value`` must already fit ``width`` bits when ``overflow`` is clear (as
    after :func:`shift_levels` down to level 0); ``sign`` is the sign of the
    unshifted value, which an arithmetic shift keeps.
    """
    hi = Const((1 << (width - 1)) - 1, signed(width))
    lo = Const(-(1 << (width - 1)), signed(width))
    return Mux(overflow, Mux(sign, lo, hi), value.as_unsigned()[:width].as_signed())


def round_half_up(doubled_shifted):
    """``(v + 1) >> 1``: the rounding step after shifting ``2*p`` (module docstring)."""
    return ((doubled_shifted + 1) >> 1)


def double(value):
    """``2*value``, one bit wider (the shift then includes the rounding position)."""
    return Cat(Const(0, 1), value.as_unsigned()).as_signed()
