"""The pair buffer of the fused depthwise + pointwise block: the depthwise outputs of pixel pairs,
in a ring of slots, read by the main array as the 1x1 remap's window.

docs/engine.md, "The fused depthwise + pointwise block": the depthwise unit
(requantized on the vector unit's lanes) writes ``pin`` channels of both
pixels of a pair a cycle into one slot; the main array reads the oldest full
slot as the 1x1 remap's window pair, ``kmax x kmax`` positions of ``pin``
channels, once per output tile. Channel ``c`` of a block of ``C`` channels
is at position ``c div g`` as channel ``c mod g`` of the remapped pixel,
``g = group * pin`` (:func:`fpgacnn.host.packing.remap_group`'s ``kmax``
block), so word ``w`` (channels ``w*pin ..``) goes to position ``w div
group``, window ``w mod group``: each position is a memory of its own, and a
read of window ``ci`` from all of them is the array's window, tap ``(ky*kmax
+ kx)*pin + p`` = channel ``(ky*kmax + kx)*g + ci*pin + p``.
"""

from amaranth.hdl import Cat, Module, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ...core.config import ConfigError, require_config
from ...core.fused_block import pair_buffer_shape

__all__ = ["PairBuffer", "pair_words"]


def pair_words(config):
    """A word of the pair buffer's writer: ``[pixel][p]``, ``pin`` int8 of each of the two pixels."""
    return data.ArrayLayout(data.ArrayLayout(signed(8), config.pin), 2)


class PairBuffer(wiring.Component):
    """``slots`` slots of two pixels' ``C`` int8 channels, written a word a cycle, read a window
    pair a cycle.

    The writer fills the slots in turn, each with the ``tiles`` words of a
    pixel pair (word ``w``: channels ``w*pin .. w*pin + pin - 1`` of both
    pixels); the reader reads the oldest full slot's windows ``0 .. group -
    1`` in any order and as often as it likes (once per output tile), then
    releases it. A slot is the writer's until its last word is in, then the
    reader's until it is released: the writer runs up to ``slots - 1`` pairs
    ahead of the pair the reader is at, and waits while every slot is full
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
    w_stream : In(stream.Signature(pair_words(config)))
        The words of each pixel pair in order, ``tiles`` a pair. Ready while
        the writer's slot is not full.
    r_ready : Out(1)
        A full slot is the reader's: the oldest.
    r_en : In(1)
        Read window ``r_ci`` of the reader's slot (only while ``r_ready``).
    r_ci : In(range(shape.group))
    r_release : In(1)
        The reader is done with its slot (only while ``r_ready``; with the
        last ``r_en`` or after it): it goes back to the writer, and the
        reader moves to the next slot.
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
            "w_stream": In(stream.Signature(pair_words(config))),
            "r_ready": Out(1),
            "r_en": In(1),
            "r_ci": In(range(shape.group)),
            "r_release": In(1),
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
        # The slots in turn: counters that wrap at a power of two.
        w_slot = Signal(range(shape.slots), name="w_slot")
        r_slot = Signal(range(shape.slots), name="r_slot")
        # The writer's place: window `w_ci` of position `w_pos`, and the words left of the pair.
        w_ci = Signal(range(shape.group), name="w_ci")
        w_pos = Signal(range(shape.positions), name="w_pos")
        w_left = Signal(range(shape.tiles), name="w_left")

        w = self.w_stream
        m.d.comb += w.ready.eq(~full.bit_select(w_slot, 1))
        fire = w.valid & w.ready
        pair_done = fire & (w_left == 0)
        with m.If(fire):
            with m.If(w_ci == self.group - 1):
                m.d.sync += [w_ci.eq(0), w_pos.eq(w_pos + 1)]
            with m.Else():
                m.d.sync += w_ci.eq(w_ci + 1)
            m.d.sync += w_left.eq(w_left - 1)
        with m.If(pair_done):
            m.d.sync += [w_ci.eq(0), w_pos.eq(0), w_left.eq(self.tiles - 1),
                         w_slot.eq(w_slot + 1)]
        m.d.comb += self.r_ready.eq(full.bit_select(r_slot, 1))
        with m.If(self.r_release):
            m.d.sync += r_slot.eq(r_slot + 1)
        # (a release and a pair's end are of different slots: the writer's is not full,
        # the reader's is)
        for h in range(shape.slots):
            with m.If(pair_done & (w_slot == h)):
                m.d.sync += full[h].eq(1)
            with m.Elif(self.r_release & (r_slot == h)):
                m.d.sync += full[h].eq(0)
        with m.If(self.start):
            m.d.sync += [full.eq(0), w_slot.eq(0), r_slot.eq(0),
                         w_ci.eq(0), w_pos.eq(0), w_left.eq(self.tiles - 1)]

        # A memory a position, distributed RAM: a read a cycle of all of them
        # is the window, and they are small (`depth` words of two pixels' pin bytes).
        w_addr = Cat(w_ci[:ci_bits], w_slot)
        r_addr = Cat(self.r_ci[:ci_bits], r_slot)
        m.d.sync += self.o_valid.eq(self.r_en)
        for t in range(shape.positions):
            mem = m.submodules[f"position{t}"] = Memory(
                shape=pair_words(cfg), depth=shape.depth, init=[],
                attrs={"ram_style": "distributed"})
            wp = mem.write_port()
            rp = mem.read_port(domain="comb")
            m.d.comb += [wp.addr.eq(w_addr), wp.data.eq(w.payload),
                         wp.en.eq(fire & (w_pos == t)), rp.addr.eq(r_addr)]
            for p in range(pin):
                m.d.sync += [self.o_window[t * pin + p].eq(rp.data[0][p]),
                             self.o_window_next[t * pin + p].eq(rp.data[1][p])]
        return m
