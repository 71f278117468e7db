"""The MAC array: ``pout`` lanes of ``kmax*kmax*pin`` multipliers, adder trees and accumulators."""

from amaranth.hdl import Module, Signal, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from .adder_tree import AdderTree
from ...core.config import require_config
from .delay import delayed
from ...core.contract import engine_contract
from ..tech.dsp import is_ecp5
from ..tech.int8_products import Int8Products, has_sb_mac16
from ..tech.pair_products import PairProducts

__all__ = ["MacArray"]


def _check_tag_width(tag_width):
    if isinstance(tag_width, bool) or not isinstance(tag_width, int):
        raise TypeError(f"tag_width must be a non-negative integer, not {tag_width!r}")
    if tag_width < 0:
        raise ValueError(f"tag_width must be a non-negative integer, not {tag_width!r}")


class MacArray(wiring.Component):
    """``pout`` dot products of one ``kmax x kmax x pin`` window, accumulated over input tiles.

    Every cycle with ``i_valid`` multiplies the window by each lane's weights
    (``T = kmax*kmax*pin`` multipliers per lane, all in parallel), sums the
    products in a pipelined :class:`~fpgacnn.hdl.datapath.adder_tree.AdderTree` and adds
    the sum to the lane's accumulator. An accumulation group is the run of
    valid cycles from one with ``i_first`` to one with ``i_last`` (a group of
    one cycle has both); idle cycles (``i_valid = 0``) may separate its cycles.
    The cycle after a group's sum is complete, ``o_valid`` is high for one
    cycle with the sum on ``o_acc`` and the last cycle's ``i_tag`` on ``o_tag``.

    Tap order: tap ``t = (ky*kmax + kx)*pin + p`` of ``i_window`` meets tap
    ``t`` of each lane's weights. The array never stalls: the caller must be
    able to take every result.

    Parameters
    ----------
    config : EngineConfig
        Uses ``pin``, ``pout``, ``kmax`` and ``acc_width``.
    tag_width : int
        Width of the tag carried from ``i_tag`` to ``o_tag`` (0 for none;
        inside a design only: Amaranth writes a zero-width top-level port as
        ``[-1:0]``, which Verilog tools read as two bits).
    pairs : bool
        Two windows a cycle (two adjacent output pixels, docs/engine.md "The
        memory bound, and the plan"): ``i_window_next`` meets the same weights
        as ``i_window``, each lane has two adder trees and accumulators, and
        ``o_acc_next`` is the second window's sums. The two products of a tap
        share the weight, so one multiplier makes both
        (:class:`~fpgacnn.hdl.tech.pair_products.PairProducts`: one DSP48 a
        pair in the Zynq flow) -- except on ECP5 and iCE40 parts, whose 18x18
        and 8x8 multipliers cannot take the packed 25-bit operand: two
        products there. The latency is the same.

    Members
    -------
    i_valid : In(1)
        The window and weights are valid this cycle.
    i_first : In(1)
        This valid cycle starts a new accumulation group (the old sum is dropped).
    i_last : In(1)
        This valid cycle ends the group: its sum is emitted.
    i_tag : In(tag_width)
        Carried with the data; sampled on the ``i_last`` cycle.
    i_window : In(data.ArrayLayout(signed(8), T))
        The window, tap order as above.
    i_weights : In(data.ArrayLayout(data.ArrayLayout(signed(8), T), pout))
        One weight word of the stream format (lane 0 in the low bytes).
    o_valid : Out(1)
        One cycle per finished group.
    o_tag : Out(tag_width)
    o_next_valid, o_next_tag : Out(1), Out(tag_width)
        ``o_valid`` and ``o_tag`` of the next cycle, one cycle early (for
        lookups keyed by the tag that must start before the result is out).
    o_acc : Out(data.ArrayLayout(signed(config.acc_width), pout))
        ``sum over the group of sum_t window[t] * weights[lane][t]``, without
        bias, in two's complement modulo ``2**acc_width`` (the host keeps
        layers within ``acc_width``; the adder tree itself is exact).
    i_window_next : In(data.ArrayLayout(signed(8), T))
        With ``pairs`` only: the second window, tap order as ``i_window``.
    o_acc_next : Out(data.ArrayLayout(signed(config.acc_width), pout))
        With ``pairs`` only: ``o_acc`` of ``i_window_next``, on the same cycle.

    Raises
    ------
    TypeError
        If ``config`` is not an :class:`EngineConfig` or ``tag_width`` is not an integer.
    ValueError
        If ``tag_width`` is negative.

    Latency
    -------
    :attr:`latency` = ``ceil(log2(T)) + 3`` cycles from the ``i_valid & i_last``
    cycle to its ``o_valid`` cycle: two for the multipliers (operand and
    product registers, :class:`~fpgacnn.hdl.tech.int8_products.Int8Products`;
    one, the products', with ``deep_pipeline = 0``), one per adder-tree
    level, one for the accumulator. A new group may start on the
    cycle after the previous ``i_last`` (full throughput).
    """

    def __init__(self, config, *, tag_width, pairs=False):
        require_config(config)
        _check_tag_width(tag_width)
        self._config = config
        self._tag_width = tag_width
        self._pairs = bool(pairs)
        self._taps = config.kmax * config.kmax * config.pin
        self._products_latency = engine_contract(config).latency.products
        acc = data.ArrayLayout(signed(config.acc_width), config.pout)
        second = ({"i_window_next": In(data.ArrayLayout(signed(8), self._taps)),
                   "o_acc_next": Out(acc)} if self._pairs else {})
        super().__init__({
            "i_valid": In(1),
            "i_first": In(1),
            "i_last": In(1),
            "i_tag": In(tag_width),
            "i_window": In(data.ArrayLayout(signed(8), self._taps)),
            "i_weights": In(data.ArrayLayout(data.ArrayLayout(signed(8), self._taps), config.pout)),
            "o_valid": Out(1),
            "o_tag": Out(tag_width),
            "o_next_valid": Out(1),
            "o_next_tag": Out(tag_width),
            "o_acc": Out(acc),
            **second,
        })

    @property
    def config(self):
        return self._config

    @property
    def taps(self):
        """Multipliers per lane: ``kmax*kmax*pin``."""
        return self._taps

    @property
    def tree_levels(self):
        return (self._taps - 1).bit_length()

    @property
    def latency(self):
        """Cycles from an ``i_valid & i_last`` cycle to its ``o_valid`` cycle."""
        return engine_contract(self._config).latency.mac_array

    def elaborate(self, platform):
        m = Module()
        cfg = self._config
        taps = self._taps

        # Stages 1-2: registered operands and products, so that a multiplier
        # (one DSP each; two per SB_MAC16 on iCE40 UltraPlus, see
        # Int8Products; a pair of products per DSP48 with pairs, see
        # PairProducts) is a pipeline stage of its own, the routes to it too.
        registered = bool(cfg.deep_pipeline)
        windows = [self.i_window] + ([self.i_window_next] if self._pairs else [])
        suffixes = ("", "_next")  # of each window's submodules and accumulators
        packed = self._pairs and not (is_ecp5(platform) or has_sb_mac16(platform))
        trees = [[] for _ in windows]  # per window, per lane
        for lane in range(cfg.pout):
            for w in range(len(windows)):
                trees[w].append(AdderTree(taps, 16))
                m.submodules[f"tree{lane}{suffixes[w]}"] = trees[w][lane]
            if packed:
                prods = m.submodules[f"mul{lane}"] = PairProducts(
                    taps, registered_operands=registered)
                m.d.comb += [prods.i_a0.eq(self.i_window), prods.i_a1.eq(self.i_window_next),
                             prods.i_b.eq(self.i_weights[lane]),
                             trees[0][lane].i_data.eq(prods.o_p0),
                             trees[1][lane].i_data.eq(prods.o_p1)]
                continue
            for w, window in enumerate(windows):
                prods = m.submodules[f"mul{lane}{suffixes[w]}"] = Int8Products(
                    taps, registered_operands=registered)
                m.d.comb += [prods.i_a.eq(window), prods.i_b.eq(self.i_weights[lane]),
                             trees[w][lane].i_data.eq(prods.o_p)]

        # Side band, delayed alongside the data: the products + tree levels.
        side = data.StructLayout({
            "valid": 1, "first": 1, "last": 1, "tag": unsigned(self._tag_width),
        })
        stage = Signal(side, name="side_in")
        m.d.comb += [
            stage.valid.eq(self.i_valid),
            stage.first.eq(self.i_first),
            stage.last.eq(self.i_last),
            stage.tag.eq(self.i_tag),
        ]
        stage = delayed(m, stage, self._products_latency + self.tree_levels, "side_d")

        # Accumulator stage.
        outputs = [self.o_acc] + ([self.o_acc_next] if self._pairs else [])
        for w, out in enumerate(outputs):
            for lane, tree in enumerate(trees[w]):
                # No reset: a group's first cycle overwrites it, o_valid qualifies it.
                acc = Signal(signed(cfg.acc_width), name=f"acc{lane}{suffixes[w]}",
                             reset_less=True)
                m.d.comb += out[lane].eq(acc)
                with m.If(stage.valid):
                    with m.If(stage.first):
                        m.d.sync += acc.eq(tree.o_sum)
                    with m.Else():
                        m.d.sync += acc.eq(acc + tree.o_sum)
        m.d.comb += [self.o_next_valid.eq(stage.valid & stage.last),
                     self.o_next_tag.eq(stage.tag)]
        m.d.sync += self.o_valid.eq(stage.valid & stage.last)
        with m.If(stage.valid & stage.last):
            m.d.sync += self.o_tag.eq(stage.tag)
        return m
