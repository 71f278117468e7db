"""The simulated open board: the UART bridge top in Verilator, behind a serial port.

ECP5 and iCE40 boards reach the host through a USB-UART and the bridge of
docs/host_link.md. :class:`SimulatedSerialPort` is that board in simulation:
a Verilator model of ``fpgacnn_uart_top`` (the engine behind the bridge,
:func:`fpgacnn.hdl.verilog.uart_top_verilog`) with a C++ model of the host's
UART (``uart_harness.cpp``), offered as a pyserial-compatible port object.
:class:`fpgacnn.host.serial_board.SerialBoard` drives it exactly as it drives
``serial.Serial`` on a real board, so the whole serial backend (framing,
credits, resynchronisation) runs against the real gateware.

Time is board time: :meth:`SimulatedSerialPort.read` clocks the model until
the bytes have arrived or ``timeout`` seconds of simulated time (cycles /
``clock_hz``) have passed, so runs are deterministic and independent of the
machine's speed. :func:`serve_pty` puts the same board on a Linux
pseudo-terminal for programs that open a device path.

Builds are cached like the ``sim`` backend's (:mod:`fpgacnn.sim.native_board`).
"""

import ctypes
import functools
import os
import re
import select
import threading
import tty
from pathlib import Path

from ..hdl.verilog import UART_TOP_NAME
from ..core.errors import BackendError
from .native_board import build_harness_library, load_library, waveform_format

__all__ = ["SimulatedSerialPort", "UART_TOP_NAME", "build_uart_library", "serve_pty", "PtyServer"]

_HARNESS = Path(__file__).with_name("uart_harness.cpp")

_vp, _u64, _u32, _int = ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_int

#: The C ABI of uart_harness.cpp: name -> (argument types, result type).
UART_ABI = {
    "uart_new": ([ctypes.c_char_p, _u32], _vp),
    "uart_free": ([_vp], None),
    "uart_cycles": ([_vp], _u64),
    "uart_framing_errors": ([_vp], _u64),
    "uart_reset": ([_vp, _u32], None),
    "uart_step": ([_vp, _u64], None),
    "uart_write": ([_vp, ctypes.c_char_p, _u64], None),
    "uart_out_waiting": ([_vp], _u64),
    "uart_clear_output": ([_vp], None),
    "uart_in_waiting": ([_vp], _u64),
    "uart_clear_input": ([_vp], None),
    "uart_read": ([_vp, _vp, _u64, _u64], _u64),
    "uart_drain": ([_vp, _u64], _int),
}

#: Cycles per call into the model while a read or flush has no time limit
#: (``timeout=None``): the C side takes a finite cycle budget.
_FOREVER_CHUNK = 1 << 20

_REQUIRED_PORTS = ("clk", "rst", "uart_rx", "uart_tx")


@functools.lru_cache(maxsize=8)
def _uart_verilog(config, clocks_per_bit, fifo_depth):
    # Generating the Verilog takes seconds; a process that opens the same
    # simulated board again (a test session, a notebook) reuses it.
    from ..hdl.verilog import uart_top_verilog
    return uart_top_verilog(config, clocks_per_bit=clocks_per_bit, fifo_depth=fifo_depth)


def build_uart_library(verilog, *, top=UART_TOP_NAME, trace=None, cache_dir=None, progress=None):
    """Build (or find in the cache) the simulated open board's shared library.

    Parameters
    ----------
    verilog : str
        Verilog of the bridge top (ports ``clk``, ``rst``, ``uart_rx``, ``uart_tx``).
    top, trace, cache_dir, progress
        As for :func:`fpgacnn.sim.native_board.build_board_library`.

    Raises
    ------
    BackendError
        If the top lacks one of the four ports, or Verilator/g++ fails.
    """
    match = re.search(rf"^module\s+{re.escape(top)}\s*\((.*?)\);", verilog, re.M | re.S)
    if not match:
        raise BackendError(f"the Verilog has no module named {top!r}")
    declared = set(re.findall(r"\b(\w+)\b", match.group(1)))
    missing = [p for p in _REQUIRED_PORTS if p not in declared]
    if missing:
        raise BackendError(f"UART bridge top {top!r} has no port {missing[0]!r}; the simulated "
                           f"serial board needs {', '.join(_REQUIRED_PORTS)}")
    return build_harness_library(verilog, _HARNESS, top=top, trace=trace, cache_dir=cache_dir,
                                 progress=progress, what="the simulated UART board")


class SimulatedSerialPort:
    """A pyserial-like port whose far end is the UART bridge top in Verilator.

    Parameters
    ----------
    config : EngineConfig, optional
        The engine behind the bridge; its Verilog is generated with
        :func:`fpgacnn.hdl.verilog.uart_top_verilog`. Give ``verilog`` instead
        to simulate another top with the same four ports.
    clocks_per_bit : int
        Engine clocks per bit on the line (both directions); small values
        keep simulations short (4: a byte every 40 cycles).
    fifo_depth : int, optional
        The bridge's input FIFO depth in beats (default: the generator's).
    clock_hz : float
        The clock the simulated board is taken to run at: ``timeout`` and
        :meth:`monotonic` count simulated cycles at this rate, and
        ``baudrate`` is ``clock_hz / clocks_per_bit``.
    timeout : float or None
        Seconds of board time :meth:`read` waits (pyserial semantics: None
        waits until all bytes have come, 0 returns at once).
    waves : path-like, optional
        Write a waveform (``.vcd``, or ``.fst`` where the lz4 headers are installed).
    verilog, top : str, optional
        A ready top instead of ``config``.
    cache_dir, progress
        As for :class:`fpgacnn.sim.native_board.SimulatedBoard`.

    Attributes
    ----------
    cycles : int
        Clock cycles simulated since the board was made.
    framing_errors : int
        Bytes from the board whose stop bit was low (a correct bridge has none).
    """

    def __init__(self, config=None, *, clocks_per_bit=4, fifo_depth=None, clock_hz=100e6,
                 timeout=None, waves=None, verilog=None, top=UART_TOP_NAME, cache_dir=None,
                 progress=None):
        if isinstance(clocks_per_bit, bool) or not isinstance(clocks_per_bit, int) or clocks_per_bit < 4:
            raise BackendError(f"clocks_per_bit must be an integer >= 4, not {clocks_per_bit!r}")
        if verilog is None:
            if config is None:
                raise BackendError("SimulatedSerialPort needs an EngineConfig (or the Verilog "
                                   "of a bridge top)")
            if progress:
                progress(f"generating the engine behind the UART bridge (pin={config.pin}, "
                         f"pout={config.pout}, kmax={config.kmax}, {clocks_per_bit} clocks/bit)")
            verilog = _uart_verilog(config, clocks_per_bit, fifo_depth)
        trace = waveform_format(waves) if waves is not None else None
        path = build_uart_library(verilog, top=top, trace=trace, cache_dir=cache_dir,
                                  progress=progress)
        self._lib = load_library(path, UART_ABI)
        self.clocks_per_bit = clocks_per_bit
        self.clock_hz = float(clock_hz)
        self.timeout = timeout
        self.port = f"sim:{top}"  # pyserial's name for the device, for messages
        self._handle = self._lib.uart_new(os.fsencode(waves) if waves is not None else None,
                                          clocks_per_bit)
        self.reset()

    # -- lifetime ---------------------------------------------------------------

    @property
    def is_open(self):
        return bool(getattr(self, "_handle", None))

    def close(self):
        """Free the model (and close the waveform file)."""
        if getattr(self, "_handle", None):
            self._lib.uart_free(self._handle)
            self._handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()

    def _h(self):
        if not self._handle:
            raise BackendError("the simulated serial port is closed")
        return self._handle

    # -- board time -------------------------------------------------------------

    @property
    def baudrate(self):
        """Bits per second on the simulated line."""
        return self.clock_hz / self.clocks_per_bit

    @property
    def cycles(self):
        return self._lib.uart_cycles(self._h())

    @property
    def framing_errors(self):
        return self._lib.uart_framing_errors(self._h())

    def monotonic(self):
        """Board time in seconds (cycles / ``clock_hz``): the clock a host on
        this port must measure its timeouts with (see SerialBoard)."""
        return self.cycles / self.clock_hz

    def reset(self, cycles=4):
        """Reset the board (as its PLL lock does) and empty both directions of the line."""
        self._lib.uart_reset(self._h(), cycles)

    def step(self, cycles):
        """Let the board run for ``cycles`` cycles."""
        self._lib.uart_step(self._h(), int(cycles))

    def _cycles(self, seconds):
        return max(0, int(round(seconds * self.clock_hz)))

    # -- the pyserial interface -------------------------------------------------

    def write(self, data):
        """Queue bytes for the line; they go out at the baud rate as the board runs."""
        data = bytes(data)
        self._lib.uart_write(self._h(), data, len(data))
        return len(data)

    def read(self, size=1):
        """Up to ``size`` bytes: clocks the board until they have arrived or
        ``timeout`` seconds of board time have passed."""
        h = self._h()
        if size <= 0:
            return b""
        buf = ctypes.create_string_buffer(size)
        at = ctypes.addressof(buf)
        if self.timeout is None:
            got = 0
            while got < size:
                got += self._lib.uart_read(h, at + got, size - got, _FOREVER_CHUNK)
            return buf.raw
        got = self._lib.uart_read(h, at, size, self._cycles(self.timeout))
        return buf.raw[:got]

    @property
    def in_waiting(self):
        """Bytes received and not read (no time passes)."""
        return self._lib.uart_in_waiting(self._h())

    @property
    def out_waiting(self):
        """Bytes written and not yet completely on the line."""
        return self._lib.uart_out_waiting(self._h())

    def flush(self):
        """Clock the board until everything written is on the line (pyserial:
        wait until all data is written)."""
        h = self._h()
        while self._lib.uart_drain(h, _FOREVER_CHUNK):
            pass

    def reset_input_buffer(self):
        self._lib.uart_clear_input(self._h())

    def reset_output_buffer(self):
        self._lib.uart_clear_output(self._h())


# -- the simulated board on a pseudo-terminal ------------------------------------

class PtyServer:
    """A simulated port served on a pseudo-terminal by a background thread.

    Made by :func:`serve_pty`. ``path`` is the device to open (e.g. with
    ``serial.Serial(path)``); :meth:`close` stops the thread and closes the
    terminal (the port is left open: it belongs to the caller).
    """

    def __init__(self, port, *, cycles_per_step=2000, idle_cycles=1_000_000):
        self.port = port
        self._master, self._slave = os.openpty()
        # Raw: the line discipline must not echo, translate CR/LF or treat
        # bytes as signals; the link is binary.
        tty.setraw(self._slave)
        tty.setraw(self._master)
        self.path = os.ttyname(self._slave)
        self._step = cycles_per_step
        self._idle = idle_cycles
        self._stop = threading.Event()
        self.error = None
        self._thread = threading.Thread(target=self._serve, name=f"pty {self.path}", daemon=True)
        self._thread.start()

    def _serve(self):
        port, master = self.port, self._master
        saved_timeout = port.timeout
        port.timeout = 0
        quiet = self._idle  # start idle: nothing to simulate until the host speaks
        try:
            while not self._stop.is_set():
                # Block on the terminal while the board has been quiet for a
                # while (nothing in flight either way): no busy loop when idle.
                wait = 0.02 if quiet >= self._idle and not port.out_waiting else 0
                ready, _, _ = select.select([master], [], [], wait)
                if ready:
                    try:
                        data = os.read(master, 4096)
                    except OSError:  # no process has the terminal open right now
                        data = b""
                    if data:
                        port.write(data)
                        quiet = 0
                if quiet >= self._idle and not port.out_waiting:
                    continue
                port.step(self._step)
                n = port.in_waiting
                if n:
                    data = memoryview(port.read(n))
                    while data:  # a full terminal buffer takes part of it at a time
                        data = data[os.write(master, data):]
                    quiet = 0
                elif port.out_waiting:
                    quiet = 0
                else:
                    quiet += self._step
        except Exception as e:  # reported by close(); the thread must not die silently
            self.error = e
        finally:
            port.timeout = saved_timeout

    def close(self):
        """Stop serving and close the terminal."""
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join()
        for fd in (self._master, self._slave):
            try:
                os.close(fd)
            except OSError:
                pass
        self._master = self._slave = -1
        if self.error is not None:
            raise BackendError(f"the pseudo-terminal server failed: {self.error}") from self.error

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def serve_pty(port, **kwargs):
    """Serve a :class:`SimulatedSerialPort` on a new pseudo-terminal (Linux).

    A background thread moves bytes between the terminal and the simulated
    line and clocks the board while anything is in flight (and for a
    simulated millisecond after, so a running engine finishes). Board time
    then runs as fast as the simulation does, not at the wall clock.

    Returns
    -------
    PtyServer
        Its ``path`` is the device (``/dev/pts/N``); close it when done.
    """
    return PtyServer(port, **kwargs)
