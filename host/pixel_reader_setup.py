"""The pixel reader's fields for an engine record of a program image (issue 16 item 3).

The :class:`~fpgacnn.hdl.program.pixel_reader.PixelReader` reads a run's pixel
section straight from the image's arena; :func:`reader_fields` says how, in
its fields (:data:`fpgacnn.core.pixel_reader_fields.READER_FIELDS`), for the
source patterns it takes, and None for the others, which the host still
gathers (:func:`fpgacnn.host.program_runner.record_stream`).

Examples
--------
>>> from fpgacnn.core.config import EngineConfig
>>> from fpgacnn.host.compiler import compile_model
>>> from fpgacnn.host.program_image import build_image
>>> from fpgacnn.host.layers import Conv
>>> from fpgacnn.host.model import QuantizedModel, TensorSpec
>>> import numpy as np
>>> cfg = EngineConfig(pin=4, pout=4, kmax=3, stream_width=32, max_width=16, max_channels=16,
...                    max_out_channels=16)
>>> conv = Conv("c", ["x"], "y", (3, 5, 5), np.ones((4, 3, 3, 3), np.int8),
...             np.zeros(4, np.int32), 0.05, 0, np.full(4, 0.01), 0.5, 0, pads=(1, 1, 1, 1))
>>> model = QuantizedModel("m", [conv], TensorSpec("x", (3, 5, 5), np.int8, 0.05, 0),
...                        TensorSpec("y", (4, 5, 5), np.int8, 0.5, 0), "x", "y")
>>> image = build_image(compile_model(model, cfg))
>>> f = reader_fields(image, image.records[0])
>>> f["rows"], f["cols"], f["words"], f["channels"], f["pixel_stride"], f["row_stride"]
(5, 5, 1, 3, 1, 5)
"""

import math

from ..core.fields import fields_fit, in_wide_words
from ..core.memory_port import words_per_read
from ..core.pixel_reader_fields import READER_FIELDS, reader_beat_commands
from .packing import remap_group, zero_point_rows
from .program_image import SOURCE_BATCH, SOURCE_STRIP, SOURCE_ZERO_COLUMN, EngineRecord

__all__ = ["reader_fields", "wide_fields", "beat_a_cycle"]


def _zero_rows(layout, height):
    """``pack_pixels``'s rows of ``x_zp`` below an image of ``height`` rows (not remapped)."""
    out_h = (height + layout.top + layout.bottom - layout.kh) // layout.sy + 1
    return zero_point_rows(height, out_h, layout.sy, layout.top)


def reader_fields(image, record):
    """The pixel reader's fields that read ``record``'s pixel section from ``image``.

    The reader then produces exactly ``record_stream(image, record)`` after
    the constants, for the arena's contents at the time it runs.

    Parameters
    ----------
    image : fpgacnn.host.program_image.ProgramImage
    record : fpgacnn.host.program_image.EngineRecord

    Returns
    -------
    dict or None
        Values keyed by :data:`~fpgacnn.core.pixel_reader_fields.READER_FIELDS`
        names; None when the reader does not take the record's pattern, which
        is when

        - it is a host record;
        - the source folds taps into channels (``fold``: Im2Col), or the layout
          is the 1x1 remap of a padded layer, of a strip whose channels do
          not start on a word, or of a Gemm chunk with padding pixels outside
          its last row;
        - a strip's first channel ``c0`` is not on a word (``pin``-byte)
          boundary, so a pixel's words are not words of the tensor;
        - a word read would not start on a word boundary of the image (an
          engine whose ``pin`` does not divide the image's alignment,
          :func:`~fpgacnn.host.program_image.alignment`: never, since it is a
          multiple of ``pin``);
        - a Gemm chunk has both padding pixels and rows of the zero point
          (they would come in the other order than the reader's);
        - the pattern reads nothing (no words), or a value does not fit its field.
    """
    if not isinstance(record, EngineRecord):
        return None
    source, layout = record.source, record.layout
    if source.fold:
        return None
    config = image.config
    pin = config.pin
    tensor = image.tensors[source.tensor]
    x_zp = int(record.descriptor["x_zp"])
    fields = dict(base=0, image_stride=0, row_stride=0, pixel_stride=0, rows=0, cols=0,
                  x_zp=x_zp, blocks=1, block_stride=0, ky_stride=0, ky_channels=0)
    if layout.remap:
        return _remap_fields(image, record, fields)
    if source.kind in (SOURCE_STRIP, SOURCE_ZERO_COLUMN):
        if tensor.flat or source.c0 % pin:
            return None
        lanes = source.c1 - source.c0
        height = tensor.height
        if source.kind == SOURCE_STRIP:
            cols = len(range(tensor.width)[source.a:source.b])  # as ColumnSlice slices
            fields.update(base=tensor.offset + source.a * tensor.cp + source.c0,
                          image_stride=tensor.image_stride, row_stride=tensor.width * tensor.cp,
                          pixel_stride=tensor.cp, rows=height if cols else 0, cols=cols)
            zp_pixels = _zero_rows(layout, height) * cols
        else:  # the column is x_zp, its zero-point rows too
            cols = 1
            zp_pixels = height + _zero_rows(layout, height)
        images = tensor.batch
        extra_pixels = 0
        pixels = (height + _zero_rows(layout, height)) * cols
    elif source.kind == SOURCE_BATCH:
        if not tensor.flat:
            return None
        # BatchImage reads every channel of the flat tensor (source_gather gives it no slice).
        lanes = tensor.channels
        vectors = len(range(tensor.batch)[source.a:source.b])
        pixels = source.rows * source.cols
        extra_pixels = pixels - vectors
        zp_pixels = _zero_rows(layout, source.rows) * source.cols
        if extra_pixels and zp_pixels:
            return None
        pixels += zp_pixels
        fields.update(base=tensor.offset + source.a * tensor.image_stride,
                      pixel_stride=tensor.image_stride, rows=1 if vectors else 0, cols=vectors)
        images = 1  # the chunk is one image, whatever the program's batch
    else:
        return None
    if lanes < 1 or pixels < 1:
        return None
    words = math.ceil(lanes / pin)
    per_beat = max(1, config.stream_bytes // pin)
    image_words = pixels * words
    # Every address is a byte address until here; the reader counts words.
    byte_values = ("base", "image_stride", "row_stride", "pixel_stride")
    if any(fields[k] % pin for k in byte_values):
        return None
    fields.update({k: fields[k] // pin for k in byte_values})
    fields.update(images=images, words=words, channels=lanes, zp_pixels=zp_pixels,
                  zero_words=extra_pixels * words + (-image_words) % per_beat,
                  last_cols=fields["cols"], wide=0)
    return fields if fields_fit(READER_FIELDS, fields) else None


#: The fields that count words (or addresses in words): the ones ``wide`` rescales.
_WORD_FIELDS = ("base", "image_stride", "row_stride", "pixel_stride", "words", "zero_words",
                "block_stride", "ky_stride")


def wide_fields(config, fields):
    """``fields`` (:func:`reader_fields`'s, ``pin``-byte words) as a wide section, or None.

    On an engine whose read port is wider than ``pin`` (``k = R / pin`` words
    of a read, R the beat: :func:`~fpgacnn.core.memory_port.read_bytes`) the
    reader gives a beat a cycle when it reads R-byte words; the section is
    the same bytes in that unit exactly when every base, stride and count of
    words is a multiple of ``k`` (then every run of words the nest reads, and
    every run it synthesizes, starts and ends on an R-byte word, and on a
    beat of the stream). Channel counts (``channels``, ``ky_channels``)
    stay as they are.

    Parameters
    ----------
    config : EngineConfig
    fields : dict or None
        With ``wide`` 0.

    A row of pixels that lie back to back in memory (``pixel_stride ==
    words``, no remap blocks: a 3-channel first layer's pixels of one word)
    is read as rows of ``k`` times fewer pixels of ``k`` times the words
    (:func:`_pixels_merged`) when that makes every count a multiple of ``k``.

    Returns
    -------
    dict or None
        The fields with ``wide`` 1 and the word counts divided by ``k``; None
        when ``fields`` is, when the port is no wider than ``pin`` or when a
        count is not a multiple of ``k`` (neither as they are nor merged).
    """
    wide = in_wide_words(config, READER_FIELDS, fields, _WORD_FIELDS)
    if wide is None and fields is not None:
        wide = in_wide_words(config, READER_FIELDS, _pixels_merged(config, fields),
                             _WORD_FIELDS)
    return wide


def beat_a_cycle(config, fields):
    """Whether the reader gives the engine a beat a cycle on the section ``fields`` says.

    It does where a word is at least a beat, and where it issues every beat
    as one command (:func:`~fpgacnn.core.pixel_reader_fields.reader_beat_commands`,
    :class:`~fpgacnn.hdl.program.pixel_reader.PixelReader`'s Latency): a wide
    section, and a narrow section of an engine of two words a read whose
    every beat is a pair, the 1x1 remap of one word a block position whose
    every two positions from a line's start are not both read or both of one
    pixel side by side from an R-aligned address (a thin pointwise layer's
    2x2 blocks: MobileNetV1's 8- and 16-channel layers). Where it does, a run
    from board memory takes the cycles the DMA's would; elsewhere its input
    rows follow the reader's beats
    (:func:`~fpgacnn.host.cycle_model.sequenced_run_cycles`).

    Parameters
    ----------
    config : EngineConfig
    fields : dict
        :func:`reader_fields`' or :func:`wide_fields`' fields.

    Returns
    -------
    bool
    """
    return config.pin >= config.stream_bytes or all(
        c == 1 for c in reader_beat_commands(config, fields))


def _pixels_merged(config, fields):
    """``fields`` with every ``k = R / pin`` adjacent pixels of a row read as one, or None.

    Only where a row's pixels lie back to back (``pixel_stride == words``, one
    block position) and its pixels, read and synthesized, come in whole groups
    of ``k``. The merged pixel keeps all its lanes (``channels`` is its
    ``k * words * pin``): the lanes past the run's channels in each pixel
    then carry what memory holds there (a tensor pixel's padding bytes, or
    channels of the tensor past the run's) instead of 0, and, in a pixel of
    ``x_zp``, the zero point: every one of them meets a weight of 0 in the
    run's weight words (channels past a run's are 0, docs/engine.md), so the
    run's results are the same.
    """
    k = words_per_read(config)
    if (fields is None or k == 1 or fields["blocks"] != 1
            or fields["pixel_stride"] != fields["words"] or fields["last_cols"] != fields["cols"]
            or fields["cols"] % k or fields["zp_pixels"] % k):
        return None
    words = k * fields["words"]
    return dict(fields, cols=fields["cols"] // k, last_cols=fields["last_cols"] // k,
                words=words, pixel_stride=words, zp_pixels=fields["zp_pixels"] // k,
                channels=words * config.pin)


def _remap_fields(image, record, fields):
    """The fields of a strip or a Gemm chunk through the 1x1 remap (``pack_pixels``'
    remapped layout): output pixel ``(y, x)`` of the run is a ``b x b`` block (``b``
    the layout's ``remap``) whose position ``(ky, kx)`` holds the tensor pixel's
    channels ``(ky*b + kx)*g ..`` (``g = remap_group``); a strip's pixels the
    stride's rows and columns apart, a chunk's feature vectors one tensor image
    apart, row by row."""
    config, source, layout = image.config, record.source, record.layout
    pin, k = config.pin, layout.remap
    tensor = image.tensors[source.tensor]
    if ((layout.kh, layout.kw) != (1, 1)
            or any((layout.top, layout.left, layout.bottom, layout.right))):
        return None
    if source.kind == SOURCE_STRIP and not tensor.flat and not source.c0 % pin:
        lanes = source.c1 - source.c0
        cols = len(range(tensor.width)[source.a:source.b])
        oh = (tensor.height - 1) // layout.sy + 1
        ow = last = (cols - 1) // layout.sx + 1 if cols else 0
        images = tensor.batch
        byte_values = dict(base=tensor.offset + source.a * tensor.cp + source.c0,
                           image_stride=tensor.image_stride,
                           row_stride=layout.sy * tensor.width * tensor.cp,
                           pixel_stride=layout.sx * tensor.cp)
    elif source.kind == SOURCE_BATCH and tensor.flat:
        # Every channel of the flat tensor (BatchImage slices none); the vectors
        # fill the rows in order, the last row's rest are padding pixels.
        lanes, oh, ow, images = tensor.channels, source.rows, source.cols, 1
        vectors = len(range(tensor.batch)[source.a:source.b])
        last = vectors - (oh - 1) * ow
        if not 1 <= last <= ow:
            return None
        byte_values = dict(base=tensor.offset + source.a * tensor.image_stride,
                           image_stride=0, row_stride=ow * tensor.image_stride,
                           pixel_stride=tensor.image_stride)
    else:
        return None
    if lanes < 1 or oh < 1 or ow < 1:
        return None
    g = remap_group(config, lanes, k)
    words = g // pin
    per_beat = max(1, config.stream_bytes // pin)
    image_words = oh * ow * k * k * words
    if any(v % pin for v in byte_values.values()):
        return None
    fields.update({name: v // pin for name, v in byte_values.items()})
    fields.update(images=images, rows=oh, cols=ow, words=words, channels=lanes,
                  zp_pixels=0, zero_words=(-image_words) % per_beat, blocks=k,
                  block_stride=words, ky_stride=k * words, ky_channels=k * g, last_cols=last,
                  wide=0)
    return fields if fields_fit(READER_FIELDS, fields) else None
