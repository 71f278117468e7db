"""A PYNQ board behind the narrow board interface the engine driver uses.

``PynqBoard`` wraps ``pynq.Overlay`` (the bitstream and its ``.hwh``), the AXI
DMA and the engine's AXI4-Lite window (``pynq.MMIO``). The module that provides
``Overlay``, ``MMIO`` and ``allocate`` is a parameter: ``pynq`` on a board
(``pip install 'fpgacnn[board]'``), or ``cocotbpynq`` in CI, where the same code
runs against the engine's RTL in Verilator (tests/test_pynq_path.py).

The engine's base address and the DMA's name are read from the ``.hwh`` file
next to the bitstream, as ``pynq`` itself does, so nothing here is typed by
hand per design.
"""

import importlib
import time
from pathlib import Path
from xml.etree import ElementTree

from ..core.errors import BackendError

__all__ = ["PynqBoard", "find_engine_in_hwh"]

#: The module type (Verilog module name) of the engine in generated designs.
ENGINE_MODTYPE = "fpgacnn_engine"


def find_engine_in_hwh(hwh_path, modtype=ENGINE_MODTYPE):
    """Locate the engine and its DMA in a Vivado hardware handoff file.

    Returns
    -------
    dict
        ``{"engine": instance, "base": int, "range": int, "dma": instance}``.

    Raises
    ------
    BackendError
        If the file is missing or unreadable, or holds no engine / DMA.
    """
    try:
        root = ElementTree.parse(hwh_path).getroot()
    except FileNotFoundError:
        raise BackendError(f"{hwh_path}: no such hardware handoff file (the .hwh must sit next "
                           f"to the .bit, with the same name)") from None
    except ElementTree.ParseError as e:
        raise BackendError(f"{hwh_path}: not a readable .hwh file ({e})") from None
    engine = root.find(f"./MODULES/MODULE[@MODTYPE='{modtype}']")
    if engine is None:
        raise BackendError(f"{hwh_path}: no {modtype} module in this design")
    instance = engine.get("INSTANCE")
    base = rng = None
    for memrange in root.iterfind("./MODULES/MODULE/MEMORYMAP/MEMRANGE"):
        if memrange.get("INSTANCE") == instance:
            base = int(memrange.get("BASEVALUE"), 16)
            rng = int(memrange.get("HIGHVALUE"), 16) - base + 1
            break
    if base is None:
        raise BackendError(f"{hwh_path}: the engine {instance!r} has no address in the memory map")
    dmas = [m.get("INSTANCE") for m in root.iterfind("./MODULES/MODULE")
            if (m.get("VLNV") or "").startswith("xilinx.com:ip:axi_dma:")]
    if not dmas:
        raise BackendError(f"{hwh_path}: no AXI DMA in this design")
    return {"engine": instance, "base": base, "range": rng, "dma": dmas[0]}


class PynqBoard:
    """A Zynq board running an fpgacnn bitstream, through PYNQ.

    Parameters
    ----------
    bitfile : path-like
        The bitstream; ``NAME.hwh`` must sit next to ``NAME.bit``.
    pynq : module, optional
        The PYNQ API: ``pynq`` (default) or a stand-in with the same API
        (``cocotbpynq`` in simulation).
    clock_hz : float
        The engine's clock, for reporting.
    modtype : str
        The engine's module name in the design.

    Raises
    ------
    BackendError
        If PYNQ is not installed or the design holds no engine.
    """

    def __init__(self, bitfile, *, pynq=None, clock_hz=100e6, modtype=ENGINE_MODTYPE):
        if pynq is None:
            try:
                pynq = importlib.import_module("pynq")
            except ImportError:
                raise BackendError("the pynq backend needs PYNQ on the board: "
                                   "pip install 'fpgacnn[board]'") from None
        self._pynq = pynq
        self.clock_hz = float(clock_hz)
        bitfile = Path(bitfile)
        found = find_engine_in_hwh(bitfile.with_suffix(".hwh"), modtype)
        self.overlay = pynq.Overlay(str(bitfile.name if _is_simulated(pynq) else bitfile))
        self._dma = getattr(self.overlay, found["dma"])
        mmio_range = found["range"]
        if _is_simulated(pynq):
            # cocotbpynq accepts a window only if base + length <= HIGHVALUE
            # (one byte short of PYNQ's inclusive range); the engine's
            # registers sit far below the top of the window either way.
            mmio_range -= 4
        self._mmio = pynq.MMIO(found["base"], mmio_range)
        self._recv_buf = None

    # -- the narrow board interface -------------------------------------------

    def mmio_read(self, addr):
        return int(self._mmio.read(addr))

    def mmio_write(self, addr, value):
        self._mmio.write(addr, int(value) & 0xFFFF_FFFF)

    def allocate(self, nbytes):
        import numpy as np
        return self._pynq.allocate(shape=(int(nbytes),), dtype=np.uint8)

    def dma_send(self, buf):
        self._dma.sendchannel.transfer(buf)

    def dma_recv(self, buf):
        self._recv_buf = buf
        self._dma.recvchannel.transfer(buf)

    @property
    def received(self):
        """Bytes received by the last receive (known once it has finished)."""
        channel = self._dma.recvchannel
        return int(getattr(channel, "transferred", 0) or 0)

    def dma_wait(self, timeout):
        """Wait for both channels; False after ``timeout`` wall-clock seconds.

        PYNQ's channels report ``idle`` from the DMA status register, so the
        wait can time out. cocotbpynq's DMA model has no status register: there
        the wait blocks until the transfer ends (timeouts are exercised on the
        ``sim`` backend).
        """
        send, recv = self._dma.sendchannel, self._dma.recvchannel
        if not hasattr(send, "idle"):
            send.wait()
            recv.wait()
            return True
        deadline = time.monotonic() + timeout
        while not (send.idle and recv.idle):
            if time.monotonic() > deadline:
                return False
            time.sleep(50e-6)
        send.wait()  # raises on a DMA error, returns at once when idle
        recv.wait()
        return True

    def dma_abort(self):
        """Reset both DMA channels (PYNQ: stop and start them again)."""
        for channel in (self._dma.sendchannel, self._dma.recvchannel):
            if hasattr(channel, "stop"):
                channel.stop()
                channel.start()


def _is_simulated(module):
    return module.__name__.startswith("cocotbpynq")
