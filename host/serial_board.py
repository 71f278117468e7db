"""The ``serial`` backend's board: an open FPGA board behind its USB-UART.

ECP5 and iCE40 boards have no CPU; their bitstream holds the engine behind the
UART bridge of docs/host_link.md. :class:`SerialBoard` speaks that protocol
over any pyserial-like port and offers the narrow board interface of
:mod:`fpgacnn.host.engine_driver`, so the driver, the compiler and
``Accelerator`` run unchanged:

- ``mmio_write`` / ``mmio_read`` send one ``'W'`` / ``'R'`` command and wait
  for its reply (one register access at a time, rule 4);
- ``dma_send`` / ``dma_recv`` register the transfer; ``dma_wait`` pumps it:
  stream beats go out while fewer than ``D`` are uncredited (rule 1), credits
  and output beats are parsed as they come;
- ``dma_abort`` resynchronises the link (rule 5).

A port is anything with ``write(bytes)``, ``read(n)`` honouring
``port.timeout``, ``in_waiting``, ``reset_input_buffer()``, ``flush()`` and
``close()``: ``serial.Serial`` (:func:`open_serial`) on a real board, or
:class:`fpgacnn.sim.uart_board.SimulatedSerialPort`, the bridge gateware in
Verilator. Timeouts are in *board time*: the port's ``monotonic()`` where it
has one (the simulated port counts simulated cycles), else the wall clock.
"""

import struct
import time

import numpy as np

from ..boards.board import DEFAULT_UART_BAUD
from ..core.errors import BackendError

__all__ = ["SerialBoard", "open_serial", "PROTOCOL_VERSION", "DEFAULT_BAUD"]

#: The protocol version this host speaks (the ``'i'`` reply's first byte).
PROTOCOL_VERSION = 1

#: The boards' default line rate (board files: ``uart_baud``).
DEFAULT_BAUD = DEFAULT_UART_BAUD

_I, _W, _R, _S, _X = b"I", b"W", b"R", b"S", b"X"
_REPLY_I, _REPLY_W, _REPLY_R, _REPLY_X = ord("i"), ord("w"), ord("r"), ord("x")
_CREDIT, _OUTPUT = ord("c"), ord("d")

#: Whole frame lengths (opcode included) of the board's replies; ``'d'`` is B + 2.
_REPLY_LEN = {_REPLY_I: 5, _REPLY_W: 2, _REPLY_R: 6, _REPLY_X: 1}

_RESP = {0: "OKAY", 1: "EXOKAY", 2: "SLVERR", 3: "DECERR"}

#: Longest a single blocking read waits. pyserial reconfigures the port on
#: every change of ``timeout``, so the value is kept constant except at the
#: very end of a wait.
_READ_SLICE = 0.05


def _hex(data, limit=24):
    text = " ".join(f"{b:02x}" for b in data[:limit])
    return text + (" ..." if len(data) > limit else "")


def _received(count, data):
    """``received 3 bytes: 63 64 ff`` for messages (``data``: the last of ``count`` bytes)."""
    if not count:
        return "received nothing"
    shown = _hex(data) if count <= len(data) else "... " + _hex(data[-16:])
    return f"received {count} byte{'s' if count != 1 else ''}: {shown}"


class SerialBoard:
    """An engine behind the UART bridge, through a serial port.

    Parameters
    ----------
    port : object
        A pyserial-like port (module docstring), already open at the
        bitstream's baud rate. It must have ``baudrate`` (the link's timing
        is computed from it).
    clock_hz : float
        The engine's clock (the driver's polling budget; reports).
    timeout : float
        Seconds (board time) to wait for a register reply or a flush.
    latency : float, optional
        Seconds the host's USB link may hold bytes back before passing them
        on (the FTDI latency timer: 16 ms by default, 1 ms in low-latency
        mode). Added to quiet periods and to :meth:`link_seconds`. Default:
        0 for a port with its own board clock (``monotonic()``, a simulated
        port), else 20 ms.
    owns_port : bool
        Close the port in :meth:`close`.

    Attributes
    ----------
    beat_bytes : int
        ``B``: the engine's stream beat in bytes, from the board.
    fifo_depth : int
        ``D``: beats the bridge's input FIFO holds, from the board.
    version : int
        The bridge's protocol version.
    stray_credits, dropped_beats : int
        Credits nobody was owed and output beats nobody was receiving
        (both happen after an aborted transfer; they are ignored).

    Raises
    ------
    BackendError
        If no bridge answers, or it speaks another protocol version.
    """

    def __init__(self, port, *, clock_hz=100e6, timeout=0.5, latency=None, owns_port=True):
        self.port = port
        self.clock_hz = float(clock_hz)
        self.timeout = float(timeout)
        board_clock = getattr(port, "monotonic", None)
        self._now = board_clock or time.monotonic
        if latency is None:  # a port with its own board clock is simulated: no USB in between
            latency = 0.0 if board_clock else 0.02
        self.latency = float(latency)
        self._owns = owns_port
        self.name = str(getattr(port, "port", None) or getattr(port, "name", None) or repr(port))
        baud = getattr(port, "baudrate", None)
        if not baud:
            raise BackendError(f"serial port {self.name}: no baudrate (the link's timing needs it)")
        self.baud = float(baud)
        self._port_timeout = object()  # the value last given to port.timeout
        self._rx = bytearray()         # received, not yet parsed
        self._recent = bytearray()     # the last bytes received since the last command...
        self._recent_count = 0         # ...and how many there were, for messages
        self._pending = None           # the reply opcode the last command waits for
        self._reply = None             # its whole frame, once it has come
        self._stale = False            # the link must be resynchronised before the next command
        self.beat_bytes = None
        self.fifo_depth = None
        self.stray_credits = 0
        self.dropped_beats = 0
        self._clear_transfers()
        self._identify()

    @property
    def mmio_read_seconds(self):
        """Time one register read takes on this link (3 bytes out, 6 back, plus latency).

        :class:`~fpgacnn.host.engine_driver.EngineDriver` bounds its polling by
        time with it; on the AXI boards a read takes a few clocks.
        """
        return 9 * 10 / self.baud + self.latency

    # -- lifetime -----------------------------------------------------------------

    def close(self):
        """Close the port (when this board opened it or was given it to own)."""
        port, self.port = getattr(self, "port", None), None
        if port is not None and self._owns and hasattr(port, "close"):
            port.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- the line ---------------------------------------------------------------

    @property
    def _quiet_seconds(self):
        # Rule 5: the bridge drops a command whose bytes stop for 256 bit
        # times; twice that, plus what the USB link may still be holding.
        return 2 * 256 / self.baud + self.latency

    def _port(self):
        if self.port is None:
            raise BackendError("the serial board is closed")
        return self.port

    def _write(self, data):
        self._port().write(data)

    def _read(self, n, timeout):
        port = self._port()
        timeout = max(0.0, min(timeout, _READ_SLICE))
        if timeout != self._port_timeout:
            port.timeout = timeout
            self._port_timeout = timeout
        data = port.read(n)
        if data:
            self._recent_count += len(data)
            self._recent += data[-64:]
            del self._recent[:-64]
        return data

    def _forget_recent(self):
        self._recent.clear()
        self._recent_count = 0

    def _what_came(self):
        return _received(self._recent_count, bytes(self._recent))

    def _frame_len(self, op):
        if op == _CREDIT:
            return 1
        if op == _OUTPUT:
            return None if self.beat_bytes is None else self.beat_bytes + 2
        return _REPLY_LEN.get(op)

    def _fill(self, deadline):
        """Read what completes the frame being received (at least a byte) and
        whatever else has arrived; False when nothing came before ``deadline``."""
        need = 1
        if self._rx:
            length = self._frame_len(self._rx[0]) or 1
            need = max(1, length - len(self._rx))
        n = max(need, self._port().in_waiting)
        data = self._read(n, deadline - self._now())
        self._rx += data
        return bool(data)

    def _parse(self, *, tolerant=False):
        """Consume whole frames from the receive buffer.

        ``tolerant`` (while resynchronising): bytes that cannot start a frame
        and replies nobody waits for are dropped. Otherwise they mean the
        link has lost its framing: the link is marked for resynchronisation
        and BackendError raised.
        """
        rx, i, n = self._rx, 0, len(self._rx)
        try:
            while i < n:
                op = rx[i]
                if op == _CREDIT:
                    if self._tx_sent > self._tx_credited:
                        self._tx_credited += 1
                    else:  # one earned before a flush; rule 3 may put it after the 'x'
                        self.stray_credits += 1
                    i += 1
                    continue
                length = self._frame_len(op)
                if length is None:
                    if tolerant:
                        i += 1
                        continue
                    self._stale = True
                    what = ("an output beat before the board said its beat size" if op == _OUTPUT
                            else f"byte 0x{op:02x}, which starts no frame")
                    raise BackendError(f"serial board {self.name}: the board sent {what} "
                                       f"({self._what_came()}); the link has lost its "
                                       f"framing and is resynchronised before the next command")
                if i + length > n:
                    break
                if op == _OUTPUT:
                    self._take_output(rx, i)
                elif op == self._pending:
                    self._reply = bytes(rx[i:i + length])
                    self._pending = None
                elif not tolerant:
                    self._stale = True
                    expected = f"reply {chr(self._pending)!r}" if self._pending else "no reply"
                    raise BackendError(f"serial board {self.name}: expected {expected}, the board "
                                       f"sent {chr(op)!r} {_hex(rx[i + 1:i + length])} "
                                       f"({self._what_came()})")
                i += length
        finally:
            del rx[:i]

    def _take_output(self, rx, i):
        b = self.beat_bytes
        if self._out is None or self._out_done:
            self.dropped_beats += 1
            return
        k = min(b, len(self._out) - self._out_pos)
        self._out_view[self._out_pos:self._out_pos + k] = rx[i + 2:i + 2 + k]
        self._out_pos += k
        if rx[i + 1] & 1 or self._out_pos >= len(self._out):
            self._out_done = True

    # -- commands -----------------------------------------------------------------

    def _command(self, data, reply, what):
        """Send one command and return its reply frame (rule 4: one at a time)."""
        if self._stale:
            self._resync()
        self._forget_recent()
        self._pending, self._reply = reply, None
        self._write(data)
        deadline = self._now() + self.timeout
        while self._reply is None:
            self._parse()
            if self._reply is not None:
                break
            if not self._fill(deadline) and self._now() >= deadline:
                self._stale = True
                self._pending = None
                raise BackendError(f"{what}: no reply {chr(reply)!r} from the board on {self.name} "
                                   f"within {self.timeout:g} s ({self._what_came()})")
        frame, self._reply = self._reply, None
        return frame

    def _identify(self):
        """Rule 5 then ``'I'``: whatever state the bridge is in, reach a frame
        boundary and learn B and D."""
        port = self._port()
        deadline = self._now() + self._quiet_seconds
        port.reset_input_buffer()
        while self._now() < deadline:  # let a half-received command time out
            self._read(max(1, port.in_waiting), deadline - self._now())
        port.reset_input_buffer()
        self._forget_recent()
        self._write(_X + _I)
        deadline = self._now() + self.timeout
        # Until the 'x' the bytes may be the tail of anything (the board's
        # state is unknown): scan for it, then parse frames.
        while True:
            at = self._rx.find(_REPLY_X)
            if at >= 0:
                del self._rx[:at + 1]
                break
            self._rx.clear()
            if not self._fill(deadline) and self._now() >= deadline:
                raise BackendError(
                    f"no answer from a fpgacnn UART bridge on {self.name} at {self.baud:,.0f} baud: "
                    f"sent flush 'X' and identify 'I', {self._what_came()} within "
                    f"{self.timeout:g} s. Is the bitstream loaded, the device the board's UART and "
                    f"the baud rate the bitstream's?")
        self._pending = _REPLY_I
        while self._reply is None:
            self._parse()
            if self._reply is None and not self._fill(deadline) and self._now() >= deadline:
                raise BackendError(f"the board on {self.name} answered the flush but not identify "
                                   f"'I' within {self.timeout:g} s ({self._what_came()})")
        frame, self._reply, self._pending = self._reply, None, None
        self.version, b, self.fifo_depth = frame[1], frame[2], struct.unpack_from("<H", frame, 3)[0]
        if self.version != PROTOCOL_VERSION:
            raise BackendError(f"the UART bridge on {self.name} speaks protocol version "
                               f"{self.version}; this host speaks version {PROTOCOL_VERSION}")
        if b not in (4, 8, 16) or self.fifo_depth < 1:
            raise BackendError(f"the UART bridge on {self.name} gave an implausible identify "
                               f"reply: beat {b} bytes, FIFO depth {self.fifo_depth} beats")
        self.beat_bytes = b
        # Refill the FIFO in batches once a quarter of it is free: fewer,
        # larger writes, and still never more than D beats uncredited.
        self._refill_batch = max(1, self.fifo_depth // 4)

    def _resync(self):
        """Rule 5: stop sending, wait for the bridge to drop a half-received
        command, flush its input FIFO and read up to the ``'x'``."""
        self._clear_transfers()
        port = self._port()
        if hasattr(port, "flush"):
            port.flush()  # what was written must be on the line before the quiet period
        self._pending = None
        deadline = self._now() + self._quiet_seconds
        while True:
            self._parse(tolerant=True)
            if self._now() >= deadline:
                break
            self._fill(deadline)
        self._forget_recent()
        self._pending, self._reply = _REPLY_X, None
        self._write(_X)
        deadline = self._now() + self.timeout
        while self._reply is None:
            self._parse(tolerant=True)
            if self._reply is None and not self._fill(deadline) and self._now() >= deadline:
                self._pending = None
                self._stale = True
                raise BackendError(f"serial board {self.name}: no flush reply 'x' within "
                                   f"{self.timeout:g} s ({self._what_came()})")
        self._reply = None
        self._stale = False
        self._clear_transfers()

    # -- the narrow board interface ---------------------------------------------

    def mmio_write(self, addr, value):
        """Write a 32-bit engine register (``'W'``, reply ``'w'``).

        Raises
        ------
        BackendError
            On no reply within ``timeout``, a reply of the wrong kind, or an
            error response; the message names the address and what arrived.
        """
        what = f"MMIO write to 0x{addr:04x}"
        self._check_addr(addr, what)
        frame = self._command(_W + struct.pack("<HI", addr, int(value) & 0xFFFF_FFFF), _REPLY_W, what)
        if frame[1]:
            raise BackendError(f"{what} answered with error response {frame[1]} "
                               f"({_RESP.get(frame[1], '?')})")

    def mmio_read(self, addr):
        """Read a 32-bit engine register (``'R'``, reply ``'r'``); see :meth:`mmio_write`."""
        what = f"MMIO read from 0x{addr:04x}"
        self._check_addr(addr, what)
        frame = self._command(_R + struct.pack("<H", addr), _REPLY_R, what)
        data, resp = struct.unpack_from("<IB", frame, 1)
        if resp:
            raise BackendError(f"{what} answered with error response {resp} ({_RESP.get(resp, '?')})")
        return data

    @staticmethod
    def _check_addr(addr, what):
        if not 0 <= addr < 1 << 16:
            raise BackendError(f"{what}: the bridge carries 16-bit register addresses")

    def allocate(self, nbytes):
        """A transfer buffer: a ``uint8`` array (the link copies; nothing is pinned)."""
        return np.zeros(int(nbytes), dtype=np.uint8)

    def dma_send(self, buf):
        """Register the input stream: ``buf`` goes out as ``'S'`` beats, the last with tlast.

        Beats start going out here, as many as the FIFO holds; :meth:`dma_wait`
        sends the rest as credits come back.

        Raises
        ------
        BackendError
            If a send is still running, or ``len(buf)`` is not a whole number of beats.
        """
        b = self.beat_bytes
        data = np.ascontiguousarray(buf, dtype=np.uint8).reshape(-1)
        if self._tx_frames is not None and self._tx_credited < self._tx_beats:
            raise BackendError("DMA send started while the previous send is still running")
        if len(data) == 0 or len(data) % b:
            raise BackendError(f"DMA send of {len(data)} bytes: the UART bridge takes whole "
                               f"{b}-byte beats")
        beats = len(data) // b
        frames = np.empty((beats, b + 2), np.uint8)
        frames[:, 0] = _S[0]
        frames[:, 1] = 0
        frames[-1, 1] = 1  # tlast
        frames[:, 2:] = data.reshape(beats, b)
        self._tx_frames, self._tx_beats = frames.tobytes(), beats
        self._tx_sent = self._tx_credited = 0
        self._refill()

    def dma_recv(self, buf):
        """Register the output buffer: ``'d'`` beats fill it until tlast or full."""
        if not (isinstance(buf, np.ndarray) and buf.dtype == np.uint8 and buf.flags.c_contiguous
                and buf.ndim == 1):
            raise BackendError("DMA receive buffer must be a contiguous uint8 array from allocate()")
        if self._out is not None and not self._out_done:
            raise BackendError("DMA receive started while the previous one is still running")
        if len(buf) == 0:
            raise BackendError("DMA receive into an empty buffer")
        self._out, self._out_view = buf, memoryview(buf)
        self._out_pos, self._out_done = 0, False

    @property
    def received(self):
        """Output bytes the last :meth:`dma_recv` has received so far."""
        return self._out_pos

    def dma_busy(self):
        """``(send_busy, recv_busy)``."""
        return (self._tx_frames is not None and self._tx_credited < self._tx_beats,
                self._out is not None and not self._out_done)

    def dma_wait(self, timeout):
        """Pump the transfers until every input beat is credited and the output
        is complete; False when ``timeout`` seconds of board time pass first."""
        deadline = self._now() + timeout
        while True:
            self._parse()
            self._refill()
            if not any(self.dma_busy()):
                self._tx_frames = None
                return True
            if self._now() >= deadline:
                return False
            self._fill(deadline)

    def dma_abort(self):
        """Cancel both transfers and resynchronise the link (rule 5): wait,
        ``'X'``, read up to ``'x'``. The engine is not touched (the driver
        soft-resets it)."""
        self._resync()

    def _refill(self):
        if self._tx_frames is None:
            return
        free = self.fifo_depth - (self._tx_sent - self._tx_credited)
        left = self._tx_beats - self._tx_sent
        k = min(free, left)
        if k > 0 and (k >= self._refill_batch or k == left):
            f = self.beat_bytes + 2
            self._write(self._tx_frames[self._tx_sent * f:(self._tx_sent + k) * f])
            self._tx_sent += k

    def _clear_transfers(self):
        self._tx_frames, self._tx_beats, self._tx_sent, self._tx_credited = None, 0, 0, 0
        self._out, self._out_view, self._out_pos, self._out_done = None, None, 0, True

    # -- timing -------------------------------------------------------------------

    def link_seconds(self, in_bytes, out_bytes):
        """A generous bound on the time the link needs to move one layer run.

        Input beats travel as B + 2 bytes; output beats as B + 2 and a
        one-byte credit per input beat share the other direction. Both
        directions are counted as if they could not overlap, and each FIFO's
        worth of input waits for at most two USB latencies for its credits.
        """
        b = self.beat_bytes
        beats_in, beats_out = -(-int(in_bytes) // b), -(-int(out_bytes) // b)
        line_bytes = beats_in * (b + 2) + beats_out * (b + 2) + beats_in
        round_trips = beats_in / self.fifo_depth + 1
        return line_bytes * 10 / self.baud + round_trips * 2 * self.latency


def open_serial(device, baud=DEFAULT_BAUD, *, clock_hz=100e6, timeout=0.5, latency=None,
                low_latency=True):
    """A :class:`SerialBoard` on a real serial device.

    Parameters
    ----------
    device : str
        The board's USB-UART: ``/dev/ttyUSB0`` (ULX3S's FT231X; iCEBreaker:
        the FT2232H's second interface, usually ``/dev/ttyUSB1``), ``COM3``...
    baud : int
        The bitstream's baud rate (the board file's ``uart_baud``).
    clock_hz, timeout
        See :class:`SerialBoard`.
    latency : float, optional
        See :class:`SerialBoard`; default 2 ms in low-latency mode, else 20 ms.
    low_latency : bool
        Ask the kernel's USB-serial driver for low-latency mode (Linux; the
        FTDI driver then sets its latency timer to 1 ms instead of 16 ms,
        which every register access waits for). Ignored where unsupported.

    Raises
    ------
    BackendError
        If pyserial is missing, the device cannot be opened, or no bridge answers.
    """
    try:
        import serial
    except ImportError:
        raise BackendError("the serial backend needs pyserial: pip install pyserial") from None
    try:
        port = serial.Serial(device, baudrate=int(baud), timeout=_READ_SLICE)
    except (serial.SerialException, OSError, ValueError) as e:
        raise BackendError(f"cannot open serial device {device}: {e}") from None
    fast = False
    if low_latency and hasattr(port, "set_low_latency_mode"):
        try:
            port.set_low_latency_mode(True)
            fast = True
        except (OSError, ValueError, serial.SerialException):
            pass  # not a tty that supports it (e.g. a pseudo-terminal)
    if latency is None:
        latency = 0.002 if fast else 0.02
    try:
        return SerialBoard(port, clock_hz=clock_hz, timeout=timeout, latency=latency)
    except BaseException:
        port.close()
        raise
