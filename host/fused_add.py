"""Which residual Adds the program engine does on a convolution's writes, and their fields (issue 16).

The program engine's fused Add (:mod:`fpgacnn.core.fused_add_fields`) turns
an engine run's writes into an Add's: the run writes the Add's output where
the Add's record would, reading the other operand beside its input. A
program image marks the Adds that may fuse (``VectorRecord.fusable``,
:func:`fpgacnn.host.program_image.fusable_add`: the operand is the output of
the engine records just before, read by nothing else, the other operand
written earlier, the output placed with the operand so it overlaps none of
the run's inputs); :func:`fusions` checks what the run table needs besides,
for one engine configuration:

- the engine has the fused Add (:func:`~fpgacnn.core.fused_add_fields.has_fused_add`);
- the operands and the output have one layout (shape, padded channels,
  image stride, batch), so b's bytes are the output's moved by one constant,
  a whole number of the stage's units;
- the output overlaps neither b nor any tensor the engine records read;
- the fields fit;
- the runs are no fused depthwise + pointwise block's where the block
  requantizes its depthwise sums on the vector unit's lanes
  (:func:`~fpgacnn.core.fused_block.depthwise_on_vector_lanes`): the fused
  Add computes on those lanes too.

Everything else stays as it was: the engine records write the operand, the
vector unit (or the host) does the Add. The per-run path (the DMA, the UART
bridge) never fuses.
"""

from dataclasses import dataclass, replace

from ..core.fields import fields_fit
from ..core.fused_add_fields import FUSED_ADD_FIELDS, fused_add_unit, has_fused_add
from ..core.fused_block import depthwise_on_vector_lanes
from .program_image import EngineRecord, VectorRecord

__all__ = ["Fusion", "fusions", "fused_record", "run_reads"]


@dataclass(frozen=True)
class Fusion:
    """An Add done by engine records: the records ``runs`` (indices into the image's
    records) write tensor ``out`` (the Add's output) with the fused Add's
    ``fields``; the Add's record ``add`` runs nothing."""

    runs: tuple
    add: int
    out: int
    fields: dict


def _layout(place):
    return (place.channels, place.height, place.width, place.cp, place.image_stride,
            place.batch, place.flat)


def _overlap(p, q):
    return p.offset < q.offset + q.nbytes and q.offset < p.offset + p.nbytes


def _fusion(image, add_index):
    records, config = image.records, image.config
    add = records[add_index]
    if not (isinstance(add, VectorRecord) and add.fusable and add.has_b) or add_index == 0:
        return None
    last = records[add_index - 1]
    if not isinstance(last, EngineRecord):
        return None
    runs = [i for i, r in enumerate(records) if isinstance(r, EngineRecord)
            and r.step == last.step]
    if runs != list(range(runs[0], add_index)):
        return None
    conv = last.dest.tensor
    if any(records[i].dest.tensor != conv for i in runs) or conv not in (add.a, add.b):
        return None
    if depthwise_on_vector_lanes(config) and any(records[i].descriptor.get("fused", 0)
                                                 for i in runs):
        return None  # the block's depthwise half has the lanes the Add would compute on
    other = add.b if conv == add.a else add.a
    t = image.tensors
    a, b, y = t[conv], t[other], t[add.out]
    if not _layout(a) == _layout(b) == _layout(y):
        return None
    read = {records[i].source.tensor for i in runs}
    if _overlap(y, b) or any(_overlap(y, t[s]) for s in read):
        return None
    u = fused_add_unit(config)
    delta = b.offset - y.offset
    if delta % u:
        return None
    # The Add is symmetric in its operands: the run's output is the fused stage's a.
    ours, theirs = ("a", "b") if conv == add.a else ("b", "a")
    fields = dict(enable=1, b_delta=delta, za=getattr(add, f"z{ours}"),
                  zb=getattr(add, f"z{theirs}"), ma=getattr(add, f"m{ours}"),
                  mb=getattr(add, f"m{theirs}"), shift=add.shift, zy=add.zy, lo=add.lo,
                  hi=add.hi)
    assert set(fields) == {f.name for f in FUSED_ADD_FIELDS}
    if add.ties_to_even or not fields_fit(FUSED_ADD_FIELDS, fields):
        return None
    return Fusion(tuple(runs), add_index, add.out, fields)


def fusions(image):
    """The Adds of ``image`` the program engine may do on its engine records' writes
    (module docstring), as :class:`Fusion` s, in record order; none on an engine
    without the fused Add."""
    if not has_fused_add(image.config):
        return []
    found = (_fusion(image, i) for i in range(len(image.records)))
    return [f for f in found if f is not None]


def fused_record(record, fusion):
    """``record`` (one of ``fusion.runs``) writing the Add's output instead of its own."""
    return replace(record, dest=replace(record.dest, tensor=fusion.out))


def run_reads(reader, writer, const_reads):
    """Memory reads of a sequenced run, at most: its input's (the pixel reader's
    ``reader`` fields: every word of its nest; fewer where words lie wholly past
    its channels), its constants' (``const_reads``) and, with a fused Add, b's
    (one a write of the pixel writer's ``writer`` fields; None: no fused Add)."""
    pixels = (reader["images"] * reader["rows"] * reader["blocks"] ** 2 * reader["cols"]
              * reader["words"])
    if writer is None:
        return pixels + const_reads
    writes = writer["images"] * writer["rows"] * writer["cols"] * writer["kept_units"]
    return pixels + const_reads + writes
