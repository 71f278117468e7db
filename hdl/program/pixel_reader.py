"""The pixel reader: a run's pixel section read from memory (issue 16 item 3).

The first piece of the engine's own address generation (docs/program.md,
"How a program runs"): it makes the pixel section of an engine run's input
stream (docs/engine.md, "Stream formats") from the program image's arena,
so the host packs nothing. Its fields
(:data:`fpgacnn.core.pixel_reader_fields.READER_FIELDS`) are one affine
counter nest; :func:`fpgacnn.host.pixel_reader_setup.reader_fields` fills them
from an engine record, for the patterns the nest covers.

Structure::

    fields --> issue (counter nest) --+--> o_addr -----> memory
                                      |                    |
                                      v                    v
                              command FIFO           response FIFO <-- i_data (R bytes)
                                      |                    |
                                      +--> word (read / x_zp / 0, lanes masked)
                                             --> beat packer --> o_stream

A word is ``pin`` bytes, or with the ``wide`` field the memory read port's
``R = read_bytes(config)`` (a whole beat on an engine whose ``pin`` is
narrower than its beat; where R is ``pin`` the two are one, and ``wide`` is
not built); either way the nest issues one word a cycle, so a wide section
gives the engine a beat a cycle where a narrow one gives it ``pin / R`` of
one. The response FIFO and the masking are R bytes wide in both modes: a
narrow word's lanes past ``pin`` are masked off with the channels past the
pixel's, so the bytes the memory returns above the word never reach the
stream.

Each word of the section is one *command* (read, ``x_zp`` or zero, and how
many of its lanes are kept), pushed in order by the counter nest; a read
command is pushed in the same cycle as its address is taken. The output side
pops the commands in order and pairs each read command with the next
response, so responses need no tags. A command stays in its FIFO until its
word has left, so the commands in flight bound the reads in flight: the
response FIFO can take every response the moment it arrives, and
``i_data.ready`` stays high (the memory is never stalled by the reader; it
may stall the reader).
"""

from amaranth.hdl import Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO, SyncFIFOBuffered
from amaranth.lib.wiring import In, Out
from amaranth.utils import exact_log2

from ...core.config import require_config
# The fields' addresses are as wide as the port's (ADDRESS_BITS).
from ...core.memory_port import ADDRESS_BITS, read_bytes, words_per_read
from ...core.pixel_reader_fields import reader_layout

__all__ = ["PixelReader", "require_outstanding"]

#: A command: where a word comes from, and how many of its lanes are kept; with
#: ``pair``, a whole beat of two narrow words, the read one (if any) in the half
#: ``high`` names, the other 0, or, with ``both``, the two words of one R-byte
#: read (``lanes`` then counts the beat's lanes kept, the first word's all). ``wide``
#: (the word is R bytes) and ``x_zp`` are the section's, carried so that the next
#: section, whose fields may differ, can be issued while this one drains.
_READ, _ZP, _ZERO = 0, 1, 2


def require_outstanding(outstanding):
    """Check a memory client's ``outstanding`` (reads in flight at most): an integer
    of at least 2.

    Raises
    ------
    TypeError
    """
    if isinstance(outstanding, bool) or not isinstance(outstanding, int) or outstanding < 2:
        raise TypeError(f"outstanding must be an integer of at least 2, not {outstanding!r}")


def _command_layout(lanes):
    """A command of words of at most ``lanes`` lanes."""
    return data.StructLayout({"kind": 2, "lanes": unsigned(lanes.bit_length()), "pair": 1,
                              "high": 1, "both": 1, "wide": 1, "x_zp": 8})


class PixelReader(wiring.Component):
    """Reads the pixel section of a run's input stream from memory.

    Parameters
    ----------
    config : EngineConfig
    outstanding : int
        Words issued (read, or synthesized) and not yet taken by the packer,
        at most; this bounds the reads in flight, and sizes both FIFOs. Full
        rate needs at least the memory's latency plus 3 (Latency); the default
        covers the simulated board's default latency of 40 cycles
        (docs/program.md).

    Members
    -------
    fields : In(reader_layout())
        Held stable from ``start`` until ``done``.
    start : In(1)
        Pulse: read the section ``fields`` describe (ignored while ``busy``).
    busy : Out(1)
        High from the cycle after ``start`` through the cycle of ``done``.
    issued : Out(1)
        High while every word of the section is issued and its last ones are
        still on their way: a ``start`` then begins the next section at once
        (its ``fields`` then the next section's; it follows this one in the
        stream, and no ``done`` comes between them), so a section's reads are
        issued while the one before it drains (the constants of a run, then its
        pixels, Latency).
    done : Out(1)
        High for one cycle, the cycle after the last beat was taken (of the
        last section started).
    o_addr : Out(stream.Signature(unsigned(ADDRESS_BITS)))
        Read requests: the address of one ``pin``-byte memory word (byte
        address ``pin * o_addr``), in both modes; a wide section's word
        address ``a`` (in R-byte words) is requested as ``a * R / pin``, so
        its reads are R-aligned. Any back-pressure.
    i_data : In(stream.Signature(unsigned(8 * R)))
        The responses, ``R = read_bytes(config)`` bytes each, in the order of
        the requests, little-endian: byte ``pin * o_addr + k`` in bits
        ``8k..8k+7``. A narrow section takes the low ``pin`` bytes and ignores
        the rest (whatever the top leaves there), but for a read at an R-aligned
        address that gives two words of a pair (Latency), which takes all R, as
        a wide section does.
        Any latency of at least a cycle, any pauses. ``ready`` is high
        whenever a response is owed.
    o_stream : Out(stream.Signature(unsigned(stream_width)))
        The section, in the engine's ``i_stream`` format: ``stream_bytes /
        pin`` words to a beat, the first in the low bytes (or, when a word is
        wider than a beat, ``pin / stream_bytes`` beats to a word, low bytes
        first); a wide word is one whole beat (R is the beat where ``pin`` is
        narrower, and the host sets ``wide`` only there). Any back-pressure.

    Latency
    -------
    With a memory that takes every request and answers ``L`` cycles after
    taking it (``L >= 1``), ``o_stream`` always ready and ``outstanding >= L +
    3``, a section of ``W`` words in ``B`` beats takes ``max(W, B) + L + 4``
    cycles from the cycle in which ``start`` is high to the cycle in which
    ``done`` is (``max(W, B) + 3`` when it reads nothing): one word per cycle,
    or one beat per cycle when a word is wider than a beat, with no bubble
    between pixels, rows, parts or images. ``W`` counts the section's words
    in its own unit: a wide section of ``W`` R-byte words is ``B = W`` beats,
    ``max(W, B) = W``, a beat per cycle. Where a read is two words (``R =
    2 * pin``), a narrow section of one word a block position (the 1x1
    remap of a thin tensor) issues two words of a line ``(row, ky)`` of
    which at most one is read (the other past the channels, or of a padding
    pixel) as one beat, from a beat's start, and so two words of one pixel
    that are both read where they are one R-byte read (``block_stride`` 1,
    the first at an R-aligned address): ``W`` counts each such pair once.
    A section started while ``issued`` (``c >= 1`` cycles after it rose)
    issues its first word ``c + 1`` cycles after the last word of the one
    before; its words follow that one's in the stream, so its ``done`` comes
    when it would alone from its ``start``, or ``max(W, B)`` cycles after the
    section before would have come alone, whichever is later: the first
    where both read a word a cycle (its reads then are ``c + 1`` cycles behind
    the section before's, not ``L + 4``), the second where it reads nothing
    or the stream is the bound.
    The four cycles are the issue
    state, the command FIFO, the response FIFO's output register and the
    packer's register; the output side sees a read's data ``L + 2`` cycles
    after it issued the read, hence ``outstanding >= L + 3`` for full rate.

    Under back-pressure the pace is a command a cycle: the output side pops a
    command (a narrow word, a wide word, a pair) a cycle into the packer,
    which holds one beat and pops in the cycle it leaves, never while it
    waits. So a beat of ``c`` commands is offered ``c`` cycles after the
    cycle the beat before left at the earliest (with the reads issued ahead,
    as ``outstanding`` lets them be): a wide word or a pair a beat a cycle,
    two narrow words a beat in two cycles, and one more for each cycle the
    consumer keeps a beat (the engine's loader takes a beat of two words of
    two input rows in two cycles). The commands of each beat are
    :func:`fpgacnn.core.pixel_reader_fields.reader_beat_commands`, which
    walks the counter nest as the issue does, pairs included; the cycle
    model reads them (:func:`fpgacnn.host.cycle_model.layer_cycles`'
    ``reader``).

    Raises
    ------
    TypeError
        ``config`` is not an EngineConfig, or ``outstanding`` not an integer of
        at least 2.
    """

    def __init__(self, config, *, outstanding=64):
        require_config(config)
        require_outstanding(outstanding)
        self._config = config
        self._outstanding = outstanding
        super().__init__({
            "fields": In(reader_layout()),
            "start": In(1),
            "busy": Out(1),
            "issued": Out(1),
            "done": Out(1),
            "o_addr": Out(stream.Signature(unsigned(ADDRESS_BITS))),
            "i_data": In(stream.Signature(unsigned(8 * read_bytes(config)))),
            "o_stream": Out(stream.Signature(unsigned(config.stream_width))),
        })

    def elaborate(self, platform):
        cfg = self._config
        pin, word_bits, beat_bits = cfg.pin, 8 * cfg.pin, cfg.stream_width
        rb = read_bytes(cfg)
        # pin words to a read: more than one only where pin divides a wider beat,
        # so a power of two; only then is there a wide mode to build.
        per_read = words_per_read(cfg)
        f = self.fields
        wide = f.wide if per_read > 1 else None
        # A word's lanes: what `left` steps by, and the most a command keeps.
        word_lanes = Mux(wide, rb, pin) if wide is not None else pin
        m = Module()

        command_layout = _command_layout(rb)
        m.submodules.commands = commands = SyncFIFO(width=command_layout.size,
                                                    depth=self._outstanding)
        # One more than the commands: the buffered FIFO's write side counts
        # its inner memory only, so a response still always finds room.
        m.submodules.responses = responses = SyncFIFOBuffered(width=8 * rb,
                                                              depth=self._outstanding + 1)

        # -- issue: the counter nest, one word per cycle ----------------------------------
        image, row, col = Signal(16), Signal(16), Signal(16)
        ky, kx = Signal(8), Signal(8)
        word = Signal(16)
        count = Signal(32)  # x_zp pixels or zero words so far
        addr = Signal(ADDRESS_BITS)
        pixel_base, row_base, image_base, block_base, ky_offset = (
            Signal(ADDRESS_BITS, name=n) for n in
            ("pixel_base", "row_base", "image_base", "block_base", "ky_offset"))
        # Channels of the tensor pixel left from this word on (<= 0: none), and
        # from this row of the block on.
        left, ky_left = Signal(signed(34)), Signal(signed(34))
        command = Signal(command_layout)
        step = Signal()  # a word (or a pair) is issued this cycle
        # Two narrow words a cycle, a whole beat (two words to a read, one word to
        # a block position): two positions of a line (row, ky) from a beat's
        # start of which at most one is read. `phase`: the narrow words issued,
        # mod 2 (a pair keeps it).
        pairs = per_read == 2
        phase = Signal()
        pair = Signal()
        second_reads = Signal()  # the pair's read word is its second
        both = Signal()  # the pair's two words are both read, as one R-byte read
        read_addr = Signal(ADDRESS_BITS)
        packer_empty = Signal()  # no word waits in the packer for the rest of its beat
        word_last = word == f.words - 1
        lanes = Mux(left >= word_lanes, word_lanes,
                    Mux(left > 0, left[:rb.bit_length()], 0))
        m.d.comb += [
            commands.w_data.eq(command),
            commands.w_en.eq(step),
            command.lanes.eq(lanes),
            command.pair.eq(pair),
            command.high.eq(second_reads),
            command.both.eq(both),
            command.wide.eq(wide if wide is not None else 0),
            command.x_zp.eq(f.x_zp),
            read_addr.eq(addr),
        ]
        if wide is not None:
            # The nest counts R-byte words; the port counts pin-byte ones.
            m.d.comb += self.o_addr.payload.eq(Mux(wide, read_addr << exact_log2(per_read),
                                                   read_addr))
        else:
            m.d.comb += self.o_addr.payload.eq(read_addr)

        def at(base):
            """Every address register to a new tensor pixel block at ``base``."""
            m.d.sync += [image_base.eq(base), row_base.eq(base), pixel_base.eq(base),
                         block_base.eq(base), addr.eq(base), ky_offset.eq(0)]

        def start_image():
            """Go to the first non-empty part of an image (all images are alike)."""
            m.d.sync += [word.eq(0), count.eq(0), row.eq(0), col.eq(0), ky.eq(0), kx.eq(0),
                         left.eq(f.channels), ky_left.eq(f.channels)]
            with m.If((f.rows != 0) & (f.cols != 0)):
                m.next = "READ"
            with m.Elif(f.zp_pixels != 0):
                m.next = "ZP"
            with m.Elif(f.zero_words != 0):
                m.next = "ZERO"
            with m.Else():  # an empty section: nothing to send
                m.next = "DRAIN"

        def next_image():
            with m.If(image == f.images - 1):
                m.next = "DRAIN"
            with m.Else():
                m.d.sync += image.eq(image + 1)
                at(image_base + f.image_stride)
                start_image()

        # The parts of an image, each possibly empty, follow each other without a
        # bubble: the part after the next is chosen when the next one is empty.
        def after_reads():
            m.d.sync += [word.eq(0), count.eq(0), left.eq(f.channels)]
            with m.If(f.zp_pixels != 0):
                m.next = "ZP"
            with m.Else():
                after_zp()

        def after_zp():
            m.d.sync += count.eq(0)
            with m.If(f.zero_words != 0):
                m.next = "ZERO"
            with m.Else():
                next_image()

        def line_end():
            """The next line of the block, the next row, or the image's next part."""
            with m.If(ky != f.blocks - 1):
                offset = ky_offset + f.ky_stride
                rest = ky_left - f.ky_channels
                m.d.sync += [word.eq(0), kx.eq(0), col.eq(0), ky.eq(ky + 1),
                             ky_offset.eq(offset), pixel_base.eq(row_base),
                             block_base.eq(row_base + offset), addr.eq(row_base + offset),
                             ky_left.eq(rest), left.eq(rest)]
            with m.Elif(row != f.rows - 1):
                following = row_base + f.row_stride
                m.d.sync += [word.eq(0), kx.eq(0), col.eq(0), ky.eq(0), row.eq(row + 1),
                             row_base.eq(following), pixel_base.eq(following),
                             block_base.eq(following), addr.eq(following),
                             ky_offset.eq(0), ky_left.eq(f.channels),
                             left.eq(f.channels)]
            with m.Else():
                after_reads()

        with m.FSM(name="issue"):
            with m.State("IDLE"):
                with m.If(self.start):
                    m.d.sync += [image.eq(0), self.busy.eq(1), phase.eq(0)]
                    at(f.base)
                    start_image()

            with m.State("READ"):
                # A word wholly past the pixel's channels, or of a padding pixel
                # of the last row, is not read (a zero).
                last_row = row == f.rows - 1
                read = (left > 0) & ~(last_row & (col >= f.last_cols))
                reads = Signal()  # a read is issued with this command
                if pairs:
                    # The next position of the line, and whether it is read.
                    in_pixel = kx != f.blocks - 1
                    next_addr = Mux(in_pixel, block_base + f.block_stride,
                                    pixel_base + f.pixel_stride + ky_offset)
                    next_left = Signal(signed(34))
                    m.d.comb += next_left.eq(Mux(in_pixel, left - word_lanes, ky_left))
                    next_read = (next_left > 0) & ~(last_row & Mux(in_pixel, col >= f.last_cols,
                                                                  col + 1 >= f.last_cols))
                    next_lanes = Mux(next_left >= word_lanes, word_lanes,
                                     Mux(next_left > 0, next_left[:rb.bit_length()], 0))
                    line_last_word = (col == f.cols - 1) & ~in_pixel
                    # Two read words of one pixel side by side from an R boundary are
                    # one read (the first is whole: the second has lanes left).
                    one_read = in_pixel & (f.block_stride == 1) & ~addr[0]
                    m.d.comb += [
                        pair.eq(~wide & (f.words == 1) & (f.blocks > 1) & ~phase
                                & ~line_last_word & (~(read & next_read) | one_read)),
                        second_reads.eq(pair & ~read & next_read),
                        both.eq(pair & read & next_read),
                    ]
                    with m.If(second_reads):
                        m.d.comb += [read_addr.eq(next_addr), command.lanes.eq(next_lanes)]
                    with m.If(both):
                        m.d.comb += command.lanes.eq(word_lanes + next_lanes)
                m.d.comb += reads.eq(read | second_reads)
                # valid waits for room for the command, never for ready.
                m.d.comb += [self.o_addr.valid.eq(commands.w_rdy & reads),
                             step.eq(commands.w_rdy & (self.o_addr.ready | ~reads)),
                             command.kind.eq(Mux(reads, _READ, _ZERO))]
                with m.If(step & pair):
                    # Two positions on (one word each): within the pixel, into the
                    # next one, or, ending the line, to the next line.
                    with m.If(kx + 2 < f.blocks):
                        following = block_base + (f.block_stride << 1)
                        m.d.sync += [kx.eq(kx + 2), block_base.eq(following),
                                     addr.eq(following), left.eq(left - (word_lanes << 1))]
                    with m.Elif(col != f.cols - 1):
                        # the next pixel, at position 0 or (from the last) 1
                        to_second = kx + 2 - f.blocks == 1
                        pixel = pixel_base + f.pixel_stride
                        position = pixel + ky_offset + Mux(to_second, f.block_stride, 0)
                        m.d.sync += [kx.eq(Mux(to_second, 1, 0)), col.eq(col + 1),
                                     pixel_base.eq(pixel), block_base.eq(position),
                                     addr.eq(position),
                                     left.eq(ky_left - Mux(to_second, word_lanes, 0))]
                    with m.Else():
                        line_end()
                with m.Elif(step):
                    with m.If(~word_last):
                        m.d.sync += [word.eq(word + 1), addr.eq(addr + 1),
                                     left.eq(left - word_lanes)]
                    with m.Elif(kx != f.blocks - 1):
                        following = block_base + f.block_stride
                        m.d.sync += [word.eq(0), kx.eq(kx + 1), block_base.eq(following),
                                     addr.eq(following), left.eq(left - word_lanes)]
                    with m.Elif(col != f.cols - 1):
                        pixel = pixel_base + f.pixel_stride
                        m.d.sync += [word.eq(0), kx.eq(0), col.eq(col + 1), pixel_base.eq(pixel),
                                     block_base.eq(pixel + ky_offset),
                                     addr.eq(pixel + ky_offset), left.eq(ky_left)]
                    with m.Else():
                        line_end()

            with m.State("ZP"):
                m.d.comb += [step.eq(commands.w_rdy), command.kind.eq(_ZP)]
                with m.If(step):
                    with m.If(~word_last):
                        m.d.sync += [word.eq(word + 1), left.eq(left - word_lanes)]
                    with m.Elif(count != f.zp_pixels - 1):
                        m.d.sync += [word.eq(0), count.eq(count + 1), left.eq(f.channels)]
                    with m.Else():
                        after_zp()

            with m.State("ZERO"):
                m.d.comb += [step.eq(commands.w_rdy), command.kind.eq(_ZERO)]
                with m.If(step):
                    with m.If(count != f.zero_words - 1):
                        m.d.sync += count.eq(count + 1)
                    with m.Else():
                        next_image()

            with m.State("DRAIN"):
                # Every command is issued; done when the last beat has left, unless the
                # next section starts (its commands follow these in the FIFO, each with
                # its section's mode and x_zp: the output side reads no field).
                m.d.comb += self.issued.eq(1)
                with m.If(self.start):
                    m.d.sync += [image.eq(0), phase.eq(0)]
                    at(f.base)
                    start_image()
                with m.Elif(~commands.r_rdy & ~self.o_stream.valid & packer_empty):
                    m.d.comb += self.done.eq(1)
                    m.d.sync += self.busy.eq(0)
                    m.next = "IDLE"

        if pairs:
            with m.If(step & ~pair):
                m.d.sync += phase.eq(~phase)

        # -- responses: always room (see `outstanding`) ------------------------------------
        m.d.comb += [
            responses.w_data.eq(self.i_data.payload),
            responses.w_en.eq(self.i_data.valid),
            self.i_data.ready.eq(responses.w_rdy),
        ]

        # -- output: one word per cycle from the command at the head ----------------------
        head = Signal(command_layout)
        m.d.comb += head.eq(commands.r_data)
        head_ready = commands.r_rdy & ((head.kind != _READ) | responses.r_rdy)
        # Lanes past the pixel's `channels` are channels the run does not have
        # (the next channel group's, or the tensor's padding): zero. A narrow
        # word keeps at most pin lanes, which also drops the response's bytes
        # above it (the next words of its R-byte read, or anything).
        keep = Cat(*((k < head.lanes).replicate(8) for k in range(rb)))
        zp_word = Cat(*([head.x_zp] * rb))
        value = Mux(head.kind == _READ, responses.r_data,
                    Mux(head.kind == _ZP, zp_word, 0)) & keep
        take = Signal()  # the packer takes a word this cycle
        pop = head_ready & take
        m.d.comb += [commands.r_en.eq(pop), responses.r_en.eq(pop & (head.kind == _READ))]

        # -- the packer: words to beats ---------------------------------------------------
        o = self.o_stream
        leaving = o.valid & o.ready
        out_valid = Signal()
        m.d.comb += o.valid.eq(out_valid)
        with m.If(leaving):
            m.d.sync += out_valid.eq(0)
        if beat_bits >= word_bits:
            per_beat = beat_bits // word_bits
            beat = Signal(beat_bits)
            filled = Signal(range(per_beat))
            m.d.comb += [o.payload.eq(beat), take.eq(~out_valid | o.ready)]
            m.d.comb += packer_empty.eq(filled == 0)

            def narrow_word():
                # Words come in at the top: after `per_beat` of them the first is lowest.
                word_value = value[:word_bits]
                m.d.sync += beat.eq(Cat(beat[word_bits:], word_value) if per_beat > 1
                                    else word_value)
                with m.If(filled == per_beat - 1):
                    m.d.sync += [filled.eq(0), out_valid.eq(1)]
                with m.Else():
                    m.d.sync += filled.eq(filled + 1)

            with m.If(pop):
                if wide is not None:
                    # A wide word is a whole beat (R is the beat here), and a wide
                    # section starts on one: every section ends on a beat. So does
                    # a pair (issued at a beat's start): its word in its half.
                    with m.If(head.wide):
                        m.d.sync += [beat.eq(value), out_valid.eq(1)]
                    with m.Elif(head.pair):
                        word_value = value[:word_bits]
                        m.d.sync += [beat.eq(Mux(head.both, value,
                                                 Mux(head.high, word_value << word_bits,
                                                     word_value))),
                                     out_valid.eq(1)]
                    with m.Else():
                        narrow_word()
                else:
                    narrow_word()
        else:
            per_word = word_bits // beat_bits
            held = Signal(word_bits)
            sent = Signal(range(per_word))
            last_beat = sent == per_word - 1
            m.d.comb += [o.payload.eq(held[:beat_bits]),
                         take.eq(~out_valid | (o.ready & last_beat))]
            m.d.comb += packer_empty.eq(1)
            with m.If(leaving):
                m.d.sync += [held.eq(held[beat_bits:]), sent.eq(sent + 1)]
                with m.If(~last_beat):
                    m.d.sync += out_valid.eq(1)
            with m.If(pop):
                m.d.sync += [held.eq(value), sent.eq(0), out_valid.eq(1)]
        return m
