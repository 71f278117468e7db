"""A unit's fields: the layer descriptor's and the words the sequencer hands the
pixel reader, the pixel writer and the vector unit, with their widths, ranges
and Amaranth layout, defined once for all of them (:mod:`fpgacnn.core.descriptor`,
:mod:`fpgacnn.core.pixel_reader_fields`, :mod:`fpgacnn.core.pixel_writer_fields`,
:mod:`fpgacnn.core.vector_fields`).

The host fills the fields from a record and asks :func:`fields_fit` before it
hands them to the gateware, which keeps only ``width`` bits of each: a value
that does not fit is a record the unit does not take (the host runs it), never
a value cut short.
"""

from dataclasses import dataclass

from amaranth.hdl import signed, unsigned
from amaranth.lib import data

from .memory_port import words_per_read

__all__ = ["Field", "field_range", "fields_fit", "in_wide_words", "struct_layout"]


@dataclass(frozen=True)
class Field:
    """One field: ``width`` bits, two's complement when ``signed``."""

    name: str
    width: int
    signed: bool
    doc: str


def field_range(field):
    """``(lo, hi)``: the values the field holds."""
    if getattr(field, "signed", False):
        return -(1 << (field.width - 1)), (1 << (field.width - 1)) - 1
    return 0, (1 << field.width) - 1


def fields_fit(fields, values):
    """Whether every field's value (``values``: name -> int) is in its range."""
    for f in fields:
        lo, hi = field_range(f)
        if not lo <= values[f.name] <= hi:
            return False
    return True


def in_wide_words(config, fields, values, word_fields):
    """``values`` (counts of ``pin``-byte words in ``word_fields``) in the read port's
    R-byte words with ``wide`` set, or None.

    None when ``values`` is, when the port reads no more than ``pin``
    (:func:`~fpgacnn.core.memory_port.read_bytes`), when a count in
    ``word_fields`` is not a whole number of R-byte words, or when a value
    does not fit its field of ``fields``.
    """
    k = words_per_read(config)
    if values is None or k == 1 or any(values[name] % k for name in word_fields):
        return None
    wide = dict(values, wide=1, **{name: values[name] // k for name in word_fields})
    return wide if fields_fit(fields, wide) else None


def struct_layout(fields):
    """The fields as a :class:`amaranth.lib.data.StructLayout`, in order."""
    return data.StructLayout({
        f.name: (signed(f.width) if getattr(f, "signed", False) else unsigned(f.width))
        for f in fields})
