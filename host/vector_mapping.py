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
- ``MaxPool`` of any kernel, strides and pads (``ceil_mode`` too: its overhang
  is padding), padded taps skipped (they never win), the output quantized as
  the input (only the clamp) or not (``rescale``), and ``GlobalMaxPool``;
- ``GlobalAveragePool``, and an ``AveragePool`` of any kernel, strides and
  pads whose windows all divide by one count
  (:func:`~fpgacnn.host.integer_ops.avgpool_counts`): unpadded ones,
  ``count_include_pad`` ones without a ``ceil_mode`` overhang; padded taps
  are skipped (they add 0). Where the count differs from window to window
  (pads without ``count_include_pad``, or an overhang) the pool stays a host
  layer: the unit has one multiplier per run;
- ``Flatten`` and ``Reshape`` that keep the arena's bytes (the same channels
  and pixels, e.g. ``(C, 1, 1)`` to ``(C,)``), and the compiler's flatten in
  the arena's order (:class:`~fpgacnn.host.nhwc_flatten.FlattenNHWC`): a copy.
"""

from ..core.fields import fields_fit, in_wide_words
from ..core.vector_fields import VECTOR_FIELDS, VECTOR_MAX_PIXELS
from .integer_ops import average_params, avgpool_counts
from .layers import (Add, AveragePool, GlobalAveragePool, GlobalMaxPool, MaxPool, Reshape)
from .nhwc_flatten import FlattenNHWC

__all__ = ["VECTOR_ADD", "VECTOR_POOL", "VECTOR_COPY", "vector_params", "vector_fields",
           "wide_vector_fields"]

#: What a vector record computes (a program image's word).
VECTOR_ADD, VECTOR_POOL, VECTOR_COPY = 1, 2, 3

#: A vector record's window when it has none (an Add, a copy): one tap.
_NO_WINDOW = dict(kernel_rows=1, kernel_cols=1, stride_rows=1, stride_cols=1, pad_top=0,
                  pad_left=0, maximum=0)


def _pixels(shape):
    return 1 if len(shape) == 1 else shape[1] * shape[2]


def _channels_and_pixels(shape):
    return shape[0], _pixels(shape)


def _window(kernel, stride=(1, 1), pads=(0, 0, 0, 0), maximum=0):
    return dict(kernel_rows=kernel[0], kernel_cols=kernel[1], stride_rows=stride[0],
                stride_cols=stride[1], pad_top=pads[0], pad_left=pads[1], maximum=maximum)


def _max_pool(layer, kernel, stride=(1, 1), pads=(0, 0, 0, 0)):
    """A max pool's parameters: only the clamp where the output is quantized as the
    input, else ``rescale``'s (ties up)."""
    if layer.identity_scale:
        scaled = dict(za=0, ma=1, shift=0, zy=0)
    else:
        scaled = dict(za=layer.x_zero_point, ma=int(layer.mult), shift=int(layer.shift),
                      zy=layer.y_zero_point)
    return dict(kind=VECTOR_POOL, has_b=0, ties_to_even=0, zb=0, mb=0, lo=layer.lo,
                hi=layer.hi, **scaled, **_window(kernel, stride, pads, maximum=1))


def _average_pool(layer, kernel, count, stride=(1, 1), pads=(0, 0, 0, 0)):
    if kernel[0] * kernel[1] > VECTOR_MAX_PIXELS:  # the sum would overflow the lanes
        return None
    mult, shift = average_params(layer.x_scale / layer.y_scale, count)
    return dict(kind=VECTOR_POOL, has_b=0, ties_to_even=1, za=layer.x_zero_point, zb=0,
                ma=int(mult), mb=0, shift=int(shift), zy=layer.y_zero_point, lo=layer.lo,
                hi=layer.hi, **_window(kernel, stride, pads))


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
        ``kind`` (VECTOR_ADD / VECTOR_POOL / VECTOR_COPY), the window
        (``kernel_rows kernel_cols stride_rows stride_cols pad_top pad_left``,
        one tap for an Add or a copy; the bottom and right padding are where
        the output's size puts them), ``maximum``, ``has_b``, ``ties_to_even``
        and the integer parameters ``za zb ma mb shift zy lo hi``.
    """
    copy = dict(has_b=0, ties_to_even=0, za=0, zb=0, ma=1, mb=0, shift=0, zy=0,
                lo=-128, hi=127, **_NO_WINDOW)
    if isinstance(layer, Add):
        if layer.constant is not None or shapes[layer.inputs[0]] != shapes[layer.inputs[1]]:
            return None
        return dict(kind=VECTOR_ADD, has_b=1, ties_to_even=0,
                    za=layer.a_zero_point, zb=layer.b_zero_point, ma=layer.ma, mb=layer.mb,
                    shift=layer.shift, zy=layer.y_zero_point, lo=layer.lo, hi=layer.hi,
                    **_NO_WINDOW)
    if isinstance(layer, GlobalMaxPool):
        return _max_pool(layer, shapes[layer.inputs[0]][1:])
    if isinstance(layer, MaxPool):  # its pads include the ceil_mode overhang
        return _max_pool(layer, layer.kernel, layer.stride, layer.pads)
    if isinstance(layer, GlobalAveragePool):
        size = shapes[layer.inputs[0]][1:]
        return _average_pool(layer, size, size[0] * size[1])
    if isinstance(layer, AveragePool):
        counts = avgpool_counts(layer.input_shape[1:], layer.kernel, layer.stride,
                                layer.pads, layer.count_include_pad, layer.extra)
        if counts.min() != counts.max():  # one multiplier a run: the count must be one
            return None
        return _average_pool(layer, layer.kernel, int(counts.flat[0]), layer.stride,
                             layer.pads)
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
        16-bit count, an address past the 32-bit word space, a tap count
        past ``VECTOR_TAP_BITS``), when a pool's output pixels are not as
        many words apart as its input's, or when a window holds no tap of
        the input: the record is then the host's, never run with a value
        cut short.
    """
    pin = config.pin
    pool = record.kind == VECTOR_POOL
    window = {k: getattr(record, k) for k in _NO_WINDOW}
    if pool:
        # A window over a's pixels, one word of channels at a time; the output's pixels
        # follow each other, as many words apart as the input's.
        words = pixel_words = a.cp // pin
        if out.cp != a.cp and out.height * out.width > 1:
            return None
        size, out_size = (a.height, a.width), (out.height, out.width)
        if not all(_taps_inside(size[i], window, i, out_size[i]) for i in (0, 1)):
            return None  # a window wholly in the padding: no tap to end its output word
    else:  # one tap a word, every word of the tensor
        words, pixel_words = a.height * a.width * a.cp // pin, 0
        size = out_size = (1, 1)
    row_words = size[1] * pixel_words
    values = dict(
        a_base=a.offset // pin, b_base=(b.offset // pin) if b is not None else 0,
        out_base=out.offset // pin, a_image_stride=a.image_stride // pin,
        b_image_stride=(b.image_stride // pin) if b is not None else 0,
        out_image_stride=out.image_stride // pin, images=a.batch, words=words,
        in_rows=size[0], in_cols=size[1], out_rows=out_size[0], out_cols=out_size[1],
        **{k: v for k, v in window.items() if k != "maximum"},
        pixel_words=pixel_words, row_words=row_words,
        out_row_words=window["stride_rows"] * row_words,
        out_col_words=window["stride_cols"] * pixel_words,
        pad_words=window["pad_top"] * row_words + window["pad_left"] * pixel_words,
        maximum=window["maximum"],
        **{k: getattr(record, k) for k in ("has_b", "ties_to_even", "za", "zb", "ma", "mb",
                                             "shift", "zy", "lo", "hi")}, wide=0)
    assert set(values) == {f.name for f in VECTOR_FIELDS}
    return values if fields_fit(VECTOR_FIELDS, values) else None


def _taps_inside(size, window, axis, out):
    """Whether every window along ``axis`` (0 rows, 1 columns) holds a tap of the input."""
    kernel, stride, pad = (window[k] for k in (("kernel_rows", "stride_rows", "pad_top"),
                                               ("kernel_cols", "stride_cols", "pad_left"))[axis])
    return kernel > pad and (out - 1) * stride - pad < size


#: The fields that count words (or are addresses in words): the ones ``wide`` rescales.
_WORD_FIELDS = ("a_base", "b_base", "out_base", "a_image_stride", "b_image_stride",
                "out_image_stride", "words", "pixel_words", "row_words", "out_row_words",
                "out_col_words", "pad_words")


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
