"""A host-side UART for Amaranth testbenches: drives one line, decodes the other.

Bit level, one call per clock: :meth:`SerialPort.tick` puts the next bit of
the queued bytes on the DUT's receive line and samples its transmit line in
the middle of each bit, as a real USB-UART would (start bit found on the
falling edge, stop bit checked).
"""

from collections import deque


class FramingError(AssertionError):
    """The DUT sent a frame whose stop bit was low."""


def frame_bits(byte):
    """The ten line levels of one 8N1 frame: start, 8 data bits LSB first, stop."""
    return [0] + [(byte >> i) & 1 for i in range(8)] + [1]


class SerialPort:
    """The host's end of a UART link to a DUT in the Amaranth simulator.

    Parameters
    ----------
    ctx : SimulatorContext
    rx, tx : Signal
        The DUT's receive line (driven here) and transmit line (sampled here;
        None for a DUT without one).
    clocks_per_bit : int
        Bit time of the DUT. The host may use another (``host_clocks_per_bit``)
        to test baud tolerance.
    models : sequence
        Other per-clock models of the testbench (a fake engine): each one's
        ``step(ctx, cycle)`` runs every clock, before the clock edge.
    """

    def __init__(self, ctx, rx, tx, clocks_per_bit, *, host_clocks_per_bit=None, models=()):
        self.ctx, self.rx, self.tx = ctx, rx, tx
        self.models = tuple(models)
        self.cpb = clocks_per_bit
        self.host_cpb = host_clocks_per_bit or clocks_per_bit
        self.cycle = 0
        self._levels = deque()          # line levels to drive, one per clock
        self.received = bytearray()
        self.received_at = []           # cycle of each received byte's stop-bit sample
        self.log = []                   # (cycle, byte) of every byte received, kept
        self._rx_state = None           # None: idle; else (start cycle, bits so far)
        self._prev = 1
        ctx.set(rx, 1)

    # -- sending ---------------------------------------------------------------

    def write(self, data, *, gap_clocks=0):
        """Queue bytes; ``gap_clocks`` of idle line after each byte."""
        for byte in bytes(data):
            for level in frame_bits(byte):
                self._levels.extend([level] * self.host_cpb)
            self._levels.extend([1] * gap_clocks)

    def pulse(self, level, clocks):
        """Queue ``clocks`` clocks of one line level (glitches, breaks, idle)."""
        self._levels.extend([level] * clocks)

    @property
    def sending(self):
        return bool(self._levels)

    # -- the clock ---------------------------------------------------------------

    async def tick(self):
        ctx = self.ctx
        ctx.set(self.rx, self._levels.popleft() if self._levels else 1)
        if self.tx is not None:
            self._sample(ctx.get(self.tx))
        for model in self.models:
            model.step(ctx, self.cycle)
        await ctx.tick()
        self.cycle += 1

    def _sample(self, level):
        cpb = self.cpb
        if self._rx_state is None:
            if self._prev and not level:
                self._rx_state = (self.cycle, [])
        else:
            start, bits = self._rx_state
            offset = self.cycle - start - cpb // 2
            if offset >= 0 and offset % cpb == 0:
                k = offset // cpb
                if k == 0:
                    if level:                      # not a start bit after all
                        self._rx_state = None
                elif k <= 8:
                    bits.append(level)
                else:
                    if not level:
                        raise FramingError(f"stop bit low at cycle {self.cycle}")
                    byte = sum(b << i for i, b in enumerate(bits))
                    self.received.append(byte)
                    self.received_at.append(self.cycle)
                    self.log.append((self.cycle, byte))
                    self._rx_state = None
        self._prev = level

    async def idle(self, clocks):
        for _ in range(clocks):
            await self.tick()

    async def flush_out(self):
        """Tick until everything queued has been sent."""
        while self._levels:
            await self.tick()

    async def read(self, n, *, timeout=None):
        """Tick until ``n`` bytes arrived; return and consume them.

        ``timeout``: clocks to wait after the queued bytes have been sent
        (default: ``n`` byte times and a margin).
        """
        limit = len(self._levels) + (timeout if timeout is not None else (n + 4) * 12 * self.cpb)
        for _ in range(limit):
            if len(self.received) >= n:
                break
            await self.tick()
        assert len(self.received) >= n, \
            f"timed out waiting for {n} bytes, got {bytes(self.received)!r}"
        out = bytes(self.received[:n])
        del self.received[:n]
        del self.received_at[:n]
        return out

    async def quiet(self, clocks):
        """Tick ``clocks`` clocks and return whatever arrived (consumed)."""
        await self.idle(clocks)
        out = bytes(self.received)
        self.received.clear()
        self.received_at.clear()
        return out
