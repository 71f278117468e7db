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
from .limits import limits

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
    oy, ox, co, ci : Out(16), Out(col_bits), Out(co_bits), Out(ci_bits)
        Current position of the reader in the schedule (widths from
        :func:`~fpgacnn.hdl.limits.limits`).
    widx : Out(range(weight_depth))
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
    ``latency`` (2) cycles from ``issue`` to ``o_valid``: memory read, then the
    tap multiplexers. No window issues in the first ``setup_cycles`` (17)
    cycles after ``start``.
    """

    def __init__(self, config):
        require_config(config)
        self._config = config
        k, pin = config.kmax, config.pin
        lim = limits(config)
        super().__init__({
            "desc": In(descriptor_layout()),
            "start": In(1),
            "w_stream": In(stream.Signature(unsigned(8 * pin))),
            "w_done": Out(1, init=1),
            "en": In(1),
            "ready": Out(1),
            "issue": Out(1),
            "oy": Out(16), "ox": Out(lim.col_bits), "co": Out(lim.co_bits),
            "ci": Out(lim.ci_bits), "widx": Out(range(config.weight_depth)),
            "first": Out(1), "last": Out(1),
            "r_done": Out(1, init=1),
            "o_valid": Out(1),
            "o_window": Out(data.ArrayLayout(signed(8), k * k * pin)),
        })

    @property
    def latency(self):
        return 2

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
        lim = limits(cfg)
        wci, wx = Signal(lim.ci_bits, name="wci"), Signal(lim.col_bits, name="wx")
        wy, wimg = Signal(16, name="wy"), Signal(16, name="wimg")
        wbank = Signal(range(k))
        wbase = Signal(range(depth + 1))
        wslot = Signal(range(slots))
        # Input rows written, counted from the first row of the reader's current
        # image (negative while the writer still finishes the previous image's
        # unused last rows; at most in_h + row_slots). Comparing this one small
        # count replaces global row numbers.
        avail = Signal(signed(19))
        row_written = Signal()
        image_read = Signal()
        # Both sums in parallel, so that `image_read` (late: it follows
        # `issue`) only selects between them.
        avail_next = Signal(signed(19))
        avail_wrap = Signal(signed(19))
        m.d.comb += [avail_next.eq(avail + row_written), avail_wrap.eq(avail_next - desc.in_h)]
        m.d.sync += avail.eq(Mux(image_read, avail_wrap, avail_next))

        # ---- reader position ------------------------------------------------
        n = Signal(16)
        oy, ox, co, ci, widx = self.oy, self.ox, self.co, self.ci, self.widx
        ytop = Signal(signed(18))   # oy*stride - pad_top
        col_w = lim.col_bits + 2  # columns, signed, with the padding on both sides
        x0 = Signal(signed(col_w))  # ox*stride - pad_left
        bank0 = Signal(range(k))    # x0 mod kmax
        base0 = Signal(signed((depth + lim.max_ci_tiles).bit_length() + 1))  # (x0 div kmax) * ci_tiles
        rslot0 = Signal(range(slots))  # slot of the current image's row ytop
        img_slot = Signal(range(slots))  # slot of the current image's row 0

        # Rows (of the current image) the current output row needs, and the first
        # row the writer may not start yet: row_slots past the first row still
        # needed. Registered with ytop, so that the issue path is one compare.
        rtarget = Signal(signed(19))
        rlimit = Signal(signed(19))

        def bounds(y, name):
            ybot = Signal(signed(19), name=f"{name}_ybot")
            t, l = Signal(signed(19), name=f"{name}_target"), Signal(signed(19), name=f"{name}_limit")
            m.d.comb += [ybot.eq(y + k), t.eq(Mux(ybot > desc.in_h, desc.in_h, ybot)),
                         l.eq(Mux(y < 0, 0, y) + slots)]
            return t, l

        # The bounds of the next row are computed from `ynext` (= ytop + stride,
        # a register), those of an image's first row are registered (static
        # during a run): `issue` then only selects, where the arithmetic after
        # it was the longest path on the iCE40.
        ynext = Signal(signed(18))
        first_t, first_l = bounds(-desc.pad_top, "first")
        next_t, next_l = bounds(ynext, "next")
        img_t, img_l = Signal(signed(19)), Signal(signed(19))
        m.d.sync += [img_t.eq(first_t), img_l.eq(first_l)]

        def row_bounds(at_start):
            t, l = (first_t, first_l) if at_start else (img_t, img_l)
            return [rtarget.eq(t), rlimit.eq(l), ynext.eq(desc.stride - desc.pad_top)]

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
                    wports[r][b].addr.eq(wbase + wci),
                    wports[r][b].data.eq(self.w_stream.payload),
                    wports[r][b].en.eq(wen & (wslot == r) & (wbank == b)),
                ]
        # Writer "last" flags, as the reader's below: `row_written` feeds avail.
        wci_last, wx_last = Signal(), Signal()
        with m.If(wen):
            with m.If(wci_last):
                m.d.sync += [wci.eq(0), wci_last.eq(desc.ci_tiles == 1)]
                with m.If(wx_last):
                    m.d.comb += row_written.eq(1)
                    m.d.sync += [wx.eq(0), wx_last.eq(desc.in_w == 1), wbank.eq(0), wbase.eq(0),
                                 wslot.eq(_wrap_inc(wslot, slots))]
                    with m.If(wy == desc.in_h - 1):
                        m.d.sync += [wy.eq(0), wimg.eq(wimg + 1)]
                        with m.If(wimg == desc.batch - 1):
                            m.d.sync += self.w_done.eq(1)
                    with m.Else():
                        m.d.sync += wy.eq(wy + 1)
                with m.Else():
                    m.d.sync += [wx.eq(wx + 1), wx_last.eq(wx + 2 == desc.in_w)]
                    with m.If(wbank == k - 1):
                        m.d.sync += [wbank.eq(0), wbase.eq(wbase + desc.ci_tiles)]
                    with m.Else():
                        m.d.sync += wbank.eq(wbank + 1)
            with m.Else():
                m.d.sync += [wci.eq(wci + 1), wci_last.eq(wci + 2 == desc.ci_tiles)]

        # ---- reader logic -----------------------------------------------------
        # "Last position" flags, registered with the counters: compares with
        # the descriptor (a subtract and an equality each) would otherwise sit
        # between `issue` and every next-state mux of the reader, the longest
        # path on the iCE40 (19.9 MHz against 24).
        ci_first, ci_last = Signal(), Signal()
        co_last, ox_last, oy_last = Signal(), Signal(), Signal()

        def next_last(count, limit):
            # the flag after `count` steps to `count + 1`
            return (count + 2) == limit

        m.d.comb += [
            self.ready.eq(~self.r_done & mod_done & (avail >= rtarget)),
            self.issue.eq(self.ready & self.en),
            self.first.eq(ci_first),
            self.last.eq(ci_last),
        ]

        def row_start():
            # x0 = -pad_left: bank (kmax - pad_left) mod kmax of word -1 when padded
            padded = desc.pad_left != 0
            return [x0.eq(-desc.pad_left),
                    bank0.eq(Mux(padded, k - desc.pad_left, 0)),
                    base0.eq(Mux(padded, -desc.ci_tiles, 0))]

        def image_start(slot, at_start=False):
            # rslot0 = (slot - pad_top) mod slots
            v = Signal(signed(8))
            m.d.comb += v.eq(slot - desc.pad_top)
            return [ytop.eq(-desc.pad_top),
                    rslot0.eq(_mod_once(v, slots)), img_slot.eq(slot)] + \
                row_bounds(at_start) + row_start()

        with m.If(self.start):
            m.d.sync += [wci.eq(0), wx.eq(0), wy.eq(0), wimg.eq(0), wbank.eq(0), wbase.eq(0),
                         wci_last.eq(desc.ci_tiles == 1), wx_last.eq(desc.in_w == 1),
                         wslot.eq(0), avail.eq(0), self.w_done.eq(0),
                         mod_rem.eq(desc.in_h), mod_div.eq(slots << 15), mod_done.eq(0),
                         n.eq(0), oy.eq(0), ox.eq(0), co.eq(0), ci.eq(0), widx.eq(0),
                         self.r_done.eq(0), ci_first.eq(1),
                         ci_last.eq(desc.ci_tiles == 1), co_last.eq(desc.co_tiles == 1),
                         ox_last.eq(desc.out_w == 1), oy_last.eq(desc.out_h == 1)]
            m.d.sync += image_start(Const(0, range(slots)), at_start=True)
        with m.Elif(self.issue):
            with m.If(ci_last):
                m.d.sync += [ci.eq(0), ci_first.eq(1), ci_last.eq(desc.ci_tiles == 1)]
                with m.If(co_last):
                    m.d.sync += [co.eq(0), widx.eq(0), co_last.eq(desc.co_tiles == 1)]
                    with m.If(ox_last):
                        m.d.sync += [ox.eq(0), ox_last.eq(desc.out_w == 1)]
                        m.d.sync += row_start()
                        with m.If(oy_last):
                            m.d.sync += oy_last.eq(desc.out_h == 1)
                            nslot = Signal(range(2 * slots))
                            m.d.comb += nslot.eq(img_slot + inh_mod)
                            m.d.comb += image_read.eq(1)
                            m.d.sync += [oy.eq(0), n.eq(n + 1)]
                            m.d.sync += image_start(_mod_once(nslot, slots))
                            with m.If(n == desc.batch - 1):
                                m.d.sync += self.r_done.eq(1)
                        with m.Else():
                            rs = Signal(range(2 * slots))
                            m.d.comb += rs.eq(rslot0 + desc.stride)
                            m.d.sync += [oy.eq(oy + 1), oy_last.eq(next_last(oy, desc.out_h)),
                                         ytop.eq(ynext),
                                         rslot0.eq(_mod_once(rs, slots))]
                            m.d.sync += [rtarget.eq(next_t), rlimit.eq(next_l),
                                         ynext.eq(ynext + desc.stride)]
                    with m.Else():
                        bs = Signal(range(2 * k + 1))
                        m.d.comb += bs.eq(bank0 + desc.stride)
                        m.d.sync += [ox.eq(ox + 1), ox_last.eq(next_last(ox, desc.out_w)),
                                     x0.eq(x0 + desc.stride)]
                        with m.If(bs >= k):
                            m.d.sync += [bank0.eq(bs - k), base0.eq(base0 + desc.ci_tiles)]
                        with m.Else():
                            m.d.sync += bank0.eq(bs)
                with m.Else():
                    m.d.sync += [co.eq(co + 1), co_last.eq(next_last(co, desc.co_tiles)),
                                 widx.eq(widx + 1)]
            with m.Else():
                m.d.sync += [ci.eq(ci + 1), ci_first.eq(0),
                             ci_last.eq(next_last(ci, desc.ci_tiles)), widx.eq(widx + 1)]

        # ---- window read: stage 0 (addresses) -> 1 (memory data) -> 2 (taps) --
        for b in range(k):
            # Bank b holds the window column whose word is one further on when b < bank0.
            addr = Signal(signed(19), name=f"raddr_{b}")
            m.d.comb += addr.eq(base0 + Mux(b < bank0, desc.ci_tiles, 0) + ci)
            for r in range(slots):
                m.d.comb += rports[r][b].addr.eq(addr.as_unsigned())
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
            cx = Signal(signed(col_w), name=f"cx_{kx}")
            bs = Signal(range(2 * k), name=f"bs_{kx}")
            m.d.comb += [cx.eq(x0 + kx), bs.eq(bank0 + kx)]
            m.d.sync += [bsel[kx].eq(_mod_once(bs, k)),
                         colv[kx].eq((cx >= 0) & (cx < desc.in_w))]
        m.d.sync += v1.eq(self.issue)

        # Stage 1: pick each window row's slot for every bank, then rotate the
        # banks into window columns: kmax*kmax slots:1 muxes and kmax*kmax
        # kmax:1 muxes, where rotating every slot's banks first takes
        # slots*kmax kmax:1 muxes more (~200 LUT4 on the iCE40 engine).
        rows = [[Array(rports[r][b].data for r in range(slots))[rsel[ky]] for b in range(k)]
                for ky in range(k)]
        zp_word = Cat(*([desc.x_zp] * pin))
        taps = []
        for ky in range(k):
            for kx in range(k):
                t = Signal(8 * pin, name=f"tap_{ky}_{kx}")
                with m.If(rowv[ky] & colv[kx]):
                    m.d.comb += t.eq(Array(rows[ky])[bsel[kx]])
                with m.Else():
                    m.d.comb += t.eq(zp_word)
                taps.append(t)
        m.d.sync += [self.o_window.as_value().eq(Cat(*taps)), self.o_valid.eq(v1)]
        return m


def _wrap_inc(value, modulus):
    return Mux(value == modulus - 1, 0, value + 1)


def _mod_once(value, modulus):
    """``value mod modulus`` for ``-modulus <= value < 2*modulus``."""
    return Mux(value < 0, value + modulus, Mux(value >= modulus, value - modulus, value))
