"""HostBridge: the engine's AXI ports behind a UART (docs/host_link.md).

Boards without a CPU next to the FPGA (ECP5, iCE40) reach the engine through
their USB-UART. The bridge turns the byte protocol of docs/host_link.md into
one AXI4-Lite transaction per register command and into the engine's input
and output streams.

It is byte-serial on purpose: the iCE40 UP5K has to hold the engine and this
bridge in 5,280 logic cells, so command arguments are collected in one shift
register and frames leave through another, with byte counters instead of
wide multiplexers. Every decision that drives an output (``bready``,
``rready``, ``s_axis.tready``, the frame to send) is made from registers one
cycle ahead, so no combinational path runs through the bridge into the
engine.
"""

from amaranth.hdl import Module, Signal, Cat, Const, ResetInserter
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..bus.axi_lite import AXI4LiteSignature
from ..bus.axi_stream import AXI4StreamRegisterSlice, AXI4StreamSignature
from ...core.config import require_config
from ...core.regmap import ADDR_WIDTH
from .uart import UartRx, UartTx, check_clocks_per_bit

__all__ = [
    "PROTOCOL_VERSION", "DEFAULT_FIFO_DEPTH", "TIMEOUT_BIT_TIMES", "Opcode", "BeatFifo",
    "HostBridge",
]

#: Version byte of the ``'i'`` reply.
PROTOCOL_VERSION = 1
#: Input FIFO depth in beats unless given (the ``D`` of docs/host_link.md).
DEFAULT_FIFO_DEPTH = 16
#: A command is dropped when its next byte is this many bit times late.
TIMEOUT_BIT_TIMES = 256


class Opcode:
    """Frame opcodes (first byte of every frame), as in docs/host_link.md."""
    # Host to board.
    IDENTIFY = ord("I")
    WRITE = ord("W")
    READ = ord("R")
    STREAM = ord("S")
    FLUSH = ord("X")
    # Board to host.
    IDENTIFY_REPLY = ord("i")
    WRITE_REPLY = ord("w")
    READ_REPLY = ord("r")
    FLUSH_REPLY = ord("x")
    CREDIT = ord("c")
    OUTPUT = ord("d")


def _check_fifo_depth(fifo_depth):
    if isinstance(fifo_depth, bool) or not isinstance(fifo_depth, int):
        raise TypeError(f"fifo_depth must be an integer, not {fifo_depth!r}")
    if not 1 <= fifo_depth <= 0xFFFF:
        # The 'i' reply carries D as a u16.
        raise ValueError(f"fifo_depth must be between 1 and 65535 beats, not {fifo_depth}")


class BeatFifo(wiring.Component):
    """The bridge's input FIFO: bytes of ``'S'`` frames in, AXI4-Stream beats out.

    Each beat is written as ``B + 1`` bytes, the flags byte (bit 0: ``tlast``)
    then ``B`` data bytes, least significant first. They are stored in a
    byte-wide memory and put together again in a beat register on the way
    out. Byte-wide because that is one block RAM on iCE40 (a beat-wide
    memory takes one per 16 bits) and because yosys surrounds a block RAM
    with read-during-write logic as wide as the memory; the price is the
    beat register. A flush is a reset (``ResetInserter``).

    Parameters
    ----------
    beat_bytes : int
        ``B``.
    depth : int
        Beats the FIFO holds at least; the memory is ``depth * (B + 1)``
        bytes rounded up to a power of two (so pointers wrap for free).

    Members
    -------
    w_data : In(8)
    w_en : In(1)
        Write ``w_data`` this cycle; ignored when the memory is full.
    stream : Out(AXI4StreamSignature(8 * beat_bytes))
        Beats, from a register. A byte is read every other cycle, so a beat
        takes ``2 * (B + 1)`` cycles to assemble: plenty for a UART.
    """

    def __init__(self, beat_bytes, depth):
        self._nb = beat_bytes
        self._abits = max(1, (depth * (beat_bytes + 1) - 1).bit_length())
        super().__init__({
            "w_data": In(8),
            "w_en": In(1),
            "stream": Out(AXI4StreamSignature(8 * beat_bytes)),
        })

    @property
    def capacity(self):
        """Bytes the memory holds."""
        return 1 << self._abits

    def elaborate(self, platform):
        m = Module()
        nb, k = self._nb, self._abits
        m.submodules.mem = mem = Memory(shape=8, depth=1 << k, init=[])
        wp = mem.write_port()
        rp = mem.read_port(domain="sync")

        # One more pointer bit than address bits tells full from empty.
        produce = Signal(k + 1)
        consume = Signal(k + 1)
        empty = produce == consume
        full = (produce[:k] == consume[:k]) & (produce[k] != consume[k])
        write = self.w_en & ~full
        m.d.comb += [wp.addr.eq(produce[:k]), wp.data.eq(self.w_data), wp.en.eq(write)]
        with m.If(write):
            m.d.sync += produce.eq(produce + 1)

        beat = Signal(8 * nb, reset_less=True)   # qualified by beat_valid
        last = Signal()
        have = Signal(range(nb + 1))     # bytes of the next beat taken so far
        beat_valid = Signal()
        pending = Signal()               # a byte read last cycle is on rp.data
        # Reading only when no read is pending keeps this simple: the byte
        # that completes a beat can never be followed by one already read.
        issue = ~empty & ~beat_valid & ~pending
        m.d.comb += [rp.addr.eq(consume[:k]), rp.en.eq(issue)]
        m.d.sync += pending.eq(issue)
        with m.If(issue):
            m.d.sync += consume.eq(consume + 1)
        with m.If(pending):
            with m.If(have == 0):
                m.d.sync += last.eq(rp.data[0])
            with m.Else():
                m.d.sync += beat.eq(Cat(beat[8:], rp.data))
            with m.If(have == nb):
                m.d.sync += [have.eq(0), beat_valid.eq(1)]
            with m.Else():
                m.d.sync += have.eq(have + 1)
        with m.If(beat_valid & self.stream.tready):
            m.d.sync += beat_valid.eq(0)
        m.d.comb += [
            self.stream.tdata.eq(beat),
            self.stream.tlast.eq(last),
            self.stream.tvalid.eq(beat_valid),
        ]
        return m


class HostBridge(wiring.Component):
    """UART host link: command parser, AXI4-Lite master, stream FIFO, reply framer.

    Implements the frames of docs/host_link.md. Commands arrive on
    ``uart_rx``; ``'W'``/``'R'`` become one AXI4-Lite transaction each on
    ``m_axil``, ``'S'`` beats go through an input FIFO of ``fifo_depth`` beats
    to ``m_axis`` (through a register slice with ``deep_pipeline``; one
    ``'c'`` credit is sent per beat that leaves the FIFO), and beats the
    engine offers on ``s_axis`` leave as ``'d'`` frames. Frames to the host
    are whole and chosen in the order replies, credits, output beats.

    Parameters
    ----------
    config : EngineConfig
        The engine behind the bridge; its ``stream_width`` sets the beat size.
    clocks_per_bit : int
        UART bit time in clock cycles (at least 4).
    fifo_depth : int
        Input FIFO depth ``D`` in beats (1..65535), reported by ``'I'``. The
        FIFO is a byte-wide memory of ``D * (B + 1)`` entries (block RAM on
        iCE40, distributed or block RAM on ECP5), followed by a beat register.

    Members
    -------
    uart_rx : In(1)
        Serial line from the host, idle high.
    uart_tx : Out(1)
        Serial line to the host, idle high, driven from a flip-flop.
    m_axil : Out(AXI4LiteSignature(ADDR_WIDTH, 32))
        AXI4-Lite manager, to the engine's ``s_axil``.
    m_axis : Out(AXI4StreamSignature(config.stream_width))
        Input beats, to the engine's ``s_axis``.
    s_axis : In(AXI4StreamSignature(config.stream_width))
        Output beats, from the engine's ``m_axis``.

    Notes
    -----
    - The register address is the low ``ADDR_WIDTH`` bits of the command's
      u16 address; ``wstrb`` is all ones.
    - The AXI4-Lite address and write data are read from the argument shift
      register, which holds still until the next command's argument bytes;
      the engine's slave takes them in the first cycle.
    - ``bready``/``rready`` stay low until the reply frame is started: the
      response waits in the engine's slave rather than in a copy here.
    - ``'X'`` empties the FIFO in one cycle (``m_axis.tvalid`` may drop
      without a handshake, which the engine tolerates) and forgets credits
      not yet sent, so after ``'x'`` the host has no beat in flight. It
      also cancels an ``'i'`` reply not yet started (the host discards
      everything before the ``'x'``); output beats are not dropped.
    - Replies due at the same time go out as ``'w'``/``'r'``, ``'x'``,
      ``'i'``: the order of the commands whenever the host may have sent
      two without waiting (rule 5's ``'X'`` then ``'I'``).
    - Bytes of a stream beat that arrive with the FIFO full (the host broke
      the credit rule) are dropped, which misaligns the following beats
      until a flush.

    Raises
    ------
    TypeError
        If ``config`` is not an EngineConfig, or a count is not an integer.
    ValueError
        If ``clocks_per_bit`` or ``fifo_depth`` is out of range.
    """

    def __init__(self, config, *, clocks_per_bit, fifo_depth=DEFAULT_FIFO_DEPTH):
        require_config(config)
        check_clocks_per_bit(clocks_per_bit)
        _check_fifo_depth(fifo_depth)
        self._config = config
        self._cpb = clocks_per_bit
        self._depth = fifo_depth
        super().__init__({
            "uart_rx": In(1, init=1),
            "uart_tx": Out(1, init=1),
            "m_axil": Out(AXI4LiteSignature(ADDR_WIDTH, 32)),
            "m_axis": Out(AXI4StreamSignature(config.stream_width)),
            "s_axis": In(AXI4StreamSignature(config.stream_width)),
        })

    @property
    def config(self):
        return self._config

    @property
    def clocks_per_bit(self):
        return self._cpb

    @property
    def fifo_depth(self):
        """``D``: input beats the host may have sent and not yet had credited."""
        return self._depth

    @property
    def beat_bytes(self):
        """``B``: bytes per stream beat."""
        return self._config.stream_bytes

    def elaborate(self, platform):
        m = Module()
        cpb, depth, nb = self._cpb, self._depth, self.beat_bytes
        axil = self.m_axil

        m.submodules.rx = rx = UartRx(cpb)
        m.submodules.tx = tx = UartTx(cpb)
        m.d.comb += [rx.rx.eq(self.uart_rx), self.uart_tx.eq(tx.tx)]

        # ---- command parser ---------------------------------------------------
        # Argument bytes shift in at the top, so each command's fields end up
        # at fixed positions counted from the top (no multiplexer per opcode):
        #   'S': flags at [-8B-8], data in the top 8B bits
        #   'W': addr at [-48:-32], data in the top 32 bits
        #   'R': addr in the top 16 bits
        # Data registers without reset: counters and flags say when they count.
        args = Signal(8 * max(6, nb + 1), reset_less=True)
        top = len(args)
        remaining = Signal(range(max(6, nb + 1) + 1))   # argument bytes to come; 0: opcode next
        is_w, is_r, is_s = Signal(), Signal(), Signal()
        # One-cycle pulses, the cycle after a command's last byte (when
        # ``args`` holds it).
        do_i, do_w, do_r, do_x = (Signal(name=f"do_{c}") for c in "iwrx")
        m.d.sync += [do_i.eq(0), do_w.eq(0), do_r.eq(0), do_x.eq(0)]
        # A complete 'S' is copied into the byte FIFO one byte per clock,
        # through the same shift path (B+1 clocks, far less than a byte time).
        copy = Signal(range(nb + 2))
        with m.If(copy != 0):
            m.d.sync += copy.eq(copy - 1)

        timeout_clocks = TIMEOUT_BIT_TIMES * cpb
        timer = Signal(range(timeout_clocks))

        with m.If(rx.valid):
            m.d.sync += timer.eq(timeout_clocks - 1)
            with m.If(remaining == 0):
                m.d.sync += [
                    is_w.eq(rx.data == Opcode.WRITE),
                    is_r.eq(rx.data == Opcode.READ),
                    is_s.eq(rx.data == Opcode.STREAM),
                ]
                with m.Switch(rx.data):
                    with m.Case(Opcode.IDENTIFY):
                        m.d.sync += do_i.eq(1)
                    with m.Case(Opcode.FLUSH):
                        m.d.sync += do_x.eq(1)
                    with m.Case(Opcode.WRITE):
                        m.d.sync += remaining.eq(6)
                    with m.Case(Opcode.READ):
                        m.d.sync += remaining.eq(2)
                    with m.Case(Opcode.STREAM):
                        m.d.sync += remaining.eq(nb + 1)
                    # Anything else is not an opcode: dropped (resynchronisation).
            with m.Else():
                m.d.sync += remaining.eq(remaining - 1)
                with m.If(remaining == 1):
                    m.d.sync += [do_w.eq(is_w), do_r.eq(is_r)]
                    with m.If(is_s):
                        m.d.sync += copy.eq(nb + 1)
        with m.If((rx.valid & (remaining != 0)) | (copy != 0)):
            m.d.sync += args.eq(Cat(args[8:], rx.data))
        with m.If(~rx.valid & (remaining != 0)):
            # A command stalled mid-way (a lost byte, a host that died) would
            # swallow the next command's bytes; give up on it after a while.
            m.d.sync += timer.eq(timer - 1)
            with m.If(timer == 0):
                m.d.sync += remaining.eq(0)

        # ---- AXI4-Lite manager: one transaction per 'W' / 'R' ----------------
        awvalid, wvalid, arvalid = Signal(), Signal(), Signal()
        w_wait, r_wait = Signal(), Signal()     # response (and reply) outstanding
        bready, rready = Signal(), Signal()
        m.d.comb += [
            axil.awaddr.eq(args[top - 48:top - 48 + ADDR_WIDTH]),
            axil.awprot.eq(0),
            axil.awvalid.eq(awvalid),
            axil.wdata.eq(args[top - 32:]),
            axil.wstrb.eq(0xF),
            axil.wvalid.eq(wvalid),
            axil.bready.eq(bready),
            axil.araddr.eq(args[top - 16:top - 16 + ADDR_WIDTH]),
            axil.arprot.eq(0),
            axil.arvalid.eq(arvalid),
            axil.rready.eq(rready),
        ]
        # One access at a time (rule 4); a register command that breaks the
        # rule is ignored rather than corrupting the one in progress.
        reg_idle = ~(w_wait | r_wait)
        with m.If(do_w & reg_idle):
            m.d.sync += [awvalid.eq(1), wvalid.eq(1), w_wait.eq(1)]
        with m.If(do_r & reg_idle):
            m.d.sync += [arvalid.eq(1), r_wait.eq(1)]
        with m.If(awvalid & axil.awready):
            m.d.sync += awvalid.eq(0)
        with m.If(wvalid & axil.wready):
            m.d.sync += wvalid.eq(0)
        with m.If(arvalid & axil.arready):
            m.d.sync += arvalid.eq(0)
        # A response is there once the request handshakes are done; it holds
        # until the reply frame is granted (bready/rready).
        w_reply = w_wait & ~awvalid & ~wvalid & axil.bvalid
        r_reply = r_wait & ~arvalid & axil.rvalid

        # ---- input FIFO and credits --------------------------------------------
        flush = do_x
        fifo = BeatFifo(nb, depth)
        m.submodules.fifo = ResetInserter(flush)(fifo)
        m.d.comb += [
            # The lowest byte of a complete 'S' (flags first), shifted along by the copy.
            fifo.w_data.eq(args[top - 8 * (nb + 1):top - 8 * nb]),
            fifo.w_en.eq(copy != 0),     # dropped if full: the host broke the credit rule
        ]
        # With deep_pipeline, a register slice between the FIFO and the
        # engine: the engine's tready (its loader and line buffer's write
        # decision) reached the FIFO's beat register and the credit logic
        # in one cycle, across the die -- the critical path of the routed
        # ULX3S-85F build. A flush empties it with the FIFO. (The compact
        # arrangement's slow clock does not need it, and the iCEBreaker
        # has no logic cells to spare for it.)
        if self._config.deep_pipeline:
            out_slice = AXI4StreamRegisterSlice(8 * nb)
            m.submodules.out_slice = ResetInserter(flush)(out_slice)
            wiring.connect(m, fifo.stream, out_slice.s_axis)
            wiring.connect(m, out_slice.m_axis, wiring.flipped(self.m_axis))
        else:
            wiring.connect(m, fifo.stream, wiring.flipped(self.m_axis))
        # A counter, not a flag: several beats may leave the FIFO while the
        # transmitter is busy with one long frame. At most D are owed. A
        # credit is a beat's room in the FIFO, returned as the beat leaves
        # it (for the slice, which holds two more, or the engine).
        credits = Signal(range(depth + 1))
        beat_in = fifo.stream.tvalid & fifo.stream.tready

        # ---- reply framer -----------------------------------------------------
        i_pend, x_pend = Signal(), Signal()

        # Grants are registered one-hot choices of the next frame, made one
        # cycle before the frame is loaded; every condition a grant is made
        # on stays true until the frame is loaded (pending flags are ours,
        # bvalid/rvalid/tvalid wait for their ready, credits only grow), so
        # the handshakes are driven straight from the grant registers.
        g_i, g_x, g_w, g_r, g_c, g_d = (Signal(name=f"grant_{c}") for c in "ixwrcd")
        grants = Cat(g_i, g_x, g_w, g_r, g_c, g_d)

        frame = Signal(8 * (nb + 2), reset_less=True)   # bytes to send, next one lowest
        left = Signal(range(nb + 3))      # bytes of the frame not yet given to the UART
        m.d.comb += [tx.data.eq(frame[:8]), tx.valid.eq(left != 0)]

        m.d.sync += grants.eq(0)
        with m.If((left == 0) & (grants == 0)):
            # Priority: replies, then credits, then output beats (rule 3).
            # Among replies, command order where two can be due at once: a
            # register reply before the 'x' of a flush sent after it, the 'x'
            # before the 'i' of an 'I' sent after it (resynchronisation sends
            # both back to back; an 'i' due before the flush is cancelled).
            with m.If(w_reply):
                m.d.sync += g_w.eq(1)
            with m.Elif(r_reply):
                m.d.sync += g_r.eq(1)
            with m.Elif(x_pend):
                m.d.sync += g_x.eq(1)
            with m.Elif(i_pend):
                m.d.sync += g_i.eq(1)
            with m.Elif((credits != 0) & ~flush):
                # Not in a flush cycle: the flush zeroes the count the
                # credit would be taken from.
                m.d.sync += g_c.eq(1)
            with m.Elif(self.s_axis.tvalid):
                m.d.sync += g_d.eq(1)

        m.d.comb += [
            bready.eq(g_w),
            rready.eq(g_r),
            self.s_axis.tready.eq(g_d),
        ]
        with m.If(g_i):
            m.d.sync += i_pend.eq(0)
        with m.If(g_x):
            m.d.sync += x_pend.eq(0)
        # After the clears, so that a command arriving as its previous reply
        # starts is answered again.
        with m.If(do_x):
            m.d.sync += [x_pend.eq(1), i_pend.eq(0)]
        with m.If(do_i):
            m.d.sync += i_pend.eq(1)
        with m.If(g_w):
            m.d.sync += w_wait.eq(0)
        with m.If(g_r):
            m.d.sync += r_wait.eq(0)

        with m.If(flush):
            # 'x' promises that no beat is in flight any more: credits owed
            # for beats taken before the flush are forgotten with the beats.
            m.d.sync += credits.eq(0)
        with m.Elif(beat_in & ~g_c):
            m.d.sync += credits.eq(credits + 1)
        with m.Elif(g_c & ~beat_in):
            m.d.sync += credits.eq(credits - 1)

        def gate(grant, value):
            value = Cat(value)
            return value & grant.replicate(len(value))

        s = self.s_axis
        load = (
            gate(g_i, Cat(Const(Opcode.IDENTIFY_REPLY, 8), Const(PROTOCOL_VERSION, 8),
                          Const(nb, 8), Const(depth, 16)))
            | gate(g_x, Const(Opcode.FLUSH_REPLY, 8))
            | gate(g_w, Cat(Const(Opcode.WRITE_REPLY, 8), axil.bresp))
            | gate(g_r, Cat(Const(Opcode.READ_REPLY, 8), axil.rdata, axil.rresp))
            | gate(g_c, Const(Opcode.CREDIT, 8))
            | gate(g_d, Cat(Const(Opcode.OUTPUT, 8), s.tlast, Const(0, 7), s.tdata))
        )
        length = (
            gate(g_i, Const(5, len(left))) | gate(g_x, Const(1, len(left)))
            | gate(g_w, Const(2, len(left))) | gate(g_r, Const(6, len(left)))
            | gate(g_c, Const(1, len(left))) | gate(g_d, Const(nb + 2, len(left)))
        )
        with m.If(grants != 0):
            m.d.sync += [frame.eq(load), left.eq(length)]
        with m.Elif(tx.valid & tx.ready):
            m.d.sync += [frame.eq(frame[8:]), left.eq(left - 1)]
        return m
