"""The pixel writer's fields: how it writes a run's output stream into memory (issue 16).

Declared once; the gateware (:class:`fpgacnn.hdl.program.pixel_writer.PixelWriter`)
reads them as an Amaranth struct, and the host
(:func:`fpgacnn.host.pixel_writer_setup.writer_fields`) fills them from a
program image's engine record (its destination pattern). See
docs/program.md, "How a program runs".

The writer cuts the output stream (docs/engine.md, "Stream formats") into
*units* of ``u = min(pout, stream_bytes)`` bytes, or with ``wide`` (an
engine whose packer can send a beat a cycle,
:func:`fpgacnn.core.memory_port.writer_has_wide`) of a whole beat, one a
cycle either way (addresses and strides count units), and walks one affine
counter nest over them::

    for image in range(images):
        for row in range(rows):                          # written to memory
            for col in range(cols):
                for unit in range(units):
                    if unit < kept_units:
                        write base + image*image_stride + row*row_stride
                              + col*pixel_stride + unit
                    # else: a lane of a channel past the run's (dropped)
        for unit in range(drop_units):                   # dropped
            pass

and of the last kept unit of a pixel only the lanes below ``last_lanes``
are written (byte strobes): the channels of the next channel group, or the
tensor's padding channels, keep their bytes. That nest is every destination
the writer takes:

- a column scatter: ``rows`` output rows (those of the tensor; a pooled
  layer's extra row is dropped with the beat padding) of ``cols`` columns,
  ``kept_units`` of the pixel's ``co_tiles * pout / u`` units;
- a Gemm batch chunk: one "row" of ``cols`` feature vectors,
  ``pixel_stride`` one tensor image apart, the chunk image's padding pixels
  and the beat padding dropped.
"""

from dataclasses import dataclass

from amaranth.hdl import unsigned
from amaranth.lib import data

from .memory_port import writer_unit

__all__ = ["WriterField", "WRITER_FIELDS", "writer_layout", "writer_beat_cycles"]


@dataclass(frozen=True)
class WriterField:
    name: str
    width: int
    doc: str


#: In register order. Addresses and strides count units of a 32-bit byte address space.
WRITER_FIELDS = (
    WriterField("base", 32, "unit address of the first unit written: image 0, row 0, the "
                "first column, the first channel"),
    WriterField("image_stride", 32, "units from one image's first written unit to the next "
                "image's"),
    WriterField("row_stride", 32, "units from one row's first written unit to the next row's"),
    WriterField("pixel_stride", 32, "units from one pixel's first unit to the next pixel's in "
                "a row (a Gemm chunk: one tensor image)"),
    WriterField("images", 16, "images of the run (the descriptor's batch), at least 1"),
    WriterField("rows", 16, "rows written per image, at least 1"),
    WriterField("cols", 16, "pixels written per row, at least 1"),
    WriterField("units", 16, "units of an output pixel in the stream, at least 1"),
    WriterField("kept_units", 16, "units of a pixel that are written, 1..units"),
    WriterField("last_lanes", 8, "bytes of a pixel's last kept unit that are written, 1..u"),
    WriterField("drop_units", 32, "units dropped at the end of each image (rows past the "
                "tensor, a Gemm chunk's padding pixels, the padding to a whole beat)"),
    WriterField("wide", 1, "1: a unit is a whole beat (writer_unit(config, wide=True)) and "
                "every address and count of units counts those; only where the writer has "
                "the mode (core.memory_port.writer_has_wide), ignored elsewhere; 0: units of "
                "writer_unit(config)"),
)


def writer_layout():
    """The fields as a :class:`amaranth.lib.data.StructLayout`."""
    return data.StructLayout({f.name: unsigned(f.width) for f in WRITER_FIELDS})


def writer_beat_cycles(config, fields, beat):
    """Cycles the pixel writer spends on beat ``beat`` of an image of its stream.

    A unit of the counter nest leaves a cycle, written or dropped (a lane past
    ``kept_units``); the image's dropped tail leaves a whole beat a cycle, and
    the part of it in the beat of the image's last written unit leaves with
    that unit (:class:`~fpgacnn.hdl.program.pixel_writer.PixelWriter`'s
    Latency). So a beat of written units takes a cycle a unit, the beat of the
    image's last written unit a cycle for each of its units up to that one,
    and a beat wholly in the tail one cycle. The cycle model reads it: the
    writer takes the next beat in the cycle the last unit of this one leaves,
    so where it takes less than a beat a cycle the beat before a run's last
    one can hold the last one back (:func:`fpgacnn.host.cycle_model.layer_cycles`).

    Parameters
    ----------
    config : EngineConfig
    fields : mapping
        The writer's fields (:data:`WRITER_FIELDS`).
    beat : int
        The beat's index in its image, from 0.

    Returns
    -------
    int
        Cycles, with the stream never paused and every write taken at once.

    Raises
    ------
    ValueError
        When ``beat`` is not a beat of the image.
    """
    per_beat = config.stream_bytes // writer_unit(config, wide=bool(fields["wide"]))
    written = fields["rows"] * fields["cols"] * fields["units"]
    beats = (written + fields["drop_units"]) // per_beat
    if not 0 <= beat < beats:
        raise ValueError(f"beat {beat} is not one of the image's {beats}")
    first = beat * per_beat
    if first + per_beat <= written:
        return per_beat
    return written - first if first < written else 1
