"""Wiring signatures of the program engine's memory port, and of a full AXI4 manager.

The memory port (:mod:`fpgacnn.core.memory_port`) is declared here once, from
the engine's side, so that the engine (``Out(memory_read_signature())``, ...)
and whatever carries the port to memory (``In(...)``, for example
:class:`~fpgacnn.hdl.bus.axi4_master.MemoryPortAXI4Master`) share one
declaration and :func:`amaranth.lib.wiring.connect` them member for member:

* :func:`memory_read_signature`: read requests, ``addr``, ``valid``, ``ready``;
* :func:`memory_response_signature`: read responses in request order,
  ``data``, ``valid``, ``ready``;
* :func:`memory_write_signature`: writes, ``addr``, ``data``, ``strb``,
  ``valid``, ``ready``, and ``pending`` back (writes taken, not yet done);
* :func:`memory_fault_signature`: the memory's first failed access (``kind``,
  ``addr``) and its ``clear``.

:class:`AXI4Signature` is a full AXI4 manager port (all five channels, with
burst, cache, protection and QoS fields). Port names come out of Amaranth as
``<member>__<signal>`` (``m_axi__araddr``, ...), which cocotbext-axi binds
with ``AxiBus.from_prefix(dut, "m_axi", bus_separator="__")``.
"""

from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ...core.memory_port import ADDRESS_BITS, FAULT_KIND_BITS

__all__ = ["memory_read_signature", "memory_response_signature", "memory_write_signature",
           "memory_fault_signature", "AXI4Signature"]


def _check_positive(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise TypeError(f"{name} must be a positive integer, not {value!r}")


def memory_read_signature():
    """Read requests, from the engine's side.

    Members
    -------
    addr : Out(ADDRESS_BITS)
        Byte address of a read of R bytes, a multiple of R.
    valid : Out(1)
    ready : In(1)
    """
    return wiring.Signature({"addr": Out(ADDRESS_BITS), "valid": Out(1), "ready": In(1)})


def memory_response_signature(width_bits):
    """Read responses, in the order of the requests, from the engine's side
    (``In(memory_response_signature(8 * R))`` on the engine).

    Parameters
    ----------
    width_bits : int
        ``8 * R``: the bytes of one read, byte ``k`` in bits ``8k .. 8k+7``.

    Members
    -------
    data : Out(width_bits)
    valid : Out(1)
    ready : In(1)
    """
    _check_positive("width_bits", width_bits)
    return wiring.Signature({"data": Out(width_bits), "valid": Out(1), "ready": In(1)})


def memory_write_signature(nbytes):
    """Writes, from the engine's side.

    Parameters
    ----------
    nbytes : int
        W, the bytes of one write.

    Members
    -------
    addr : Out(ADDRESS_BITS)
        Byte address, a multiple of W.
    data : Out(8 * nbytes)
    strb : Out(nbytes)
        Bit ``k``: write byte ``k`` of ``data``.
    valid : Out(1)
    ready : In(1)
    pending : In(1)
        Writes taken and not yet done (an AXI4 port's before their B
        responses); the engine waits for it low before reading what it
        wrote and before it stops. A memory that does a write when it takes
        it holds it low.
    """
    _check_positive("nbytes", nbytes)
    return wiring.Signature({"addr": Out(ADDRESS_BITS), "data": Out(8 * nbytes),
                             "strb": Out(nbytes), "valid": Out(1), "ready": In(1),
                             "pending": In(1)})


def memory_fault_signature():
    """The memory's failed accesses, from the engine's side.

    Members
    -------
    kind : In(FAULT_KIND_BITS)
        :data:`~fpgacnn.core.memory_port.FAULT_NONE`, ``FAULT_READ`` or
        ``FAULT_WRITE``: the first access answered with an error since a clear.
    addr : In(ADDRESS_BITS)
        Its byte address (an AXI4 burst's).
    clear : Out(1)
        Forget it.
    """
    return wiring.Signature({"kind": In(FAULT_KIND_BITS), "addr": In(ADDRESS_BITS),
                             "clear": Out(1)})


#: Data widths AXI4 allows (bits).
AXI4_DATA_WIDTHS = (8, 16, 32, 64, 128, 256, 512, 1024)


class AXI4Signature(wiring.Signature):
    """AXI4, from the manager's side (``Out(AXI4Signature(...))`` on a manager,
    ``In(...)`` on a subordinate).

    Parameters
    ----------
    addr_width : int
        Byte-address width, at least 12 (the 4 KiB pages bursts may not cross).
    data_width : int
        A power of two from 8 to 1024 bits.
    id_width : int
        Width of the transaction IDs, at least 1.

    Members
    -------
    awid, awaddr, awlen, awsize, awburst, awlock, awcache, awprot, awqos, awvalid, awready
        Write address channel (``awlen`` 8 bits, ``awsize`` 3, ``awburst`` 2,
        ``awlock`` 1, ``awcache`` 4, ``awprot`` 3, ``awqos`` 4).
    wdata, wstrb, wlast, wvalid, wready
        Write data channel.
    bid, bresp, bvalid, bready
        Write response channel.
    arid, araddr, arlen, arsize, arburst, arlock, arcache, arprot, arqos, arvalid, arready
        Read address channel (widths as the write address channel's).
    rid, rdata, rresp, rlast, rvalid, rready
        Read data channel.

    Raises
    ------
    TypeError
        A width is not an integer, or below its minimum.
    ValueError
        ``data_width`` is not one AXI4 allows.
    """

    def __init__(self, addr_width=32, data_width=64, id_width=1):
        for name, value, lo in (("addr_width", addr_width, 12), ("data_width", data_width, 8),
                                ("id_width", id_width, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < lo:
                raise TypeError(f"{name} must be an integer of at least {lo}, not {value!r}")
        if data_width not in AXI4_DATA_WIDTHS:
            raise ValueError(f"data_width must be one of {AXI4_DATA_WIDTHS}, not {data_width!r}")
        self.addr_width = addr_width
        self.data_width = data_width
        self.id_width = id_width

        def address(p):
            return {
                f"{p}id": Out(id_width), f"{p}addr": Out(addr_width), f"{p}len": Out(8),
                f"{p}size": Out(3), f"{p}burst": Out(2), f"{p}lock": Out(1),
                f"{p}cache": Out(4), f"{p}prot": Out(3), f"{p}qos": Out(4),
                f"{p}valid": Out(1), f"{p}ready": In(1),
            }

        super().__init__({
            **address("aw"),
            "wdata": Out(data_width), "wstrb": Out(data_width // 8), "wlast": Out(1),
            "wvalid": Out(1), "wready": In(1),
            "bid": In(id_width), "bresp": In(2), "bvalid": In(1), "bready": Out(1),
            **address("ar"),
            "rid": In(id_width), "rdata": In(data_width), "rresp": In(2), "rlast": In(1),
            "rvalid": In(1), "rready": Out(1),
        })

    def __eq__(self, other):
        return (isinstance(other, AXI4Signature) and other.addr_width == self.addr_width
                and other.data_width == self.data_width and other.id_width == self.id_width)

    def __repr__(self):
        return f"AXI4Signature({self.addr_width}, {self.data_width}, {self.id_width})"
