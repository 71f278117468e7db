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
from .memory_port import words_per_read

__all__ = ["ReaderField", "READER_FIELDS", "reader_layout", "reader_beat_commands"]

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


def reader_beat_commands(config, fields):
    """Commands the pixel reader issues for each beat of the section ``fields`` say.

    The reader issues one command a cycle and its output side pops one a
    cycle (:class:`~fpgacnn.hdl.program.pixel_reader.PixelReader`'s Latency):
    a narrow word (``pin`` bytes, half a beat or less), a wide word (a
    beat), or, on an engine of two words a read, a pair of two words of a
    line ``(row, ky)`` of the 1x1 remap's blocks from a beat's start, of
    which at most one is read or both are one R-byte read (``both``). So a
    beat takes as many cycles of the reader as it has commands: one for a
    wide word or a pair, ``stream_bytes / pin`` for narrow words. This walks
    the counter nest as the issue FSM does, its pair decisions included (a
    pair only where the words issued since the section's start are even, the
    two positions not the line's last one, and not both read unless they are
    side by side in one pixel from an even word address); the cycle model
    reads it for the runs it feeds slower than a beat a cycle
    (:func:`fpgacnn.host.cycle_model.layer_cycles`' ``reader``).

    Parameters
    ----------
    config : EngineConfig
    fields : mapping
        The reader's fields (:data:`READER_FIELDS`) of one section.

    Returns
    -------
    list of int
        Commands of each beat of the section, in stream order (every image's
        beats, the images one after another; an image ends on a beat).

    Raises
    ------
    ValueError
        On an engine whose word is a beat or more (the reader gives a beat a
        cycle there, or a word spans beats), or when the section's words do
        not make whole beats.

    Examples
    --------
    The 1x1 remap of a 32-channel row of two pixels into 3x3 blocks of one
    4-byte word a position, in 8-byte beats (MobileNetV1's ``/features/3/pw``
    on the PYNQ-Z2's engine): its lines ``ky = 0, 1`` of six read words
    pair once each (two words of one pixel from an even address), the rest
    go a word a command; the line ``ky = 2``, whose third positions are past
    the channels, pairs throughout. Thirteen cycles for nine beats:

    >>> from fpgacnn.core.config import EngineConfig
    >>> cfg = EngineConfig(pin=4, pout=4, kmax=3, stream_width=64, writer_words=2)
    >>> fields = dict(base=0, image_stride=0, row_stride=16, pixel_stride=8, images=1,
    ...               rows=1, cols=2, words=1, channels=32, x_zp=0, zp_pixels=0,
    ...               zero_words=0, blocks=3, block_stride=1, ky_stride=3, ky_channels=12,
    ...               last_cols=2, wide=0)
    >>> reader_beat_commands(cfg, fields)
    [1, 2, 2, 2, 2, 1, 1, 1, 1]
    """
    pin, beat = config.pin, config.stream_bytes
    if pin >= beat:
        raise ValueError(f"pin ({pin}) is not narrower than the {beat}-byte beat")
    per_beat = beat // pin
    if fields["wide"]:  # a wide word is the read port's R bytes, the whole beat here
        words = fields["rows"] * fields["cols"] * fields["blocks"] ** 2 * fields["words"]
        return [1] * (fields["images"] * (words + fields["zp_pixels"] * fields["words"]
                                          + fields["zero_words"]))
    # Widths of the commands, in words, in the order issued.
    sizes = []
    pairs = words_per_read(config) == 2 and fields["words"] == 1 and fields["blocks"] > 1
    blocks, cols, rows = fields["blocks"], fields["cols"], fields["rows"]
    channels, ky_channels = fields["channels"], fields["ky_channels"]
    line = [(col, kx) for col in range(cols) for kx in range(blocks)]
    phase = 0  # narrow words issued, mod 2 (a pair keeps it)
    for image in range(fields["images"]):
        for row in range(rows):
            last_row = row == rows - 1
            for ky in range(blocks):
                if not pairs:
                    sizes += [1] * (len(line) * fields["words"])
                    continue

                def read(col, kx):
                    # Channels left at the position, and not a last row's padding pixel.
                    return (channels - ky * ky_channels - kx * pin > 0
                            and not (last_row and col >= fields["last_cols"]))
                i = 0
                while i < len(line):
                    col, kx = line[i]
                    if phase == 0 and i + 1 < len(line):
                        col2, kx2 = line[i + 1]
                        address = (fields["base"] + image * fields["image_stride"]
                                   + row * fields["row_stride"] + col * fields["pixel_stride"]
                                   + ky * fields["ky_stride"] + kx * fields["block_stride"])
                        one_read = (col2 == col and fields["block_stride"] == 1
                                    and address % 2 == 0)
                        if not (read(col, kx) and read(col2, kx2)) or one_read:
                            sizes.append(2)
                            i += 2
                            continue
                    sizes.append(1)
                    phase ^= 1
                    i += 1
        synthesized = fields["zp_pixels"] * fields["words"] + fields["zero_words"]
        sizes += [1] * synthesized
        phase ^= synthesized & 1
    commands, filled = [], 0
    for size in sizes:
        if filled == 0:
            commands.append(0)
        commands[-1] += 1
        filled = (filled + size) % per_beat
    if filled:
        raise ValueError("the section's words do not make whole beats")
    return commands
