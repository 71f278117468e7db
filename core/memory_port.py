"""The program engine's memory port, declared once (issue 16, docs/program.md).

A top that sequences a network program itself (:class:`fpgacnn.hdl.program.
program_engine.ProgramEngine`) reads and writes board memory through two
channels, and everything that talks to them reads this declaration: the
gateware builds its ports from :func:`memory_port_widths`, the simulated
board's C++ memory model (``sim/board_harness.cpp``) is generated for the
same names, and the host lays out the program for the same word sizes.

Read channel (requests out, responses in, both valid/ready streams)::

    mem_rd__addr   out  32          byte address of a read of R bytes, a multiple of R
    mem_rd__valid  out  1
    mem_rd__ready  in   1
    mem_rdata__data   in   8*R      the R bytes, byte k in bits 8k..8k+7
    mem_rdata__valid  in   1        responses come in the order of the requests
    mem_rdata__ready  out  1

Write channel (no response)::

    mem_wr__addr   out  32          byte address of a write of W bytes, a multiple of W
    mem_wr__data   out  8*W
    mem_wr__strb   out  W           bit k: write byte k
    mem_wr__valid  out  1
    mem_wr__ready  in   1
    mem_wr__pending  in  1          writes taken and not yet done (AXI4: before their B)

Faults (a memory that answers every access holds ``kind`` 0)::

    mem_fault__kind   in   2        FAULT_NONE, FAULT_READ or FAULT_WRITE: the first since a clear
    mem_fault__addr   in   32       byte address of the access (an AXI4 burst) that failed
    mem_fault__clear  out  1        forget it

and ``irq`` (out, 1): the sequencer has stopped (done, stopped for the
host, or error) and not been started again.

The sequencer shows the fault in ``seq_fault`` / ``seq_fault_addr``; the
simulated board's memory model reports its own (an access outside the
buffer) to the host directly and holds the port's at 0.

The engine waits for ``mem_wr__pending`` low before a record's reads and
before it stops: an AXI4 port orders no read after a write, and the host
reads the output once the engine has stopped. The simulated board's memory
does a write when it takes it and holds it low.

``R`` is the engine's beat (``stream_bytes``), or its input word (``pin``
bytes) where that is wider; ``W`` is the larger of the pixel writer's widest
unit (``min(pout, stream_bytes)``, or the beat on an engine whose writer has
a wide mode, :func:`writer_has_wide`; a power of two) and 4 (a 32-bit
counter), so also a power of two. Addresses are byte addresses of a 32-bit space: on the
simulated board, offsets into the buffer attached as the board's memory; on
a Zynq board, physical addresses.
"""

from .config import require_config

__all__ = ["ADDRESS_BITS", "FAULT_NONE", "FAULT_READ", "FAULT_WRITE", "FAULT_KIND_BITS",
           "AXI_ID_BITS", "AXI_MAX_BURST",
           "MEMORY_PORTS", "read_bytes", "words_per_read", "writer_has_wide", "writer_unit",
           "write_bytes", "memory_port_widths"]

#: Bits of a memory byte address.
ADDRESS_BITS = 32

#: ``mem_fault__kind``: no fault, a read or a write answered with an error.
FAULT_NONE, FAULT_READ, FAULT_WRITE = 0, 1, 2
FAULT_KIND_BITS = 2

#: The ID width of the AXI4 master a Zynq top puts on this port: one ID, so
#: every response comes back in order.
AXI_ID_BITS = 1
#: Beats of its bursts at most: the Zynq-7000 HP ports are AXI3 (16 beats), so
#: the interconnect's AXI4-to-AXI3 conversion never splits one.
AXI_MAX_BURST = 16

#: Every port of the memory interface: name -> (direction from the top, width key).
#: Width keys: an int, ``"R"`` / ``"W"`` (bytes: 8 bits each) or ``"Wstrb"`` (W bits).
MEMORY_PORTS = {
    "mem_rd__addr": ("out", ADDRESS_BITS),
    "mem_rd__valid": ("out", 1),
    "mem_rd__ready": ("in", 1),
    "mem_rdata__data": ("in", "R"),
    "mem_rdata__valid": ("in", 1),
    "mem_rdata__ready": ("out", 1),
    "mem_wr__addr": ("out", ADDRESS_BITS),
    "mem_wr__data": ("out", "W"),
    "mem_wr__strb": ("out", "Wstrb"),
    "mem_wr__valid": ("out", 1),
    "mem_wr__ready": ("in", 1),
    "mem_wr__pending": ("in", 1),
    "mem_fault__kind": ("in", FAULT_KIND_BITS),
    "mem_fault__addr": ("in", ADDRESS_BITS),
    "mem_fault__clear": ("out", 1),
    "irq": ("out", 1),
}


def read_bytes(config):
    """R: bytes of one memory read: the engine's beat, or its input word (``pin``) if wider.

    A client that reads ``pin``-byte words (the record fetch, the vector
    unit, the pixel reader's narrow sections) gets the word's bytes out of
    the R read at the word's R-aligned address; the pixel reader's wide
    sections take all R (docs/program.md, "The beat-wide read port").
    """
    require_config(config)
    return max(config.pin, config.stream_bytes)


def words_per_read(config):
    """``pin``-byte words in one memory read: R / pin (:func:`read_bytes`); more than
    one only where ``pin`` is narrower than the beat (then a power of two: both are),
    which is where a wide mode reads R-byte words a beat a cycle."""
    return read_bytes(config) // config.pin


def writer_has_wide(config):
    """Whether the pixel writer has a wide mode (its field ``wide``: units of a whole
    beat, one a cycle): on an engine whose output packer can send a beat a cycle
    (:attr:`~fpgacnn.core.config.EngineConfig.paired_beats`: a pixel-pair run's
    beat entries), the only output faster than one ``pout``-byte word a cycle. The
    other engines' writers are built without it."""
    require_config(config)
    return config.paired_beats


def writer_unit(config, wide=False):
    """Bytes of the pixel writer's unit: ``min(pout, stream_bytes)``, or with ``wide``
    (where :func:`writer_has_wide`) the beat. It writes one a cycle, so it takes the
    output stream at this many bytes a cycle (the cycle model's sink, ``layer_cycles``'
    ``writer``)."""
    require_config(config)
    if wide and not writer_has_wide(config):
        raise ValueError(f"the pixel writer of this engine has no wide mode (pout "
                         f"{config.pout}, a {config.stream_bytes}-byte beat, pixel pairs "
                         f"{config.pixel_pairs})")
    return config.stream_bytes if wide else min(config.pout, config.stream_bytes)


def write_bytes(config):
    """W: bytes of one memory write: the writer's widest unit or a 32-bit word, the
    larger."""
    return max(writer_unit(config, wide=writer_has_wide(config)), 4)


def memory_port_widths(config):
    """Each port of :data:`MEMORY_PORTS` with its width in bits for ``config``."""
    r, w = read_bytes(config), write_bytes(config)
    sizes = {"R": 8 * r, "W": 8 * w, "Wstrb": w}
    return {name: sizes.get(width, width) for name, (_, width) in MEMORY_PORTS.items()}
