"""Input-stream unpacker of the convolution engine, with the parameter and weight buffers.

One layer run's input stream (docs/engine.md, Stream formats) is, in order:
parameter groups (``pout`` records of 8 bytes per output tile), weight words
(``pout*kmax*kmax*pin`` bytes per (output tile, input tile)), then the pixels
of every image as ``pin``-byte words; each section is padded to whole beats.
The :class:`StreamLoader` writes the first two into their buffer memories a
beat at a time (write ports with beat granularity, so no wide assembly
register is needed) and hands the pixel words on, one per cycle, to the line
buffer.
"""

from amaranth.hdl import Array, Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ...core.config import require_config
from ...core.contract import PARAM_RECORD_FIELDS, engine_contract
from ...core.descriptor import descriptor_layout
from ...core.technology import ram_style
from .limits import limits
from .pixel_words import pixel_group_shape, step_in_row
from ..tech.pipelined_memory import MemoryPorts

__all__ = ["PARAM_RECORD", "StreamLoader"]

#: One output channel's parameters, as in the stream (little-endian): the
#: contract's :data:`~fpgacnn.core.contract.PARAM_RECORD_FIELDS` as a layout.
PARAM_RECORD = data.StructLayout({
    name: (signed if is_signed else unsigned)(8 * size)
    for name, _, size, is_signed in PARAM_RECORD_FIELDS
})


class StreamLoader(wiring.Component):
    """Unpacks the input stream into parameter records, weight words and pixel words.

    Parameters
    ----------
    config : EngineConfig

    Members
    -------
    desc : In(descriptor_layout())
        Held stable from ``start`` until ``done``.
    start : In(1)
        Pulse: expect a new layer run's stream (parameters and weights first
        when ``desc.load_weights``, the weights from word ``desc.weight_base``;
        the parameters alone when ``desc.load_params``; the parameters from
        word ``desc.param_base`` where the contract has ``resident_params``).
    i_stream : In(stream.Signature(unsigned(stream_width)))
    o_pixels : Out(stream.Signature(pixel_group_shape(config)))
        The pixel words of the whole batch, NHWC order: one word a transfer,
        or with ``writer_words`` 2 one or two of one input row
        (:func:`~fpgacnn.hdl.datapath.pixel_words.pixel_group_shape`).
    wants : Out(1)
        A beat would be taken this cycle if it were valid.
    done : Out(1)
        Every beat of the run has been taken (also high after reset).
    param_addr : In(range(param_depth))
    param_data : Out(data.ArrayLayout(PARAM_RECORD, pout))
        The parameter group at ``param_addr`` of ``read_latency``
        cycles before.
    weight_addr : In(range(weight_depth))
    weight_data : Out(data.ArrayLayout(data.ArrayLayout(signed(8), kmax*kmax*pin), pout))
        The weight word at ``weight_addr`` of ``weight_read_latency``
        cycles before (MacArray's ``i_weights``).
    group : In(range(...)), with ``fused_blocks`` only
        A fused run's pointwise input tiles a remap position
        (:func:`~fpgacnn.core.fused_block.pointwise_tiles` of ``ci_tiles``):
        its weight section is ``co_tiles * group`` words.
    dw_addr : In(range(depthwise words)), with ``fused_blocks`` only
    dw_data : Out(depthwise word bits), with ``fused_blocks`` only
        The depthwise memory's word at ``dw_addr`` of a cycle before
        (:func:`~fpgacnn.core.fused_block.depthwise_word_bytes`, as streamed).
        A fused run with ``load_weights`` streams ``ci_tiles`` such words after
        the parameters, written from word ``dw_base`` (docs/engine.md, "Step 3").
    """

    @property
    def read_latency(self):
        """Cycles from ``param_addr``/``weight_addr`` to the data: 2 with ``deep_pipeline``, else 1.

        With ``deep_pipeline`` the buffers are
        :class:`~fpgacnn.hdl.tech.pipelined_memory.PipelinedMemory` (registered
        behind the block RAMs).
        """
        return engine_contract(self._config).latency.param_read

    @property
    def weight_read_latency(self):
        """Cycles from ``weight_addr`` to ``weight_data``: :attr:`read_latency`, and one more
        with ``deep_pipeline`` when the weights span several block RAMs in depth.

        The part select is registered then: the weight word (``kmax*kmax*pin*pout``
        bytes) goes to every DSP block of the MAC array, across the die.
        """
        return engine_contract(self._config).latency.weight_read

    def __init__(self, config):
        require_config(config)
        self._config = config
        taps = config.kmax * config.kmax * config.pin
        fused = engine_contract(config).fused
        extra = {}
        if fused:
            # (ports of the fused block only: the other engines' as before)
            extra = {"group": In(range(1, fused.pair_buffer.group + 1)),
                     "dw_addr": In(range(fused.depthwise_memory.words)),
                     "dw_data": Out(engine_contract(config).depthwise_beats
                                    * config.stream_width)}
        super().__init__({
            **extra,
            "desc": In(descriptor_layout(engine_contract(config).descriptor_fields)),
            "start": In(1),
            "i_stream": In(stream.Signature(unsigned(config.stream_width))),
            "o_pixels": Out(stream.Signature(pixel_group_shape(config))),
            "wants": Out(1),
            "done": Out(1, init=1),
            "param_addr": In(range(engine_contract(config).params.words)),
            "param_data": Out(data.ArrayLayout(PARAM_RECORD, config.pout)),
            "weight_addr": In(range(engine_contract(config).weights.words)),
            "weight_data": Out(data.ArrayLayout(data.ArrayLayout(signed(8), taps), config.pout)),
        })

    @property
    def param_beats(self):
        """Beats per parameter group."""
        return engine_contract(self._config).param_beats

    @property
    def weight_beats(self):
        """Beats per weight word."""
        return engine_contract(self._config).weight_beats

    def elaborate(self, platform):
        cfg = self._config
        beat_bits = cfg.stream_width
        desc = self.desc
        m = Module()

        pbeats, wbeats = self.param_beats, self.weight_beats
        pipelined = bool(cfg.deep_pipeline)
        # The buffers are loaded before any window of the run issues, so a
        # write may land a cycle late (register_write: the stream handshake
        # in front of the block RAMs' write enables, across the die, was
        # among the longest paths) and is never read as it lands
        # (collision_free).
        params = MemoryPorts(m, "params", pbeats * beat_bits, engine_contract(cfg).params.words,
                             pipelined=pipelined, granularity=beat_bits, register_write=True,
                             collision_free=True)
        weights = MemoryPorts(m, "weights", wbeats * beat_bits, engine_contract(cfg).weights.words,
                              pipelined=pipelined, granularity=beat_bits,
                              register_output=True, register_write=True, collision_free=True)
        m.d.comb += [
            params.r_addr.eq(self.param_addr),
            self.param_data.as_value().eq(params.r_data),
            weights.r_addr.eq(self.weight_addr),
            self.weight_data.as_value().eq(weights.r_data),
            params.w_data.eq(Cat(*([self.i_stream.payload] * pbeats))),
            weights.w_data.eq(Cat(*([self.i_stream.payload] * wbeats))),
        ]

        beat_no = Signal(range(max(pbeats, wbeats, cfg.pin // cfg.stream_bytes, 1,
                                   engine_contract(cfg).depthwise_beats) + 1))
        lim = limits(cfg)
        co, ci = Signal(lim.co_bits), Signal(lim.ci_bits)
        word_addr = Signal(range(engine_contract(cfg).weights.words + 1))
        # Resident weights (deep arrangement): a run's weights start at
        # `weight_base`; the compact one keeps them from word 0.
        resident = engine_contract(cfg).resident_weights
        weight_base = desc.weight_base[:len(word_addr)] if resident else 0
        load_params = desc.load_params if resident else 0
        # Resident parameters (a parameter buffer deeper than one run's tiles):
        # the run's records from `param_base`, by a counter restarted there as
        # the weights' is; elsewhere from word 0, at the output tile.
        resident_params = engine_contract(cfg).resident_params
        if resident_params:
            param_addr = Signal(range(engine_contract(cfg).params.words), name="param_w_addr")
            param_base = desc.param_base[:len(param_addr)]
        else:
            param_addr = co
        # A depthwise run's weights: one word per output tile.
        dw = desc.depthwise if engine_contract(cfg).depthwise_runs else 0
        # The input tiles of the weight section: a fused run's are the pointwise
        # half's, `group` a remap position (its pixels are ci_tiles words).
        fused = engine_contract(cfg).fused
        w_tiles = Mux(desc.fused, self.group, desc.ci_tiles) if fused else desc.ci_tiles
        if fused:
            dbeats = engine_contract(cfg).depthwise_beats
            # In LUT RAM while shallow, else block RAM (core.technology): the
            # read port is synchronous either way, dw_addr to dw_data a cycle.
            dwords = fused.depthwise_memory.words
            dmem = m.submodules.depthwise_memory = Memory(
                shape=dbeats * beat_bits, depth=dwords, init=[],
                attrs={"ram_style": ram_style(dwords)})
            dwp = dmem.write_port(granularity=beat_bits)
            drp = dmem.read_port()
            dw_waddr = Signal(range(fused.depthwise_memory.words), name="dw_waddr")
            dw_t = Signal(range(fused.max_tiles + 1), name="dw_t")
            m.d.comb += [drp.addr.eq(self.dw_addr), self.dw_data.eq(drp.data),
                         dwp.addr.eq(dw_waddr),
                         dwp.data.eq(Cat(*([self.i_stream.payload] * dbeats)))]
        # The last output and input tile: with deep_pipeline flags registered
        # with the counters (compares with the descriptor in front of their
        # next values were among the longest paths of the ECP5 build), else
        # compares (fewer logic cells: the iCE40 UP5K is full).
        co_last, ci_last = Signal(name="co_last"), Signal(name="ci_last")
        if not pipelined:
            m.d.comb += [co_last.eq(co == desc.co_tiles - 1), ci_last.eq(ci == desc.ci_tiles - 1)]

        def set_last(flag, value):
            return [flag.eq(value)] if pipelined else []
        px_ci, px_x = Signal(lim.ci_bits, name="px_ci"), Signal(lim.col_bits, name="px_x")
        px_y, px_n = Signal(16, name="px_y"), Signal(16, name="px_n")
        take = self.i_stream.valid & self.i_stream.ready

        # Position in the pixel section; the last word of an image also ends its beat.
        # "Last" flags registered with the counters (count + 2 == limit when
        # stepping): compares with the descriptor in front of `ready` were the
        # longest path on the iCE40.
        last_ci, last_x, last_y = Signal(), Signal(), Signal()
        image_end = last_ci & last_x & last_y
        batch_end = image_end & (px_n == desc.batch - 1)

        def advance_pixel(at=None):
            # The position after the word at `at` (the current one, or the
            # second of a pair: writer_words 2, whose column may be the next).
            ci_at, ci_last_at, x_at, x_last_at = at or (px_ci, last_ci, px_x, last_x)
            with m.If(ci_last_at):
                m.d.sync += [px_ci.eq(0), last_ci.eq(desc.ci_tiles == 1)]
                with m.If(x_last_at):
                    m.d.sync += [px_x.eq(0), last_x.eq(desc.in_w == 1)]
                    with m.If(last_y):
                        m.d.sync += [px_y.eq(0), px_n.eq(px_n + 1), last_y.eq(desc.in_h == 1)]
                    with m.Else():
                        m.d.sync += [px_y.eq(px_y + 1), last_y.eq(px_y + 2 == desc.in_h)]
                with m.Else():
                    m.d.sync += [px_x.eq(x_at + 1), last_x.eq(x_at + 2 == desc.in_w)]
            with m.Else():
                m.d.sync += [px_ci.eq(ci_at + 1), last_ci.eq(ci_at + 2 == desc.ci_tiles)]
                if at is not None:
                    m.d.sync += [px_x.eq(x_at), last_x.eq(x_last_at)]

        with m.FSM(name="section"):
            with m.State("IDLE"):
                with m.If(self.start):
                    if resident_params:
                        m.d.sync += param_addr.eq(param_base)
                    m.d.sync += [beat_no.eq(0), co.eq(0), ci.eq(0), word_addr.eq(weight_base),
                                 *set_last(co_last, desc.co_tiles == 1),
                                 *set_last(ci_last, (w_tiles == 1) | dw),
                                 px_ci.eq(0), px_x.eq(0), px_y.eq(0), px_n.eq(0),
                                 last_ci.eq(desc.ci_tiles == 1), last_x.eq(desc.in_w == 1),
                                 last_y.eq(desc.in_h == 1), self.done.eq(0)]
                    if fused:
                        m.d.sync += [dw_waddr.eq(desc.dw_base[:len(dw_waddr)]), dw_t.eq(0)]
                    with m.If(desc.load_weights | load_params):
                        m.next = "PARAMS"
                    with m.Else():
                        m.next = "PIXELS"

            with m.State("PARAMS"):
                m.d.comb += [self.i_stream.ready.eq(1), self.wants.eq(1),
                             params.w_addr.eq(param_addr), params.w_en.eq(take << beat_no)]
                with m.If(take):
                    with m.If(beat_no == pbeats - 1):
                        m.d.sync += [beat_no.eq(0), co.eq(co + 1),
                                     *set_last(co_last, co + 2 == desc.co_tiles)]
                        if resident_params:
                            m.d.sync += param_addr.eq(param_addr + 1)
                        with m.If(co_last):
                            m.d.sync += [co.eq(0), *set_last(co_last, desc.co_tiles == 1)]
                            if fused:
                                with m.If(desc.load_weights & desc.fused):
                                    m.next = "DEPTHWISE"
                                with m.Elif(desc.load_weights):
                                    m.next = "WEIGHTS"
                                with m.Else():  # load_params alone: the weights are resident
                                    m.next = "PIXELS"
                            else:
                                with m.If(desc.load_weights):
                                    m.next = "WEIGHTS"
                                with m.Else():  # load_params alone: the weights are resident
                                    m.next = "PIXELS"
                    with m.Else():
                        m.d.sync += beat_no.eq(beat_no + 1)

            if fused:
                with m.State("DEPTHWISE"):
                    # ci_tiles depthwise words from dw_base, a beat at a time
                    m.d.comb += [self.i_stream.ready.eq(1), self.wants.eq(1),
                                 dwp.en.eq(take << beat_no)]
                    with m.If(take):
                        with m.If(beat_no == dbeats - 1):
                            m.d.sync += [beat_no.eq(0), dw_waddr.eq(dw_waddr + 1),
                                         dw_t.eq(dw_t + 1)]
                            with m.If(dw_t == desc.ci_tiles - 1):
                                m.next = "WEIGHTS"
                        with m.Else():
                            m.d.sync += beat_no.eq(beat_no + 1)

            with m.State("WEIGHTS"):
                m.d.comb += [self.i_stream.ready.eq(1), self.wants.eq(1),
                             weights.w_addr.eq(word_addr), weights.w_en.eq(take << beat_no)]
                with m.If(take):
                    with m.If(beat_no == wbeats - 1):
                        m.d.sync += [beat_no.eq(0), word_addr.eq(word_addr + 1)]
                        with m.If(ci_last):
                            m.d.sync += [ci.eq(0), *set_last(ci_last, (w_tiles == 1) | dw),
                                         co.eq(co + 1),
                                         *set_last(co_last, co + 2 == desc.co_tiles)]
                            with m.If(co_last):
                                m.next = "PIXELS"
                        with m.Else():
                            m.d.sync += [ci.eq(ci + 1),
                                         *set_last(ci_last, ci + 2 == w_tiles)]
                    with m.Else():
                        m.d.sync += beat_no.eq(beat_no + 1)

            with m.State("PIXELS"):
                if cfg.writer_words == 2:
                    # Two words a beat, handed on as one pair where both are
                    # in one input row; a row's last word goes alone, and so
                    # does the first of the next row in the same beat (the
                    # line buffer's writer stores a pair of one row a cycle).
                    lo, hi = (self.i_stream.payload[i * 8 * cfg.pin:(i + 1) * 8 * cfg.pin]
                              for i in range(2))
                    two = (beat_no == 0) & ~(last_ci & last_x)
                    beat_end = (beat_no == 1) | two | image_end
                    second = step_in_row((px_ci, last_ci, px_x, last_x), desc.ci_tiles,
                                         desc.in_w)
                    _, ci_last2, _, x_last2 = second
                    pair_batch_end = ci_last2 & x_last2 & last_y & (px_n == desc.batch - 1)
                    m.d.comb += [
                        self.o_pixels.valid.eq(self.i_stream.valid),
                        self.o_pixels.payload.eq(Cat(Mux(beat_no[0], hi, lo), hi, two)),
                        self.i_stream.ready.eq(self.o_pixels.ready & beat_end),
                        self.wants.eq(self.o_pixels.ready),
                    ]
                    with m.If(self.o_pixels.valid & self.o_pixels.ready):
                        with m.If(two):
                            advance_pixel(second)
                        with m.Else():
                            advance_pixel()
                        with m.If(beat_end):
                            m.d.sync += beat_no.eq(0)
                        with m.Else():
                            m.d.sync += beat_no.eq(beat_no + 1)
                        with m.If(Mux(two, pair_batch_end, batch_end)):
                            m.d.sync += self.done.eq(1)
                            m.next = "IDLE"
                elif cfg.stream_bytes >= cfg.pin:
                    # Several words per beat: the beat is taken with its last word.
                    per_beat = cfg.stream_bytes // cfg.pin
                    words = [self.i_stream.payload[i * 8 * cfg.pin:(i + 1) * 8 * cfg.pin]
                             for i in range(per_beat)]
                    # With one word per beat every word ends its beat: no
                    # beat count in front of `ready` (it was on the longest
                    # path of the ECP5 build).
                    beat_end = (beat_no == per_beat - 1) | image_end if per_beat > 1 else 1
                    m.d.comb += [
                        self.o_pixels.valid.eq(self.i_stream.valid),
                        self.o_pixels.payload.eq(Array(words)[beat_no] if per_beat > 1
                                                 else words[0]),
                        self.i_stream.ready.eq(self.o_pixels.ready & beat_end),
                        self.wants.eq(self.o_pixels.ready),
                    ]
                    with m.If(self.o_pixels.valid & self.o_pixels.ready):
                        advance_pixel()
                        with m.If(beat_end):
                            m.d.sync += beat_no.eq(0)
                        with m.Else():
                            m.d.sync += beat_no.eq(beat_no + 1)
                        with m.If(batch_end):
                            m.d.sync += self.done.eq(1)
                            m.next = "IDLE"
                else:
                    # A word spans several beats: collect all but the last.
                    per_word = cfg.pin // cfg.stream_bytes
                    held = Signal((per_word - 1) * beat_bits)
                    collecting = beat_no != per_word - 1
                    m.d.comb += [
                        self.o_pixels.valid.eq(self.i_stream.valid & ~collecting),
                        self.o_pixels.payload.eq(Cat(held, self.i_stream.payload)),
                        self.i_stream.ready.eq(collecting | self.o_pixels.ready),
                        self.wants.eq(collecting | self.o_pixels.ready),
                    ]
                    with m.If(take):
                        with m.If(collecting):
                            m.d.sync += [beat_no.eq(beat_no + 1),
                                         held.eq(Cat(held[beat_bits:], self.i_stream.payload)
                                                 if per_word > 2 else self.i_stream.payload)]
                        with m.Else():
                            m.d.sync += beat_no.eq(0)
                            advance_pixel()
                            with m.If(batch_end):
                                m.d.sync += self.done.eq(1)
                                m.next = "IDLE"
        return m
