"""A float graph input -> int8 codes, in as few numpy calls as the host can make.

:meth:`fpgacnn.host.model.QuantizedModel.quantize_input` computes float32
``clip(rint(x / scale) + zp, -128, 127)`` (onnxruntime's QuantizeLinear,
ties to even) with an :class:`InputQuantizer`, made once per input. On the
sequencer the host quantizes straight into the program's arena in board
memory, the input's strided view (``(N, C, H, W)`` over the engine's
``(N, H, W, cp)`` pixels), once an inference, after a wait as long as the
engine's: there every numpy call costs a microsecond or more, and the
host's share of ResNet-8's time is a count of them (docs/program.md
"Batches"). So the common case (a float32 batch whose codes all fall inside
int8) is two reductions (the least and greatest value: a NaN or an infinity
fails the range check and is refused by the caller's checked path), a
division, one or two additions and one int8 copy a channel:

- ``rint`` and the cast to int8 are one float32 addition of ``1.5 * 2**23``:
  a sum in ``[2**23, 2**24)`` has a spacing of one, so the addition rounds
  ``x / scale`` to a whole number, ties to even as ``rint`` does (the
  constant is even), and the low byte of the sum's bits is that number's
  two's complement int8 code (the constant's low bits are zero); adding the
  zero point after it keeps it whole (before it, an odd zero point would
  move the ties; an even one is added with the constant, in one addition);
- the clip, only where a code could fall outside int8, is applied before
  the rounding, to bounds that are whole numbers (clipping commutes with
  rounding there);
- the codes are copied into the arena a channel at a time: numpy copies a
  strided int8 plane several times faster than the whole ``(N, C, H, W)``
  view, whose channels are its innermost bytes.
"""

import contextlib
import sys

import numpy as np

__all__ = ["InputQuantizer"]

_INT8, _FLOAT32 = np.dtype(np.int8), np.dtype(np.float32)

#: Added to a float32 of magnitude at most 2**22, rounds it to a whole number
#: (ties to even) whose two's complement code is the sum's low byte.
_ROUNDER = np.float32(1.5 * 2 ** 23)

#: The byte of a float32 that holds the low byte of its mantissa.
_LOW_BYTE = 0 if sys.byteorder == "little" else 3

#: Half of float32's largest finite value: ``x / scale`` cannot overflow for
#: ``|x|`` within it times the scale (where under 1).
_FLOAT32_HALF_MAX = float(np.finfo(np.float32).max) / 2

#: Channels up to which a strided ``out`` is written a channel at a time.
_PLANES_UP_TO = 8


class InputQuantizer:
    """Quantizes batches of one float graph input (module docstring).

    Parameters
    ----------
    shape : tuple of int
        The input's shape per image.
    scale : float
    zero_point : int

    Attributes
    ----------
    no_overflow : float
        Inputs within ``[-no_overflow, no_overflow]`` divide by the scale with no
        float32 overflow.
    """

    def __init__(self, shape, scale, zero_point):
        self.shape = tuple(int(d) for d in shape)
        self.scale = np.float32(scale)
        zp = int(zero_point)
        # The rounding addition, then the zero point's; one addition of their sum
        # where the zero point is even (the sum's parity, so the ties, are the
        # constant's).
        self._terms = ((np.float32(_ROUNDER + zp),) if zp % 2 == 0
                       else (_ROUNDER, np.float32(zp)))
        s = float(self.scale)
        # Inputs inside these quantize to -127..126 with no clip: the float32
        # quotient at a bound is within a millionth of a whole number, so one
        # code of margin at each end of int8 covers every rounding (the bounds'
        # own, a float32 comparison's). Past them the clip runs, to the same
        # codes. A scale that is not positive inverts them: always clipped.
        self._unclipped = ((-127 - zp) * s, (126 - zp) * s)
        self._clip = (np.float32(-128 - zp), np.float32(127 - zp))
        self.no_overflow = _FLOAT32_HALF_MAX * min(s, 1.0)
        self._into = None  # (out, float buffer, its copies): the last ``out``'s

    def __call__(self, x, out=None):
        """The codes of ``x``, if it is a float32 array of the input's shape with every
        value finite and within :attr:`no_overflow`, else None (for the caller's
        checked path, which says what is wrong or quantizes what is not wrong).

        Parameters
        ----------
        x : object
        out : numpy.ndarray of int8, optional
            Of ``x``'s shape, any strides.

        Returns
        -------
        numpy.ndarray of int8 or None
            ``out`` if given.
        """
        if not (type(x) is np.ndarray and x.dtype == _FLOAT32 and x.shape[1:] == self.shape
                and x.shape[0] and (out is None or out.shape == x.shape)):
            return None
        # Python floats: the comparisons here and in codes() cost nothing then.
        lo = float(np.minimum.reduce(x, axis=None))
        hi = float(np.maximum.reduce(x, axis=None))
        bound = self.no_overflow
        if not (-bound <= lo and hi <= bound):  # also a NaN, which compares false
            return None
        return self.codes(x, lo, hi, out)

    def codes(self, x, lo, hi, out=None):
        """``clip(rint(x / scale) + zp, -128, 127)`` of a finite float32 ``x`` whose least
        and greatest values are ``lo`` and ``hi``, into ``out`` (or a new int8 array).

        Returns
        -------
        numpy.ndarray of int8
        """
        into = self._into
        if out is not None and into is not None and into[0] is out:
            t, copies = into[1], into[2]  # the arena's view, every inference
        else:
            t, copies, out = self._buffers(x, out)
        if -self.no_overflow <= lo and hi <= self.no_overflow:
            np.divide(x, self.scale, out=t)
        else:
            # Overflow is no error here: a finite value past the int8 range
            # saturates, whatever its quotient (the clip below).
            with np.errstate(over="ignore"):
                np.divide(x, self.scale, out=t)
        if not (self._unclipped[0] <= lo and hi <= self._unclipped[1]):
            np.clip(t, *self._clip, out=t)
        for term in self._terms:
            np.add(t, term, out=t)
        for dst, src in copies:
            dst[...] = src  # (np.copyto's Python dispatch costs more than the copy)
        return out

    def _buffers(self, x, out):
        """``(float32 buffer, [(int8 destination, its codes' bytes)], out)`` for ``x``
        into ``out`` (a new int8 array where None); kept for ``out`` (until another
        is given)."""
        t = np.empty(x.shape, _FLOAT32)
        low = t.view(_INT8)[..., _LOW_BYTE::4]  # each float's low byte, x's shape
        target = np.empty(x.shape, _INT8) if out is None else out
        if out is not None and out.ndim >= 3 and out.shape[1] <= _PLANES_UP_TO:
            copies = [(out[:, c], low[:, c]) for c in range(out.shape[1])]
        else:
            copies = [(target, low)]
        if out is not None:
            self._into = (out, t, copies)
        return t, copies, target

    def overflow_guard(self, lo, hi):
        """A context in which ``x / scale`` of values from ``lo`` to ``hi`` may overflow
        without a warning (a null context where it cannot)."""
        if -self.no_overflow <= lo and hi <= self.no_overflow:
            return contextlib.nullcontext()
        return np.errstate(over="ignore")
