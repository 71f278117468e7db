"""Line buffer and window generator of the convolution engine (docs/engine.md, Schedule).

The writer side takes the input pixels of a whole batch in NHWC order, one
``pin``-byte word per cycle, and stores input row ``g`` (counted over the
batch) in row slot ``g mod row_slots``; column ``x`` of a row lives in bank
``x mod nb`` at word ``(x div nb)*ci_tiles + ci``, ``nb`` the column banks
(``kmax + spare_bank``). The reader side walks
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

import dataclasses

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ...core.config import require_config
from ...core.contract import engine_contract
from .delay import delayed
from ...core.descriptor import descriptor_layout
from .limits import limits
from .pixel_words import pixel_group_shape, step_in_row
from ..tech.pipelined_memory import MemoryPorts
from ..tech.register_copies import register_copy

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
    w_stream : In(stream.Signature(pixel_group_shape(config)))
        Input pixel words of the whole batch, NHWC (byte ``p`` = channel ``ci*pin + p``);
        with ``writer_words`` 2 one or two words of one input row a transfer
        (:mod:`~fpgacnn.hdl.datapath.pixel_words`), stored in one cycle.
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
        :func:`~fpgacnn.hdl.datapath.limits.limits`).
    widx : Out(range(weight_depth))
        ``co*ci_tiles + ci``, the weight word of the current position.
    first, last : Out(1)
        ``ci == 0`` and ``ci == ci_tiles - 1``.
    r_done : Out(1)
        Every window of the batch has been issued (also high after reset).
    o_valid : Out(1)
    o_window : Out(data.ArrayLayout(signed(8), kmax*kmax*pin))
        The window issued ``latency`` cycles earlier; tap ``(ky*kmax + kx)*pin + p``.
    o_window_next : Out(data.ArrayLayout(signed(8), kmax*kmax*pin))
        With ``spare_bank`` only: beside ``o_window``, from the same read, the
        window one input column on (``x0 + 1``: at stride 1 the next output
        pixel's) with one spare bank (its first ``kmax - 1`` columns are
        ``o_window``'s last, its last the spare bank's), the window ``stride``
        columns on (the next output pixel's at any stride up to
        ``spare_bank``) with more.
    second : Out(1)
        With ``pixel_pairs`` only: in a run with the descriptor's
        ``pixel_pairs`` the reader steps ``ox`` by two (the window and
        ``o_window_next`` are pixels ``ox`` and ``ox + 1``), and ``second``
        says that pixel ``ox + 1`` is in the row (not past an odd
        ``out_w``'s end). Low in other runs.

    Latency
    -------
    ``latency`` cycles from ``issue`` to ``o_valid``: memory read, the tap
    multiplexers (2); with ``deep_pipeline`` the read address registered
    (it fans out to every slot's memories), a register behind the
    memories (a block RAM's clock-to-output delay and the multiplexers
    would not fit one 100 MHz cycle on the ECP5) and one between the two
    multiplexer levels (5), and one more after the memories' part select
    when a bank spans several block RAMs in depth (6).
    No window issues in the first ``setup_cycles`` (18) cycles after ``start``.
    """

    def __init__(self, config):
        require_config(config)
        self._config = config
        k, pin = config.kmax, config.pin
        lim = limits(config)
        # With spare banks, beside the window the one a stride on (two adjacent
        # output pixels a read: docs/engine.md, "Pixel pairs").
        following = ({"o_window_next": Out(data.ArrayLayout(signed(8), k * k * pin))}
                     if config.spare_bank else {})
        if config.pixel_pairs:
            following["second"] = Out(1)
        super().__init__({
            "desc": In(descriptor_layout(engine_contract(config).descriptor_fields)),
            "start": In(1),
            "w_stream": In(stream.Signature(pixel_group_shape(config))),
            "w_done": Out(1, init=1),
            "en": In(1),
            "ready": Out(1),
            "issue": Out(1),
            "oy": Out(16), "ox": Out(lim.col_bits), "co": Out(lim.co_bits),
            "ci": Out(lim.ci_bits), "widx": Out(range(engine_contract(config).weights.words)),
            "first": Out(1), "last": Out(1),
            "r_done": Out(1, init=1),
            "o_valid": Out(1),
            "o_window": Out(data.ArrayLayout(signed(8), k * k * pin)),
            **following,
        })

    @property
    def latency(self):
        return engine_contract(self._config).latency.line_buffer

    @property
    def setup_cycles(self):
        """Cycles after ``start`` before the first window can issue (``in_h mod row_slots``,
        then the slots of the second image from it)."""
        return engine_contract(self._config).latency.line_buffer_setup

    def _bounds_ahead(self, m, desc, ynext, rtarget, rlimit):
        """Row bounds kept a row ahead (``deep_pipeline``).

        The bounds of the next row (`next_t`, `next_l`, of the row at
        `ynext` = ytop + stride) are registers kept a row ahead, and those of
        an image's first and second rows are registered (static during a
        run): `issue` then only selects, and the lookahead compares of
        `ready` take registers. The static ones are computed in registered
        steps from the descriptor (a path from the descriptor registers is a
        one-cycle path like any other) and taken at `settle`, the divider's
        last step, long before the first window.
        """
        k, slots = self._config.kmax, engine_contract(self._config).row_slots
        img_ybot = Signal(signed(6))   # kmax - pad_top (the first row starts at -pad_top)
        img2_y = Signal(signed(6))     # stride - pad_top
        img2_ybot = Signal(signed(7))  # stride - pad_top + kmax
        img_t, img2_t, img2_l = Signal(signed(19)), Signal(signed(19)), Signal(signed(19))
        img_l = Const(slots, signed(19))  # (the first row is at or above row 0)
        img_rslot0 = Signal(range(slots))  # (-pad_top) mod slots
        m.d.sync += [img_ybot.eq(k - desc.pad_top), img2_y.eq(desc.stride - desc.pad_top),
                     img2_ybot.eq(img2_y + k),
                     img_t.eq(Mux(img_ybot > desc.in_h, desc.in_h, img_ybot)),
                     img2_t.eq(Mux(img2_ybot > desc.in_h, desc.in_h, img2_ybot)),
                     img2_l.eq(Mux(img2_y < 0, slots, img2_y + slots)),
                     img_rslot0.eq(_mod_once(-desc.pad_top, slots))]
        next_t, next_l = Signal(signed(19)), Signal(signed(19))
        # The row after: bounds() with the compare against in_h - kmax (static,
        # registered) beside the sum, not after it.
        top_row = Signal(signed(19))
        m.d.sync += top_row.eq(desc.in_h - k)
        # ynext + stride, a register of its own (stepped with ynext): the sum
        # in front of the compares was the longest path on the ULX3S-85F.
        y_after = Signal(signed(19))
        after_t, after_l = Signal(signed(19)), Signal(signed(19))
        m.d.comb += [after_t.eq(Mux(y_after > top_row, desc.in_h, y_after + k)),
                     after_l.eq(Mux(y_after < 0, slots, y_after + slots))]

        def row_bounds(at_start):
            # At `start`, only the writer's bound (constant): the others follow at `settle`.
            return ([rlimit.eq(img_l)] if at_start else
                    [rtarget.eq(img_t), rlimit.eq(img_l), next_t.eq(img2_t), next_l.eq(img2_l)]
                    ) + [ynext.eq(desc.stride - desc.pad_top),
                         y_after.eq((desc.stride << 1) - desc.pad_top)]

        def row_step():
            return [rtarget.eq(next_t), rlimit.eq(next_l), next_t.eq(after_t),
                    next_l.eq(after_l), ynext.eq(y_after), y_after.eq(y_after + desc.stride)]
        settle = [rtarget.eq(img_t), next_t.eq(img2_t), next_l.eq(img2_l)]
        return _Bounds(next_t, next_l, img_t, img_l, row_bounds, row_step, settle, img_rslot0)

    def _bounds_compact(self, m, desc, ynext, rtarget, rlimit):
        """Row bounds computed when they are taken (``deep_pipeline = 0``: fewer flip-flops).

        The next row's from `ynext` (a register); an image's first row's from
        the descriptor at `start` and registered for the later images.
        """
        k, slots = self._config.kmax, engine_contract(self._config).row_slots

        def bounds(y, name):
            ybot = Signal(signed(19), name=f"{name}_ybot")
            t, l = Signal(signed(19), name=f"{name}_target"), Signal(signed(19), name=f"{name}_limit")
            m.d.comb += [ybot.eq(y + k), t.eq(Mux(ybot > desc.in_h, desc.in_h, ybot)),
                         l.eq(Mux(y < 0, 0, y) + slots)]
            return t, l

        first_t, first_l = bounds(-desc.pad_top, "first")
        next_t, next_l = bounds(ynext, "next")
        img_t, img_l = Signal(signed(19)), Signal(signed(19))
        m.d.sync += [img_t.eq(first_t), img_l.eq(first_l)]

        def row_bounds(at_start):
            t, l = (first_t, first_l) if at_start else (img_t, img_l)
            return [rtarget.eq(t), rlimit.eq(l), ynext.eq(desc.stride - desc.pad_top)]

        def row_step():
            return [rtarget.eq(next_t), rlimit.eq(next_l), ynext.eq(ynext + desc.stride)]
        return _Bounds(next_t, next_l, img_t, img_l, row_bounds, row_step, [], None)

    def elaborate(self, platform):
        cfg = self._config
        k, pin, slots = cfg.kmax, cfg.pin, engine_contract(cfg).row_slots
        # Column banks: kmax + spare_bank (column x in bank
        # x mod nb); a window's kmax columns never share one.
        nb = cfg.column_banks
        depth = engine_contract(cfg).line_buffer.words
        desc = self.desc
        m = Module()

        # A memory per (slot, bank): a PipelinedMemory (registered behind
        # the block RAMs) with deep_pipeline, else a plain one.
        deep = bool(cfg.deep_pipeline)
        # The part select registered too: the tap multiplexers gather the
        # banks from block RAMs all over the die; the write too (see the
        # writer below).
        # No read meets a write of a word in use (see the writer; checked
        # every cycle in the tests), so on the ECP5 the blocks' own output
        # registers can hold the read (collision_free).
        pairs = cfg.writer_words == 2
        bank_kind = _PairBank if pairs else MemoryPorts
        banks = [[bank_kind(m, f"bank_{r}_{b}", 8 * pin,
                            engine_contract(cfg).line_buffer_memory_words, pipelined=deep,
                            register_output=True, register_write=True, collision_free=True)
                  for b in range(nb)] for r in range(slots)]

        # in_h mod row_slots (how far the slots turn from one image to the next),
        # by restoring division, one quotient bit per cycle after `start`: a
        # combinational divider would be the longest path of the engine.
        mod_rem = Signal(16)
        mod_div = Signal(16 + slots.bit_length())
        div_done = Signal(init=1)
        mod_done = Signal(init=1)  # a cycle later: the next image's slots are computed
        inh_mod = mod_rem[:max(1, (slots - 1).bit_length())]
        with m.If(~div_done):
            with m.If(mod_rem >= mod_div):
                m.d.sync += mod_rem.eq(mod_rem - mod_div)
            m.d.sync += mod_div.eq(mod_div >> 1)
            with m.If(mod_div == slots):
                m.d.sync += div_done.eq(1)
        m.d.sync += mod_done.eq(div_done)

        # ---- writer ---------------------------------------------------------
        lim = limits(cfg)
        wci, wx = Signal(lim.ci_bits, name="wci"), Signal(lim.col_bits, name="wx")
        wy, wimg = Signal(16, name="wy"), Signal(16, name="wimg")
        # Named where `finish_row` (below) captures them: a closure's variable
        # hides its assignment from Amaranth's name inference (the names it
        # inferred before, so the generated Verilog stays as it was).
        wbank = Signal(range(nb), name="wbank")
        wbase = Signal(range(depth + 1), name="wbase")
        wslot = Signal(range(slots), name="wslot")
        # Input rows written, counted from the first row of the reader's current
        # image (negative while the writer still finishes the previous image's
        # unused last rows; at most in_h + row_slots). Comparing this one small
        # count replaces global row numbers.
        avail = Signal(signed(19))
        row_written = Signal(name="row_written")
        image_read = Signal()

        # ---- reader position ------------------------------------------------
        n = Signal(16)
        oy, ox, co, ci, widx = self.oy, self.ox, self.co, self.ci, self.widx
        # The run's weights start at `weight_base` (resident weights, deep
        # arrangement; a counter's restart value, no adder in the read path).
        wbase0 = (desc.weight_base[:len(widx)] if engine_contract(cfg).resident_weights
                  else 0)
        # A depthwise run reads input tile `co` only: one window per output tile
        # (`ci` follows `co`, every window is the first and the last of its group).
        dw = desc.depthwise if engine_contract(cfg).depthwise_runs else Const(0, 1)
        # A fused block's depthwise half (docs/engine.md, "Step 3") reads as a
        # depthwise run of its ci_tiles: a window pair a tile, for the depthwise
        # unit. (Engines without the block: the descriptor as before.)
        co_tiles = desc.co_tiles
        if engine_contract(cfg).fused:
            dw = dw | desc.fused
            co_tiles = Mux(desc.fused, desc.ci_tiles, desc.co_tiles)
        # Pixel pairs: ox steps by two; `second` says whether pixel ox + 1 is
        # in the row (docs/engine.md, "Pixel pairs"). Both are constants
        # without them, so the other engines' logic is as it was.
        pp = desc.pixel_pairs if cfg.pixel_pairs else Const(0, 1)
        # (a row's first position's `second`, assigned only where the port exists)
        row_pair = [self.second.eq(pp & (desc.out_w >= 2))] if cfg.pixel_pairs else []
        # columns (and output pixels) from one position to the next in a row
        x_step = Mux(pp, desc.stride << 1, desc.stride) if cfg.pixel_pairs else desc.stride
        ox_step = 1 + pp if cfg.pixel_pairs else 1
        ytop = Signal(signed(18))   # oy*stride - pad_top
        col_w = lim.col_bits + 2  # columns, signed, with the padding on both sides
        x0 = Signal(signed(col_w))  # ox*stride - pad_left
        bank0 = Signal(range(nb))    # x0 mod nb
        base0 = Signal(signed((depth + lim.max_ci_tiles).bit_length() + 1))  # (x0 div nb) * ci_tiles
        rslot0 = Signal(range(slots))  # slot of the current image's row ytop
        img_slot = Signal(range(slots))  # slot of the current image's row 0

        # Rows (of the current image) the current output row needs, and the first
        # row the writer may not start yet: row_slots past the first row still
        # needed. Registered with ytop, so that the issue path is one compare.
        rtarget = Signal(signed(19))
        rlimit = Signal(signed(19))

        ynext = Signal(signed(18))
        bounds = (self._bounds_ahead if deep else self._bounds_compact)(m, desc, ynext, rtarget,
                                                                       rlimit)

        # ---- writer logic -----------------------------------------------------
        can_write = Signal()
        m.d.comb += self.w_stream.ready.eq(can_write)
        wen = self.w_stream.valid & can_write
        # With deep_pipeline the memories' write is registered (a cycle
        # later, in the memory; the word fans out to every bank's block
        # RAMs), as their read address is: a window is read at least two
        # cycles after the write of its last word (`ready` follows `avail` a
        # cycle after the write, then the address register), and a freed
        # row is overwritten at least a cycle after its last read
        # (`can_write` follows the issue a cycle later, then the write
        # register). Without either register the same holds a cycle earlier
        # on both sides. So no read relies on a block RAM's read-during-write
        # behaviour (the tests check it).
        if not pairs:
            for r in range(slots):
                for b in range(nb):
                    m.d.comb += [
                        banks[r][b].w_addr.eq(wbase + wci),
                        banks[r][b].w_data.eq(self.w_stream.payload),
                        banks[r][b].w_en.eq(wen & (wslot == r) & (wbank == b)),
                    ]
        # Writer "last" flags, as the reader's below: `row_written` feeds avail.
        wci_last, wx_last = Signal(), Signal(name="wx_last")
        w_finish = Signal(name="w_finish")  # the batch's last word is written
        # The last row and image, flags registered with the counters too:
        # they decide `w_finish`, which the lookahead of can_write follows.
        wy_last, wimg_last = Signal(), Signal(name="wimg_last")

        def finish_row():
            # A row's last word is written: the next row's first, or the next image's.
            m.d.comb += row_written.eq(1)
            m.d.sync += [wx.eq(0), wx_last.eq(desc.in_w == 1), wbank.eq(0), wbase.eq(0),
                         wslot.eq(_wrap_inc(wslot, slots))]
            with m.If(wy_last):
                m.d.sync += [wy.eq(0), wy_last.eq(desc.in_h == 1), wimg.eq(wimg + 1),
                             wimg_last.eq(wimg + 2 == desc.batch)]
                with m.If(wimg_last):
                    m.d.comb += w_finish.eq(1)
                    m.d.sync += self.w_done.eq(1)
            with m.Else():
                m.d.sync += [wy.eq(wy + 1), wy_last.eq(wy + 2 == desc.in_h)]
        if pairs:
            self._pair_writer(m, banks, wen, (wci, wci_last, wx, wx_last, wbank, wbase),
                              wslot, finish_row)
        else:
            with m.If(wen):
                with m.If(wci_last):
                    m.d.sync += [wci.eq(0), wci_last.eq(desc.ci_tiles == 1)]
                    with m.If(wx_last):
                        finish_row()
                    with m.Else():
                        m.d.sync += [wx.eq(wx + 1), wx_last.eq(wx + 2 == desc.in_w)]
                        with m.If(wbank == nb - 1):
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
            self.issue.eq(self.ready & self.en),
            self.first.eq(ci_first),
            self.last.eq(ci_last),
        ]

        def row_start():
            # x0 = -pad_left: bank (nb - pad_left) mod nb of word -1 when padded
            padded = desc.pad_left != 0
            return [x0.eq(-desc.pad_left),
                    bank0.eq(Mux(padded, nb - desc.pad_left, 0)),
                    base0.eq(Mux(padded, -desc.ci_tiles, 0))]

        def slot_sum(a, b):
            v = Signal(signed(8))
            m.d.comb += v.eq(a + b)
            return _mod_once(v, slots)

        def image_start(slot, rslot, at_start=False):
            # deep_pipeline: the first image's rslot0 follows at `settle`
            return [ytop.eq(-desc.pad_top), img_slot.eq(slot)] + \
                ([] if rslot is None else [rslot0.eq(rslot)]) + \
                bounds.row_bounds(at_start) + row_start()

        if deep:
            # The next image's img_slot and rslot0, kept a step ahead (from
            # registers only): at an image's end `issue` then only selects
            # them, where two modular sums after it were the longest path on
            # the ECP5. Each image starts inh_mod slots after the one before.
            nimg_slot = Signal(range(slots))
            nimg_rslot0 = Signal(range(slots))

            def next_image():
                return image_start(nimg_slot, nimg_rslot0) + [
                    nimg_slot.eq(slot_sum(nimg_slot, inh_mod)),
                    nimg_rslot0.eq(slot_sum(nimg_rslot0, inh_mod))]
            with m.If(div_done & ~mod_done):
                # the divider's result is out: the second image's slots
                m.d.sync += [nimg_slot.eq(inh_mod),
                             nimg_rslot0.eq(slot_sum(inh_mod, bounds.first_rslot0))]
            settle = Signal()
            m.d.comb += settle.eq(~div_done & (mod_div == slots))
            with m.If(settle):
                # the first image's read bounds and slot (registered from the descriptor)
                m.d.sync += bounds.settle + [rslot0.eq(bounds.first_rslot0)]
        else:
            def next_image():
                slot = slot_sum(img_slot, inh_mod)
                return image_start(slot, slot_sum(slot, -desc.pad_top))

        # The next column's first bank and word, from registers only: the
        # wrap compare stays off the path from `issue` to their enables.
        # (bank0 + x_step < 2*nb in every run the descriptor check lets start:
        # a pair run's stride is at most spare_bank)
        bs = Signal(range(nb + (2 * k if cfg.pixel_pairs else k) + 1))
        bank_step, base_step = Signal.like(bank0), Signal.like(base0)
        m.d.comb += [bs.eq(bank0 + x_step),
                     bank_step.eq(Mux(bs >= nb, bs - nb, bs)),
                     base_step.eq(Mux(bs >= nb, base0 + desc.ci_tiles, base0))]

        r_finish = Signal()  # the batch's last window is issued
        # A row's first position: the last when it is the row's only one (two
        # pixels with pairs), a pair when the row has a second pixel.
        row_one_step = Mux(pp, desc.out_w <= 2, desc.out_w == 1) if cfg.pixel_pairs \
            else desc.out_w == 1
        n_last = Signal()  # the batch's last image (a flag, as the ones below)
        row_read = Signal()  # an output row (not an image's last) is issued
        with m.If(self.start):
            m.d.sync += [wci.eq(0), wx.eq(0), wy.eq(0), wimg.eq(0), wbank.eq(0), wbase.eq(0),
                         wci_last.eq(desc.ci_tiles == 1), wx_last.eq(desc.in_w == 1),
                         wslot.eq(0), avail.eq(0), self.w_done.eq(0),
                         wy_last.eq(desc.in_h == 1), wimg_last.eq(desc.batch == 1),
                         n_last.eq(desc.batch == 1),
                         mod_rem.eq(desc.in_h), mod_div.eq(slots << 15), div_done.eq(0),
                         mod_done.eq(0),
                         n.eq(0), oy.eq(0), ox.eq(0), co.eq(0), ci.eq(0), widx.eq(wbase0),
                         self.r_done.eq(0), ci_first.eq(1),
                         ci_last.eq(dw | (desc.ci_tiles == 1)), co_last.eq(co_tiles == 1),
                         ox_last.eq(row_one_step), oy_last.eq(desc.out_h == 1)] + row_pair
            m.d.sync += image_start(Const(0, range(slots)),
                                    None if deep else slot_sum(0, -desc.pad_top), at_start=True)
        with m.Elif(self.issue):
            with m.If(ci_last):
                m.d.sync += [ci.eq(0), ci_first.eq(1), ci_last.eq(dw | (desc.ci_tiles == 1))]
                with m.If(co_last):
                    m.d.sync += [co.eq(0), widx.eq(wbase0), co_last.eq(co_tiles == 1)]
                    with m.If(ox_last):
                        m.d.sync += [ox.eq(0), ox_last.eq(row_one_step)] + row_pair
                        m.d.sync += row_start()
                        with m.If(oy_last):
                            m.d.sync += oy_last.eq(desc.out_h == 1)
                            m.d.comb += image_read.eq(1)
                            m.d.sync += [oy.eq(0), n.eq(n + 1)]
                            m.d.sync += next_image()
                            m.d.sync += n_last.eq(n + 2 == desc.batch)
                            with m.If(n_last):
                                m.d.comb += r_finish.eq(1)
                                m.d.sync += self.r_done.eq(1)
                        with m.Else():
                            rs = Signal(range(2 * slots))
                            m.d.comb += rs.eq(rslot0 + desc.stride)
                            m.d.sync += [oy.eq(oy + 1), oy_last.eq(next_last(oy, desc.out_h)),
                                         ytop.eq(ynext),
                                         rslot0.eq(_mod_once(rs, slots))]
                            m.d.comb += row_read.eq(1)
                            m.d.sync += bounds.row_step()
                    with m.Else():
                        m.d.sync += [ox.eq(ox + ox_step), x0.eq(x0 + x_step),
                                     bank0.eq(bank_step), base0.eq(base_step)]
                        if cfg.pixel_pairs:
                            # after the step to ox + 2: last when ox + 4 >= out_w,
                            # a pair when ox + 3 < out_w
                            m.d.sync += [
                                ox_last.eq(Mux(pp, ox + 4 >= desc.out_w,
                                               next_last(ox, desc.out_w))),
                                self.second.eq(pp & (ox + 3 < desc.out_w))]
                        else:
                            m.d.sync += ox_last.eq(next_last(ox, desc.out_w))
                with m.Else():
                    m.d.sync += [co.eq(co + 1), co_last.eq(next_last(co, co_tiles)),
                                 widx.eq(widx + 1)]
                    with m.If(dw):
                        m.d.sync += ci.eq(co + 1)
            with m.Else():
                m.d.sync += [ci.eq(ci + 1), ci_first.eq(0),
                             ci_last.eq(next_last(ci, desc.ci_tiles)), widx.eq(widx + 1)]

        # ---- ready and can_write -------------------------------------------
        now_ready = ~self.r_done & mod_done & (avail >= rtarget)
        now_can_write = ~self.w_done & (self.r_done | (avail < rlimit))

        def select(stay, written, read, written_read):
            # `row_written` and `image_read` (late: they follow `wen` and
            # `issue`) only select between sums made in parallel.
            return Mux(image_read, Mux(row_written, written_read, read),
                       Mux(row_written, written, stay))

        if not cfg.deep_pipeline:
            # Few logic cells, slow clock: compare the registers directly.
            m.d.comb += [self.ready.eq(now_ready), can_write.eq(now_can_write)]
            avail_next = Signal(signed(19))
            m.d.comb += avail_next.eq(avail + row_written)
            with m.If(~self.start):
                m.d.sync += avail.eq(Mux(image_read, avail_next - desc.in_h, avail_next))
        else:
            # Both registered, computed a cycle ahead, exactly: each compare
            # is made for every way `avail` and the row bounds can change
            # this cycle (from registers, in parallel), and the late events
            # (`issue`, `wen`) only select one. Compared directly, they were
            # the longest paths on the ECP5 (into the loader and the reader).
            # Every compare is one subtraction of two registers: `avail + 1`
            # is a register of its own, and an image's end, which takes
            # in_h from `avail`, compares with bounds that have in_h added
            # (static during a run, registered).
            ready_q = Signal(name="ready_q")
            can_write_q = Signal(name="can_write_q")
            m.d.comb += [self.ready.eq(ready_q), can_write.eq(can_write_q)]
            avail_p1 = Signal(signed(19), init=1)
            static = {name: Signal(signed(19), name=name) for name in
                      ("neg_h", "one_minus_h", "two_minus_h")}
            m.d.sync += [static["neg_h"].eq(-desc.in_h), static["one_minus_h"].eq(1 - desc.in_h),
                         static["two_minus_h"].eq(2 - desc.in_h)]
            # An image's bounds with in_h added (static during a run), a register
            # of their own for each of avail's and avail_p1's compares, so that
            # each sits beside its compare's carry chain: the route from one
            # register shared by both was the first 1.9 ns of the longest path
            # of the routed ULX3S-85F build (81d7ff5, 96.6 MHz).
            image_bounds = [tuple(register_copy(m, (bound + desc.in_h)[:19].as_signed(),
                                                f"img_{kind}_h_{w}")
                                  for kind, bound in (("t", bounds.img_t), ("l", bounds.img_l)))
                            for w in (0, 1)]
            with m.If(~self.start):  # else both restart (0, 1)
                m.d.sync += [
                    avail.eq(select(avail, avail_p1, avail + static["neg_h"],
                                    avail + static["one_minus_h"])),
                    avail_p1.eq(select(avail_p1, avail + 2, avail + static["one_minus_h"],
                                       avail + static["two_minus_h"])),
                ]
            ge, lt = {}, {}
            for w, a in ((0, avail), (1, avail_p1)):
                moves = {"stay": (rtarget, rlimit), "row": (bounds.next_t, bounds.next_l),
                         "image": image_bounds[w]}
                for move, (t, l) in moves.items():
                    ge[w, move] = Signal(name=f"ready_{w}_{move}")
                    lt[w, move] = Signal(name=f"can_write_{w}_{move}")
                    m.d.comb += [ge[w, move].eq(a >= t), lt[w, move].eq(a < l)]

            # The late events pick one compare of each table: a one-hot
            # select per compare, with the done terms folded in, made beside
            # the compares' carry chains and kept as nets of their own
            # (`keep`: yosys's LUT mapping would otherwise merge them into
            # one cone with the compares at its deepest inputs, 5 LUT levels
            # after the carry chain: the longest path of the routed ULX3S-85F
            # build). After the compares: two compares with their selects per
            # LUT (kept too), then their OR: 2 levels.
            r_done_next = self.r_done | r_finish
            w_done_next = self.w_done | w_finish
            move_now = {"image": image_read, "row": ~image_read & row_read,
                        "stay": ~image_read & ~row_read}

            def kept(value, name):
                net = Signal(name=name, attrs={"keep": 1})
                m.d.comb += net.eq(value)
                return net
            ready_terms, can_write_terms = [], []
            for (w, move), ge_compare in ge.items():
                now = move_now[move] & (row_written if w else ~row_written)
                ready_terms.append(ge_compare & kept(now & ~r_done_next & div_done,
                                                     f"ready_sel_{w}_{move}"))
                can_write_terms.append(lt[w, move] & kept(now & ~w_done_next,
                                                          f"can_write_sel_{w}_{move}"))
            only_writes = kept(r_done_next & ~w_done_next, "can_write_sel_done")

            def or_in_pairs(terms, name):
                return Cat(*(kept(Cat(*terms[i:i + 2]).any(), f"{name}_{i // 2}")
                             for i in range(0, len(terms), 2))).any()
            m.d.sync += [ready_q.eq(or_in_pairs(ready_terms, "ready_pair")),
                         can_write_q.eq(only_writes | or_in_pairs(can_write_terms,
                                                                  "can_write_pair"))]
            with m.If(self.start):
                # avail = 0 < rlimit = row_slots: the writer may start at once.
                m.d.sync += [ready_q.eq(0), can_write_q.eq(1), avail_p1.eq(1)]
        # The direct values, for checking the lookahead in simulation; the
        # memories, for checking that no read meets a write of a row the
        # window uses (`_window_rows`).
        self._now = (now_ready, now_can_write)
        self._banks = [[part for bank in row for part in bank.parts] for row in banks] \
            if pairs else banks

        # ---- window read: stage 0 (addresses) -> 1 (memory data) -> (with
        # deep_pipeline: 2, the memory data registered ->) the taps --------
        for b in range(nb):
            # Bank b holds the window column whose word is one further on when b < bank0.
            addr = Signal(signed(19), name=f"raddr_{b}")
            m.d.comb += addr.eq(base0 + Mux(b < bank0, desc.ci_tiles, 0) + ci)
            for r in range(slots):
                if deep:
                    # Registered, a copy per memory beside its block RAMs:
                    # the sum fanned out to every slot's block RAMs across
                    # the die was the longest path.
                    m.d.comb += banks[r][b].r_addr.eq(
                        register_copy(m, addr.as_unsigned()[:len(banks[r][b].r_addr)],
                                      f"raddr_q_{r}_{b}"))
                else:
                    m.d.comb += banks[r][b].r_addr.eq(addr.as_unsigned())
                if pairs:
                    banks[r][b].connect_read(m, f"{r}_{b}")
        mem_data = [[banks[r][b].r_data for b in range(nb)] for r in range(slots)]
        # A read takes a column from every bank: the window's kmax, and with
        # one spare bank one more, the last column of the window one column on.
        # With more spare banks the window `stride` columns on (a pair's
        # second, at strides up to spare_bank) has tap selects of its own
        # (`_column_selects`): its columns start anywhere in the read.
        own = cfg.spare_bank > 1
        rsel = [Signal(range(slots), name=f"rsel_{ky}") for ky in range(k)]
        rowv = Signal(k)
        self._window_rows = []  # (slot, in the image) of each window row, for tests
        for ky in range(k):
            ry = Signal(signed(19), name=f"ry_{ky}")
            rs = Signal(range(slots + k), name=f"rs_{ky}")
            m.d.comb += [ry.eq(ytop + ky), rs.eq(rslot0 + ky)]
            slot, inside = _mod_once(rs, slots), (ry >= 0) & (ry < desc.in_h)
            m.d.sync += [rsel[ky].eq(slot), rowv[ky].eq(inside)]
            self._window_rows.append((slot, inside))
        # The window's columns; with several spare banks the pair's second's
        # (`stride` columns on) too.
        column_sets = [self._column_selects(m, bank0, x0, col_w, 0, k if own else nb, "")]
        if own:
            column_sets.append(self._column_selects(m, bank0, x0, col_w, desc.stride, k,
                                                    "next_"))
        v1 = Signal()
        m.d.sync += v1.eq(self.issue)
        # ... and on with the memory data when its read takes longer. With
        # deep_pipeline the window rows are registered between the two
        # multiplexer levels (the selects fan out to hundreds of LUTs across
        # the banks' block RAMs: a multiplexer level and its routing per cycle).
        split = int(deep)
        extra = self.latency - 2 - split
        v1 = delayed(m, v1, extra + split, "v1_d")
        tap_sets = []  # (tap selects, tap valid flags) of each column set
        if deep:
            # The selects' last stage is a copy per multiplexer group (the
            # slot select per window row and bank, the bank select and the
            # valid flag per tap): one register each, fanned out to hundreds
            # of LUTs across the die, were the most congested nets of the
            # 85F build. (extra >= 2 with deep_pipeline.)
            rsel_e = [delayed(m, s, extra - 1, f"rsel{ky}_d") for ky, s in enumerate(rsel)]
            bsel_e = [[delayed(m, s, extra + split - 1, f"{tag}bsel{kx}_d")
                       for kx, s in enumerate(bsel)] for bsel, _, tag in column_sets]
            rowv_e = delayed(m, rowv, extra + split - 1, "rowv_d")
            colv_e = [delayed(m, colv, extra + split - 1, f"{tag}colv_d")
                      for _, colv, tag in column_sets]
            row_sel = [[register_copy(m, rsel_e[ky], f"rsel_{ky}_{b}") for b in range(nb)]
                       for ky in range(k)]
            for (bsel, colv, tag), bs_e, cv_e in zip(column_sets, bsel_e, colv_e):
                tap_sel = [[register_copy(m, bs_e[kx], f"{tag}bsel_{ky}_{kx}")
                            for kx in range(len(bsel))] for ky in range(k)]
                tap_valid = [[register_copy(m, rowv_e[ky] & cv_e[kx], f"{tag}tapv_{ky}_{kx}")
                              for kx in range(len(bsel))] for ky in range(k)]
                tap_sets.append((tap_sel, tap_valid))
        else:
            rsel = [delayed(m, s, extra, f"rsel{ky}_d") for ky, s in enumerate(rsel)]
            bsel_e = [[delayed(m, s, extra, f"{tag}bsel{kx}_d") for kx, s in enumerate(bsel)]
                      for bsel, _, tag in column_sets]
            rowv = delayed(m, rowv, extra, "rowv_d")
            colv_e = [delayed(m, colv, extra, f"{tag}colv_d") for _, colv, tag in column_sets]
            row_sel = [[rsel[ky]] * nb for ky in range(k)]
            for bs_e, cv_e in zip(bsel_e, colv_e):
                tap_sets.append(([list(bs_e) for _ in range(k)],
                                 [[rowv[ky] & cv_e[kx] for kx in range(len(bs_e))]
                                  for ky in range(k)]))

        # Last stage(s): pick each window row's slot for every bank, then rotate
        # the banks into window columns: kmax*kmax slots:1 muxes and kmax*kmax
        # kmax:1 muxes, where rotating every slot's banks first takes
        # slots*kmax kmax:1 muxes more (~200 LUT4 on the iCE40 engine).
        rows = [[Array(mem_data[r][b] for r in range(slots))[row_sel[ky][b]] for b in range(nb)]
                for ky in range(k)]
        if deep:
            rows = [[delayed(m, rows[ky][b], 1, f"row_{ky}_{b}", reset_less=True)
                     for b in range(nb)] for ky in range(k)]
        zp_word = Cat(*([desc.x_zp] * pin))
        taps_of = []
        for (tap_sel, tap_valid), (_, _, tag) in zip(tap_sets, column_sets):
            taps = [[None] * len(tap_sel[0]) for _ in range(k)]
            for ky in range(k):
                for kx in range(len(tap_sel[0])):
                    t = Signal(8 * pin, name=f"{tag}tap_{ky}_{kx}")
                    with m.If(tap_valid[ky][kx]):
                        m.d.comb += t.eq(Array(rows[ky])[tap_sel[ky][kx]])
                    with m.Else():
                        m.d.comb += t.eq(zp_word)
                    taps[ky][kx] = t
            taps_of.append(taps)
        taps = taps_of[0]
        m.d.sync += [self.o_window.as_value().eq(Cat(*(taps[ky][kx] for ky in range(k)
                                                       for kx in range(k)))),
                     self.o_valid.eq(v1)]
        if cfg.spare_bank:
            # one spare bank: the read's columns 1..kmax; more: their own taps
            nxt = taps_of[1] if own else [row[1:] for row in taps]
            m.d.sync += self.o_window_next.as_value().eq(
                Cat(*(nxt[ky][kx] for ky in range(k) for kx in range(k))))
        return m

    def _column_selects(self, m, bank0, x0, col_w, offset, count, tag):
        """Bank selects and in-image flags of ``count`` consecutive columns of the read
        from column ``offset`` of the current position (``x0 + offset`` on), registered
        at issue: ``(bsel, colv, tag)``. ``tag`` names the registers (``""``: the
        window's own, whose names the engines' Verilog has always had)."""
        nb, desc = self._config.column_banks, self.desc
        bsel = [Signal(range(nb), name=f"{tag}bsel_{kx}") for kx in range(count)]
        colv = Signal(count, name=f"{tag}colv")
        for kx in range(count):
            cx = Signal(signed(col_w), name=f"{tag}cx_{kx}")
            bs = Signal(range(2 * nb), name=f"{tag}bs_{kx}")
            # (offset + kx < nb in every run that starts: the columns of one
            # read; bank0 < nb)
            plain = isinstance(offset, int) and offset == 0
            x, b = (x0, bank0) if plain else (x0 + offset, bank0 + offset)
            m.d.comb += [cx.eq(x + kx), bs.eq(b + kx)]
            m.d.sync += [bsel[kx].eq(_mod_once(bs, nb)),
                         colv[kx].eq((cx >= 0) & (cx < desc.in_w))]
        return bsel, colv, tag

    def _pair_writer(self, m, banks, wen, at, wslot, finish_row):
        """The writer of ``writer_words`` 2: a word or a pair of one row a cycle.

        ``at`` is the current word's ``(ci, ci_last, x, x_last, bank, base)``
        (registers), ``wslot`` its row slot, ``finish_row()`` what follows a
        row's last word. The
        second word of a pair is the row's next, in the next
        column's bank or at the next address of the same bank: the bank's
        half for its address parity differs from the first word's, so each
        half memory takes at most one of the two.
        """
        cfg, desc, pin = self._config, self.desc, self._config.pin
        nb = cfg.column_banks  # kmax + spare_bank
        slots = engine_contract(cfg).row_slots
        wci, wci_last, wx, wx_last, wbank, wbase = at
        payload = self.w_stream.payload
        first, second, two = payload[:8 * pin], payload[8 * pin:16 * pin], payload[16 * pin]
        ci1, ci_last1, x1, x_last1 = step_in_row((wci, wci_last, wx, wx_last), desc.ci_tiles,
                                                 desc.in_w)
        wrap = wci_last & (wbank == nb - 1)
        bank1 = Signal.like(wbank, name="wbank1")
        base1 = Signal.like(wbase, name="wbase1")
        m.d.comb += [bank1.eq(Mux(wci_last, Mux(wbank == nb - 1, 0, wbank + 1), wbank)),
                     base1.eq(Mux(wrap, wbase + desc.ci_tiles, wbase))]
        addr_bits = len(banks[0][0].parts[0].w_addr) + 1
        addr0 = Signal(addr_bits, name="waddr0")
        addr1 = Signal(addr_bits, name="waddr1")
        m.d.comb += [addr0.eq(wbase + wci), addr1.eq(base1 + ci1)]
        for b in range(nb):
            for p in range(2):
                sel0 = (wbank == b) & (addr0[0] == p)
                sel1 = Signal(name=f"wsel1_{b}_{p}")
                m.d.comb += sel1.eq(two & (bank1 == b) & (addr1[0] == p))
                for r in range(slots):
                    part = banks[r][b].parts[p]
                    m.d.comb += [part.w_addr.eq(Mux(sel1, addr1[1:], addr0[1:])),
                                 part.w_data.eq(Mux(sel1, second, first)),
                                 part.w_en.eq(wen & (wslot == r) & (sel0 | sel1))]

        def advance(ci_at, ci_last_at, x_at, x_last_at, bank_at, base_at):
            # The position after the word at these values (the group's last).
            with m.If(ci_last_at):
                m.d.sync += [wci.eq(0), wci_last.eq(desc.ci_tiles == 1)]
                with m.If(x_last_at):
                    finish_row()
                with m.Else():
                    m.d.sync += [wx.eq(x_at + 1), wx_last.eq(x_at + 2 == desc.in_w)]
                    with m.If(bank_at == nb - 1):
                        m.d.sync += [wbank.eq(0), wbase.eq(base_at + desc.ci_tiles)]
                    with m.Else():
                        m.d.sync += [wbank.eq(bank_at + 1), wbase.eq(base_at)]
            with m.Else():
                m.d.sync += [wci.eq(ci_at + 1), wci_last.eq(ci_at + 2 == desc.ci_tiles),
                             wx.eq(x_at), wx_last.eq(x_last_at), wbank.eq(bank_at),
                             wbase.eq(base_at)]
        with m.If(wen):
            with m.If(two):
                advance(ci1, ci_last1, x1, x_last1, bank1, base1)
            with m.Else():
                advance(wci, wci_last, wx, wx_last, wbank, wbase)


class _PairBank:
    """One bank of the line buffer as two memories of ``depth`` words, even and odd
    word addresses (``writer_words`` 2: two words of one row a cycle never meet in
    one half).

    The read address goes to both halves (less its low bit); the data is the
    half of the address's parity, carried beside the read. The writer drives
    each half's write port itself (``parts``).
    """

    def __init__(self, m, name, width, depth, **kwargs):
        self.parts = [MemoryPorts(m, f"{name}_{p}", width, depth, **kwargs) for p in range(2)]
        self.r_addr = Signal(len(self.parts[0].r_addr) + 1, name=f"{name}_raddr")
        self.r_data = Signal(width, name=f"{name}_rdata")
        self.latency = self.parts[0].latency
        self.write_latency = self.parts[0].write_latency

    def connect_read(self, m, name):
        parity = delayed(m, self.r_addr[0], self.latency, f"rpar_{name}_", reset_less=True)
        m.d.comb += [part.r_addr.eq(self.r_addr[1:]) for part in self.parts]
        m.d.comb += self.r_data.eq(Mux(parity, self.parts[1].r_data, self.parts[0].r_data))


@dataclasses.dataclass
class _Bounds:
    """Row bounds logic of one arrangement (see ``LineBuffer._bounds_*``)."""
    next_t: object
    next_l: object
    img_t: object
    img_l: object
    row_bounds: object  # at_start -> assignments at an image's start
    row_step: object  # () -> assignments at an output row's end
    settle: list  # assignments at `settle` (deep_pipeline)
    first_rslot0: object  # the first image's rslot0, taken at `settle` (deep_pipeline)


def _wrap_inc(value, modulus):
    return Mux(value == modulus - 1, 0, value + 1)


def _mod_once(value, modulus):
    """``value mod modulus`` for ``-modulus <= value < 2*modulus``."""
    return Mux(value < 0, value + modulus, Mux(value >= modulus, value - modulus, value))
