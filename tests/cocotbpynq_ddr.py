"""cocotbpynq with a DDR: the PS's memory behind the engine's AXI4 master, for the pynq code path.

cocotbpynq stands in for pynq's ``Overlay``, ``MMIO`` and the AXI DMA, and
its ``allocate`` returns plain numpy arrays: nothing models the DDR the
engine's own master (``m_axi``, through the HP port) reads and writes. This
module is that stand-in's memory:

- :class:`Ddr`: a byte array as DDR, bound to the wrapper's ``m_axi`` with
  cocotbext-axi's ``AxiSlave``. A write becomes visible to reads only when
  its burst's B response is taken (until then it is staged), and the B
  responses are held back some cycles, so a master that reads what it wrote
  before the B comes back reads stale bytes, as it could on a Zynq;
- :func:`allocate`: ``pynq.allocate``'s buffers, numpy arrays with a
  ``physical_address`` in that DDR whose ``flush`` and ``invalidate`` copy the
  CPU's view to and from it (the CPU's cache, which pynq's buffers have too:
  a host that forgets a flush or an invalidate sees wrong bytes here);
- ``Overlay`` and ``MMIO``: cocotbpynq's.

The module's name starts with ``cocotbpynq``, which is how
:class:`fpgacnn.host.pynq_board.PynqBoard` knows it runs in simulation.
"""

import itertools

import numpy as np
from cocotb.triggers import RisingEdge
from cocotbext.axi import AxiBus, AxiSlave
from cocotbpynq import MMIO, Overlay  # noqa: F401  (the stand-in's API)

__all__ = ["Ddr", "allocate", "attach_ddr", "MMIO", "Overlay"]

#: Where the buffers of :func:`allocate` start (above the low DDR Linux keeps).
CMA_BASE = 0x1000_0000
#: Pages: pynq's contiguous buffers start on one.
PAGE = 4096

_ddr = None


class Ddr:
    """DDR behind the HP port (see the module docstring).

    Parameters
    ----------
    dut
        The wrapper (``m_axi_*`` ports, ``aclk``, ``aresetn``).
    size : int
        Bytes from :data:`CMA_BASE`; an access outside is answered SLVERR.
    b_delay : int
        Cycles each B response is held back.
    """

    def __init__(self, dut, size, *, b_delay=12):
        self.base, self.size = CMA_BASE, size
        self.memory = bytearray(size)
        self.staged = []
        self.next_free = CMA_BASE
        self.bad_accesses = 0
        self.slave = AxiSlave(AxiBus.from_prefix(dut, "m_axi"), dut.aclk, dut.aresetn,
                              reset_active_level=False, target=self)
        self.slave.write_if.b_channel.set_pause_generator(
            itertools.cycle([1] * b_delay + [0]))
        self._clock = dut.aclk
        self._bvalid, self._bready = dut.m_axi_bvalid, dut.m_axi_bready

    def _offset(self, address, length):
        off = address - self.base
        if off < 0 or off + length > self.size:
            self.bad_accesses += 1
            raise ValueError(f"0x{address:08x}+{length} is outside the DDR")
        return off

    async def read(self, address, length):
        off = self._offset(address, length)
        return bytes(self.memory[off:off + length])

    async def write(self, address, data):
        off = self._offset(address, len(data))
        self.staged.append((off, bytes(data)))

    async def commit_on_b(self):
        """Staged writes reach memory when a B response is taken (every one
        staged by then: the slave answers bursts in order)."""
        while True:
            await RisingEdge(self._clock)
            if self._bvalid.value and self._bready.value:
                for off, data in self.staged:
                    self.memory[off:off + len(data)] = data
                self.staged.clear()

    def place(self, nbytes):
        """A page-aligned range of ``nbytes``: its address."""
        address = self.next_free
        self.next_free += -(-max(int(nbytes), 1) // PAGE) * PAGE
        if self.next_free > self.base + self.size:
            raise MemoryError(f"the simulated DDR ({self.size} bytes) is full")
        return address


def attach_ddr(dut, size=1 << 22, **kwargs):
    """Bind a :class:`Ddr` to ``dut``'s ``m_axi``; :func:`allocate` then places buffers in it.

    Returns the coroutine to start (``cocotb.start_soon``) that commits writes.
    """
    global _ddr
    _ddr = Ddr(dut, size, **kwargs)
    return _ddr


class DdrBuffer(np.ndarray):
    """A buffer in :class:`Ddr`: the CPU's view, written back and refreshed by hand."""

    def flush(self):
        off = self.physical_address - _ddr.base
        _ddr.memory[off:off + self.nbytes] = self.tobytes()

    def invalidate(self):
        off = self.physical_address - _ddr.base
        self[...] = np.frombuffer(bytes(_ddr.memory[off:off + self.nbytes]),
                                  dtype=self.dtype).reshape(self.shape)

    sync_to_device = flush
    sync_from_device = invalidate

    def __array_finalize__(self, obj):
        # A view keeps the address of its first byte (views the driver makes are
        # leading slices, as pynq's are only meaningful whole).
        if obj is not None:
            base = getattr(obj, "physical_address", None)
            if base is not None and isinstance(obj, np.ndarray):
                shift = self.__array_interface__["data"][0] - obj.__array_interface__["data"][0]
                self.physical_address = base + shift


def allocate(shape, dtype="u4", target=None, **kwargs):
    """``pynq.allocate``: a zeroed buffer in the simulated DDR."""
    if _ddr is None:
        raise RuntimeError("attach_ddr(dut) first: no DDR to allocate in")
    arr = np.zeros(shape, dtype=dtype).view(DdrBuffer)
    arr.physical_address = _ddr.place(arr.nbytes)
    arr.flush()
    return arr
