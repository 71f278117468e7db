"""The depthwise unit of the fused depthwise + pointwise block: ``pin`` channels of two pixels a cycle
(of one with ``depthwise_pixels`` 1).

docs/engine.md, "The fused depthwise + pointwise block": beside the main
array, which runs the pointwise convolution, the unit takes the window pair
the line buffer gives the array in a pixel-pair run (``kmax x kmax`` taps of
``pin`` channels at output pixels ``ox`` and ``ox + 1``) and multiplies each
channel's taps by that channel's own weights: ``2 * pin`` sums of ``kmax^2``
products a cycle. The products are LUT logic, not DSP blocks: the XC7Z020's
DSPs are spent on the array and the requantizers (the design's DSP budget).
The requantization is not here: the vector unit's lanes do it
(:func:`~fpgacnn.hdl.program.scaled_sum.scaled_sum` with ``mb = 0``), and
its bias, as the array's requantizer adds the array's.
"""

from amaranth.hdl import EnableInserter, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ...core.config import ConfigError, require_config
from ...core.fused_block import (check_depthwise_sums, depthwise_lanes, depthwise_term_width,
                                  depthwise_unit_latency)
from ...core.widths import SHIFT_BITS
from .adder_tree import AdderTree
from .delay import delayed
from .mac_array import _check_tag_width
# (the iCE40 engines' LUT product: one definition of the Booth form, proven
# against the generic product by tests/test_hdl_int8_products.py)
from ..tech.int8_products import _lut_product

__all__ = ["DepthwiseUnit", "depthwise_unit_input", "depthwise_unit_output",
           "depthwise_lanes_signature"]


def depthwise_unit_input(config, tag_width=0):
    """The :class:`DepthwiseUnit`'s input payload: ``window``, ``window_next``
    (``kmax*kmax*pin`` int8, tap ``(ky*kmax + kx)*pin + p``, the line buffer's
    ``o_window`` and ``o_window_next``), ``weights`` (``pin`` channels of
    ``kmax*kmax`` int8, tap ``ky*kmax + kx``) and, with ``tag_width``, ``tag``."""
    k2 = config.kmax * config.kmax
    fields = {
        "window": data.ArrayLayout(signed(8), k2 * config.pin),
        "window_next": data.ArrayLayout(signed(8), k2 * config.pin),
        "weights": data.ArrayLayout(data.ArrayLayout(signed(8), k2), config.pin),
    }
    if config.depthwise_pixels == 1:
        # (the half-rate unit: a pair of one pixel, a row's odd last, takes one cycle)
        fields["single"] = unsigned(1)
    if tag_width:
        fields["tag"] = unsigned(tag_width)
    return data.StructLayout(fields)


def depthwise_unit_output(config, tag_width=0):
    """The :class:`DepthwiseUnit`'s output payload: ``acc[pixel][p]`` (pixel 0 the
    window's, 1 ``window_next``'s; ``signed(acc_width)``) and, with ``tag_width``, ``tag``."""
    fields = {"acc": data.ArrayLayout(
        data.ArrayLayout(signed(config.acc_width), config.pin), 2)}
    if tag_width:
        fields["tag"] = unsigned(tag_width)
    return data.StructLayout(fields)


def depthwise_lanes_signature(config):
    """The requantizing lanes the depthwise half borrows, from its side (Out): the
    program engine's vector unit's, lent to the convolution core
    (:func:`~fpgacnn.core.fused_block.depthwise_on_vector_lanes`).

    ``enable`` (the lanes are the half's, held for a fused run), per lane
    (:func:`~fpgacnn.core.fused_block.depthwise_lanes`, lane ``pixel * pin + p``)
    the term ``terms`` (``acc + bias``,
    :func:`~fpgacnn.core.fused_block.depthwise_term_width` bits), its channel's
    multiplier ``ma`` and ``shift``, all three taken every cycle together; the
    run's ``zy``, ``lo``, ``hi`` (``lo <= hi``); and ``y`` back (In), the lanes'
    int8 results of the terms taken
    :data:`~fpgacnn.core.vector_fields.VECTOR_LANE_STAGES` cycles before."""
    lanes = depthwise_lanes(config)
    return wiring.Signature({
        "enable": Out(1),
        "terms": Out(data.ArrayLayout(signed(depthwise_term_width(config)), lanes)),
        "ma": Out(data.ArrayLayout(unsigned(config.mult_width), lanes)),
        "shift": Out(data.ArrayLayout(unsigned(SHIFT_BITS), lanes)),
        "zy": Out(signed(8)), "lo": Out(signed(8)), "hi": Out(signed(8)),
        "y": In(data.ArrayLayout(signed(8), lanes)),
    })


class _Pipeline(wiring.Component):
    """The unit's datapath, always flowing; :class:`DepthwiseUnit` holds it with an enable."""

    def __init__(self, config, tag_width):
        self._config = config
        self._tag_width = tag_width
        ports = {
            "i_valid": In(1), "i_payload": In(depthwise_unit_input(config, tag_width)),
            "o_valid": Out(1), "o_payload": Out(depthwise_unit_output(config, tag_width)),
        }
        if config.depthwise_pixels == 1:
            # the cycle after a window pair is taken, its second window's: no pair is taken
            ports["o_second"] = Out(1)
        super().__init__(ports)

    def elaborate(self, platform):
        if self._config.depthwise_pixels == 1:
            return self._elaborate_half()
        m = Module()
        cfg = self._config
        pin, k2 = cfg.pin, cfg.kmax * cfg.kmax
        i = self.i_payload
        # Operand registers, as the array's Int8Products with deep_pipeline (which
        # pixel_pairs implies): the routes from the line buffer's tap multiplexers
        # get a cycle of their own.
        q = Signal.like(i, name="operands", reset_less=True)
        m.d.sync += q.eq(i)
        i = q
        trees = []
        for pixel, window in enumerate((i.window, i.window_next)):
            for p in range(pin):
                tree = m.submodules[f"tree{pixel}_{p}"] = AdderTree(k2, 16)
                trees.append(tree)
                for t in range(k2):
                    # Radix-4 Booth partial products and adders: no `*` for
                    # any flow to map to a DSP block (yosys's synth_xilinx
                    # makes each `*` a DSP48E1, whatever `use_dsp` attribute
                    # its signal carries).
                    product = Signal(signed(16), name=f"prod{pixel}_{p}_{t}", reset_less=True)
                    m.d.sync += product.eq(_lut_product(window[t * pin + p], i.weights[p][t]))
                    m.d.comb += tree.i_data[t].eq(product)
        self._side_path(m, self.i_valid)
        for n, tree in enumerate(trees):
            m.d.sync += self.o_payload.acc[n // pin][n % pin].eq(tree.o_sum)
        return m

    def _side_path(self, m, valid):
        """``valid`` (and the input's tag) to ``o_valid`` (and ``o_payload.tag``) the
        unit's latency later, beside the products: both arrangements' one side path."""
        side = data.StructLayout({"valid": 1, **({"tag": unsigned(self._tag_width)}
                                                 if self._tag_width else {})})
        s = Signal(side, name="side_in")
        m.d.comb += s.valid.eq(valid)
        if self._tag_width:
            m.d.comb += s.tag.eq(self.i_payload.tag)
        # everything but the output register
        s = delayed(m, s, depthwise_unit_latency(self._config) - 1, "side_d")
        m.d.sync += self.o_valid.eq(s.valid)
        if self._tag_width:
            m.d.sync += self.o_payload.tag.eq(s.tag)

    def _elaborate_half(self):
        """``depthwise_pixels`` 1: one window of the pair a cycle through ``kmax^2 * pin``
        products, ``window`` the cycle after the pair is taken, ``window_next`` the
        cycle after that; the first window's sums wait a cycle for the second's. A
        ``single`` pair (no second pixel) takes one cycle: the next pair's window
        takes the second's place, and its ``acc[1]`` is of no window."""
        m = Module()
        cfg = self._config
        pin, k2 = cfg.pin, cfg.kmax * cfg.kmax
        i = self.i_payload
        second = Signal(name="second")
        take = Signal(name="take")
        m.d.comb += [take.eq(self.i_valid & ~second), self.o_second.eq(second)]
        m.d.sync += second.eq(take & ~i.single)
        # The operand register takes the pair's window, then the held window_next:
        # the multiplexer is a register's input, not the products' (the route from
        # the line buffer's tap multiplexers keeps its cycle). The weights and the
        # second window are held for the pair's two cycles.
        held = Signal.like(i.window_next, name="window_held", reset_less=True)
        weights = Signal.like(i.weights, name="weights", reset_less=True)
        with m.If(take):
            m.d.sync += [held.eq(i.window_next), weights.eq(i.weights)]
        window = Signal.like(i.window, name="operands", reset_less=True)
        m.d.sync += window.eq(Mux(second, held, i.window))
        trees = []
        for p in range(pin):
            tree = m.submodules[f"tree{p}"] = AdderTree(k2, 16)
            trees.append(tree)
            for t in range(k2):
                # (Booth products in LUTs, as the full-rate unit's: no `*`)
                product = Signal(signed(16), name=f"prod{p}_{t}", reset_less=True)
                m.d.sync += product.eq(_lut_product(window[t * pin + p], weights[p][t]))
                m.d.comb += tree.i_data[t].eq(product)
        self._side_path(m, take)
        for p, tree in enumerate(trees):
            # the first window's sum, a cycle ahead of the second's
            first = Signal.like(tree.o_sum, name=f"first_sum{p}", reset_less=True)
            m.d.sync += [first.eq(tree.o_sum), self.o_payload.acc[0][p].eq(first),
                         self.o_payload.acc[1][p].eq(tree.o_sum)]
        return m


class DepthwiseUnit(wiring.Component):
    """``pin`` depthwise channels of two adjacent output pixels a cycle, in LUT logic.

    Each window pair taken is multiplied tap by tap by its channels' weights:
    ``acc[j][p] = sum over ky, kx of window_j[(ky*kmax + kx)*pin + p] *
    weights[p][ky*kmax + kx]``, ``j`` 0 for ``window`` and 1 for
    ``window_next``. The windows are the line buffer's in a pixel-pair run
    (raw ``x``, the padding reading ``x_zp``), so, as the array's ``o_acc``,
    the sums leave out the folded bias ``b - x_zp*sum(w)`` (the parameter
    record's), which the requantizing stage adds: ``acc + bias`` is
    :func:`fpgacnn.host.integer_ops.conv_acc` of the depthwise layer. A
    kernel smaller than ``kmax`` is embedded top-left in zeros, as the
    array's.

    The weights are a word of ``pin * kmax^2`` bytes, the channels' own taps
    only: the engine's weight word of a depthwise run (``pout`` lanes of
    ``kmax^2 * pin``, zero off the diagonal, ``pin == pout``) holds them as
    its lane ``p``'s channel ``p``, ``1/pin`` of its bytes
    (docs/engine.md, "The fused depthwise + pointwise block").

    With ``depthwise_pixels`` 1 (the half-rate unit, docs/engine.md "The
    half-rate depthwise unit") it has half the products, ``kmax^2 * pin``: a
    pair taken is worked in two cycles, ``window`` then ``window_next``, and
    its ``2 * pin`` sums leave together as the full-rate unit's; the input's
    ``single`` (a pair of one pixel, an odd row's last) takes one, its
    ``acc[1]`` of no window.

    Parameters
    ----------
    config : EngineConfig
        The engine the unit sits in: ``pin``, ``kmax``, ``acc_width``,
        ``deep_pipeline`` and ``depthwise_pixels``; it must have
        ``pixel_pairs`` (the window pair).
    tag_width : int
        Width of a tag carried from input to output with its window (0: none).

    Members
    -------
    i_stream : In(stream.Signature(depthwise_unit_input(config, tag_width)))
        One window pair with its weights a transfer.
    o_stream : Out(stream.Signature(depthwise_unit_output(config, tag_width)))
        The ``2 * pin`` sums of each window pair, in the order taken.

    Raises
    ------
    TypeError
        ``config`` is not an :class:`EngineConfig`, or ``tag_width`` not an integer.
    ValueError
        ``tag_width`` is negative.
    ConfigError
        The engine has no ``pixel_pairs``, or its ``acc_width`` is narrower
        than a sum (:func:`~fpgacnn.core.fused_block.depthwise_sum_width`).

    Latency
    -------
    :attr:`latency` (:func:`~fpgacnn.core.fused_block.depthwise_unit_latency`,
    7 for a 3x3 engine with ``deep_pipeline``) cycles from a transfer in to
    its sums on ``o_stream`` (8 for the half-rate unit), one window pair a
    cycle while ``o_stream`` is ready (the half-rate unit: ``i_stream.ready``
    is low the cycle after a pair of two pixels is taken). The whole pipeline holds while a result waits (``i_stream.ready``
    is ``~o_stream.valid | o_stream.ready``): the line buffer's read cannot
    wait, so in the engine the window issue must be credited against the
    pair buffer's space, as the convolution core credits its output FIFO.
    """

    def __init__(self, config, *, tag_width=0):
        require_config(config)
        _check_tag_width(tag_width)
        if not config.pixel_pairs:
            raise ConfigError("the depthwise unit takes the window pair of a pixel-pair "
                              "engine: it needs pixel_pairs 1")
        check_depthwise_sums(config)
        self._config = config
        self._tag_width = tag_width
        super().__init__({
            "i_stream": In(stream.Signature(depthwise_unit_input(config, tag_width))),
            "o_stream": Out(stream.Signature(depthwise_unit_output(config, tag_width))),
        })

    @property
    def config(self):
        return self._config

    @property
    def latency(self):
        """Cycles from a transfer in to its result's ``o_stream.valid``, unstalled."""
        return depthwise_unit_latency(self._config)

    def elaborate(self, platform):
        m = Module()
        # One enable for every register: the pipeline moves while its last
        # stage is empty or taken. Valid is a register, ready follows it.
        advance = Signal()
        m.d.comb += advance.eq(~self.o_stream.valid | self.o_stream.ready)
        pipe = _Pipeline(self._config, self._tag_width)
        m.submodules.pipeline = EnableInserter({"sync": advance})(pipe)
        ready = advance & ~pipe.o_second if self._config.depthwise_pixels == 1 else advance
        m.d.comb += [
            self.i_stream.ready.eq(ready),
            pipe.i_valid.eq(self.i_stream.valid),
            pipe.i_payload.eq(self.i_stream.payload),
            self.o_stream.valid.eq(pipe.o_valid),
            self.o_stream.payload.eq(pipe.o_payload),
        ]
        return m
