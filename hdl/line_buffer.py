"""Line buffer and window generator of the convolution engine (docs/engine.md, Schedule).

The writer side takes the input pixels of a whole batch in NHWC order, one
``pin``-byte word per cycle, and stores input row ``g`` (counted over the
batch) in row slot ``g mod row_slots``; column ``x`` of a row lives in bank
``x mod kmax`` at word ``(x div kmax)*ci_tiles + ci``. The reader side walks
the schedule ``for oy: for ox: for co: for ci`` and issues one window per
cycle: ``kmax x kmax`` taps of ``pin`` bytes, out-of-image taps reading the
input zero point. A window touches ``kmax`` slots and ``kmax`` banks, so every
bank memory is read at most once per cycle whatever the stride.

Row bookkeeping: an output row is issued only once the input rows it needs
are complete, and the writer starts a row only once every output row still
to be issued has moved past the row whose slot it reuses (``row_slots``
rows earlier). Both tests compare one small count, the rows written counted
from the first row of the reader's current image. Writing rows for later
output rows (and the next image) thus overlaps the reading of the current ones.
"""

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .config import require_config
from .descriptor import descriptor_layout

__all__ = ["LineBuffer"]

class LineBuffer(wiring.Component):
    """Row-slot line buffer and ``kmax x kmax x pin`` window generator.

    Parameters
    ----------
    config : EngineConfig

    Members
    -------
    desc : In(descriptor_layout())
        The layer; held stable from ``start`` until both ``w_done`` and ``r_done``.
    start : In(1)
        Pulse: forget everything and wait for the first pixel / first window of the batch.
    w_stream : In(stream.Signature(unsigned(8*pin)))
        Input pixel words of the whole batch, NHWC (byte ``p`` = channel ``ci*pin + p``).
    w_done : Out(1)
        Every pixel word of the batch has been written (also high after reset).
    en : In(1)
        The reader may issue a window this cycle.
    ready : Out(1)
        The input rows of the window at the current position are present.
    issue : Out(1)
        ``en & ready``: the window at the current position is read this cycle.
    oy, ox, co, ci : Out(16)
        Current position of the reader in the schedule.
    widx : Out(16)
        ``co*ci_tiles + ci``, the weight word of the current position.
    first, last : Out(1)
        ``ci == 0`` and ``ci == ci_tiles - 1``.
    r_done : Out(1)
        Every window of the batch has been issued (also high after reset).
    o_valid : Out(1)
    o_window : Out(data.ArrayLayout(signed(8), kmax*kmax*pin))
        The window issued ``latency`` cycles earlier; tap ``(ky*kmax + kx)*pin + p``.

    Latency
    -------
    ``latency`` (3) cycles from ``issue`` to ``o_valid``: memory read, the
    memory output register, then the tap multiplexers. No window issues in the first ``setup_cycles`` (17)
    cycles after ``start``.
    """

    def __init__(self, config):
        require_config(config)
        self._config = config
        k, pin = config.kmax, config.pin
        super().__init__({
            "desc": In(descriptor_layout()),
            "start": In(1),
            "w_stream": In(stream.Signature(unsigned(8 * pin))),
            "w_done": Out(1, init=1),
            "en": In(1),
            "ready": Out(1),
            "issue": Out(1),
            "oy": Out(16), "ox": Out(16), "co": Out(16), "ci": Out(16),
            "widx": Out(16),
            "first": Out(1), "last": Out(1),
            "r_done": Out(1, init=1),
            "o_valid": Out(1),
            "o_window": Out(data.ArrayLayout(signed(8), k * k * pin)),
        })

    @property
    def latency(self):
        return 3

    @property
    def setup_cycles(self):
        """Cycles after ``start`` before the first window can issue (``in_h mod row_slots``)."""
        return 17

    def elaborate(self, platform):
        cfg = self._config
        k, pin, slots = cfg.kmax, cfg.pin, cfg.row_slots
        depth = cfg.line_bank_depth
        desc = self.desc
        m = Module()

        banks = [[Memory(shape=unsigned(8 * pin), depth=depth, init=[]) for _ in range(k)]
                 for _ in range(slots)]
        wports, rports = [], []
        for r in range(slots):
            wports.append([])
            rports.append([])
            for b in range(k):
                m.submodules[f"bank_{r}_{b}"] = banks[r][b]
                # Ports bound to names, so the netlist does not call them "$signature".
                wport = banks[r][b].write_port()
                rport = banks[r][b].read_port()
                wports[r].append(wport)
                rports[r].append(rport)

        # in_h mod row_slots (how far the slots turn from one image to the next),
        # by restoring division, one quotient bit per cycle after `start`: a
        # combinational divider would be the longest path of the engine.
        mod_rem = Signal(16)
        mod_div = Signal(16 + slots.bit_length())
        mod_done = Signal(init=1)
        inh_mod = mod_rem[:max(1, (slots - 1).bit_length())]
        with m.If(~mod_done):
            with m.If(mod_rem >= mod_div):
                m.d.sync += mod_rem.eq(mod_rem - mod_div)
            m.d.sync += mod_div.eq(mod_div >> 1)
            with m.If(mod_div == slots):
                m.d.sync += mod_done.eq(1)

        # ---- writer ---------------------------------------------------------
        wci, wx, wy, wimg = (Signal(16, name=n) for n in ("wci", "wx", "wy", "wimg"))
        wbank = Signal(range(k))
        wbase = Signal(range(depth + 1))
        waddr = Signal(range(depth + 1))  # = wbase + wci, kept as a register of its own
        # "Counter at its last value" flags, kept beside the counters so that
        # the next-state logic selects on a register instead of a compare.
        wci_last = _LastFlag("wci_last", desc.ci_tiles)
        wx_last = _LastFlag("wx_last", desc.in_w)
        wy_last = _LastFlag("wy_last", desc.in_h)
        wimg_last = _LastFlag("wimg_last", desc.batch)
        wslot = Signal(range(slots))
        # Input rows written, counted from the first row of the reader's current
        # image (negative while the writer still finishes the previous image's
        # unused last rows; at most in_h + row_slots). Comparing this one small
        # count replaces global row numbers.
        avail = Signal(signed(19))
        row_written = Signal()
        image_read = Signal()
        m.d.sync += avail.eq(avail + row_written - Mux(image_read, desc.in_h, 0))

        # ---- reader position ------------------------------------------------
        n = Signal(16)
        oy, ox, co, ci, widx = self.oy, self.ox, self.co, self.ci, self.widx
        ytop = Signal(signed(18))   # oy*stride - pad_top
        x0 = Signal(signed(18))     # ox*stride - pad_left
        bank0 = Signal(range(k))    # x0 mod kmax
        base0 = Signal(signed(18))  # (x0 div kmax) * ci_tiles
        rslot0 = Signal(range(slots))  # slot of the current image's row ytop
        img_slot = Signal(range(slots))  # slot of the current image's row 0

        # Rows (of the current image) the current output row needs, and the first
        # row the writer may not start yet: row_slots past the first row still
        # needed. Registered with ytop, so that the issue path is one compare.
        rtarget = Signal(signed(19))
        rlimit = Signal(signed(19))

        ci_last = _LastFlag("ci_last", desc.ci_tiles)
        co_last = _LastFlag("co_last", desc.co_tiles)
        ox_last = _LastFlag("ox_last", desc.out_w)
        oy_last = _LastFlag("oy_last", desc.out_h)
        n_last = _LastFlag("n_last", desc.batch)
        ci_first = Signal(init=1)
        # Read address of each bank, a register (rather than ``rbase + ci``
        # at issue): it fans out to every row slot's block RAMs. ``rbase[b]``
        # is the word of ci = 0 of the window column that bank b holds:
        # ``base0``, one further on (``+ ci_tiles``) when ``b < bank0``.
        rbase = [Signal(signed(19), name=f"rbase_{b}") for b in range(k)]
        raddr = [Signal(signed(19), name=f"raddr_{b}") for b in range(k)]
        # The column after the current one (x0 + stride), computed a step
        # ahead, so that the issue logic only ever selects registers: with the
        # arithmetic behind the selection, yosys merged the adders of the
        # different branches and put the issue logic in front of them.
        column = data.StructLayout({"base0": signed(18), "bank0": range(k),
                                    "rbase": data.ArrayLayout(signed(19), k)})
        nxt = Signal(column)

        def advance(col):
            """The column ``stride`` pixels to the right of ``col`` (a View of ``column``)."""
            bs = Signal(range(2 * k + 1), name="adv_bs")
            m.d.comb += bs.eq(col.bank0 + desc.stride)
            wrap = bs >= k
            bank = Mux(wrap, bs - k, bs)
            res = Signal(column, name="adv")
            m.d.comb += [res.base0.eq(col.base0 + Mux(wrap, desc.ci_tiles, 0)), res.bank0.eq(bank)]
            for b in range(k):
                # new base0, + ci_tiles below the new bank0: one adder on the old base0
                m.d.comb += res.rbase[b].eq(col.base0 + Mux(wrap & (b < bank), desc.ci_tiles << 1,
                                                            Mux(wrap | (b < bank), desc.ci_tiles, 0)))
            return res

        # A row's first column (x0 = -pad_left) and the one after it depend on
        # the descriptor alone: registers, refreshed every cycle (and loaded
        # into the position while the setup of `start` runs, see below).
        # x0 = -pad_left: bank (kmax - pad_left) mod kmax of word -1 when padded;
        # then banks below bank0 hold word 0, the others word -1.
        padded = desc.pad_left != 0
        first_col = Signal(column)
        m.d.comb += [first_col.base0.eq(Mux(padded, -desc.ci_tiles, 0)),
                     first_col.bank0.eq(Mux(padded, k - desc.pad_left, 0))]
        m.d.comb += [first_col.rbase[b].eq(Mux(padded & (b >= k - desc.pad_left), -desc.ci_tiles, 0))
                     for b in range(k)]
        row_col = Signal(column, reset_less=True)
        row_nxt = Signal(column, reset_less=True)
        m.d.sync += [row_col.eq(first_col), row_nxt.eq(advance(first_col))]

        def set_column(col, after):
            """Make ``col`` the current column (read addresses at ci = 0), ``after`` the next."""
            return ([base0.eq(col.base0), bank0.eq(col.bank0), nxt.eq(after)] +
                    [stmt for b in range(k)
                     for stmt in (rbase[b].eq(col.rbase[b]), raddr[b].eq(col.rbase[b]))])

        def row_bounds(y):
            ybot = Signal(signed(19))
            m.d.comb += ybot.eq(y + k)
            return [rtarget.eq(Mux(ybot > desc.in_h, desc.in_h, ybot)),
                    rlimit.eq(Mux(y < 0, 0, y) + slots)]

        # ---- writer logic -----------------------------------------------------
        can_write = Signal()
        m.d.comb += [
            can_write.eq(~self.w_done & (self.r_done | (avail < rlimit))),
            self.w_stream.ready.eq(can_write),
        ]
        wen = self.w_stream.valid & can_write
        for r in range(slots):
            for b in range(k):
                m.d.comb += [
                    wports[r][b].addr.eq(waddr),
                    wports[r][b].data.eq(self.w_stream.payload),
                    wports[r][b].en.eq(wen & (wslot == r) & (wbank == b)),
                ]
        with m.If(wen):
            with m.If(wci_last.value):
                m.d.sync += [wci.eq(0), wci_last.reset()]
                with m.If(wx_last.value):
                    m.d.comb += row_written.eq(1)
                    m.d.sync += [wx.eq(0), wx_last.reset(), wbank.eq(0), wbase.eq(0),
                                 waddr.eq(0), wslot.eq(_wrap_inc(wslot, slots))]
                    with m.If(wy_last.value):
                        m.d.sync += [wy.eq(0), wy_last.reset(), wimg.eq(wimg + 1),
                                     wimg_last.step(wimg)]
                        with m.If(wimg_last.value):
                            m.d.sync += self.w_done.eq(1)
                    with m.Else():
                        m.d.sync += [wy.eq(wy + 1), wy_last.step(wy)]
                with m.Else():
                    m.d.sync += [wx.eq(wx + 1), wx_last.step(wx)]
                    with m.If(wbank == k - 1):
                        m.d.sync += [wbank.eq(0), wbase.eq(wbase + desc.ci_tiles),
                                     waddr.eq(wbase + desc.ci_tiles)]
                    with m.Else():
                        m.d.sync += [wbank.eq(wbank + 1), waddr.eq(wbase)]
            with m.Else():
                m.d.sync += [wci.eq(wci + 1), wci_last.step(wci), waddr.eq(waddr + 1)]

        # ---- reader logic -----------------------------------------------------
        m.d.comb += [
            self.ready.eq(~self.r_done & mod_done & (avail >= rtarget)),
            self.issue.eq(self.ready & self.en),
            self.first.eq(ci_first),
            self.last.eq(ci_last.value),
        ]

        def row_start():
            return [x0.eq(-desc.pad_left)] + set_column(row_col, row_nxt)

        def image_start(slot):
            # rslot0 = (slot - pad_top) mod slots
            v = Signal(signed(8))
            m.d.comb += v.eq(slot - desc.pad_top)
            return [ytop.eq(-desc.pad_top),
                    rslot0.eq(_mod_once(v, slots)), img_slot.eq(slot)] + \
                row_bounds(-desc.pad_top) + row_start()

        with m.If(~mod_done):
            # No window issues before the setup is done; by then the row-start
            # registers hold this descriptor's values (they may not at `start`).
            m.d.sync += set_column(row_col, row_nxt)
        with m.If(self.start):
            m.d.sync += [wci.eq(0), wx.eq(0), wy.eq(0), wimg.eq(0), wbank.eq(0), wbase.eq(0),
                         wslot.eq(0), avail.eq(0), self.w_done.eq(0),
                         mod_rem.eq(desc.in_h), mod_div.eq(slots << 15), mod_done.eq(0),
                         n.eq(0), oy.eq(0), ox.eq(0), co.eq(0), ci.eq(0), widx.eq(0),
                         self.r_done.eq(0)]
            m.d.sync += [wci_last.reset(), wx_last.reset(), wy_last.reset(), wimg_last.reset(),
                         waddr.eq(0), ci_last.reset(), co_last.reset(), ox_last.reset(),
                         oy_last.reset(), n_last.reset(), ci_first.eq(1)]
            m.d.sync += image_start(Const(0, range(slots)))
        with m.Elif(self.issue):
            with m.If(ci_last.value):
                m.d.sync += [ci.eq(0), ci_last.reset(), ci_first.eq(1)]
                with m.If(co_last.value):
                    m.d.sync += [co.eq(0), co_last.reset(), widx.eq(0)]
                    with m.If(ox_last.value):
                        m.d.sync += [ox.eq(0), ox_last.reset()]
                        m.d.sync += row_start()
                        with m.If(oy_last.value):
                            nslot = Signal(range(2 * slots))
                            m.d.comb += nslot.eq(img_slot + inh_mod)
                            m.d.comb += image_read.eq(1)
                            m.d.sync += [oy.eq(0), oy_last.reset(), n.eq(n + 1), n_last.step(n)]
                            m.d.sync += image_start(_mod_once(nslot, slots))
                            with m.If(n_last.value):
                                m.d.sync += self.r_done.eq(1)
                        with m.Else():
                            rs = Signal(range(2 * slots))
                            m.d.comb += rs.eq(rslot0 + desc.stride)
                            m.d.sync += [oy.eq(oy + 1), oy_last.step(oy),
                                         ytop.eq(ytop + desc.stride),
                                         rslot0.eq(_mod_once(rs, slots))]
                            m.d.sync += row_bounds(ytop + desc.stride)
                    with m.Else():
                        m.d.sync += [ox.eq(ox + 1), ox_last.step(ox), x0.eq(x0 + desc.stride)]
                        m.d.sync += set_column(nxt, advance(nxt))
                with m.Else():
                    m.d.sync += [co.eq(co + 1), co_last.step(co), widx.eq(widx + 1)]
                    m.d.sync += [raddr[b].eq(rbase[b]) for b in range(k)]
            with m.Else():
                m.d.sync += [ci.eq(ci + 1), ci_last.step(ci), ci_first.eq(0), widx.eq(widx + 1)]
                m.d.sync += [raddr[b].eq(raddr[b] + 1) for b in range(k)]

        # ---- window read: stage 0 (address) -> 1 (memory data) -> 2 (registered
        # memory data) -> 3 (taps). The memory outputs get a register of their
        # own: a block RAM's clock-to-output delay followed by the tap
        # multiplexers would be one of the longest paths of the engine. The
        # read itself stays in the issue cycle: the writer may reuse a slot
        # from the next cycle on.
        for b in range(k):
            for r in range(slots):
                m.d.comb += rports[r][b].addr.eq(raddr[b].as_unsigned())
        rsel = [Signal(range(slots), name=f"rsel_{ky}") for ky in range(k)]
        bsel = [Signal(range(k), name=f"bsel_{kx}") for kx in range(k)]
        rowv = Signal(k)
        colv = Signal(k)
        v1 = Signal()
        for ky in range(k):
            ry = Signal(signed(19), name=f"ry_{ky}")
            rs = Signal(range(slots + k), name=f"rs_{ky}")
            m.d.comb += [ry.eq(ytop + ky), rs.eq(rslot0 + ky)]
            m.d.sync += [rsel[ky].eq(_mod_once(rs, slots)),
                         rowv[ky].eq((ry >= 0) & (ry < desc.in_h))]
        for kx in range(k):
            cx = Signal(signed(19), name=f"cx_{kx}")
            bs = Signal(range(2 * k), name=f"bs_{kx}")
            m.d.comb += [cx.eq(x0 + kx), bs.eq(bank0 + kx)]
            m.d.sync += [bsel[kx].eq(_mod_once(bs, k)),
                         colv[kx].eq((cx >= 0) & (cx < desc.in_w))]
        m.d.sync += v1.eq(self.issue)

        # Stage 1: register the memory outputs; the tap selection moves on with them.
        bank_q = [[Signal(8 * pin, name=f"bank_q_{r}_{b}", reset_less=True) for b in range(k)]
                  for r in range(slots)]
        for r in range(slots):
            m.d.sync += [bank_q[r][b].eq(rports[r][b].data) for b in range(k)]
        rsel2 = [Signal.like(x, name=f"rsel2_{i}") for i, x in enumerate(rsel)]
        bsel2 = [Signal.like(x, name=f"bsel2_{i}") for i, x in enumerate(bsel)]
        rowv2, colv2, v2 = Signal(k), Signal(k), Signal()
        m.d.sync += [a.eq(b) for a, b in zip(rsel2 + bsel2, rsel + bsel)]
        m.d.sync += [rowv2.eq(rowv), colv2.eq(colv), v2.eq(v1)]

        # Stage 2: rotate the banks of every slot into window columns, then pick
        # each window row's slot.
        cols = []
        for r in range(slots):
            bank_data = Array(bank_q[r][b] for b in range(k))
            cols.append([bank_data[bsel2[kx]] for kx in range(k)])
        zp_word = Cat(*([desc.x_zp] * pin))
        taps = []
        for ky in range(k):
            for kx in range(k):
                col = Array(cols[r][kx] for r in range(slots))
                t = Signal(8 * pin, name=f"tap_{ky}_{kx}")
                with m.If(rowv2[ky] & colv2[kx]):
                    m.d.comb += t.eq(col[rsel2[ky]])
                with m.Else():
                    m.d.comb += t.eq(zp_word)
                taps.append(t)
        window = Signal(len(self.o_window.as_value()), reset_less=True)  # o_valid qualifies it
        m.d.sync += [window.eq(Cat(*taps)), self.o_valid.eq(v2)]
        m.d.comb += self.o_window.as_value().eq(window)
        return m

def _wrap_inc(value, modulus):
    return Mux(value == modulus - 1, 0, value + 1)


def _mod_once(value, modulus):
    """``value mod modulus`` for ``-modulus <= value < 2*modulus``."""
    return Mux(value < 0, value + modulus, Mux(value >= modulus, value - modulus, value))


class _LastFlag:
    """A register that says "the counter is at ``count - 1``", kept up to date.

    The counter's next-state logic then selects on a flip-flop instead of on
    a 16-bit compare against a descriptor field: the compare moves to the
    flag's own next-state input, off the path from ``issue``.
    """

    def __init__(self, name, count):
        self.value = Signal(name=name)
        self._count = count

    def reset(self):
        """The counter goes to 0."""
        return self.value.eq(self._count == 1)

    def step(self, counter):
        """The counter goes from ``counter`` to ``counter + 1``."""
        return self.value.eq(counter + 2 == self._count)
