"""ZynqProgramTop: the program engine with its memory port on an AXI4 master (issue 16 item 3).

The top the Zynq boards build (inside the Vivado wrapper ``fpgacnn_axi``,
:func:`fpgacnn.boards.zynq_vivado.wrapper_verilog`)::

    s_axil (PS GP master) --> ProgramEngine --> m_axis (to the AXI DMA)
    s_axis (from the DMA) --> |           | --> irq
                              mem_rd/mem_rdata/mem_wr/mem_fault
                                    |
                              MemoryPortAXI4Master --> m_axi (SmartConnect -> PS HP port -> DDR)

The host's per-run interface (registers, the DMA's streams) is the
ProgramEngine's, unchanged; the program's reads and writes go to DDR through
the HP port. The bridge's ``writes_pending`` is the engine's
``mem_wr.pending`` (the sequencer waits for the B responses before the next
record and before it stops) and its fault the engine's ``mem_fault``
(``seq_fault``).
"""

import functools

from amaranth.back import verilog
from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ...core.config import require_config
from ...core.memory_port import ADDRESS_BITS, AXI_ID_BITS, AXI_MAX_BURST, read_bytes, write_bytes
from ...core.regmap import ADDR_WIDTH
from ..bus.axi4_master import MemoryPortAXI4Master
from ..bus.axi_lite import AXI4LiteSignature
from ..bus.axi_stream import AXI4StreamSignature
from ..bus.memory_port import AXI4Signature
from ..verilog import ZYNQ_TOP_NAME
from .program_engine import ProgramEngine

__all__ = ["ZynqProgramTop", "zynq_top_verilog"]


class ZynqProgramTop(wiring.Component):
    """:class:`~fpgacnn.hdl.program.program_engine.ProgramEngine` with an AXI4 memory master.

    Parameters
    ----------
    config : EngineConfig
    data_width : int
        The AXI4 master's data width in bits (the HP port's: 64 on the Zynq
        boards); at least ``8 * R`` and ``8 * W`` of
        :mod:`fpgacnn.core.memory_port`.
    outstanding : int
        Reads in flight at most (the engine's and the bridge's).

    Members
    -------
    s_axil, s_axis, m_axis
        As :class:`ProgramEngine`'s.
    m_axi : Out(AXI4Signature(32, data_width, AXI_ID_BITS))
        The program's memory reads and writes.
    irq : Out(1)
        The sequencer stopped since its last start.

    Raises
    ------
    ValueError
        If a memory word is wider than ``data_width``.
    """

    def __init__(self, config, *, data_width=64, outstanding=64):
        require_config(config)
        self._config = config
        self._data_width = data_width
        self._outstanding = outstanding
        # The bridge checks the widths; made here so a bad one fails at construction.
        self._bridge = MemoryPortAXI4Master(read_bytes=read_bytes(config),
                                            write_bytes=write_bytes(config),
                                            data_width=data_width, max_burst=AXI_MAX_BURST,
                                            read_depth=outstanding)
        super().__init__({
            "s_axil": In(AXI4LiteSignature(ADDR_WIDTH, 32)),
            "s_axis": In(AXI4StreamSignature(config.stream_width)),
            "m_axis": Out(AXI4StreamSignature(config.stream_width)),
            "m_axi": Out(AXI4Signature(ADDRESS_BITS, data_width, AXI_ID_BITS)),
            "irq": Out(1),
        })

    @property
    def config(self):
        return self._config

    def elaborate(self, platform):
        m = Module()
        m.submodules.engine = engine = ProgramEngine(self._config, outstanding=self._outstanding)
        m.submodules.bridge = bridge = self._bridge
        wiring.connect(m, wiring.flipped(self.s_axil), engine.s_axil)
        wiring.connect(m, wiring.flipped(self.s_axis), engine.s_axis)
        wiring.connect(m, engine.m_axis, wiring.flipped(self.m_axis))
        wiring.connect(m, bridge.m_axi, wiring.flipped(self.m_axi))
        wiring.connect(m, engine.mem_rd, bridge.mem_rd)
        wiring.connect(m, bridge.mem_rdata, engine.mem_rdata)
        wiring.connect(m, engine.mem_wr, bridge.mem_wr)  # its `pending` too
        m.d.comb += [
            engine.mem_fault.kind.eq(bridge.fault), engine.mem_fault.addr.eq(bridge.fault_addr),
            bridge.clear_fault.eq(engine.mem_fault.clear),
            self.irq.eq(engine.irq),
        ]
        return m


def zynq_top_verilog(config, *, data_width=64, name=ZYNQ_TOP_NAME):
    """Verilog text of :class:`ZynqProgramTop` for ``config`` (its AXI4 memory master
    ``data_width`` bits wide; source locations left out); kept for the process, as a
    Zynq project's script, wrapper and ``.hwh`` are often written together."""
    require_config(config)
    return _zynq_top_verilog(config, data_width, name)


@functools.lru_cache(maxsize=8)
def _zynq_top_verilog(config, data_width, name):
    return verilog.convert(ZynqProgramTop(config, data_width=data_width), name=name,
                           emit_src=False)
