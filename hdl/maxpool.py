"""2x2 stride-2 max-pooling of the conv result stream, with one row of memory."""

import math

from amaranth.hdl import Cat, Module, Mux, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .config import require_config

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
    fourth word emits the result. The block never stalls.

    The read-modify-write is spread over short stages so that it does not
    limit the clock (a block-RAM read followed by the compare and the write
    in one cycle did): the input word is registered (A), its address read
    (B), the memory output registered (C), the compare done from registers
    (D) and the result written back (E). Words one to three apart that hit
    the same entry (``co_tiles <= 3``: columns ``2*px`` and ``2*px+1``; small
    images) would read a value not yet written; their running maximum is
    forwarded from the later stages instead, the most recent first.

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
    :attr:`latency` = 4 cycles from the ``i_valid`` cycle of a window's last
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
        return 4

    def elaborate(self, platform):
        m = Module()
        pout = self._config.pout
        word = data.ArrayLayout(signed(8), pout)
        addr_width = max(1, (self._depth - 1).bit_length())

        m.submodules.row = row = Memory(shape=word, depth=self._depth, init=[])
        wr = row.write_port()
        # Not transparent: writes still in flight are forwarded below, away
        # from the memory's output path.
        rd = row.read_port()

        # Position of the next input word; `clear` restarts it combinationally
        # so that a word in the clear cycle is the first of the image.
        co, ox = Signal(16), Signal(16)
        oy_odd = Signal()
        base = Signal(addr_width + 1)  # = (ox // 2) * co_tiles
        p_co, p_ox, p_oy_odd, p_base = Signal(16), Signal(16), Signal(), Signal(addr_width + 1)
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

        # Stage A: register the word, its address and what it does. A
        # trailing odd column is dropped (its pair index equals the pooled width).
        keep = (p_ox >> 1) < (self.out_w >> 1)
        stage = data.StructLayout({
            "valid": 1,   # a kept word: it writes its entry
            "first": 1,   # first word of its window: no read, it writes itself
            "emit": 1,    # last word of its window: emit the result
            "addr": addr_width,
        })
        b, c, d = Signal(stage), Signal(stage), Signal(stage)
        b_data = Signal(word, reset_less=True)
        m.d.sync += [
            b.valid.eq(self.i_valid & keep),
            b.first.eq(~p_oy_odd & ~p_ox[0]),
            b.emit.eq(p_oy_odd & p_ox[0]),
            b.addr.eq(p_base + p_co),
            b_data.eq(self.i_data),
        ]

        # Stage B: read (the memory's data comes out in stage C). Words still
        # in C, D and E when this one reads (1, 2 and 3 words ahead) have not
        # written their entry yet: note which one has the same address.
        m.d.comb += rd.addr.eq(b.addr)
        e_valid = Signal()
        e_addr = Signal(addr_width, reset_less=True)
        e_best = Signal(word, reset_less=True)
        f_best = Signal(word, reset_less=True)
        g_best = Signal(word, reset_less=True)
        c_data = Signal(word, reset_less=True)
        c_fwd = Signal(3)  # one-hot or zero: take the result of D, E or F (as of stage D)
        m.d.sync += [
            c.eq(b), c_data.eq(b_data),
            c_fwd.eq(Cat(c.valid & (c.addr == b.addr),
                         d.valid & (d.addr == b.addr),
                         e_valid & (e_addr == b.addr))),
        ]

        # Stage C: register the memory output; the forwarding choice moves on.
        d_data = Signal(word, reset_less=True)
        d_mem = Signal(word, reset_less=True)
        d_fwd = Signal(3)
        m.d.sync += [d.eq(c), d_data.eq(c_data), d_mem.eq(rd.data), d_fwd.eq(c_fwd)]

        # Stage D: lane-wise maximum against the running maximum, which comes
        # from the memory or, for a word that read too early, from the newest
        # of the three results after this one (now in E, F and G).
        running = Signal(word)
        with m.If(d_fwd[0]):
            m.d.comb += running.eq(e_best)
        with m.Elif(d_fwd[1]):
            m.d.comb += running.eq(f_best)
        with m.Elif(d_fwd[2]):
            m.d.comb += running.eq(g_best)
        with m.Else():
            m.d.comb += running.eq(d_mem)
        best = Signal(word)
        for lane in range(pout):
            with m.If(d.first | (d_data[lane] > running[lane])):
                m.d.comb += best[lane].eq(d_data[lane])
            with m.Else():
                m.d.comb += best[lane].eq(running[lane])
        m.d.sync += [
            e_valid.eq(d.valid), e_addr.eq(d.addr), e_best.eq(best),
            f_best.eq(e_best),
            g_best.eq(f_best),
            self.o_valid.eq(d.valid & d.emit), self.o_data.eq(best),
        ]

        # Stage E: write the result back (from registers: the route to the
        # block RAM gets a cycle of its own).
        m.d.comb += [wr.en.eq(e_valid), wr.addr.eq(e_addr), wr.data.eq(e_best)]
        return m
