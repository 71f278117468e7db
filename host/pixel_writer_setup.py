"""The pixel writer's fields for an engine record of a program image (issue 16 item 3).

The :class:`~fpgacnn.hdl.program.pixel_writer.PixelWriter` writes a run's
output stream straight into the image's arena; :func:`writer_fields` says
how, in its fields (:data:`fpgacnn.core.pixel_writer_fields.WRITER_FIELDS`),
for the destination patterns it takes, and None for the others, whose
output the host still scatters (:func:`fpgacnn.host.program_runner.store_output`);
:func:`wide_writer_fields` turns them into beats where the writer has a wide
mode and the pattern is whole beats.
"""

import math

from ..core.contract import engine_contract
from ..core.fields import fields_fit
from ..core.memory_port import writer_has_wide, writer_unit
from ..core.pixel_writer_fields import WRITER_FIELDS
from .program_image import DEST_BATCH, DEST_COLUMNS, EngineRecord

__all__ = ["unit_bytes", "writer_fields", "wide_writer_fields"]


def unit_bytes(config):
    """Bytes of the writer's (narrow) unit: an output word, or a beat when the word is
    wider (:func:`fpgacnn.core.memory_port.writer_unit`)."""
    return writer_unit(config)


def writer_fields(image, record):
    """The pixel writer's fields that write ``record``'s output stream into ``image``.

    The writer then leaves the arena exactly as
    :func:`~fpgacnn.host.program_runner.store_output` does.

    Parameters
    ----------
    image : fpgacnn.host.program_image.ProgramImage
    record : fpgacnn.host.program_image.EngineRecord

    Returns
    -------
    dict or None
        A value for every field, or None when the destination is not one the
        writer takes: a host record; a channel range that starts inside a
        unit (the block-diagonal views of groups of a few channels); a field
        past its width.
    """
    if not isinstance(record, EngineRecord):
        return None
    config, dest, desc = image.config, record.dest, record.descriptor
    u = unit_bytes(config)
    if dest.c0 % u:
        return None
    tensor = image.tensors[dest.tensor]
    contract = engine_contract(config)
    oh, ow = contract.pooled_shape(desc)
    units = int(desc["co_tiles"]) * config.pout // u
    per_image = contract.output_image_beats(oh, ow, int(desc["co_tiles"])) \
        * config.stream_bytes // u
    nc = dest.c1 - dest.c0
    kept = math.ceil(nc / u)
    if dest.kind == DEST_COLUMNS:
        rows, cols, images = min(oh, tensor.height), dest.b - dest.a, int(desc["batch"])
        if cols != ow:
            return None
        base = tensor.offset + dest.a * tensor.cp + dest.c0
        pixel_stride = tensor.cp
    elif dest.kind == DEST_BATCH:
        rows, cols, images = 1, dest.b - dest.a, 1
        base = tensor.offset + dest.a * tensor.image_stride + dest.c0
        pixel_stride = tensor.image_stride
    else:
        return None
    strides = (tensor.image_stride, tensor.width * tensor.cp, pixel_stride)
    if base % u or any(s % u for s in strides):
        return None
    fields = {
        "base": base // u,
        "image_stride": tensor.image_stride // u,
        "row_stride": tensor.width * tensor.cp // u,
        "pixel_stride": pixel_stride // u,
        "images": images, "rows": rows, "cols": cols, "units": units,
        "kept_units": kept, "last_lanes": nc - (kept - 1) * u,
        "drop_units": per_image - rows * cols * units, "wide": 0,
    }
    return fields if fields_fit(WRITER_FIELDS, fields) else None


#: The fields that count units (or are addresses in units): the ones ``wide`` rescales.
_UNIT_FIELDS = ("base", "image_stride", "row_stride", "pixel_stride", "units", "drop_units")


def wide_writer_fields(config, fields):
    """``fields`` (:func:`writer_fields`'s, narrow units) in whole beats (``wide``), or
    None.

    Where the writer has a wide mode
    (:func:`~fpgacnn.core.memory_port.writer_has_wide`: ``k`` narrow units a
    beat), it takes a beat a cycle when every address and stride and each
    pixel of the stream (``units``) is a whole number of beats: the pixels
    then start on beats in the stream and in memory. The kept bytes of a
    pixel stay what they were, the last kept beat written up to
    ``last_lanes`` bytes.

    Returns
    -------
    dict or None
        None when ``fields`` is, when the engine's writer has no wide mode,
        or when an address or count is not whole beats.
    """
    if fields is None or not writer_has_wide(config):
        return None
    u, beat = writer_unit(config), writer_unit(config, wide=True)
    k = beat // u
    if any(fields[name] % k for name in _UNIT_FIELDS):
        return None
    kept_bytes = (fields["kept_units"] - 1) * u + fields["last_lanes"]
    kept = math.ceil(kept_bytes / beat)
    wide = dict(fields, wide=1, kept_units=kept, last_lanes=kept_bytes - (kept - 1) * beat,
                **{name: fields[name] // k for name in _UNIT_FIELDS})
    return wide if fields_fit(WRITER_FIELDS, wide) else None
