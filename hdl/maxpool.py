"""2x2 stride-2 max-pooling of the conv result stream, with one row of memory."""

import math

from amaranth.hdl import Module, Mux, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .config import require_config
from .limits import limits

__all__ = ["MaxPool2x2"]


class MaxPool2x2(wiring.Component):
    """2x2, stride-2, floor-mode max-pool of a stream of ``pout``-lane int8 words.

    The input is the convolution core's result stream in the order
    ``for oy: for ox: for co in range(co_tiles)``, one word (``pout`` lanes,
    channels ``co*pout ..``) per ``i_valid``; the output is the pooled stream in
    the order ``for py: for px: for co``, as
    :func:`fpgacnn.host.integer_ops.maxpool2d` computes it. An odd trailing
    column (``out_w`` odd) and an odd trailing row are dropped.

    A row memory holds one running maximum per ``(px, co)``: word
    ``px*co_tiles + co``. Each input word reads its entry and writes back the
    maximum (the first of the four words of a window writes itself); the
    fourth word emits the result. The read-modify-write takes two cycles, and
    back-to-back words to the same entry (``co_tiles = 1``: columns ``2*px``
    and ``2*px+1``) are handled by a read port that is transparent for the
    write port. The block never stalls.

    Parameters
    ----------
    config : EngineConfig
        Uses ``pout`` and, for the row memory, ``max_width`` and
        ``max_out_channels`` (``ceil(max_width/2) * max_co_tiles`` words).

    Members
    -------
    clear : In(1)
        Pulse before each image: the position returns to ``(0, 0, 0)``. A word
        valid in the same cycle is taken as the image's first.
    out_w : In(16)
        Convolution output width before pooling, ``1..max_width``; static
        during an image.
    co_tiles : In(16)
        Output-channel tiles, ``1..max_co_tiles``; static during an image.
    i_valid : In(1)
    i_data : In(data.ArrayLayout(signed(8), pout))
    o_valid : Out(1)
    o_data : Out(data.ArrayLayout(signed(8), pout))

    Raises
    ------
    TypeError
        If ``config`` is not an :class:`EngineConfig`.

    Latency
    -------
    :attr:`latency` = 2 cycles from the ``i_valid`` cycle of a window's last
    word (bottom right, ``(2*py+1, 2*px+1, co)``) to its ``o_valid`` cycle.
    """

    def __init__(self, config):
        require_config(config)
        self._config = config
        self._depth = math.ceil(config.max_width / 2) * config.max_co_tiles
        super().__init__({
            "clear": In(1),
            "out_w": In(16),
            "co_tiles": In(16),
            "i_valid": In(1),
            "i_data": In(data.ArrayLayout(signed(8), config.pout)),
            "o_valid": Out(1),
            "o_data": Out(data.ArrayLayout(signed(8), config.pout)),
        })

    @property
    def config(self):
        return self._config

    @property
    def depth(self):
        """Words of the row memory."""
        return self._depth

    @property
    def latency(self):
        """Cycles from a window's last input word to its output word."""
        return 2

    def elaborate(self, platform):
        m = Module()
        pout = self._config.pout
        word = data.ArrayLayout(signed(8), pout)
        addr_width = max(1, (self._depth - 1).bit_length())

        m.submodules.row = row = Memory(shape=word, depth=self._depth, init=[])
        wr = row.write_port()
        rd = row.read_port(transparent_for=(wr,))

        # Position of the next input word; `clear` restarts it combinationally
        # so that a word in the clear cycle is the first of the image.
        lim = limits(self._config)
        co, ox = Signal(lim.co_bits), Signal(lim.col_bits)
        oy_odd = Signal()
        base = Signal(addr_width + 1)  # = (ox // 2) * co_tiles
        p_co, p_ox, p_oy_odd, p_base = Signal.like(co), Signal.like(ox), Signal(), Signal(addr_width + 1)
        with m.If(self.clear):
            m.d.comb += [p_co.eq(0), p_ox.eq(0), p_oy_odd.eq(0), p_base.eq(0)]
        with m.Else():
            m.d.comb += [p_co.eq(co), p_ox.eq(ox), p_oy_odd.eq(oy_odd), p_base.eq(base)]

        with m.If(self.i_valid):
            with m.If(p_co + 1 >= self.co_tiles):
                m.d.sync += co.eq(0)
                with m.If(p_ox + 1 >= self.out_w):
                    m.d.sync += [ox.eq(0), base.eq(0), oy_odd.eq(~p_oy_odd)]
                with m.Else():
                    m.d.sync += [
                        ox.eq(p_ox + 1),
                        base.eq(p_base + Mux(p_ox[0], self.co_tiles, 0)),
                        oy_odd.eq(p_oy_odd),
                    ]
            with m.Else():
                m.d.sync += [co.eq(p_co + 1), ox.eq(p_ox), base.eq(p_base), oy_odd.eq(p_oy_odd)]
        with m.Elif(self.clear):
            m.d.sync += [co.eq(0), ox.eq(0), base.eq(0), oy_odd.eq(0)]

        # Stage A: read the running maximum. A trailing odd column is dropped
        # (its pair index equals the pooled width).
        keep = (p_ox >> 1) < (self.out_w >> 1)
        addr = Signal(addr_width)
        m.d.comb += [addr.eq(p_base + p_co), rd.addr.eq(addr)]
        b_valid, b_first, b_emit = Signal(), Signal(), Signal()
        b_addr = Signal(addr_width)
        b_data = Signal(word)
        m.d.sync += [
            b_valid.eq(self.i_valid & keep),
            b_first.eq(~p_oy_odd & ~p_ox[0]),
            b_emit.eq(p_oy_odd & p_ox[0]),
            b_addr.eq(addr),
            b_data.eq(self.i_data),
        ]

        # Stage B: lane-wise maximum, write back, emit on the window's last word.
        best = Signal(word)
        for lane in range(pout):
            with m.If(b_first | (b_data[lane] > rd.data[lane])):
                m.d.comb += best[lane].eq(b_data[lane])
            with m.Else():
                m.d.comb += best[lane].eq(rd.data[lane])
        m.d.comb += [wr.en.eq(b_valid), wr.addr.eq(b_addr), wr.data.eq(best)]
        m.d.sync += [self.o_valid.eq(b_valid & b_emit), self.o_data.eq(best)]
        return m
