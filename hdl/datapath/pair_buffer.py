"""The pair buffer of the fused depthwise + pointwise block: the depthwise outputs of pixel pairs,
in a ring of slots, read by the main array as the 1x1 remap's window.

docs/engine.md, "The fused depthwise + pointwise block": the depthwise unit
(requantized on the vector unit's lanes) writes ``pin`` channels of both
pixels of a window pair (two adjacent pixels of a row) a cycle; the main
array reads the oldest full slot as the 1x1 remap's window pair, ``kmax x
kmax`` positions of ``pin`` channels, once per output tile. A slot holds
two pixels adjacent in the image's raster order, not in its row
("Pairs across rows"): pixel ``p`` of an image is in half ``p mod 2`` of
its slot ``p div 2``, so a row of odd width ends on half a slot that the
next row's first pixel completes. Channel ``c`` of a block of ``C`` channels
is at position ``c div g`` as channel ``c mod g`` of the remapped pixel,
``g = group * pin`` (:func:`fpgacnn.host.packing.remap_group`'s ``kmax``
block), so word ``w`` (channels ``w*pin ..``) goes to position ``w div
group``, window ``w mod group``: each position is a memory of its own, and a
read of window ``ci`` from all of them is the array's window, tap ``(ky*kmax
+ kx)*pin + p`` = channel ``(ky*kmax + kx)*g + ci*pin + p``.
"""

from amaranth.hdl import Cat, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ...core.config import ConfigError, require_config
from ...core.fused_block import pair_buffer_shape
from .limits import limits

__all__ = ["PairBuffer", "pair_words"]


def pair_words(config):
    """A word of the pair buffer's writer: ``[pixel][p]``, ``pin`` int8 of each of the two pixels."""
    return data.ArrayLayout(data.ArrayLayout(signed(8), config.pin), 2)


class PairBuffer(wiring.Component):
    """``slots`` slots of two pixels' ``C`` int8 channels, written a word a cycle, read a window
    pair a cycle.

    The writer takes an image's window pairs in the line buffer's order, row
    by row, ``ceil(width / 2)`` a row, each the ``tiles`` words of pixels
    ``x`` and ``x + 1`` of a row (word ``w``: channels ``w*pin .. w*pin +
    pin - 1`` of both; ``x + 1`` missing at the end of an odd row). It puts
    pixel ``p = y*width + x`` of the image in half ``p mod 2`` of slot ``p div
    2`` (a slot a pair of the image's raster order): each half a memory with
    its own write address, so a pair starting on an odd ``p`` writes half 1
    of one slot and half 0 of the next. A slot is full when both its pixels
    are in, or its one pixel where it is an image's odd last. The reader
    reads the oldest full slot's windows ``0 .. group - 1`` in any order and
    as often as it likes (once per output tile), then releases it. A slot is
    the writer's until full, then the reader's until released: the writer
    runs up to ``slots - 1`` slots ahead of the one the reader is at, and a
    pair waits while a slot it writes is full
    (:data:`~fpgacnn.core.fused_block.PAIR_BUFFER_SLOTS`: why more than two).
    Taps of channels past ``C`` in a window hold whatever the slot
    held (the last word's spare channels, an earlier pair's words): the
    remapped pointwise weights there are 0 (:func:`fpgacnn.host.packing.
    pack_weights`), so they contribute nothing.

    Parameters
    ----------
    config : EngineConfig
        The engine: ``pin``, ``kmax``, ``max_channels``
        (:func:`~fpgacnn.core.fused_block.pair_buffer_shape`, which also
        gives the slots), with ``pixel_pairs``.

    Members
    -------
    start : In(1)
        A new block run: every slot empty, the writer and the reader at slot 0.
    tiles : In(range(1, shape.tiles + 1))
        Words of a pixel of the run (:func:`~fpgacnn.core.fused_block.pair_buffer_run`),
        held from ``start``.
    group : In(range(1, shape.group + 1))
        Words of a position (the remap's windows), held from ``start``.
    width, height : In(col_bits), In(16)
        Pixels of an image's row, and its rows (the run's output's), held from
        ``start``; the images follow each other, each from half 0 of a slot.
    w_stream : In(stream.Signature(pair_words(config)))
        The words of each window pair in order, ``tiles`` a pair. Ready while
        the slots the pair writes are not full.
    w_full : Out(1)
        A slot is full: the write of its last word (one slot at most a pair).
    r_ready : Out(1)
        A full slot is the reader's: the oldest.
    r_en : In(1)
        Read window ``r_ci`` of the reader's slot (only while ``r_ready``).
    r_ci : In(range(shape.group))
    r_release : In(1)
        The reader is done with its slot (only while ``r_ready``; with the
        last ``r_en`` or after it): it goes back to the writer, and the
        reader moves to the next slot.
    q_slot : In(range(shape.slots))
        A full slot to tell about (the slots in turn from ``start``, as the
        reader's: for an issuer ahead of the reads).
    q_second, q_last : Out(1)
        Slot ``q_slot`` holds two pixels (not an image's odd last alone), and
        it holds its image's last pixel.
    o_valid : Out(1)
    o_window, o_window_next : Out(data.ArrayLayout(signed(8), kmax*kmax*pin))
        The window of the read :attr:`latency` cycles before, of the first and
        the second pixel; tap ``(ky*kmax + kx)*pin + p``, the array's order.

    Raises
    ------
    TypeError
        ``config`` is not an :class:`EngineConfig`.
    ConfigError
        The engine has no ``pixel_pairs``.

    Latency
    -------
    :attr:`latency` = 1: the distributed memories' read, registered. A word
    written is readable (as part of a full slot) the cycle after the write
    of the slot's last word.
    """

    def __init__(self, config):
        require_config(config)
        if not config.pixel_pairs:
            raise ConfigError("the pair buffer holds pixel pairs for the array's window pair: "
                              "it needs pixel_pairs 1")
        self._config = config
        self._shape = shape = pair_buffer_shape(config)
        window = data.ArrayLayout(signed(8), shape.positions * config.pin)
        super().__init__({
            "start": In(1),
            "tiles": In(range(1, shape.tiles + 1)),
            "group": In(range(1, shape.group + 1)),
            "width": In(limits(config).col_bits),
            "height": In(16),
            "w_stream": In(stream.Signature(pair_words(config))),
            "w_full": Out(1),
            "r_ready": Out(1),
            "r_en": In(1),
            "r_ci": In(range(shape.group)),
            "r_release": In(1),
            "q_slot": In(range(shape.slots)),
            "q_second": Out(1),
            "q_last": Out(1),
            "o_valid": Out(1),
            "o_window": Out(window),
            "o_window_next": Out(window),
        })

    @property
    def shape(self):
        """The buffer's :class:`~fpgacnn.core.fused_block.PairBufferShape`."""
        return self._shape

    @property
    def latency(self):
        """Cycles from ``r_en`` to its window on ``o_window``."""
        return 1

    def elaborate(self, platform):
        m = Module()
        cfg, shape = self._config, self._shape
        pin = cfg.pin
        ci_bits = (shape.group - 1).bit_length()  # the slot is the address's next bits

        full = Signal(shape.slots, name="full")
        # (of each full slot, for the issuer: an image's odd last pixel alone; an image's last)
        single = Signal(shape.slots, name="single")
        last = Signal(shape.slots, name="last")
        # The slots in turn: counters that wrap at a power of two.
        w_slot = Signal(range(shape.slots), name="w_slot")
        r_slot = Signal(range(shape.slots), name="r_slot")
        # The writer's place: window `w_ci` of position `w_pos`, and the words left of the pair.
        w_ci = Signal(range(shape.group), name="w_ci")
        w_pos = Signal(range(shape.positions), name="w_pos")
        w_left = Signal(range(shape.tiles), name="w_left")
        # The pair's place in the image: the pixels of its row from its first on, the
        # rows after its row (down-counters: their flags are compares with constants),
        # and whether its first pixel is odd in the raster order (it goes to half 1 of
        # `w_slot`, the second pixel to half 0 of the next slot).
        x_left = Signal.like(self.width, name="w_x_left")
        y_left = Signal(16, name="w_y_left")
        odd = Signal(name="w_odd")
        second, row_end = Signal(name="w_second"), Signal(name="w_row_end")
        image_end = Signal(name="w_image_end")
        m.d.comb += [second.eq(x_left > 1), row_end.eq(x_left <= 2),
                     image_end.eq(row_end & (y_left == 0))]

        w = self.w_stream
        next_slot = Signal.like(w_slot, name="w_next_slot")
        m.d.comb += [next_slot.eq(w_slot + 1),
                     w.ready.eq(~full.bit_select(w_slot, 1)
                                & ~(odd & second & full.bit_select(next_slot, 1)))]
        fire = w.valid & w.ready
        pair_done = fire & (w_left == 0)
        # A slot is full with the pixel that ends it: an odd one, a pair's second,
        # or an image's last.
        slot_full = pair_done & (odd | second | image_end)
        m.d.comb += self.w_full.eq(slot_full)
        with m.If(fire):
            with m.If(w_ci == self.group - 1):
                m.d.sync += [w_ci.eq(0), w_pos.eq(w_pos + 1)]
            with m.Else():
                m.d.sync += w_ci.eq(w_ci + 1)
            m.d.sync += w_left.eq(w_left - 1)

        with m.If(pair_done):
            m.d.sync += [w_ci.eq(0), w_pos.eq(0), w_left.eq(self.tiles - 1),
                         # the parity of the next pixel: an image starts even
                         odd.eq(~image_end & (odd ^ ~second))]
            with m.If(slot_full):
                m.d.sync += w_slot.eq(next_slot)
            with m.If(row_end):
                m.d.sync += [x_left.eq(self.width),
                             y_left.eq(Mux(image_end, self.height - 1, y_left - 1))]
            with m.Else():
                m.d.sync += x_left.eq(x_left - 2)
        m.d.comb += [self.r_ready.eq(full.bit_select(r_slot, 1)),
                     self.q_second.eq(~single.bit_select(self.q_slot, 1)),
                     self.q_last.eq(last.bit_select(self.q_slot, 1))]
        with m.If(self.r_release):
            m.d.sync += r_slot.eq(r_slot + 1)
        # (a release and a slot's end are of different slots: the writer's is not full,
        # the reader's is)
        for h in range(shape.slots):
            with m.If(slot_full & (w_slot == h)):
                m.d.sync += [full[h].eq(1), last[h].eq(image_end),
                             single[h].eq(~odd & ~second)]
            with m.Elif(self.r_release & (r_slot == h)):
                m.d.sync += full[h].eq(0)
        with m.If(self.start):
            m.d.sync += [full.eq(0), w_slot.eq(0), r_slot.eq(0),
                         w_ci.eq(0), w_pos.eq(0), w_left.eq(self.tiles - 1),
                         x_left.eq(self.width), y_left.eq(self.height - 1), odd.eq(0)]

        # Two memories a position, one a half of the slots, distributed RAM: a read a
        # cycle of all of them is the window pair, and they are small (`depth` words
        # of pin bytes). Half 0 takes the pair's first pixel, in `w_slot`, or where
        # that pixel is odd its second, in the next slot.
        r_addr = Cat(self.r_ci[:ci_bits], r_slot)
        addr = [Cat(w_ci[:ci_bits], Mux(odd, next_slot, w_slot)), Cat(w_ci[:ci_bits], w_slot)]
        data_in = [Mux(odd, w.payload[1], w.payload[0]), Mux(odd, w.payload[0], w.payload[1])]
        # (half 0 of the next slot is not the pair's when it has no second pixel)
        half_en = [~odd | second, odd | second]
        out = [self.o_window, self.o_window_next]
        m.d.sync += self.o_valid.eq(self.r_en)
        for t in range(shape.positions):
            for half in range(2):
                mem = m.submodules[f"position{t}_{half}"] = Memory(
                    shape=data.ArrayLayout(signed(8), pin), depth=shape.depth, init=[],
                    attrs={"ram_style": "distributed"})
                wp = mem.write_port()
                rp = mem.read_port(domain="comb")
                m.d.comb += [wp.addr.eq(addr[half]), wp.data.eq(data_in[half]),
                             wp.en.eq(fire & (w_pos == t) & half_en[half]), rp.addr.eq(r_addr)]
                for p in range(pin):
                    m.d.sync += out[half][t * pin + p].eq(rp.data[p])
        return m
