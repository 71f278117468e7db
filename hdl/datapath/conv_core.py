"""The convolution core: one layer run from descriptor and input stream to output stream.

Datapath (docs/engine.md)::

    i_stream -> StreamLoader -> parameter / weight buffers
                             -> pixel words -> LineBuffer -> window ---.
                                weight buffer[co*ci_tiles + ci] -------+-> MacArray
    MacArray -> parameter lookup -> Requantizer -> (MaxPool2x2) -> output FIFO -> beats -> o_stream

The window generator issues one window (and one weight word) per cycle in the
order ``for oy: for ox: for co: for ci``. Issue is credit based: a group of
``ci_tiles`` windows that will produce an output word is started only when
a place in the output FIFO is reserved for it, so the fixed-latency pipeline
behind the issue point never needs to stall, whatever the back-pressure on
``o_stream``.

Pixel pairs (``pixel_pairs``, docs/engine.md): in a run with the descriptor's
``pixel_pairs`` a window issue computes output pixels ``ox`` and ``ox + 1``
(``ox`` even): the MAC array's second window, a second requantizer, and a
second output FIFO for the odd pixels' words, which wait there while the
even pixel's words go out; the packer takes each pixel's words from the FIFO
of its parity. A group reserves a place in each FIFO its pixels write. On an
engine whose beat holds two output words (``EngineContract.paired_beats``), a
pair run with an even ``co_tiles`` stores two output tiles of a pixel in one
FIFO entry, a beat, and the packer sends a beat a cycle: two words, where one
word a cycle would halve a paired run of one window a group (depthwise, one
input tile).
"""

import dataclasses

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

from ...core.config import ConfigError, require_config
from ...core.contract import engine_contract
from ...core.fused_block import (depthwise_issue_cycles, depthwise_on_vector_lanes,
                                  depthwise_term_width, pointwise_tiles)
from ...core.vector_fields import VECTOR_LANE_STAGES
from .delay import delayed
from ...core.descriptor import descriptor_layout
from .limits import limits, narrow_descriptor
from .line_buffer import LineBuffer
from .pixel_words import pixel_group_shape
from .mac_array import MacArray
from .maxpool import MaxPool2x2
from ..bus.register_slice import StreamRegisterSlice
from .requantizer import Requantizer, check_whole_multiplier
from .stream_loader import PARAM_RECORD, StreamLoader
from .depthwise_unit import DepthwiseUnit, depthwise_lanes_signature
from .pair_buffer import PairBuffer

__all__ = ["ConvCore", "check_lent_lanes"]


def check_lent_lanes(config, lent_lanes):
    """Raise unless ``lent_lanes`` (a bool) is possible for ``config``: only where
    :func:`~fpgacnn.core.fused_block.depthwise_on_vector_lanes`."""
    if not isinstance(lent_lanes, bool):
        raise TypeError(f"lent_lanes must be True or False, not {lent_lanes!r}")
    if lent_lanes and not depthwise_on_vector_lanes(config):
        raise ConfigError("the depthwise half takes lent lanes only where "
                          "depthwise_on_vector_lanes(config): fused_blocks and a vector "
                          "lane for each of its 2 * pin sums")


class ConvCore(wiring.Component):
    """Runs one layer (``batch`` images) as described by ``desc``.

    Parameters
    ----------
    config : EngineConfig
    lent_lanes : bool
        With ``fused_blocks``: requantize the depthwise half's sums on lanes lent
        from outside (``dw_lanes``: the program engine's vector unit,
        :func:`~fpgacnn.core.fused_block.depthwise_on_vector_lanes`) instead of a
        requantizer of the core's own, in the same cycles.
    whole_multiplier : bool
        The requantizers' ``whole_multiplier``
        (:class:`~fpgacnn.hdl.datapath.requantizer.Requantizer`): two DSP48s a lane
        in place of four, the same results and cycles.

    Members
    -------
    desc : In(descriptor_layout())
        Held stable by the caller while ``busy``.
    start : In(1)
        One-cycle pulse; ignored while busy.
    busy : Out(1)
    done : Out(1)
        One-cycle pulse after the last output beat was accepted and the whole
        input stream was taken.
    i_stream : In(stream.Signature(unsigned(stream_width)))
        Parameters, weights (when ``desc.load_weights``), pixels.
    o_stream : Out(stream.Signature(StructLayout({"data": unsigned(stream_width), "last": 1})))
        Results, each image padded to whole beats, ``last`` on the batch's final beat.
    stall_in : Out(1)
        Busy, no window issued, and the core wants an input beat that is not valid.
    stall_out : Out(1)
        Busy, no window issued, and an output beat is held up by ``o_stream.ready``.
    dw_lanes : Out(depthwise_lanes_signature(config))
        With ``lent_lanes`` only: the depthwise half's terms to the lent lanes,
        their results back.

    Raises
    ------
    ConfigError
        ``lent_lanes`` where :func:`~fpgacnn.core.fused_block.depthwise_on_vector_lanes`
        is False (no block, or too few lanes to lend).

    Latency
    -------
    :attr:`latency`: cycles from a group's last window issue to its result
    entering the output FIFO (``pipeline_latency(pool)``).
    """

    def __init__(self, config, *, lent_lanes=False, whole_multiplier=False):
        require_config(config)
        check_lent_lanes(config, lent_lanes)
        check_whole_multiplier(whole_multiplier)
        self._config = config
        self._lent = lent_lanes
        self._whole = whole_multiplier
        self._fused = engine_contract(config).fused
        self._co_bits = max(1, (engine_contract(config).max_co_tiles - 1).bit_length())
        self._pairs = bool(config.pixel_pairs)
        self._beat_entries = engine_contract(config).paired_beats
        self._tag = data.StructLayout({"co": unsigned(self._co_bits), "produce": 1,
                                       "img_first": 1, **({"second": 1} if self._pairs else {})})
        super().__init__({
            "desc": In(descriptor_layout(engine_contract(config).descriptor_fields)),
            "start": In(1),
            "busy": Out(1),
            "done": Out(1),
            "i_stream": In(stream.Signature(unsigned(config.stream_width))),
            "o_stream": Out(stream.Signature(data.StructLayout({
                "data": unsigned(config.stream_width), "last": unsigned(1)}))),
            "stall_in": Out(1),
            "stall_out": Out(1),
            **({"dw_lanes": Out(depthwise_lanes_signature(config))} if lent_lanes else {}),
        })
        # Sub-blocks are built here so that their latencies are known up front.
        self._lb = LineBuffer(config)
        self._loader = StreamLoader(config)
        self._mac = MacArray(config, tag_width=self._tag.size, pairs=self._pairs)
        self._rq = Requantizer(config, tag_width=self._tag.size, whole_multiplier=whole_multiplier)
        # the second pixel's (its tag is the first's)
        self._rq_next = (Requantizer(config, tag_width=0, whole_multiplier=whole_multiplier)
                         if self._pairs else None)
        self._pool = MaxPool2x2(config)

    def pipeline_latency(self, pool):
        """Cycles from the issue of a group's last window to its output word's FIFO write
        (the contract's :meth:`~fpgacnn.core.contract.Latencies.pipeline`: line buffer,
        MAC array, parameter lookup, requantizer, max-pool when ``pool``)."""
        return engine_contract(self._config).latency.pipeline(pool)

    @property
    def fifo_depth(self):
        """Output FIFO words, of each with pixel pairs (the contract's ``output_fifo_depth``)."""
        return engine_contract(self._config).latency.output_fifo_depth

    def elaborate(self, platform):
        cfg = self._config
        m = Module()
        desc = narrow_descriptor(m, self.desc, cfg)
        lb, loader, mac, rq, pool = self._lb, self._loader, self._mac, self._rq, self._pool
        m.submodules.line_buffer = lb
        m.submodules.loader = loader
        m.submodules.mac = mac
        m.submodules.requantizer = rq
        m.submodules.pool = pool
        depth = self.fifo_depth
        # An entry: a word, or a beat of two (pair runs of `beats`, below).
        entry = 8 * cfg.pout * (2 if self._beat_entries else 1)
        m.submodules.fifo = fifo = SyncFIFOBuffered(width=entry, depth=depth)
        fifos = [fifo]
        # A pair run whose FIFO entries are beats (the contract's output_entry_words)
        beats = (desc.pixel_pairs & ~desc.co_tiles[0]) if self._beat_entries else Const(0, 1)
        if self._pairs:
            # the odd pixels' words of a pixel-pair run
            m.submodules.fifo_next = fifo_next = SyncFIFOBuffered(width=entry, depth=depth)
            m.submodules.requantizer_next = rq_next = self._rq_next
            fifos.append(fifo_next)

        start = self.start & ~self.busy
        with m.If(start):
            m.d.sync += self.busy.eq(1)
        m.d.comb += [
            lb.desc.eq(desc), loader.desc.eq(desc),
            lb.start.eq(start), loader.start.eq(start),
        ]
        wiring.connect(m, wiring.flipped(self.i_stream), loader.i_stream)
        if engine_contract(cfg).latency.pixel_slice_words:
            # A register slice between the loader and the line buffer's
            # writer: the writer's `can_write` reached the loader's `ready`,
            # every beat counter and weight write enable of the loader, and
            # the bridge's stream registers in one cycle, across the die --
            # the critical path of the routed ULX3S-85F build. The pixels
            # arrive a cycle later.
            m.submodules.pixel_slice = pixel_slice = StreamRegisterSlice(pixel_group_shape(cfg))
            wiring.connect(m, loader.o_pixels, pixel_slice.i_stream)
            wiring.connect(m, pixel_slice.o_stream, lb.w_stream)
        else:
            wiring.connect(m, loader.o_pixels, lb.w_stream)

        # ---- issue, gated by output credits ---------------------------------
        # The array's windows: the line buffer's, or in a fused run the pair
        # buffer's, issued by the pointwise issuer (`_fused_half`).
        iss = _Issue(lb.issue, lb.first, lb.last, lb.co, lb.widx,
                     lb.second if self._pairs else None)
        blocked = Signal() if self._fused else None
        if self._fused:
            fz = self._fused_half(m, desc, lb, loader, start, blocked)
            iss = _Issue(*(Mux(desc.fused, getattr(fz, f.name), getattr(iss, f.name))
                           for f in dataclasses.fields(_Issue)))
        produce = Signal()
        reserve = Signal()
        m.d.comb += [
            produce.eq(~desc.pool | (lb.oy[0] & lb.ox[0])),
            reserve.eq(iss.issue & iss.first & produce),
        ]
        # A pop of each FIFO (the packer's, below), and whether each is out of
        # credits; a pair's group needs one in the second FIFO too.
        pops = [Signal(name=name) for name in ("pop", "pop_next")[:len(fifos)]]
        # (with beats, the group of an even output tile reserves the entry of both)
        reserve_entry = reserve & ~(beats & iss.co[0]) if self._beat_entries else reserve
        no_credits = [self._credits(m, "_next" if i else "", depth, pops[i],
                                    reserve_entry & (iss.second if i else 1), start)
                      for i in range(len(fifos))]
        if self._fused:
            m.d.comb += blocked.eq(no_credits[0] | (iss.second & no_credits[1]))
            # (the line buffer's windows go to the depthwise unit: credited by the pair buffer)
            m.d.comb += lb.en.eq(self.busy & Mux(desc.fused, fz.lb_en,
                                                 ~(lb.first & produce & blocked)))
        else:
            blocked = no_credits[0] | (lb.second & no_credits[1]) if self._pairs else no_credits[0]
            m.d.comb += lb.en.eq(self.busy & ~(lb.first & produce & blocked))

        # Stage 0 -> lb.latency: control travels beside the window read. The
        # weight word is read the loader's weight read latency before the MAC
        # array (with deep_pipeline two stages, registered behind the block
        # RAMs: a block RAM's clock-to-output delay and the route to DSPs
        # spread over the die do not fit one cycle together, three when the
        # part select is registered too; else one).
        read_latency = loader.read_latency
        ctrl = data.StructLayout({"valid": 1, "first": 1, "last": 1, "tag": self._tag})
        s0 = Signal(ctrl)
        img_first = (lb.oy == 0) & (lb.ox == 0) & (lb.co == 0)
        m.d.comb += [
            s0.valid.eq(iss.issue), s0.first.eq(iss.first), s0.last.eq(iss.last),
            s0.tag.co.eq(iss.co), s0.tag.produce.eq(produce),
            # the tag travels with the group's last window: first word of an image
            # (for the max-pool, which a fused run never has)
            s0.tag.img_first.eq(img_first & ~desc.fused if self._fused else img_first),
        ]
        window, window_next = lb.o_window, lb.o_window_next if self._pairs else None
        if self._fused:
            # the pair buffer's window reaches the array when the line buffer's would
            window = Mux(desc.fused, fz.window, lb.o_window)
            window_next = Mux(desc.fused, fz.window_next, lb.o_window_next)
        if self._pairs:
            m.d.comb += [s0.tag.second.eq(iss.second), mac.i_window_next.eq(window_next)]
        s_ctrl = delayed(m, s0, lb.latency, "s")
        widx = delayed(m, iss.widx, lb.latency - loader.weight_read_latency, "widx")
        weights = loader.weight_data.as_value()
        m.d.comb += [
            loader.weight_addr.eq(widx),
            mac.i_valid.eq(s_ctrl.valid), mac.i_first.eq(s_ctrl.first),
            mac.i_last.eq(s_ctrl.last), mac.i_tag.eq(s_ctrl.tag),
            mac.i_window.eq(window), mac.i_weights.as_value().eq(weights),
        ]

        # ---- parameter lookup (one cycle) and requantization ----------------
        # Read as the result comes out, or a cycle before when the read
        # takes two (the data is registered behind the block RAMs).
        mac_tag = data.View(self._tag, mac.o_next_tag if read_latency == 2 else mac.o_tag)
        if engine_contract(cfg).resident_params:
            # The run's records from its param_base: one adder of a register (the
            # tag) and the held descriptor, in front of the block RAM's address.
            pbits = len(loader.param_addr)
            m.d.comb += loader.param_addr.eq(mac_tag.co + desc.param_base[:pbits])
        else:
            m.d.comb += loader.param_addr.eq(mac_tag.co)
        params = loader.param_data
        acc_valid = Signal()
        acc_tag = Signal(self._tag.size)
        acc = Signal.like(mac.o_acc)
        m.d.sync += [acc_valid.eq(mac.o_valid), acc_tag.eq(mac.o_tag), acc.eq(mac.o_acc)]
        m.d.comb += [rq.i_valid.eq(acc_valid), rq.i_tag.eq(acc_tag), rq.i_acc.eq(acc)]
        if self._pairs:
            # the second pixel's sums, requantized beside the first's with the same records
            acc_next = Signal.like(mac.o_acc_next)
            m.d.sync += acc_next.eq(mac.o_acc_next)
            m.d.comb += [rq_next.i_valid.eq(acc_valid), rq_next.i_acc.eq(acc_next)]
        for r in [rq] + ([rq_next] if self._pairs else []):
            m.d.comb += [r.y_zp.eq(desc.y_zp), r.clamp_lo.eq(desc.clamp_lo),
                         r.clamp_hi.eq(desc.clamp_hi)]
            for lane in range(cfg.pout):
                rec = params[lane]
                m.d.comb += [
                    r.i_bias[lane].eq(rec.bias),
                    r.i_mult[lane].eq(rec.mult),
                    r.i_shift[lane].eq(rec.shift[:6]),
                ]

        # ---- optional max-pool, then the output FIFO -------------------------
        rq_tag = data.View(self._tag, rq.o_tag)
        m.d.comb += [
            pool.out_w.eq(desc.out_w), pool.co_tiles.eq(desc.co_tiles),
            pool.clear.eq(rq.o_valid & rq_tag.img_first),
            pool.i_valid.eq(rq.o_valid & desc.pool),
            pool.i_data.eq(rq.o_data),
        ]
        with m.If(desc.pool):
            m.d.comb += [fifo.w_en.eq(pool.o_valid), fifo.w_data.eq(pool.o_data)]
        with m.Else():
            m.d.comb += [fifo.w_en.eq(rq.o_valid), fifo.w_data.eq(rq.o_data)]
        if self._pairs:
            m.d.comb += [fifo_next.w_en.eq(rq.o_valid & rq_tag.second),
                         fifo_next.w_data.eq(rq_next.o_data)]
        if self._beat_entries:
            # Beats: an even output tile's words wait a group for the odd one's, then
            # both go in as one entry (the pool is never in a pair run).
            held = [Signal(8 * cfg.pout, name=f"out_held{suffix}") for suffix in ("", "_next")]
            with m.If(rq.o_valid & beats & ~rq_tag.co[0]):
                m.d.sync += [held[0].eq(rq.o_data), held[1].eq(rq_next.o_data)]
            with m.If(beats):
                m.d.comb += [fifo.w_en.eq(rq.o_valid & rq_tag.co[0]),
                             fifo.w_data.eq(Cat(held[0], rq.o_data)),
                             fifo_next.w_en.eq(rq.o_valid & rq_tag.co[0] & rq_tag.second),
                             fifo_next.w_data.eq(Cat(held[1], rq_next.o_data))]

        # ---- packing words into beats ----------------------------------------
        out_done = Signal()
        self._packer(m, desc, fifos, pops, out_done, start, beats)

        # ---- completion and stall reporting ---------------------------------
        # Results of windows that produce no output (a pooled layer's odd last
        # row) may still be in flight after the final beat: wait for them too.
        drain = engine_contract(cfg).latency.drain
        since_issue = Signal(range(drain + 1), init=drain)
        with m.If(iss.issue):
            m.d.sync += since_issue.eq(0)
        with m.Elif(since_issue != drain):
            m.d.sync += since_issue.eq(since_issue + 1)
        idle = lb.r_done & (since_issue == drain)
        if self._fused:
            idle = idle & fz.done
        with m.If(self.busy & out_done & loader.done & idle & ~start):
            m.d.sync += [self.busy.eq(0), out_done.eq(0)]
            m.d.comb += self.done.eq(1)
        m.d.comb += [
            self.stall_out.eq(self.busy & ~iss.issue & self.o_stream.valid & ~self.o_stream.ready),
            self.stall_in.eq(self.busy & ~iss.issue & ~self.stall_out & loader.wants &
                             ~self.i_stream.valid),
        ]
        return m

    def _fused_half(self, m, desc, lb, loader, start, blocked):
        """The fused block's datapath (docs/engine.md, "Step 3"): the line buffer's
        window pairs of a fused run through the depthwise unit and its requantizer
        into the pair buffer, and the pointwise issuer that reads the pair buffer's
        full slots (two pixels of the image's raster order: docs/engine.md, "Pairs
        across rows") into the array. Returns a :class:`_Fused` of the issuer's signals."""
        cfg, con = self._config, engine_contract(self._config)
        fb = con.fused
        pin, k2 = cfg.pin, cfg.kmax * cfg.kmax
        lat = lb.latency
        lim = limits(cfg)
        fused = desc.fused

        # The pointwise input tiles a remap position: a table over ci_tiles.
        group = Signal(range(1, fb.pair_buffer.group + 1), name="fused_group")
        m.d.comb += group.eq(1)
        with m.Switch(desc.ci_tiles):
            for t in range(1, fb.max_tiles + 1):
                with m.Case(t):
                    m.d.comb += group.eq(pointwise_tiles(cfg, t))
        m.d.comb += loader.group.eq(group)

        # ---- the depthwise half: a pair's windows only when the slots it writes are free
        m.submodules.pair_buffer = pb = PairBuffer(cfg)
        release = pb.r_release
        # The slots pair across rows (the pair buffer's raster order): a window pair
        # takes a slot of its own unless it is the single last pixel of a row that
        # starts on an odd pixel (an odd row of an odd width), which completes the slot
        # the pair before it took. Credits count slots taken less slots released.
        takes = ~(lb.oy[0] & desc.out_w[0] & ~lb.second)
        pair_start = lb.issue & (lb.co == 0) & fused & takes
        no_half = self._credits(m, "_pair", fb.pair_buffer.slots, release, pair_start, start)
        lb_en = ~((lb.co == 0) & no_half & takes)
        if depthwise_issue_cycles(cfg) == 2:
            # The half-rate unit takes a window pair every other cycle, and the line
            # buffer's read cannot wait: no issue the cycle after one.
            # A pair of one pixel (a row's odd last) takes the unit one cycle.
            dw_gap = Signal(name="dw_gap")
            m.d.sync += dw_gap.eq(lb.issue & fused & lb.second)
            lb_en = lb_en & ~dw_gap
        # The depthwise word of tile `co` (one cycle's read), beside the windows.
        t_read = delayed(m, lb.co, lat - 1, "dw_tile")
        m.d.comb += loader.dw_addr.eq(desc.dw_base[:len(loader.dw_addr)] + t_read)
        dw_valid = delayed(m, lb.issue & fused, lat, "dw_valid")
        wbits, rbits = 8 * pin * k2, 64 * pin
        m.submodules.depthwise_unit = unit = DepthwiseUnit(cfg, tag_width=rbits)
        m.d.comb += [
            unit.i_stream.valid.eq(dw_valid),
            unit.i_stream.payload.window.eq(lb.o_window),
            unit.i_stream.payload.window_next.eq(lb.o_window_next),
            unit.i_stream.payload.weights.as_value().eq(loader.dw_data[:wbits]),
            # the channels' parameter records travel with their sums
            unit.i_stream.payload.tag.eq(loader.dw_data[wbits:wbits + rbits]),
            # (never held: the pair buffer has room for every pair issued)
            unit.o_stream.ready.eq(1),
        ]
        if depthwise_issue_cycles(cfg) == 2:
            m.d.comb += unit.i_stream.payload.single.eq(delayed(m, ~lb.second, lat, "dw_single"))
        recs = data.View(data.ArrayLayout(PARAM_RECORD, pin), unit.o_stream.payload.tag)
        # The sums requantized (lane pixel * pin + p), in the contract's cycles either way.
        if self._lent:
            dw_valid, dw_data = self._lent_lanes(m, desc, unit, recs)
        else:
            m.submodules.requantizer_dw = rqd = Requantizer(cfg, tag_width=0, lanes=2 * pin,
                                                            whole_multiplier=self._whole)
            assert rqd.latency == con.latency.depthwise_requant
            m.d.comb += [rqd.i_valid.eq(unit.o_stream.valid), rqd.y_zp.eq(desc.dw_y_zp),
                         rqd.clamp_lo.eq(desc.dw_clamp_lo), rqd.clamp_hi.eq(desc.dw_clamp_hi)]
            for pixel in range(2):
                for p in range(pin):
                    lane = pixel * pin + p
                    m.d.comb += [rqd.i_acc[lane].eq(unit.o_stream.payload.acc[pixel][p]),
                                 rqd.i_bias[lane].eq(recs[p].bias),
                                 rqd.i_mult[lane].eq(recs[p].mult),
                                 rqd.i_shift[lane].eq(recs[p].shift[:6])]
            dw_valid, dw_data = rqd.o_valid, rqd.o_data
        m.d.comb += [pb.start.eq(start), pb.tiles.eq(desc.ci_tiles), pb.group.eq(group),
                     pb.width.eq(desc.out_w), pb.height.eq(desc.out_h),
                     pb.w_stream.valid.eq(dw_valid)]
        for pixel in range(2):
            for p in range(pin):
                m.d.comb += pb.w_stream.payload[pixel][p].eq(dw_data[pixel * pin + p])
        # A slot is readable the cycle after its last word: count them.
        pair_written = pb.w_full

        # ---- the pointwise issuer: `for co: for g in group` of each full slot
        pw_co = Signal(lim.co_bits, name="pw_co")
        pw_g = Signal(range(fb.pair_buffer.group), name="pw_g")
        pw_widx = Signal.like(lb.widx, name="pw_widx")
        # the slot issued (ahead of the pair buffer's reads), and the images done
        pw_slot = Signal(range(fb.pair_buffer.slots), name="pw_slot")
        pw_n = Signal(16, name="pw_n")
        active, done = Signal(name="pw_active"), Signal(name="pw_done", init=1)
        avail = Signal(range(fb.pair_buffer.slots + 1), name="pw_avail")
        first, last = Signal(name="pw_first"), Signal(name="pw_last")
        co_last, second = Signal(name="pw_co_last"), Signal(name="pw_second")
        issue = Signal(name="pw_issue")
        m.d.comb += [
            first.eq(pw_g == 0), last.eq(pw_g == group - 1),
            # (the slot's flags, from the pair buffer: its second pixel, an image's end)
            pb.q_slot.eq(pw_slot), co_last.eq(pw_co == desc.co_tiles - 1),
            second.eq(pb.q_second),
            issue.eq(self.busy & fused & ~done & (active | (avail != 0))
                     & ~(first & blocked)),
        ]
        begin = issue & ~active
        end = issue & last & co_last
        wbase = desc.weight_base[:len(pw_widx)]
        m.d.sync += avail.eq(avail + pair_written - begin)
        with m.If(begin):
            m.d.sync += active.eq(1)
        with m.If(end):
            m.d.sync += active.eq(0)
        with m.If(issue):
            m.d.sync += pw_widx.eq(pw_widx + 1)
            with m.If(last):
                m.d.sync += pw_g.eq(0)
                with m.If(co_last):
                    m.d.sync += [pw_co.eq(0), pw_widx.eq(wbase), pw_slot.eq(pw_slot + 1)]
                    with m.If(pb.q_last):
                        m.d.sync += pw_n.eq(pw_n + 1)
                        with m.If(pw_n == desc.batch - 1):
                            m.d.sync += done.eq(1)
                with m.Else():
                    m.d.sync += pw_co.eq(pw_co + 1)
            with m.Else():
                m.d.sync += pw_g.eq(pw_g + 1)
        with m.If(start):
            m.d.sync += [pw_co.eq(0), pw_g.eq(0), pw_widx.eq(wbase), pw_slot.eq(0),
                         pw_n.eq(0), active.eq(0), avail.eq(0), done.eq(~fused)]
        # The reads follow the issue by the line buffer's latency less the pair
        # buffer's, so that the window reaches the array when the line buffer's
        # would; the half is released with its last read.
        rd = delayed(m, Cat(issue, end, pw_g), lat - pb.latency, "pw_read")
        m.d.comb += [pb.r_en.eq(rd[0]), pb.r_release.eq(rd[1]), pb.r_ci.eq(rd[2:])]
        return _Fused(issue=issue, first=first, last=last, co=pw_co, widx=pw_widx, second=second,
                      done=done, lb_en=lb_en, window=pb.o_window, window_next=pb.o_window_next)

    def _lent_lanes(self, m, desc, unit, recs):
        """The depthwise half's sums through the lent lanes (``dw_lanes``): each lane's
        term ``acc + bias`` and its channel's multiplier and shift registered, then
        delayed so that the results, registered on their way back, reach the pair
        buffer the contract's ``depthwise_requant`` cycles after the sums, as its own
        requantizer's would. Returns ``(valid, data)``, data the ``2 * pin`` int8."""
        cfg, lanes = self._config, self.dw_lanes
        pin = cfg.pin
        total = engine_contract(cfg).latency.depthwise_requant
        # the term register, the lanes' stages, the results' register
        pad = total - 1 - VECTOR_LANE_STAGES - 1
        if pad < 0:
            raise ConfigError(f"the vector unit's lanes take {VECTOR_LANE_STAGES + 2} cycles "
                              f"with the core's registers, over the requantizer's {total}")
        acc = unit.o_stream.payload.acc
        width = depthwise_term_width(cfg)
        for pixel in range(2):
            for p in range(pin):
                lane = pixel * pin + p
                term = Signal(signed(width), name=f"dw_term{lane}", reset_less=True)
                ma = Signal(cfg.mult_width, name=f"dw_ma{lane}", reset_less=True)
                shift = Signal(len(lanes.shift[lane]), name=f"dw_shift{lane}", reset_less=True)
                # (the sum is exact in depthwise_sum_width bits: check_depthwise_sums)
                m.d.sync += [term.eq(acc[pixel][p] + recs[p].bias), ma.eq(recs[p].mult),
                             shift.eq(recs[p].shift[:len(shift)])]
                m.d.comb += [
                    lanes.terms[lane].eq(delayed(m, term, pad, f"dw_term{lane}_d", reset_less=True)),
                    lanes.ma[lane].eq(delayed(m, ma, pad, f"dw_ma{lane}_d", reset_less=True)),
                    lanes.shift[lane].eq(delayed(m, shift, pad, f"dw_shift{lane}_d",
                                                 reset_less=True)),
                ]
        # The lanes clamp as `lo if v < lo else hi if v > hi`; numpy.clip's order (the
        # requantizer's) gives hi whatever v when lo > hi: so lo is hi then.
        lo, hi = desc.dw_clamp_lo, desc.dw_clamp_hi
        m.d.comb += [lanes.enable.eq(self.busy & desc.fused), lanes.zy.eq(desc.dw_y_zp),
                     lanes.lo.eq(Mux(lo > hi, hi, lo)), lanes.hi.eq(hi)]
        y = Signal(data.ArrayLayout(signed(8), 2 * pin), name="dw_y", reset_less=True)
        m.d.sync += y.eq(lanes.y)
        return delayed(m, unit.o_stream.valid, total, "dw_valid_rq"), y

    def _credits(self, m, name, depth, pop, reserve, start):
        """The credit counter of a FIFO of ``depth`` words (its places not yet
        reserved); returns the registered flag that none is left."""
        credits = Signal(range(depth + 1), init=depth, name=f"credits{name}")
        no_credit = Signal(name=f"no_credit{name}")
        m.d.sync += credits.eq(credits + pop - reserve)
        # `credits == 0`, registered: it gates the issue, whose fanout is the
        # reader's every counter. A pop alone never leaves none; a reserve
        # alone leaves none when one was left; both or neither keep it.
        m.d.sync += no_credit.eq(Mux(pop & ~reserve, 0,
                                     Mux(reserve & ~pop, credits == 1, no_credit)))
        with m.If(start):
            m.d.sync += [credits.eq(depth), no_credit.eq(0)]
        return no_credit

    def _packer(self, m, desc, fifos, pops, out_done, start, beats):
        """FIFO words -> ``o_stream`` beats; sets ``out_done`` on the batch's final beat.

        With pixel pairs, ``fifos`` and ``pops`` are the even and the odd pixels':
        each pixel's words come from the FIFO of its column's parity. With
        ``beats`` an entry is a beat, two output tiles: the tile counter counts
        entries."""
        cfg = self._config
        wbits, bbits = 8 * cfg.pout, cfg.stream_width
        lim = limits(cfg)
        oco, opx = Signal(lim.co_bits, name="o_co"), Signal(lim.col_bits, name="o_px")
        opy, on = Signal(16, name="o_py"), Signal(16, name="o_n")
        if self._pairs:
            # a pixel-pair run's odd column: its words are in the second FIFO; in a fused
            # run the odd pixel of the image's raster order (its slots pair across rows)
            odd = desc.pixel_pairs & opx[0]
            if self._fused:
                odd = desc.pixel_pairs & (opx[0] ^ (desc.fused & opy[0] & desc.out_w[0]))
            fifo = _FifoRead(r_rdy=Mux(odd, fifos[1].r_rdy, fifos[0].r_rdy),
                             r_data=Mux(odd, fifos[1].r_data, fifos[0].r_data),
                             r_en=Signal(name="fifo_r_en"))
            pop = Signal(name="pop_either")
            m.d.comb += [fifos[0].r_en.eq(fifo.r_en & ~odd), fifos[1].r_en.eq(fifo.r_en & odd),
                         pops[0].eq(pop & ~odd), pops[1].eq(pop & odd)]
        else:
            fifo, pop = fifos[0], pops[0]
        # The last output position, registered from the descriptor (static
        # during a run; the first output word comes long after `start`):
        # computed in the compares, the pooled-size mux and the subtracts
        # were the longest path on the iCE40, in front of `pop`.
        co_last, px_last = Signal.like(oco, name="o_co_last"), Signal.like(opx, name="o_px_last")
        py_last, n_last = Signal.like(opy, name="o_py_last"), Signal.like(on, name="o_n_last")
        out_w = Mux(desc.pool, desc.out_w >> 1, desc.out_w)
        out_h = Mux(desc.pool, desc.out_h >> 1, desc.out_h)
        # entries a pixel, less one; whether a pixel is one entry
        if self._beat_entries:
            co_entries_last = Mux(beats, (desc.co_tiles >> 1) - 1, desc.co_tiles - 1)
            co_single = Mux(beats, desc.co_tiles == 2, desc.co_tiles == 1)
        else:
            co_entries_last, co_single = desc.co_tiles - 1, desc.co_tiles == 1
        m.d.sync += [co_last.eq(co_entries_last), px_last.eq(out_w - 1),
                     py_last.eq(out_h - 1), n_last.eq(desc.batch - 1)]
        # "At the last position" flags, registered with the counters (the
        # compares of the next counts are made beside `pop`, which only
        # enables them): the equality compares in front of `pop` and back
        # into every counter's enable were among the longest paths on the
        # ECP5. `*_one`: a single position, the flag when a counter restarts.
        co_at, px_at = Signal(name="o_co_at"), Signal(name="o_px_at")
        py_at, n_at = Signal(name="o_py_at"), Signal(name="o_n_at")
        co_one, px_one = Signal(name="o_co_one"), Signal(name="o_px_one")
        py_one, n_one = Signal(name="o_py_one"), Signal(name="o_n_one")
        m.d.sync += [co_one.eq(co_single), px_one.eq(out_w == 1),
                     py_one.eq(out_h == 1), n_one.eq(desc.batch == 1)]
        img_end = co_at & px_at & py_at
        batch_end = img_end & n_at
        with m.If(pop):
            with m.If(co_at):
                m.d.sync += [oco.eq(0), co_at.eq(co_one)]
                with m.If(px_at):
                    m.d.sync += [opx.eq(0), px_at.eq(px_one)]
                    with m.If(py_at):
                        m.d.sync += [opy.eq(0), py_at.eq(py_one), on.eq(on + 1),
                                     n_at.eq(on + 1 == n_last)]
                    with m.Else():
                        m.d.sync += [opy.eq(opy + 1), py_at.eq(opy + 1 == py_last)]
                with m.Else():
                    m.d.sync += [opx.eq(opx + 1), px_at.eq(opx + 1 == px_last)]
            with m.Else():
                m.d.sync += [oco.eq(oco + 1), co_at.eq(oco + 1 == co_last)]
        with m.If(start):
            # (from the descriptor: the registers above follow it a cycle late)
            m.d.sync += [oco.eq(0), opx.eq(0), opy.eq(0), on.eq(0),
                         co_at.eq(co_single), px_at.eq(out_w == 1),
                         py_at.eq(out_h == 1), n_at.eq(desc.batch == 1)]

        out = self.o_stream
        accepted = out.valid & out.ready
        with m.If(accepted & out.payload.last):
            m.d.sync += out_done.eq(1)

        if wbits <= bbits:
            # Several words per beat; an image's last word ends its beat (zero padded).
            per_beat = bbits // wbits
            slots = [Signal(wbits, name=f"asm_{i}") for i in range(per_beat)]
            idx = Signal(range(per_beat))
            word = fifo.r_data[:wbits] if self._beat_entries else fifo.r_data
            # (an entry that is a beat completes one: idx is 0 throughout such a run)
            completes = (idx == per_beat - 1) | img_end | beats if self._beat_entries \
                else (idx == per_beat - 1) | img_end
            free = ~out.valid | out.ready
            m.d.comb += [pop.eq(self.busy & fifo.r_rdy & (~completes | free)),
                         fifo.r_en.eq(pop)]
            merged = [Mux(idx == i, word, slots[i]) for i in range(per_beat)]
            beat = Mux(beats, fifo.r_data, Cat(*merged)) if self._beat_entries else Cat(*merged)
            with m.If(pop & completes):
                m.d.sync += [out.valid.eq(1), out.payload.data.eq(beat),
                             out.payload.last.eq(batch_end), idx.eq(0)]
                m.d.sync += [s.eq(0) for s in slots]
            with m.Else():
                with m.If(out.ready):
                    m.d.sync += out.valid.eq(0)
                with m.If(pop):
                    m.d.sync += idx.eq(idx + 1)
                    m.d.sync += Array(slots)[idx].eq(word)
        else:
            # A word spans several beats.
            per_word = wbits // bbits
            held = Signal(wbits)
            left = Signal(range(per_word + 1))
            held_last = Signal()
            m.d.comb += [
                out.valid.eq(left != 0),
                out.payload.data.eq(held[:bbits]),
                out.payload.last.eq(held_last & (left == 1)),
                pop.eq(self.busy & fifo.r_rdy & ((left == 0) | ((left == 1) & out.ready))),
                fifo.r_en.eq(pop),
            ]
            with m.If(pop):
                m.d.sync += [held.eq(fifo.r_data), left.eq(per_word), held_last.eq(batch_end)]
            with m.Elif(accepted):
                m.d.sync += [held.eq(held >> bbits), left.eq(left - 1)]


@dataclasses.dataclass
class _Issue:
    """The window issue the array follows: the line buffer's, or the pointwise issuer's."""
    issue: object
    first: object
    last: object
    co: object
    widx: object
    second: object


@dataclasses.dataclass
class _Fused(_Issue):
    """The fused block's signals the core reads (:meth:`ConvCore._fused_half`): the
    pointwise issuer's issue, and the rest."""
    done: object
    lb_en: object
    window: object
    window_next: object


@dataclasses.dataclass
class _FifoRead:
    """The read side of the FIFO the packer takes the next word from."""
    r_rdy: object
    r_data: object
    r_en: object
