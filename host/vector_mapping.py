"""Which layers the vector unit runs, and its fields for them (issue 16).

The program engine's vector unit (:mod:`fpgacnn.core.vector_fields`) runs
the layers between the convolutions from the arena to the arena. This
module decides, for a layer of a compiled program, whether it is one of
them, with which integer parameters (:func:`vector_params`, read when the
program image is built), and turns a program image's vector record into the
unit's fields for the tensors' places (:func:`vector_fields`, read when the
run table is made). Everything else stays a host layer.

Taken, with docs/semantics.md's integer semantics unchanged:

- ``Add`` of two tensors of one shape (not a constant operand);
- ``GlobalAveragePool``, and an unpadded ``AveragePool`` with one output pixel
  whose window is a run of whole leading rows (``kw == W``) or the start of the
  first row (``kh == 1``): the first ``kh * kw`` pixels of the arena's raster
  order (ResNet-8's whole-input pool; DS-CNN's ``(24, 5)`` window over its
  ``25 x 5`` map, which leaves the last row out);
- ``Flatten`` and ``Reshape`` that keep the arena's bytes (the same channels
  and pixels, e.g. ``(C, 1, 1)`` to ``(C,)``), and the compiler's flatten in
  the arena's order (:class:`~fpgacnn.host.nhwc_flatten.FlattenNHWC`): a copy.
"""

from ..core.fields import fields_fit, in_wide_words
from ..core.vector_fields import VECTOR_FIELDS, VECTOR_MAX_PIXELS
from .integer_ops import average_params
from .layers import Add, AveragePool, GlobalAveragePool, Reshape
from .nhwc_flatten import FlattenNHWC

__all__ = ["VECTOR_ADD", "VECTOR_POOL", "VECTOR_COPY", "vector_params", "vector_fields",
           "wide_vector_fields"]

#: What a vector record computes (a program image's word).
VECTOR_ADD, VECTOR_POOL, VECTOR_COPY = 1, 2, 3


def _pixels(shape):
    return 1 if len(shape) == 1 else shape[1] * shape[2]


def _channels_and_pixels(shape):
    return shape[0], _pixels(shape)


def vector_params(layer, shapes):
    """The vector unit's parameters for ``layer``, or None if the unit does not take it.

    Parameters
    ----------
    layer : fpgacnn.host.layers.Layer
    shapes : dict
        Tensor name -> per-image shape (``(C, H, W)`` or ``(C,)``).

    Returns
    -------
    dict or None
        ``kind`` (VECTOR_ADD / VECTOR_POOL / VECTOR_COPY), ``pixels`` summed
        per output word, ``has_b``, ``ties_to_even`` and the integer
        parameters ``za zb ma mb shift zy lo hi``.
    """
    copy = dict(pixels=1, has_b=0, ties_to_even=0, za=0, zb=0, ma=1, mb=0, shift=0, zy=0,
                lo=-128, hi=127)
    if isinstance(layer, Add):
        if layer.constant is not None or shapes[layer.inputs[0]] != shapes[layer.inputs[1]]:
            return None
        return dict(kind=VECTOR_ADD, pixels=1, has_b=1, ties_to_even=0,
                    za=layer.a_zero_point, zb=layer.b_zero_point, ma=layer.ma, mb=layer.mb,
                    shift=layer.shift, zy=layer.y_zero_point, lo=layer.lo, hi=layer.hi)
    if isinstance(layer, (GlobalAveragePool, AveragePool)):
        c, h, w = shapes[layer.inputs[0]]
        kh, kw = (h, w) if isinstance(layer, GlobalAveragePool) else layer.kernel
        if isinstance(layer, AveragePool) and (
                tuple(layer.output_shape[1:]) != (1, 1) or any(layer.pads)
                or any(layer.extra) or not (kw == w or kh == 1)):
            # more than one window, padding, or taps that are not the leading pixels
            return None
        if kh * kw > VECTOR_MAX_PIXELS:
            return None
        mult, shift = average_params(layer.x_scale / layer.y_scale, kh * kw)
        return dict(kind=VECTOR_POOL, pixels=kh * kw, has_b=0, ties_to_even=1,
                    za=layer.x_zero_point, zb=0, ma=int(mult), mb=0, shift=int(shift),
                    zy=layer.y_zero_point, lo=layer.lo, hi=layer.hi)
    if isinstance(layer, FlattenNHWC):  # the arena's bytes, in their order
        return dict(kind=VECTOR_COPY, **copy)
    if isinstance(layer, Reshape):  # Flatten too
        source, dest = shapes[layer.inputs[0]], tuple(layer.output_shape)
        if len(dest) not in (1, 3) or _channels_and_pixels(source) != _channels_and_pixels(dest):
            return None
        return dict(kind=VECTOR_COPY, **copy)
    return None


def vector_fields(config, record, a, b, out):
    """The unit's fields (:data:`~fpgacnn.core.vector_fields.VECTOR_FIELDS`) for a vector
    record whose operands and output are at the places ``a``, ``b`` (None without
    ``has_b``) and ``out`` (:class:`~fpgacnn.host.program_image.TensorPlace`).

    Returns
    -------
    dict or None
        Field name -> value; addresses as ``pin``-byte words of the image.
        None when a value does not fit its field (more images than the
        16-bit count, an address past the 32-bit word space): the record is
        then the host's, never run with a value cut short.
    """
    pin = config.pin
    pool = record.kind == VECTOR_POOL
    words = a.cp // pin if pool else a.height * a.width * a.cp // pin
    values = dict(
        a_base=a.offset // pin, b_base=(b.offset // pin) if b is not None else 0,
        out_base=out.offset // pin, a_image_stride=a.image_stride // pin,
        b_image_stride=(b.image_stride // pin) if b is not None else 0,
        out_image_stride=out.image_stride // pin, images=a.batch, words=words,
        pixels=record.pixels, pixel_words=a.cp // pin if pool else 0,
        **{k: getattr(record, k) for k in ("has_b", "ties_to_even", "za", "zb", "ma", "mb",
                                             "shift", "zy", "lo", "hi")}, wide=0)
    assert set(values) == {f.name for f in VECTOR_FIELDS}
    return values if fields_fit(VECTOR_FIELDS, values) else None


#: The fields that count words (or are addresses in words): the ones ``wide`` rescales.
_WORD_FIELDS = ("a_base", "b_base", "out_base", "a_image_stride", "b_image_stride",
                "out_image_stride", "words", "pixel_words")


def wide_vector_fields(config, fields):
    """``fields`` (:func:`vector_fields`'s, ``pin``-byte words) in the read port's R-byte
    words (``wide``), or None.

    Where the port reads more than ``pin`` bytes (``k = R / pin`` words), the
    unit moves R bytes a read when every address and count of words is a
    multiple of ``k``: the same bytes in, the same bytes out.

    Returns
    -------
    dict or None
        None when ``fields`` is, when ``k`` is 1 or a count is not a multiple of it.
    """
    return in_wide_words(config, VECTOR_FIELDS, fields, _WORD_FIELDS)
