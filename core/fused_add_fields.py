"""The fused Add's fields: a residual Add done on a convolution's output on its way to memory (issue 16).

Declared once; the gateware (:class:`fpgacnn.hdl.program.fused_add.FusedAdd`)
reads them as an Amaranth struct from an engine record of the run table
(:mod:`fpgacnn.core.sequencer`, the words ``add_<name>``), the host
(:mod:`fpgacnn.host.fused_add`) fills them where it fuses an Add into the
convolution that makes one of its operands, and the cycle model
(:mod:`fpgacnn.host.cycle_model`) reads :func:`fused_add_unit`. See
docs/program.md, "The residual Add fused into the convolution (as built)".

With ``enable`` set, every write of the pixel writer (``u =``
:func:`fused_add_unit` bytes at byte address ``addr``, with strobes) becomes::

    b = the u bytes at addr + b_delta              (operand b, already in memory)
    for each byte k of the unit:
        y[k] = clamp(round_shift((a[k] - za) * ma + (b[k] - zb) * mb, shift) + zy,
                     lo, hi)                        (exact halves round up)
    write y at addr, with the writer's strobes

which is the vector unit's Add (:mod:`fpgacnn.core.vector_fields`) byte for
byte on the same integers: the writer's destination is the Add's output
tensor, ``a`` the convolution's requantized output (never written), ``b`` the
other operand of one layout with both. With ``enable`` clear the writes pass
unchanged (every other engine record).
"""

from .config import require_config
from .fields import Field, struct_layout
from .memory_port import read_bytes, writer_has_wide, writer_unit
from .scaled_sum_fields import SCALED_SUM_FIELDS

__all__ = ["FUSED_ADD_FIELDS", "fused_add_layout", "fused_add_unit", "has_fused_add"]

#: In record order (one 32-bit word each).
FUSED_ADD_FIELDS = (
    Field("enable", 1, False, "1: the run's writes are the Add's output (module docstring); "
          "0: written as they come"),
    Field("b_delta", 32, True, "bytes from a write's address to operand b's bytes "
          "(a multiple of fused_add_unit(config))"),
    # a: the convolution's output; exact halves round up
    *SCALED_SUM_FIELDS,
)


def fused_add_layout():
    """The fields as a :class:`amaranth.lib.data.StructLayout`."""
    return struct_layout(FUSED_ADD_FIELDS)


def fused_add_unit(config):
    """Bytes of one write the fused Add works on: the pixel writer's write (its
    widest unit, :func:`~fpgacnn.core.memory_port.writer_unit`; a narrow unit
    in its lanes of it)."""
    require_config(config)
    return writer_unit(config, wide=writer_has_wide(config))


def has_fused_add(config):
    """Whether the program engine of ``config`` fuses Adds: where a unit lies inside
    one memory read (R, :func:`~fpgacnn.core.memory_port.read_bytes`, and the unit
    powers of two, R a multiple of the unit), so each write's b is one read at an
    R-aligned address. Every engine the sizing makes has it; elsewhere (a ``pin``
    of 12 bytes, say) the Adds stay vector records and nothing of it is built."""
    r, u = read_bytes(config), fused_add_unit(config)
    return r % u == 0 and not r & (r - 1) and not u & (u - 1)
