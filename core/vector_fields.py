"""The vector unit's fields and limits: the layers between the convolutions (issue 16).

Declared once; the gateware (:class:`fpgacnn.hdl.program.vector_unit.VectorUnit`)
reads them as an Amaranth struct from a run-table record
(:mod:`fpgacnn.core.sequencer`), the host
(:mod:`fpgacnn.host.vector_mapping`) fills them from a layer, and the cycle
model (:func:`fpgacnn.host.cycle_model.vector_run_cycles`) reads the same
numbers. See docs/program.md, "Layers between the convolutions".

The unit reads ``pin``-byte words of the arena (addresses count words) and
writes ``pin``-byte words, one lane per channel byte, in one counter nest
(with ``wide``, words of the read port's R bytes, a beat where ``pin`` is
narrower: an Add's two reads a word then move twice the bytes; the host sets
it where every address and count is a whole number of them,
:func:`fpgacnn.host.vector_mapping.wide_vector_fields`). A window of
``kernel_rows x kernel_cols`` taps slides over an input of ``in_rows x
in_cols`` pixels, ``stride_rows`` / ``stride_cols`` pixels an output pixel,
from ``(-pad_top, -pad_left)``; its taps outside the input are skipped (no
read, one issue cycle each)::

    for image in range(images):
        for oy in range(out_rows):
            for ox in range(out_cols):
                for word in range(words):            # one output word each
                    acc = None                       # per lane, ACC_BITS signed
                    for ky in range(kernel_rows):
                        for kx in range(kernel_cols):
                            iy = oy*stride_rows - pad_top + ky
                            ix = ox*stride_cols - pad_left + kx
                            if not (0 <= iy < in_rows and 0 <= ix < in_cols):
                                continue             # a tap in the padding
                            d = a[a_base + image*a_image_stride + iy*row_words
                                  + ix*pixel_words + word] - za
                            acc = d if acc is None else max(acc, d) if maximum else acc + d
                    b_term = (b[b_base + image*b_image_stride + word] - zb) * mb  if has_b else 0
                    v = acc * ma + b_term
                    y = clamp(round_shift(v, shift, ties_to_even) + zy, lo, hi)
                    write the image's next output word: y

The output words of an image follow each other from ``out_base +
image*out_image_stride`` (``out_rows * out_cols * words`` of them). The
window's steps in words are fields of their own, so that the unit needs no
multiplier: ``out_row_words = stride_rows * row_words``, ``out_col_words =
stride_cols * pixel_words`` and ``pad_words = pad_top * row_words + pad_left
* pixel_words`` (:func:`fpgacnn.host.vector_mapping.vector_fields` makes them
from one window). Every window must hold a tap of the input (as every pool's
does: its pads are smaller than its kernel), or the run never ends.

Which is, with the integer semantics of docs/semantics.md:

- a residual **Add** of two tensors of one shape (a 1 x 1 window and input,
  ``words`` every word of the tensor, ``has_b``, ``(ma, mb, shift)`` of
  ``add_params``, ties up);
- an **average pool** (``(ma, shift)`` of ``average_params(M, count)``, ties
  to even): a GlobalAveragePool (the window the whole input), or an
  AveragePool whose windows all divide by one ``count`` (padding and the
  ``ceil_mode`` overhang are skipped taps, which add 0);
- a **max pool** (``maximum``): MaxPool and GlobalMaxPool, padded taps never
  win; with the output quantized as the input ``za = zy = 0``, ``ma = 1``,
  ``shift = 0`` (only the clamp), else ``rescale``'s ``(ma, shift)``, ties up;
- a **copy** (a 1 x 1 window, ``ma = 1``, ``shift = 0``, zero points 0): a
  Flatten or Reshape that keeps the bytes of the arena layout (a ``(C, 1,
  1)`` tensor to ``(C,)``), which the arena does not alias.
"""

import math

from .config import require_config
from .fields import Field, struct_layout
from .memory_port import read_bytes, write_bytes
from .scaled_sum_fields import SCALED_SUM_FIELDS

__all__ = ["VectorField", "VECTOR_FIELDS", "VECTOR_ACC_BITS", "VECTOR_MAX_PIXELS",
           "VECTOR_TAP_BITS", "VECTOR_LANE_STAGES", "VECTOR_RUN_OVERHEAD", "vector_layout",
           "vector_word_bytes", "write_chunk_bytes", "window_taps", "vector_accesses"]

#: Bits of the unit's per-lane accumulator (signed): a pixel adds ``x - za`` of at
#: most 255 in magnitude.
VECTOR_ACC_BITS = 32
#: Most taps one output word sums (``kernel_rows * kernel_cols`` of an average
#: pool): ``255 * taps`` fits the accumulator. A maximum never grows, so a max
#: pool's window is bounded only by its fields.
VECTOR_MAX_PIXELS = (1 << (VECTOR_ACC_BITS - 1)) // 255
#: Bits of the fields that count pixels or taps along an axis (the input, the
#: window, the output, strides and pads): wide enough for a global pool's window
#: over a ``1 x VECTOR_MAX_PIXELS`` map.
VECTOR_TAP_BITS = 24
assert VECTOR_MAX_PIXELS < 1 << VECTOR_TAP_BITS
#: Registered stages of a lane, from a read's data taken to its output word in the
#: unit's output FIFO (sum, products, their sum, round-shift, zero point and clamp).
VECTOR_LANE_STAGES = 5
#: Cycles of a vector run besides its issue slots, its writes and the memory's
#: latency: the lanes' stages and three registers (the issue state's, the response
#: FIFO's and the output FIFO's); read by
#: :func:`fpgacnn.host.cycle_model.vector_run_cycles`, exact on the RTL in the tests.
VECTOR_RUN_OVERHEAD = 1 + 1 + VECTOR_LANE_STAGES + 1


#: One vector unit field (:class:`fpgacnn.core.fields.Field`).
VectorField = Field


def _taps(name, doc):
    return VectorField(name, VECTOR_TAP_BITS, False, doc)


#: In record order (one 32-bit word each). Addresses and strides count ``pin``-byte words.
VECTOR_FIELDS = (
    VectorField("a_base", 32, False, "word address of operand a's first word (image 0)"),
    VectorField("b_base", 32, False, "word address of operand b's first word (has_b)"),
    VectorField("out_base", 32, False, "word address of the first output word"),
    VectorField("a_image_stride", 32, False, "words from one image of a to the next"),
    VectorField("b_image_stride", 32, False, "words from one image of b to the next"),
    VectorField("out_image_stride", 32, False, "words from one output image to the next"),
    VectorField("images", 16, False, "images, at least 1"),
    VectorField("words", 32, False, "output words per output pixel, at least 1"),
    _taps("in_rows", "rows of a's input image (taps past them are skipped)"),
    _taps("in_cols", "columns of a's input image (taps past them are skipped)"),
    _taps("kernel_rows", "rows of the window, at least 1"),
    _taps("kernel_cols", f"columns of the window, at least 1; an average pool's "
          f"kernel_rows * kernel_cols at most {VECTOR_MAX_PIXELS:,}"),
    _taps("out_rows", "output pixel rows per image, at least 1"),
    _taps("out_cols", "output pixel columns per image, at least 1"),
    _taps("stride_rows", "input rows from one window to the next output row's"),
    _taps("stride_cols", "input columns from one window to the next output column's"),
    _taps("pad_top", "rows of padding above the input (the first window's first row "
          "is -pad_top)"),
    _taps("pad_left", "columns of padding left of the input"),
    VectorField("pixel_words", 32, False, "words from one pixel of a to the next"),
    VectorField("row_words", 32, False, "words from one row of a to the next"),
    VectorField("out_row_words", 32, False, "words from one output row's windows to the "
                "next's: stride_rows * row_words"),
    VectorField("out_col_words", 32, False, "words from one window to the next in a row: "
                "stride_cols * pixel_words"),
    VectorField("pad_words", 32, False, "words from the first window's first tap to a's "
                "first pixel: pad_top * row_words + pad_left * pixel_words"),
    VectorField("has_b", 1, False, "1: add (b - zb) * mb (an Add); 0: no b read"),
    VectorField("ties_to_even", 1, False, "1: exact halves round to even (average pools); "
                "0: up"),
    VectorField("maximum", 1, False, "1: the window's maximum of a - za (max pools); "
                "0: its sum"),
    *SCALED_SUM_FIELDS,
    VectorField("wide", 1, False, "1: a word is the read port's R bytes (R lanes: "
                "read_bytes(config)) and every address and count of words counts those; "
                "0: pin-byte words"),
)


def vector_layout():
    """The fields as a :class:`amaranth.lib.data.StructLayout`."""
    return struct_layout(VECTOR_FIELDS)


def vector_word_bytes(config, wide=False):
    """Bytes of one of the unit's words: ``pin``, or with ``wide`` the read port's R."""
    require_config(config)
    return read_bytes(config) if wide else config.pin


def write_chunk_bytes(config, wide=False):
    """Bytes of one memory write of the unit: an output word of ``word`` bytes
    (:func:`vector_word_bytes`) is written in ``word / chunk`` writes of ``chunk =
    gcd(word, W)`` bytes (``W`` the memory port's write width)."""
    return math.gcd(vector_word_bytes(config, wide), write_bytes(config))


def window_taps(fields, axis):
    """Per output position along ``axis`` (``"rows"`` or ``"cols"``), the offsets in
    the window of its first and last tap inside the input: a list of ``(first,
    last)``. The unit reads the taps between them (on both axes) and skips the
    others."""
    size, kernel, out = (fields[f"{n}_{axis}"] for n in ("in", "kernel", "out"))
    stride, pad = fields[f"stride_{axis}"], fields["pad_top" if axis == "rows" else "pad_left"]
    taps = []
    for o in range(out):
        start = o * stride - pad
        taps.append((max(0, -start), min(kernel, size - start) - 1))
    return taps


def vector_accesses(config, fields):
    """``(reads, writes)``: the memory accesses of a run of ``fields`` (a mapping of
    field name to value)."""
    wide = bool(fields.get("wide", 0))
    rows, cols = (sum(last - first + 1 for first, last in window_taps(fields, axis))
                  for axis in ("rows", "cols"))
    words = fields["images"] * fields["words"]
    return (words * (rows * cols + fields["has_b"] * fields["out_rows"] * fields["out_cols"]),
            words * fields["out_rows"] * fields["out_cols"]
            * (vector_word_bytes(config, wide) // write_chunk_bytes(config, wide)))
