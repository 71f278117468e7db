"""The pixel reader's fields: how it reads a run's pixel section from memory (issue 16).

Declared once; the gateware (:class:`fpgacnn.hdl.program.pixel_reader.PixelReader`)
reads them as an Amaranth struct, and the host
(:func:`fpgacnn.host.pixel_reader_setup.reader_fields`) fills them from a
program image's engine record. See docs/program.md, "How a program runs".

The reader walks one affine counter nest and emits ``pin``-byte words (a
*word* below; addresses count words, not bytes), or, with ``wide``, words of
the read port's ``R = read_bytes(config)`` bytes (a whole beat on an engine
whose ``pin`` is narrower than its beat: the PYNQ-Z2's 4 in 8), so that it
gives the engine a beat a cycle; the host sets ``wide`` where every count of
words, stride and base is a multiple of ``R / pin``
(:func:`fpgacnn.host.pixel_reader_setup.wide_fields`)::

    for image in range(images):
        for row in range(rows):                        # read from memory
            for ky in range(blocks):
                for col in range(cols):
                    for kx in range(blocks):
                        for word in range(words):
                            read base + image*image_stride + row*row_stride
                                 + col*pixel_stride + ky*ky_stride
                                 + kx*block_stride + word
        for pixel in range(zp_pixels):                 # synthesized, no memory
            for word in range(words):
                x_zp in every lane
        for word in range(zero_words):                 # synthesized, no memory
            0

Of the channels of a tensor pixel that the reads of one ``(row, col)`` walk
(``channels`` of them, from ``ky * ky_channels + (kx * words + word) * pin``
on; ``R`` for ``pin`` with ``wide``), only those below ``channels`` are kept: a word wholly past them is not
read (0), and in the word they end in the lanes past them are 0 (in a pixel
of ``x_zp`` too); so are the words of the last row's pixels from
``last_cols`` on. That nest is every pixel section the reader takes:

- a column strip (``blocks = 1``): ``rows`` input rows of ``cols`` columns, then the
  ``zero_point_rows`` of ``x_zp`` (``zp_pixels = zero rows * cols``), then the
  zero words that end the image on a beat;
- a column of the zero point: ``rows = 0`` (nothing read), the whole column
  as ``zp_pixels``;
- a Gemm batch chunk: one "row" of ``cols`` feature vectors, ``pixel_stride``
  one tensor image apart, then the chunk image's padding pixels and the beat
  padding as ``zero_words``;
- the 1x1 remap of a strip (``blocks`` its block ``b``, 2 to ``kmax``): each
  output pixel's channels as a ``b x b`` block of ``words``-word positions
  (docs/engine.md),
  ``row_stride`` and ``pixel_stride`` the stride's rows and columns apart;
- the 1x1 remap of a Gemm chunk: its ``rows x cols`` feature vectors as such
  blocks, the last row's padding pixels past ``last_cols``.
"""

from .fields import Field, struct_layout

__all__ = ["ReaderField", "READER_FIELDS", "reader_layout"]

#: One reader field (:class:`fpgacnn.core.fields.Field`).
ReaderField = Field


#: In register order. Widths are fixed, as the descriptor's are: addresses and
#: strides count ``pin``-byte words of a 32-bit byte address space.
READER_FIELDS = (
    ReaderField("base", 32, False, "word address of the first word read: image 0, row 0, "
                "the first column, the first channel word"),
    ReaderField("image_stride", 32, False, "words from one image's first read word to the "
                "next image's"),
    ReaderField("row_stride", 32, False, "words from one row's first read word to the next "
                "row's"),
    ReaderField("pixel_stride", 32, False, "words from one pixel's first word to the next "
                "pixel's in a row (a Gemm chunk: one tensor image)"),
    ReaderField("images", 16, False, "images of the run (the descriptor's batch), at least 1"),
    ReaderField("rows", 16, False, "rows read per image; 0: nothing read (a column of the "
                "zero point)"),
    ReaderField("cols", 16, False, "pixels read per row, at least 1 when rows is not 0"),
    ReaderField("words", 16, False, "words per pixel (the run's ci_tiles), at least 1"),
    ReaderField("channels", 32, False, "channels of a tensor pixel that are kept (at least "
                "1); the lanes past them are 0 (channels past the run's)"),
    ReaderField("x_zp", 8, True, "the input zero point, the value of the synthesized pixels"),
    ReaderField("zp_pixels", 32, False, "pixels of x_zp after each image's read rows"),
    ReaderField("zero_words", 32, False, "zero words ending each image (padding pixels of a "
                "Gemm chunk, then the padding to a whole beat)"),
    ReaderField("blocks", 8, False, "block positions per axis: 1, or the 1x1 remap's block "
                "(2..kmax: fpgacnn.host.packing.remap_block)"),
    ReaderField("block_stride", 32, False, "words from one block position to the next in a "
                "row of the block (the remap: words)"),
    ReaderField("ky_stride", 32, False, "words from one row of the block to the next "
                "(the remap: blocks * words)"),
    ReaderField("ky_channels", 32, False, "channels from one row of the block to the next "
                "(the remap: blocks * words * pin)"),
    ReaderField("last_cols", 16, False, "pixels of the last row that are read, 1..cols; the "
                "rest are 0 (a remapped Gemm chunk's padding pixels)"),
    ReaderField("wide", 1, False, "1: a word is the read port's R bytes (a whole beat where "
                "pin is narrower: read_bytes(config)), and every field counting words counts "
                "those; 0: pin-byte words"),
)


def reader_layout():
    """The fields as a :class:`amaranth.lib.data.StructLayout`."""
    return struct_layout(READER_FIELDS)
