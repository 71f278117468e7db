"""2x2 stride-2 max-pooling of the conv result stream, with one row of memory."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ...core.config import require_config
from ...core.contract import engine_contract
from .delay import delay_line, delayed
from .limits import limits
from ..tech.pipelined_memory import MemoryPorts

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
    fourth word emits the result. The block never stalls. The
    read-modify-write takes five short stages (register the word, read,
    register the memory output -- and its part select when the row memory
    spans several block RAMs, six then --, compare, write back from
    registers), and a
    word that reads an entry still in flight takes the newest result
    instead (compared a stage early with the results older than the
    newest); without ``deep_pipeline`` it takes two (read, compare and
    write) with a read port transparent for the write port.

    Parameters
    ----------
    config : EngineConfig
        Uses ``pout``; the row memory is the contract's ``pool_row``
        (``ceil(max_width/2) * max_co_tiles`` words, :mod:`fpgacnn.core.contract`).

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
    :attr:`latency` = 4 cycles (5 when the row memory spans several block
    RAMs in depth; 2 without ``deep_pipeline``) from the ``i_valid`` cycle of a window's last
    word (bottom right, ``(2*py+1, 2*px+1, co)``) to its ``o_valid`` cycle.
    """

    def __init__(self, config):
        require_config(config)
        self._config = config
        self._depth = engine_contract(config).pool_row.words
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
        return engine_contract(self._config).latency.maxpool

    def elaborate(self, platform):
        m = Module()
        pout = self._config.pout
        word = data.ArrayLayout(signed(8), pout)
        addr_width = max(1, (self._depth - 1).bit_length())

        # Position of the next input word; `clear` restarts it combinationally
        # so that a word in the clear cycle is the first of the image.
        # With deep_pipeline, "last" and "kept" flags are registered with the
        # counters (the compares with the descriptor in front of every
        # counter's next value were the longest path of the pool on the
        # ECP5): each is computed for the value its counter takes, beside
        # that value. Without, they are compares of the position (fewer
        # logic cells: the iCE40 UP5K is full).
        deep = bool(self._config.deep_pipeline)
        lim = limits(self._config)
        co, ox = Signal(lim.co_bits), Signal(lim.col_bits)
        oy_odd = Signal()
        base = Signal(addr_width + 1)  # = (ox // 2) * co_tiles
        co_last, ox_last, ox_kept = Signal(name="co_last"), Signal(name="ox_last"), Signal(name="ox_kept")
        p_co, p_ox, p_oy_odd, p_base = Signal.like(co), Signal.like(ox), Signal(), Signal(addr_width + 1)
        p_co_last, p_ox_last, p_ox_kept = Signal(), Signal(), Signal()

        def flags_at(co_value, ox_value):
            # co_last, ox_last, ox_kept when the position is (co_value,
            # ox_value); a trailing odd column is dropped (its pair index
            # equals the pooled width)
            return Cat(co_value + 1 >= self.co_tiles, ox_value + 1 >= self.out_w,
                       (ox_value >> 1) < (self.out_w >> 1))

        zero, one = Const(0, 1), Const(1, 1)
        flags, p_flags = Cat(co_last, ox_last, ox_kept), Cat(p_co_last, p_ox_last, p_ox_kept)

        def set_flags(value):
            return [flags.eq(value)] if deep else []
        # The flags of the next column and of the next tile, from the
        # registers and from the restart in parallel: `clear` (late: the
        # requantizer's valid and tag) only selects. Each is one compare of
        # a counter with a bound registered from `out_w`/`co_tiles` (static
        # from two cycles before an image's first word).
        co_bound = Signal(signed(18))    # co + 2 >= co_tiles  <=>  co >= co_tiles - 2
        last_bound = Signal(signed(18))  # ox + 2 >= out_w     <=>  ox >= out_w - 2
        kept_bound = Signal(signed(18))  # (ox + 1) // 2 < out_w // 2  <=>  ox < out_w//2*2 - 1
        if deep:
            m.d.sync += [co_bound.eq(self.co_tiles - 2), last_bound.eq(self.out_w - 2),
                         kept_bound.eq(Cat(Const(0, 1), self.out_w[1:]) - 1)]
        next_column = Mux(self.clear, flags_at(zero, one),
                          Cat(self.co_tiles <= 1, ox >= last_bound, ox < kept_bound))
        next_co_last = Mux(self.clear, self.co_tiles <= 2, co >= co_bound)
        with m.If(self.clear):
            m.d.comb += [p_co.eq(0), p_ox.eq(0), p_oy_odd.eq(0), p_base.eq(0)]
            if deep:
                m.d.comb += p_flags.eq(flags_at(zero, zero))
        with m.Else():
            m.d.comb += [p_co.eq(co), p_ox.eq(ox), p_oy_odd.eq(oy_odd), p_base.eq(base)]
            if deep:
                m.d.comb += p_flags.eq(flags)
        if not deep:
            m.d.comb += p_flags.eq(flags_at(p_co, p_ox))
        with m.If(self.i_valid):
            with m.If(p_co_last):
                with m.If(p_ox_last):
                    m.d.sync += [co.eq(0), ox.eq(0), base.eq(0), oy_odd.eq(~p_oy_odd),
                                 *set_flags(flags_at(zero, zero))]
                with m.Else():
                    m.d.sync += [
                        co.eq(0), ox.eq(p_ox + 1),
                        base.eq(p_base + Mux(p_ox[0], self.co_tiles, 0)),
                        oy_odd.eq(p_oy_odd), *set_flags(next_column),
                    ]
            with m.Else():
                m.d.sync += [co.eq(p_co + 1), ox.eq(p_ox), base.eq(p_base), oy_odd.eq(p_oy_odd),
                             *set_flags(Cat(next_co_last, p_ox_last, p_ox_kept))]
        with m.Elif(self.clear):
            m.d.sync += [co.eq(0), ox.eq(0), base.eq(0), oy_odd.eq(0),
                         *set_flags(flags_at(zero, zero))]

        # The word, its entry and what it does there.
        step = data.StructLayout({
            "valid": 1,   # a kept word: it writes its entry
            "first": 1,   # first word of its window: it writes itself
            "emit": 1,    # last word of its window: emit the result
            "addr": addr_width,
        })
        now = Signal(step)
        m.d.comb += [
            now.valid.eq(self.i_valid & p_ox_kept),
            now.first.eq(~p_oy_odd & ~p_ox[0]),
            now.emit.eq(p_oy_odd & p_ox[0]),
            now.addr.eq(p_base + p_co),
        ]
        if not self._config.deep_pipeline:
            self._two_stages(m, now, word)
        else:
            self._pipelined(m, now, word)
        return m

    def _best(self, m, first, new, running, word):
        best = Signal(word)
        for lane in range(self._config.pout):
            with m.If(first | (new[lane] > running[lane])):
                m.d.comb += best[lane].eq(new[lane])
            with m.Else():
                m.d.comb += best[lane].eq(running[lane])
        return best

    def _two_stages(self, m, now, word):
        """Read, then compare and write back."""
        m.submodules.row = row = Memory(shape=word, depth=self._depth, init=[])
        wr = row.write_port()
        rd = row.read_port(transparent_for=(wr,))
        b = Signal.like(now)
        b_data = Signal(word)
        m.d.comb += rd.addr.eq(now.addr)
        m.d.sync += [b.eq(now), b_data.eq(self.i_data)]
        best = self._best(m, b.first, b_data, rd.data, word)
        m.d.comb += [wr.en.eq(b.valid), wr.addr.eq(b.addr), wr.data.eq(best)]
        m.d.sync += [self.o_valid.eq(b.valid & b.emit), self.o_data.eq(best)]

    def _pipelined(self, m, now, word):
        """Register, read, the memory's registered read, compare, write back."""
        # Read data registered behind the block RAMs (and after the part
        # select when there are parts); not transparent: writes still in
        # flight are forwarded below, away from the memory's output path.
        row = MemoryPorts(m, "row", word.size, self._depth, pipelined=True,
                          register_output=True)
        # Stage B: the word registered; it reads its entry. Stages up to D
        # (`row.latency` later): the word travels beside the read.
        b = Signal.like(now)
        b_data = Signal(word, reset_less=True)
        m.d.sync += [b.eq(now), b_data.eq(self.i_data)]
        m.d.comb += row.r_addr.eq(b.addr)
        chain = delay_line(m, b, row.latency, "s")
        d = chain[-1]
        # E: the result of D, written back this cycle; then the older results.
        e = Signal.like(now, name="e")
        results = [Signal(word, name=f"result_{i}", reset_less=True) for i in range(row.latency + 1)]
        # The words 1 .. latency+1 ahead of the one in B (in stages C .. D and
        # E) have not written their entry yet when it reads: note which ones
        # have the same address, and carry that along to D, when the i-th
        # ahead's result is in results[i-1].
        # The choice is made here, one-hot (the newest match wins, else the
        # memory), so that stage D only selects.
        ahead = chain[1:] + [e]
        match = [w.valid & (w.addr == b.addr) for w in ahead]
        pick = Signal(len(ahead) + 1)  # bit 0: the memory, bit i+1: results[i]
        m.d.comb += pick.eq(Cat(~Cat(*match).any(),
                                *(match[i] & ~Cat(*match[:i]).any() if i else match[0]
                                  for i in range(len(ahead)))))
        # Stage C (a cycle before D) compares the word with the results that
        # will be results[1..] in D (results shift every cycle: results[i-1]
        # now) and ORs the chosen one and its compare into two registers, so
        # that D compares with two candidates only (the memory's data and the
        # newest result, both new in D): the compare and the choice after it
        # were the longest path of the pool.
        pick_c = delayed(m, pick, row.latency - 1, "pick")
        c_data = delayed(m, b_data, row.latency - 1, "s_data", reset_less=True)
        pick_d = delayed(m, pick_c, 1, "pick_d")
        d_data = delayed(m, c_data, 1, "d_data", reset_less=True)
        pout = self._config.pout
        older_running = Signal(word, name="older_running", reset_less=True)
        older_greater = Signal(pout, name="older_greater", reset_less=True)
        for lane in range(pout):
            chosen = [(pick_c[i + 2], results[i]) for i in range(len(results) - 1)]
            m.d.sync += [
                older_running[lane].eq(_or_words(
                    Cat(*(r[lane].as_unsigned() & p.replicate(8) for p, r in chosen)),
                    len(chosen), 8)),
                older_greater[lane].eq(Cat(*((c_data[lane] > r[lane]) & p
                                             for p, r in chosen)).any()),
            ]
        # Stage D: the running maximum from memory, the newest result or the
        # older one chosen in C (one-hot), and the new word's compare with it.
        best = Signal(word)
        memory = data.View(word, row.r_data)
        for lane in range(pout):
            new = d_data[lane]
            running_lane = Signal(signed(8), name=f"running{lane}")
            m.d.comb += running_lane.eq(
                (memory[lane].as_unsigned() & pick_d[0].replicate(8)) |
                (results[0][lane].as_unsigned() & pick_d[1].replicate(8)) |
                older_running[lane].as_unsigned())
            greater = (((new > memory[lane]) & pick_d[0]) | ((new > results[0][lane]) & pick_d[1])
                       | older_greater[lane])
            with m.If(d.first | greater):
                m.d.comb += best[lane].eq(new)
            with m.Else():
                m.d.comb += best[lane].eq(running_lane)
        m.d.sync += [e.eq(d), results[0].eq(best),
                     self.o_valid.eq(d.valid & d.emit), self.o_data.eq(best)]
        m.d.sync += [results[i + 1].eq(results[i]) for i in range(len(results) - 1)]
        # Stage E: write back from registers (the route to the block RAM gets
        # a cycle of its own).
        m.d.comb += [row.w_en.eq(e.valid), row.w_addr.eq(e.addr), row.w_data.eq(results[0])]


def _or_words(bits, count, width):
    """The OR of ``count`` ``width``-bit words packed in ``bits``."""
    out = bits[:width]
    for i in range(1, count):
        out = out | bits[i * width:(i + 1) * width]
    return out
