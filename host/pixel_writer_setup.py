"""The pixel writer's fields for an engine record of a program image (issue 16 item 3).

The :class:`~fpgacnn.hdl.program.pixel_writer.PixelWriter` writes a run's
output stream straight into the image's arena; :func:`writer_fields` says
how, in its fields (:data:`fpgacnn.core.pixel_writer_fields.WRITER_FIELDS`),
for the destination patterns it takes, and None for the others, whose
output the host still scatters (:func:`fpgacnn.host.program_runner.store_output`).
"""

import math

from ..core.contract import engine_contract
from ..core.fields import fields_fit
from ..core.pixel_writer_fields import WRITER_FIELDS
from .program_image import DEST_BATCH, DEST_COLUMNS, EngineRecord

__all__ = ["unit_bytes", "writer_fields"]


def unit_bytes(config):
    """Bytes of the writer's unit: an output word, or a beat when the word is wider."""
    return min(config.pout, config.stream_bytes)


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
        "drop_units": per_image - rows * cols * units,
    }
    return fields if fields_fit(WRITER_FIELDS, fields) else None
