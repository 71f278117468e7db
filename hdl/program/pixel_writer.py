"""The pixel writer: a run's output stream written into memory (issue 16 item 3).

The other half of the engine's own address generation (docs/program.md, "How
a program runs"), beside :class:`~fpgacnn.hdl.program.pixel_reader.PixelReader`:
it takes the engine's output stream (docs/engine.md, "Stream formats") and
writes each output pixel's channels where the run's destination pattern puts
them in the program image's arena, so the host unpacks and scatters
nothing. Its fields (:data:`fpgacnn.core.pixel_writer_fields.WRITER_FIELDS`)
are one affine counter nest over the stream's units of
``u = min(pout, stream_bytes)`` bytes;
:func:`fpgacnn.host.pixel_writer_setup.writer_fields` fills them from an
engine record.

Structure::

    i_stream --> beat register --> unit k of the beat --+--> write (addr, data, strobes)
                                                         +--> dropped
                 counter nest (image, row, col, unit) --/

One unit leaves the beat register per cycle: written when the nest says so
and ``o_write`` takes it, dropped at once otherwise. An image's dropped tail
(its beat padding, the rows past the tensor: every unit from its last
written one to its end, which is a beat's end) leaves a beat at a time, the
part in the beat of the last written unit with that unit, as a DMA takes a
padded beat: a writer that spent a cycle on each padding unit fell a cycle
behind the engine every image of an output-bound batch. The next beat is
taken in the cycle its predecessor's last unit leaves, so an output stream
that gives a beat every ``stream_bytes / u`` cycles and a memory that takes
a write every cycle keep the writer busy every cycle. ``o_write`` is the
beat register's unit itself (``o_write.ready`` reaches ``i_stream.ready``
through one AND): a register slice can follow where timing needs it.

**Wide mode** (field ``wide``, built where
:func:`~fpgacnn.core.memory_port.writer_has_wide`: the PYNQ-Z1/Z2 and KV260
engines, whose packer sends a pixel-pair run's output a beat a cycle): a
unit is the whole beat, so the writer takes a beat a cycle, as the DMA
does. The host sets it where every address, stride and pixel of the stream
is whole beats (:func:`fpgacnn.host.pixel_writer_setup.wide_writer_fields`);
the last kept beat of a pixel is written up to ``last_lanes`` bytes. On such
an engine ``o_write`` is a beat wide in both modes: a narrow unit goes in
its lanes of the beat-aligned write (its place in the beat from its
address), with its strobes.
"""

from amaranth.hdl import Const, Module, Mux, Signal, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ...core.config import require_config
# the fields' addresses are as wide as ADDRESS_BITS
from ...core.memory_port import ADDRESS_BITS, writer_has_wide, writer_unit
from ...core.pixel_writer_fields import writer_layout

__all__ = ["PixelWriter", "write_layout"]


def write_layout(unit):
    """A memory write of one ``unit``-byte unit: its address, data (byte ``k`` in bits
    ``8k..8k+7``) and byte strobes (bit ``k``: write byte ``k``)."""
    return data.StructLayout({"addr": unsigned(ADDRESS_BITS), "data": unsigned(8 * unit),
                              "strb": unsigned(unit)})


class PixelWriter(wiring.Component):
    """Writes a run's output stream into memory.

    Parameters
    ----------
    config : EngineConfig

    Members
    -------
    fields : In(writer_layout())
        Held stable from ``start`` until ``done``.
    start : In(1)
        Pulse: write the output stream ``fields`` describe (ignored while ``busy``).
    busy : Out(1)
        From the cycle after ``start`` until the cycle after the last unit left.
    done : Out(1)
        High for the one cycle in which the stream's last unit leaves (``busy``
        is low from the next); every beat of the run has been taken then.
    i_stream : In(stream.Signature(unsigned(stream_width)))
        The engine's output stream (``o_stream``), any pauses.
    o_write : Out(stream.Signature(write_layout(unit)))
        Unit writes, in stream order; any back-pressure. Addresses count
        :attr:`unit` bytes: ``writer_unit(config)``, or the beat where the
        writer has the wide mode (a narrow unit then in its lanes).

    Latency
    -------
    With ``i_stream`` always valid and ``o_write`` always ready, a stream of
    ``N`` units (of the run's mode: beats in a wide run) takes ``N + 1`` cycles from the cycle in which ``start`` is
    high to the cycle in which ``done`` is (the first beat is taken in the
    cycle after ``start``), where an image's dropped tail counts one unit a
    whole beat it covers and nothing in the beat of the image's last written
    unit; beat by beat,
    :func:`~fpgacnn.core.pixel_writer_fields.writer_beat_cycles`, which the
    cycle model reads (the next beat is taken in the cycle the last unit of
    the one before leaves, so a short last beat of an image waits for it).
    """

    def __init__(self, config):
        require_config(config)
        self._config = config
        self._has_wide = writer_has_wide(config)
        #: Bytes of an ``o_write`` (its addresses count them).
        self.unit = writer_unit(config, wide=self._has_wide)
        super().__init__({
            "fields": In(writer_layout()),
            "start": In(1),
            "busy": Out(1),
            "done": Out(1),
            "i_stream": In(stream.Signature(unsigned(config.stream_width))),
            "o_write": Out(stream.Signature(write_layout(self.unit))),
        })

    def elaborate(self, platform):
        cfg, u = self._config, writer_unit(self._config)  # u: the narrow unit
        per_beat = cfg.stream_bytes // u
        has_wide = self._has_wide
        f = self.fields
        m = Module()

        # -- the beat register and the unit that leaves it ------------------------------
        beat = Signal(cfg.stream_width)
        have = Signal()  # beat holds units not yet gone
        k = Signal(range(max(per_beat, 2)))
        unit_data = Signal(8 * u)
        m.d.comb += unit_data.eq(beat.word_select(k, 8 * u) if per_beat > 1 else beat)

        # -- the counter nest ---------------------------------------------------------
        image, row, col, unit = Signal(16), Signal(16), Signal(16), Signal(16)
        dropped = Signal(32)
        addr = Signal(ADDRESS_BITS)
        pixel_base, row_base, image_base = (Signal(ADDRESS_BITS, name=n) for n in
                                            ("pixel_base", "row_base", "image_base"))
        writing = Signal()  # the nest is in an image's rows (else: its dropped tail)
        keep = writing & (unit < f.kept_units)
        last_kept = unit == f.kept_units - 1
        strobes = Signal(self.unit)
        below = Signal(self.unit)  # the lanes below last_lanes
        full = (1 << u) - 1
        if has_wide:
            full = Mux(f.wide, (1 << self.unit) - 1, full)
        m.d.comb += [below.eq(((Const(1, 1) << f.last_lanes) - 1)[:self.unit]),
                     strobes.eq(Mux(last_kept, below, full))]

        go = Signal()  # a unit leaves this cycle
        if has_wide:
            # A wide run's unit is the beat; a narrow unit goes to its lanes of the
            # beat-aligned write.
            lane = addr[:exact_log2(per_beat)]
            m.d.comb += [
                self.o_write.payload.addr.eq(Mux(f.wide, addr, addr >> exact_log2(per_beat))),
                self.o_write.payload.data.eq(Mux(f.wide, beat, unit_data << (8 * u * lane))),
                self.o_write.payload.strb.eq(Mux(f.wide, strobes, strobes << (u * lane))),
            ]
        else:
            m.d.comb += [
                self.o_write.payload.addr.eq(addr),
                self.o_write.payload.data.eq(unit_data),
                self.o_write.payload.strb.eq(strobes),
            ]
        m.d.comb += [
            self.o_write.valid.eq(self.busy & have & keep),
            go.eq(self.busy & have & (~keep | self.o_write.ready)),
        ]
        # The image's last written unit, and the units of its beat after it.
        last_of_image = (unit == f.units - 1) & (col == f.cols - 1) & (row == f.rows - 1)
        rest = Signal(range(per_beat))
        beat_end = k == per_beat - 1
        units_a_beat = per_beat
        if has_wide:  # a wide unit is its beat: nothing of the beat after it
            m.d.comb += rest.eq(Mux(f.wide, 0, per_beat - 1 - k))
            beat_end = beat_end | f.wide
            units_a_beat = Mux(f.wide, 1, per_beat)
        else:
            m.d.comb += rest.eq(per_beat - 1 - k)
        # A beat leaves with its last unit, with the image's last written unit (the
        # rest is tail), or whole in the tail.
        beat_gone = go & (beat_end | (writing & last_of_image) | ~writing)
        m.d.comb += self.i_stream.ready.eq(self.busy & (~have | beat_gone))
        with m.If(self.i_stream.valid & self.i_stream.ready):
            m.d.sync += [beat.eq(self.i_stream.payload), have.eq(1), k.eq(0)]
        with m.Elif(beat_gone):
            m.d.sync += [have.eq(0), k.eq(0)]
        with m.Elif(go):
            m.d.sync += k.eq(k + 1)

        def begin_image(base):
            m.d.sync += [image_base.eq(base), row_base.eq(base), pixel_base.eq(base),
                         addr.eq(base), row.eq(0), col.eq(0), unit.eq(0), dropped.eq(0),
                         writing.eq(1)]

        def end_image():
            with m.If(image == f.images - 1):
                m.d.sync += [self.busy.eq(0), writing.eq(0)]
                m.d.comb += self.done.eq(1)
            with m.Else():
                m.d.sync += image.eq(image + 1)
                begin_image(image_base + f.image_stride)

        with m.If(~self.busy):
            with m.If(self.start):
                m.d.sync += [self.busy.eq(1), image.eq(0)]
                begin_image(f.base)
        with m.Elif(go & writing):
            with m.If(unit != f.units - 1):
                m.d.sync += [unit.eq(unit + 1), addr.eq(addr + 1)]
            with m.Elif(col != f.cols - 1):
                following = pixel_base + f.pixel_stride
                m.d.sync += [unit.eq(0), col.eq(col + 1), pixel_base.eq(following),
                             addr.eq(following)]
            with m.Elif(row != f.rows - 1):
                following = row_base + f.row_stride
                m.d.sync += [unit.eq(0), col.eq(0), row.eq(row + 1), row_base.eq(following),
                             pixel_base.eq(following), addr.eq(following)]
            with m.Elif(f.drop_units > rest):  # the tail goes on past this beat
                m.d.sync += [writing.eq(0), dropped.eq(rest)]
            with m.Else():
                end_image()
        with m.Elif(go):  # a whole beat of the tail
            with m.If(dropped + units_a_beat < f.drop_units):
                m.d.sync += dropped.eq(dropped + units_a_beat)
            with m.Else():
                end_image()
        return m
