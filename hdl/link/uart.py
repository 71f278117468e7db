"""8N1 UART receiver and transmitter, one fixed bit time in clock cycles.

The host link of the open boards (docs/host_link.md) runs over the board's
USB-UART. Both ends here are byte streams: :class:`UartRx` produces one
``valid`` pulse per received byte and cannot be stalled (a UART line cannot be
paused), :class:`UartTx` takes bytes with a ``valid``/``ready`` handshake.

The bit time is an integer number of clocks, ``clocks_per_bit``, fixed at
generation time (``baud = f_clk / clocks_per_bit``); no fractional divider,
since the build picks the nearest integer divisor and refuses one too far off.
"""

from amaranth.hdl import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.cdc import FFSynchronizer
from amaranth.lib.wiring import In, Out

__all__ = ["MIN_CLOCKS_PER_BIT", "check_clocks_per_bit", "UartRx", "UartTx"]

#: Fewest clocks per bit: the receiver needs a half-bit wait of at least two
#: clocks to tell a start bit from a glitch, and its timer reloads take a cycle.
MIN_CLOCKS_PER_BIT = 4


def check_clocks_per_bit(clocks_per_bit):
    """Raise unless ``clocks_per_bit`` is an integer of at least :data:`MIN_CLOCKS_PER_BIT`.

    Raises
    ------
    TypeError
        If it is not an integer (``bool`` included).
    ValueError
        If it is smaller than :data:`MIN_CLOCKS_PER_BIT`.
    """
    if isinstance(clocks_per_bit, bool) or not isinstance(clocks_per_bit, int):
        raise TypeError(f"clocks_per_bit must be an integer, not {clocks_per_bit!r}")
    if clocks_per_bit < MIN_CLOCKS_PER_BIT:
        raise ValueError(f"clocks_per_bit must be at least {MIN_CLOCKS_PER_BIT} "
                         f"(baud = clock / clocks_per_bit), not {clocks_per_bit}")


class UartRx(wiring.Component):
    """UART receiver, 8N1, least significant bit first.

    The line goes through a two-flip-flop synchronizer (it is asynchronous to
    the clock). A falling edge starts a frame only if the line stays low for
    half a bit time (shorter pulses are glitches and are ignored); from there
    each bit is sampled once, in its middle. A byte is delivered when its
    stop bit samples high; a low stop bit (framing error, or a break) drops
    the byte and the receiver waits for the line to go high again before it
    looks for the next start bit.

    Parameters
    ----------
    clocks_per_bit : int
        Bit time in clock cycles, at least :data:`MIN_CLOCKS_PER_BIT`.

    Members
    -------
    rx : In(1)
        The serial line, idle high.
    data : Out(8)
        The received byte, in the cycle ``valid`` is high (it changes while
        the next byte comes in).
    valid : Out(1)
        One-cycle pulse per received byte, in the middle of its stop bit.
        There is no ``ready``: the sender cannot be paused, so the consumer
        must take every byte.

    Raises
    ------
    TypeError, ValueError
        If ``clocks_per_bit`` is not an integer of at least 4.
    """

    def __init__(self, clocks_per_bit):
        check_clocks_per_bit(clocks_per_bit)
        self._cpb = clocks_per_bit
        super().__init__({
            "rx": In(1, init=1),
            "data": Out(8),
            "valid": Out(1),
        })

    @property
    def clocks_per_bit(self):
        return self._cpb

    def elaborate(self, platform):
        m = Module()
        cpb = self._cpb

        # Idle high, so a reset or power-up does not look like a start bit.
        line = Signal(init=1)
        m.submodules.sync = FFSynchronizer(self.rx, line, init=1)

        # One down-counter times everything: half a bit to the middle of the
        # start bit, then whole bits from middle to middle.
        timer = Signal(range(cpb))
        bits = Signal(range(9))          # data bits still to sample
        shreg = Signal(8, reset_less=True)   # only read when valid: no reset needed
        valid = Signal()
        m.d.comb += [self.data.eq(shreg), self.valid.eq(valid)]
        m.d.sync += valid.eq(0)

        with m.FSM(name="rx"):
            with m.State("IDLE"):
                with m.If(~line):
                    # The first low sample is 0..1 clocks after the edge; the
                    # middle of the start bit is cpb/2 clocks from here.
                    m.d.sync += timer.eq(cpb // 2 - 1)
                    m.next = "START"
            with m.State("START"):
                with m.If(line):
                    m.next = "IDLE"             # high again before mid-bit: a glitch
                with m.Elif(timer == 0):
                    m.d.sync += [timer.eq(cpb - 1), bits.eq(8)]
                    m.next = "DATA"
                with m.Else():
                    m.d.sync += timer.eq(timer - 1)
            with m.State("DATA"):
                m.d.sync += timer.eq(timer - 1)
                with m.If(timer == 0):
                    m.d.sync += timer.eq(cpb - 1)
                    with m.If(bits == 0):
                        # Middle of the stop bit: deliver now, so the next
                        # start edge (half a bit away at the earliest) is seen.
                        with m.If(line):
                            m.d.sync += valid.eq(1)
                            m.next = "IDLE"
                        with m.Else():
                            m.next = "BREAK"
                    with m.Else():
                        m.d.sync += [shreg.eq(shreg[1:] | (line << 7)), bits.eq(bits - 1)]
            with m.State("BREAK"):
                with m.If(line):
                    m.next = "IDLE"
        return m


class UartTx(wiring.Component):
    """UART transmitter, 8N1, least significant bit first, idle high.

    A byte is taken when ``valid`` and ``ready`` are both high. ``ready`` is
    also high in the last clock of a stop bit, so bytes offered back to back
    leave with no idle time between frames (exactly ``10 * clocks_per_bit``
    clocks per byte).

    Parameters
    ----------
    clocks_per_bit : int
        Bit time in clock cycles, at least :data:`MIN_CLOCKS_PER_BIT`.

    Members
    -------
    data : In(8)
    valid : In(1)
    ready : Out(1)
        Registered.
    tx : Out(1)
        The serial line, driven from a flip-flop (no glitches on the pin).

    Raises
    ------
    TypeError, ValueError
        If ``clocks_per_bit`` is not an integer of at least 4.
    """

    def __init__(self, clocks_per_bit):
        check_clocks_per_bit(clocks_per_bit)
        self._cpb = clocks_per_bit
        super().__init__({
            "data": In(8),
            "valid": In(1),
            "ready": Out(1, init=1),
            "tx": Out(1, init=1),
        })

    @property
    def clocks_per_bit(self):
        return self._cpb

    def elaborate(self, platform):
        m = Module()
        cpb = self._cpb

        ready = Signal(init=1)
        tx = Signal(init=1)
        timer = Signal(range(cpb))
        bits = Signal(range(10))         # bits still to put on the line after this one
        shreg = Signal(9, reset_less=True)   # 8 data bits, then the stop bit
        m.d.comb += [self.ready.eq(ready), self.tx.eq(tx)]

        with m.If(ready):
            # Idle, or the last clock of a stop bit.
            with m.If(self.valid):
                m.d.sync += [
                    tx.eq(0),                               # start bit
                    shreg.eq(self.data | (1 << 8)),
                    bits.eq(9),
                    timer.eq(cpb - 1),
                    ready.eq(0),
                ]
            with m.Else():
                m.d.sync += tx.eq(1)
        with m.Else():
            m.d.sync += timer.eq(timer - 1)
            with m.If(timer == 0):
                m.d.sync += [
                    timer.eq(cpb - 1),
                    tx.eq(shreg[0]),
                    shreg.eq(shreg[1:]),
                    bits.eq(bits - 1),
                ]
            # Ready one clock early, in the stop bit's last clock, so the next
            # start bit follows without a gap.
            with m.If((bits == 0) & (timer == 1)):
                m.d.sync += ready.eq(1)
        return m
