"""Counter widths from the configuration's limits.

The descriptor's fields are 16 bits wide for every engine (the register map
has one shape), but a run that the host can map (:func:`fpgacnn.host.packing.map_layer`)
never has more columns, input tiles or output tiles than the engine contract
(:mod:`fpgacnn.core.contract`) allows.
Counters of columns and channel tiles are therefore only as wide as those
limits, and :func:`narrow_descriptor` drops the descriptor bits above them,
so that the comparisons and adders against the descriptor narrow too. On a
small part (iCE40 UP5K) this is several hundred LUTs; rows and images stay
16 bits (the buffers do not bound them).

A descriptor beyond these limits is outside the engine's contract (the host
rejects such a layer before it packs it).
"""

from dataclasses import dataclass

from amaranth.hdl import Signal

from ...core.config import require_config
from ...core.contract import engine_contract
from ...core.descriptor import descriptor_layout

__all__ = ["Limits", "limits", "narrow_descriptor"]


def _bits(n):
    """Bits of an unsigned count ``0..n``."""
    return max(1, n.bit_length())


@dataclass(frozen=True)
class Limits:
    """Largest descriptor values a configuration can run, and the bits they take.

    Attributes
    ----------
    max_cols, max_ci_tiles, max_co_tiles : int
        :attr:`fpgacnn.core.contract.EngineContract.max_cols` and the others.
    col_bits, ci_bits, co_bits : int
        Bits of ``0..max_cols``, ``0..max_ci_tiles``, ``0..max_co_tiles``.
    """

    max_cols: int
    max_ci_tiles: int
    max_co_tiles: int
    #: The most a tile counter of the window issue counts: ``max_co_tiles``, and a
    #: fused block's depthwise input tiles, which the line buffer issues as a
    #: depthwise run's output tiles (docs/engine.md, "Step 3").
    max_co_count: int = 0

    @property
    def col_bits(self):
        return _bits(self.max_cols)

    @property
    def ci_bits(self):
        return _bits(self.max_ci_tiles)

    @property
    def co_bits(self):
        return _bits(max(self.max_co_tiles, self.max_co_count))


def limits(config):
    """The :class:`Limits` of ``config``: the contract's largest columns and tiles."""
    require_config(config)
    c = engine_contract(config)
    return Limits(max_cols=c.max_cols, max_ci_tiles=c.max_ci_tiles, max_co_tiles=c.max_co_tiles,
                  max_co_count=c.fused.max_tiles if c.fused else 0)


#: Descriptor field -> the Limits attribute that bounds it.
_BOUNDED = {"in_w": "col_bits", "out_w": "col_bits", "ci_tiles": "ci_bits",
            "co_tiles": "co_bits"}


def narrow_descriptor(m, desc, config):
    """A copy of ``desc`` (driven combinationally in ``m``) with the bits above the limits zero.

    Returns
    -------
    Signal(descriptor_layout(engine_contract(config).descriptor_fields))
    """
    lim = limits(config)
    out = Signal(descriptor_layout(engine_contract(config).descriptor_fields), name="desc_narrow")
    m.d.comb += out.eq(desc)
    for name, attr in _BOUNDED.items():
        bits = getattr(lim, attr)
        m.d.comb += out[name].eq(desc[name][:bits])
    return out
