"""A PYNQ board behind the narrow board interface the engine driver uses.

``PynqBoard`` wraps ``pynq.Overlay`` (the bitstream and its ``.hwh``), the AXI
DMA and the engine's AXI4-Lite window (``pynq.MMIO``). The module that provides
``Overlay``, ``MMIO`` and ``allocate`` is a parameter: ``pynq`` on a board
(``pip install 'fpgacnn[board]'``), or ``cocotbpynq`` in CI, where the same code
runs against the RTL of the wrapper the Vivado script builds, in Verilator
(tests/test_pynq_path.py; there a DDR model on the wrapper's ``m_axi`` and an
``allocate`` whose buffers live in it stand in for the PS's memory).

When the engine's memory master reaches DDR (the designs ``fpgacnn build``
writes), the board offers a memory (``has_memory``, ``attach_memory``) and the
accelerator runs the network program on the engine's sequencer: the host
writes the input into a ``pynq.allocate`` buffer, flushes it, starts the
sequencer at the buffer's physical address, polls its status and
invalidates the buffer before it reads the output.

The engine and its DMA are found in the ``.hwh`` next to the bitstream by
what Vivado writes for the block design of
:data:`fpgacnn.boards.zynq_design.DESIGN`: the engine is the module-reference
cell of the wrapper (``MODTYPE`` ``fpgacnn_axi``, ``VLNV``
``xilinx.com:module_ref:fpgacnn_axi:*``), its registers are the PS's
``MEMRANGE`` for that cell's ``s_axi``, and the DMA is the
``xilinx.com:ip:axi_dma`` cell whose MM2S stream feeds the engine. Nothing here
is typed by hand per design.
"""

import importlib
import time
from pathlib import Path
from xml.etree import ElementTree

from ..boards.zynq_design import DESIGN
from ..core.errors import BackendError

__all__ = ["PynqBoard", "find_engine_in_hwh"]


def _is_engine(module, design):
    engine = design.engine
    vlnv = (module.get("VLNV") or "").rsplit(":", 1)[0]
    return module.get("MODTYPE") == engine.module or vlnv == engine.vlnv.rsplit(":", 1)[0]


def _cell(module):
    """The cell's path in the block design, as pynq keys ``ip_dict``: ``engine``, ``hier/dma``."""
    return (module.get("FULLNAME") or "/" + (module.get("INSTANCE") or "")).lstrip("/")


def find_engine_in_hwh(hwh_path, design=DESIGN):
    """Locate the engine and its DMA in a Vivado hardware handoff file.

    Parameters
    ----------
    hwh_path : path-like
    design : ZynqDesign
        The block design the bitstream was built from (default: the one
        ``fpgacnn build`` generates).

    Returns
    -------
    dict
        ``{"engine": cell, "base": int, "range": int, "dma": cell, "memory":
        bool}``; a cell is its path in the block design (``engine``, or
        ``hier/engine`` inside a hierarchy), as ``pynq.Overlay`` names it;
        ``memory``: the engine's AXI4 master (``m_axi``) reaches DDR, so it
        runs network programs itself.

    Raises
    ------
    BackendError
        If the file is missing or unreadable, or lacks the engine, its
        register window or the DMA that feeds it.
    """
    engine_d, dma_d = design.engine, design.dma
    try:
        root = ElementTree.parse(hwh_path).getroot()
    except FileNotFoundError:
        raise BackendError(f"{hwh_path}: no such hardware handoff file (the .hwh must sit next "
                           f"to the .bit, with the same name)") from None
    except ElementTree.ParseError as e:
        raise BackendError(f"{hwh_path}: not a readable .hwh file ({e})") from None
    modules = root.findall("./MODULES/MODULE")
    engines = [m for m in modules if _is_engine(m, design)]
    if len(engines) > 1:  # several wrappers: the one the script names
        engines = [m for m in engines if m.get("INSTANCE") == engine_d.cell] or engines
    if not engines:
        raise BackendError(f"{hwh_path}: no {engine_d.module} module (the engine's wrapper, "
                           f"{engine_d.vlnv}) in this design")
    if len(engines) > 1:
        raise BackendError(f"{hwh_path}: {len(engines)} {engine_d.module} modules "
                           f"({', '.join(_cell(m) for m in engines)}); expected one")
    engine = engines[0]
    instance = engine.get("INSTANCE")
    base = rng = None
    for memrange in root.iterfind("./MODULES/MODULE[@IS_PL='FALSE']/MEMORYMAP/MEMRANGE"):
        if (memrange.get("INSTANCE") == instance
                and memrange.get("SLAVEBUSINTERFACE") == engine_d.control.name):
            base = int(memrange.get("BASEVALUE"), 16)
            rng = int(memrange.get("HIGHVALUE"), 16) - base + 1
            break
    if base is None:
        raise BackendError(f"{hwh_path}: the engine {_cell(engine)!r} has no address on the "
                           f"processing system (no MEMRANGE for its {engine_d.control.name})")
    # The DMA is the one whose MM2S stream is the engine's stream in (one BUSNAME).
    stream = engine.find(f"./BUSINTERFACES/BUSINTERFACE[@NAME='{engine_d.stream_in.name}']")
    busname = stream.get("BUSNAME") if stream is not None else None
    dmas = [m for m in modules if (m.get("VLNV") or "").startswith(dma_d.vlnv_prefix + ":")]
    feeding = [m for m in dmas if busname and m.find(
        f"./BUSINTERFACES/BUSINTERFACE[@NAME='{dma_d.mm2s}'][@BUSNAME='{busname}']") is not None]
    if not feeding:
        raise BackendError(f"{hwh_path}: no AXI DMA ({dma_d.vlnv_prefix}) drives the engine's "
                           f"{engine_d.stream_in.name} (found "
                           f"{', '.join(_cell(m) for m in dmas) or 'no DMA'})")
    # The engine's memory master, if the design gives it DDR (a design without
    # one runs every layer through the DMA).
    memory = any(r.get("MASTERBUSINTERFACE") == engine_d.memory.name
                 for r in engine.iterfind("./MEMORYMAP/MEMRANGE"))
    return {"engine": _cell(engine), "base": base, "range": rng, "dma": _cell(feeding[0]),
            "memory": memory}


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
    design : ZynqDesign
        The block design the bitstream was built from.

    Raises
    ------
    BackendError
        If PYNQ is not installed or the design holds no engine.
    """

    def __init__(self, bitfile, *, pynq=None, clock_hz=100e6, design=DESIGN):
        if pynq is None:
            try:
                pynq = importlib.import_module("pynq")
            except ImportError:
                raise BackendError("the pynq backend needs PYNQ on the board: "
                                   "pip install 'fpgacnn[board]'") from None
        self._pynq = pynq
        self.clock_hz = float(clock_hz)
        bitfile = Path(bitfile)
        found = find_engine_in_hwh(bitfile.with_suffix(".hwh"), design)
        self.overlay = pynq.Overlay(str(bitfile.name if _is_simulated(pynq) else bitfile))
        self._dma = self.overlay
        for part in found["dma"].split("/"):  # a cell inside a hierarchy: overlay.hier.dma
            self._dma = getattr(self._dma, part)
        mmio_range = found["range"]
        if _is_simulated(pynq):
            # cocotbpynq accepts a window only if base + length <= HIGHVALUE
            # (one byte short of PYNQ's inclusive range); the engine's
            # registers sit far below the top of the window either way.
            mmio_range -= 4
        self._mmio = pynq.MMIO(found["base"], mmio_range)
        self._recv_buf = None
        self._has_memory = found["memory"]
        self._memory = None

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

    @property
    def realtime(self):
        """True on a board: a wall-clock timeout bounds a run. False when PYNQ's API is
        simulated (cocotbpynq), far slower than the board: the simulator's limit does."""
        return not _is_simulated(self._pynq)

    # -- the engine's own memory (a design whose engine has its AXI4 master) -----

    @property
    def has_memory(self):
        """True if the engine reads and writes DDR itself (it runs network programs)."""
        return self._has_memory

    def attach_memory(self, buf):
        """Make ``buf`` (from :meth:`allocate`) the program's memory; returns its bus address.

        The engine's master sees DDR at physical addresses, so the sequencer's
        ``seq_memory`` is the buffer's physical address.

        Raises
        ------
        BackendError
            If the design has no memory master, or ``buf`` is not a buffer
            :meth:`allocate` made (no physical address).
        """
        if not self._has_memory:
            raise BackendError("this design's engine has no memory master (m_axi): it cannot "
                               "run a program from DDR")
        address = getattr(buf, "physical_address", None)
        if address is None:
            raise BackendError("the program's memory must be a buffer from allocate() "
                               "(pynq.allocate: contiguous, with a physical address)")
        self._memory = buf
        return int(address)

    def memory_to_device(self):
        """Write the CPU's cached copy of the program's memory back to DDR (before a start)."""
        self._memory.flush()

    def memory_from_device(self):
        """Drop the CPU's cached copy, so reads see what the engine wrote (after a stop)."""
        self._memory.invalidate()

    def dma_abort(self):
        """Reset both DMA channels (PYNQ: stop and start them again)."""
        for channel in (self._dma.sendchannel, self._dma.recvchannel):
            if hasattr(channel, "stop"):
                channel.stop()
                channel.start()


def _is_simulated(module):
    """cocotbpynq, or a stand-in built on it (its name starts the same: ``cocotbpynq_ddr``)."""
    return module.__name__.startswith("cocotbpynq")
