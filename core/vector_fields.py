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
:func:`fpgacnn.host.vector_mapping.wide_vector_fields`)::

    for image in range(images):
        for word in range(words):                    # one output word each
            acc = 0                                  # per lane, ACC_BITS signed
            for pixel in range(pixels):
                acc += a[a_base + image*a_image_stride + pixel*pixel_words + word] - za
            b_term = (b[b_base + image*b_image_stride + word] - zb) * mb  if has_b else 0
            v = acc * ma + b_term
            y = clamp(round_shift(v, shift, ties_to_even) + zy, lo, hi)
            write out_base + image*out_image_stride + word: y

which is, with the integer semantics of docs/semantics.md:

- a residual **Add** of two tensors of one shape (``pixels = 1``, ``has_b``,
  ``(ma, mb, shift)`` of ``add_params``, ties up), over every word of the
  tensor;
- a **global average pool** (``pixels = H * W``, ``(ma, shift)`` of
  ``average_params(M, H * W)``, ties to even): a GlobalAveragePool, or an
  unpadded AveragePool with one window over the first ``pixels`` pixels in
  raster order (whole leading rows, or the start of the first row);
- a **copy** (``pixels = 1``, ``ma = 1``, ``shift = 0``, zero points 0): a
  Flatten or Reshape that keeps the bytes of the arena layout (a ``(C, 1,
  1)`` tensor to ``(C,)``), which the arena does not alias.
"""

import math

from .config import require_config
from .fields import Field, struct_layout
from .memory_port import read_bytes, write_bytes
from .scaled_sum_fields import SCALED_SUM_FIELDS

__all__ = ["VectorField", "VECTOR_FIELDS", "VECTOR_ACC_BITS", "VECTOR_MAX_PIXELS",
           "VECTOR_LANE_STAGES", "VECTOR_RUN_OVERHEAD", "vector_layout", "vector_word_bytes",
           "write_chunk_bytes", "vector_accesses"]

#: Bits of the unit's per-lane accumulator (signed): a pixel adds ``x - za`` of at
#: most 255 in magnitude.
VECTOR_ACC_BITS = 32
#: Most pixels one output word sums (the ``pixels`` field): ``255 * pixels`` fits
#: the accumulator.
VECTOR_MAX_PIXELS = (1 << (VECTOR_ACC_BITS - 1)) // 255
#: Registered stages of a lane, from a read's data taken to its output word in the
#: unit's output FIFO (sum, products, their sum, round-shift, zero point and clamp).
VECTOR_LANE_STAGES = 5
#: Cycles of a vector run besides its accesses and the memory's latency: the lanes'
#: stages and three registers (the issue state's, the response FIFO's and the output
#: FIFO's); read by :func:`fpgacnn.host.cycle_model.vector_run_cycles`, exact on the
#: RTL in the tests.
VECTOR_RUN_OVERHEAD = 1 + 1 + VECTOR_LANE_STAGES + 1


#: One vector unit field (:class:`fpgacnn.core.fields.Field`).
VectorField = Field


#: In record order (one 32-bit word each). Addresses and strides count ``pin``-byte words.
VECTOR_FIELDS = (
    VectorField("a_base", 32, False, "word address of operand a's first word (image 0)"),
    VectorField("b_base", 32, False, "word address of operand b's first word (has_b)"),
    VectorField("out_base", 32, False, "word address of the first output word"),
    VectorField("a_image_stride", 32, False, "words from one image of a to the next"),
    VectorField("b_image_stride", 32, False, "words from one image of b to the next"),
    VectorField("out_image_stride", 32, False, "words from one output image to the next"),
    VectorField("images", 16, False, "images, at least 1"),
    VectorField("words", 32, False, "output words per image, at least 1"),
    VectorField("pixels", 24, False, f"pixels of a summed into each output word, 1.."
                f"{VECTOR_MAX_PIXELS:,}"),
    VectorField("pixel_words", 32, False, "words from one pixel of a to the next"),
    VectorField("has_b", 1, False, "1: add (b - zb) * mb (an Add); 0: no b read"),
    VectorField("ties_to_even", 1, False, "1: exact halves round to even (average pools); "
                "0: up"),
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


def vector_accesses(config, fields):
    """``(reads, writes)``: the memory accesses of a run of ``fields`` (a mapping of
    field name to value)."""
    wide = bool(fields.get("wide", 0))
    out_words = fields["images"] * fields["words"]
    return (out_words * (fields["pixels"] + fields["has_b"]),
            out_words * (vector_word_bytes(config, wide) // write_chunk_bytes(config, wide)))
