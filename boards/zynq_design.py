"""The Zynq block design, described once.

Three parties must agree on what the Vivado block design of a Zynq board
contains: the Vivado script that builds it (:mod:`fpgacnn.boards.zynq_vivado`),
the hardware handoff file (``.hwh``) that Vivado writes for it and that the
simulated board imitates (:mod:`fpgacnn.sim.pynq_hwh`), and the driver that
finds the engine and the DMA in that file on a board
(:mod:`fpgacnn.host.pynq_board`). This module is the one place that names
what they share:

- the engine's RTL wrapper (module ``fpgacnn_axi``, added as a *module
  reference* cell ``engine``), its clock, reset and bus interfaces and every
  port of them;
- the AXI DMA (cell ``dma``, ``xilinx.com:ip:axi_dma``) and the parameters
  the driver relies on (simple mode, buffer-length register width, stream
  width);
- the processing system of each PS kind (``zynq7``: ``processing_system7``,
  ``zynqmp``: ``zynq_ultra_ps_e``): its cell name, the ports used and the
  address map (the engine's and the DMA's register windows);
- the other cells and every interface, clock and reset connection, from
  which Vivado names its nets (a ``.hwh`` ``BUSNAME`` is the driving cell and
  interface, ``ctrl_xbar_M00_AXI``).

It holds data only; the Tcl, the ``.hwh`` and the driver's search are written
elsewhere from :data:`DESIGN`.

Examples
--------
>>> DESIGN.engine.vlnv
'xilinx.com:module_ref:fpgacnn_axi:1.0'
>>> hex(DESIGN.ps("zynq7").engine_base), DESIGN.ps("zynq7").cell
('0x43c00000', 'ps7')
>>> DESIGN.busname("engine/s_axis", "zynq7")
'dma_M_AXIS_MM2S'
"""

from dataclasses import dataclass

from ..core.memory_port import ADDRESS_BITS, AXI_ID_BITS, read_bytes, write_bytes
from ..core.regmap import ADDR_WIDTH, DATA_WIDTH
from .board import BoardError

__all__ = ["Port", "BusInterface", "EngineCell", "AxiDma", "ProcessingSystem", "ZynqDesign",
           "DESIGN"]


@dataclass(frozen=True)
class Port:
    """One port of the engine's wrapper.

    Parameters
    ----------
    name : str
        Verilog port name (``s_axi_awaddr``).
    direction : str
        ``"in"`` or ``"out"``.
    width : int
    interface : str or None
        The bus interface it belongs to (``s_axi``), None for clock and reset.
    logical : str or None
        Its logical name in that interface (``AWADDR``).
    """

    name: str
    direction: str
    width: int
    interface: "str | None" = None
    logical: "str | None" = None


@dataclass(frozen=True)
class BusInterface:
    """A bus interface of the wrapper, as the block design and the ``.hwh`` see it.

    Parameters
    ----------
    name : str
        Interface name (``s_axi``); its ports are ``NAME_signal``.
    kind : str
        ``"aximm"`` or ``"axis"`` (``xilinx.com:interface:KIND:1.0``).
    mode : str
        The ``.hwh`` ``TYPE``: ``SLAVE`` (memory-mapped subordinate),
        ``MASTER`` (memory-mapped manager), ``TARGET`` (stream in) or
        ``INITIATOR`` (stream out).
    signals : tuple of (str, str)
        ``(LOGICAL, direction)`` in the wrapper's port order; ``TDATA``,
        ``TKEEP``, ``AWADDR``/``ARADDR`` take their widths from the engine.
    """

    name: str
    kind: str
    mode: str
    signals: tuple

    @property
    def vlnv(self):
        return f"xilinx.com:interface:{self.kind}:1.0"


_AXI_LITE = (
    ("AWADDR", "in"), ("AWPROT", "in"), ("AWVALID", "in"), ("AWREADY", "out"),
    ("WDATA", "in"), ("WSTRB", "in"), ("WVALID", "in"), ("WREADY", "out"),
    ("BRESP", "out"), ("BVALID", "out"), ("BREADY", "in"),
    ("ARADDR", "in"), ("ARPROT", "in"), ("ARVALID", "in"), ("ARREADY", "out"),
    ("RDATA", "out"), ("RRESP", "out"), ("RVALID", "out"), ("RREADY", "in"),
)
_FIXED_WIDTHS = {"AWPROT": 3, "ARPROT": 3, "WDATA": DATA_WIDTH, "RDATA": DATA_WIDTH,
                 "WSTRB": DATA_WIDTH // 8, "BRESP": 2, "RRESP": 2}


#: AXI4 from its manager's side (the engine's memory master), in the wrapper's port order.
_AXI4_MASTER = (
    ("AWID", "out"), ("AWADDR", "out"), ("AWLEN", "out"), ("AWSIZE", "out"), ("AWBURST", "out"),
    ("AWLOCK", "out"), ("AWCACHE", "out"), ("AWPROT", "out"), ("AWQOS", "out"),
    ("AWVALID", "out"), ("AWREADY", "in"),
    ("WDATA", "out"), ("WSTRB", "out"), ("WLAST", "out"), ("WVALID", "out"), ("WREADY", "in"),
    ("BID", "in"), ("BRESP", "in"), ("BVALID", "in"), ("BREADY", "out"),
    ("ARID", "out"), ("ARADDR", "out"), ("ARLEN", "out"), ("ARSIZE", "out"), ("ARBURST", "out"),
    ("ARLOCK", "out"), ("ARCACHE", "out"), ("ARPROT", "out"), ("ARQOS", "out"),
    ("ARVALID", "out"), ("ARREADY", "in"),
    ("RID", "in"), ("RDATA", "in"), ("RRESP", "in"), ("RLAST", "in"), ("RVALID", "in"),
    ("RREADY", "out"),
)
#: Widths of the AXI4 master's fields that do not depend on the engine.
_AXI4_WIDTHS = {"AWADDR": ADDRESS_BITS, "ARADDR": ADDRESS_BITS, "AWLEN": 8, "ARLEN": 8,
                "AWSIZE": 3, "ARSIZE": 3, "AWBURST": 2, "ARBURST": 2, "AWLOCK": 1, "ARLOCK": 1,
                "AWCACHE": 4, "ARCACHE": 4, "AWPROT": 3, "ARPROT": 3, "AWQOS": 4, "ARQOS": 4,
                "BRESP": 2, "RRESP": 2,
                "AWID": AXI_ID_BITS, "ARID": AXI_ID_BITS, "BID": AXI_ID_BITS, "RID": AXI_ID_BITS}


def _axis(into):
    """AXI4-Stream signals seen from the side the data flows ``into`` (True) or out of."""
    d, r = ("in", "out") if into else ("out", "in")
    return (("TDATA", d), ("TVALID", d), ("TREADY", r), ("TLAST", d), ("TKEEP", d))


@dataclass(frozen=True)
class EngineCell:
    """The engine in the block design: an RTL module reference to its wrapper.

    Parameters
    ----------
    module : str
        The wrapper's Verilog module (``create_bd_cell -type module
        -reference MODULE``); Vivado writes it as the cell's ``MODTYPE``.
    cell : str
        The cell name (``.hwh`` ``INSTANCE``, ``FULLNAME`` ``/CELL``).
    clock, resetn : str
        The wrapper's clock and active-low reset ports.
    control, stream_in, stream_out : BusInterface
        AXI4-Lite registers, the stream from the DMA, the stream to the DMA.
    memory : BusInterface
        The AXI4 master the program engine reads and writes DDR through.
    interrupt : str
        The sequencer's interrupt output (level high).
    segment : str
        The address segment Vivado creates for ``control`` (``engine/s_axi/reg0``).
    address_space : str
        The address space Vivado creates for ``memory`` (``engine/m_axi``).
    """

    module: str = "fpgacnn_axi"
    cell: str = "engine"
    clock: str = "aclk"
    resetn: str = "aresetn"
    control: BusInterface = BusInterface("s_axi", "aximm", "SLAVE", _AXI_LITE)
    stream_in: BusInterface = BusInterface("s_axis", "axis", "TARGET", _axis(into=True))
    stream_out: BusInterface = BusInterface("m_axis", "axis", "INITIATOR", _axis(into=False))
    memory: BusInterface = BusInterface("m_axi", "aximm", "MASTER", _AXI4_MASTER)
    interrupt: str = "irq"
    segment: str = "reg0"

    @property
    def vlnv(self):
        """What Vivado writes as the ``VLNV`` of a module-reference cell."""
        return f"xilinx.com:module_ref:{self.module}:1.0"

    @property
    def interfaces(self):
        return (self.control, self.stream_in, self.stream_out, self.memory)

    @property
    def address_space(self):
        return f"{self.cell}/{self.memory.name}"

    @property
    def register_range(self):
        """Bytes of the register window: the whole AXI4-Lite address space."""
        return 1 << ADDR_WIDTH

    def ports(self, stream_width, memory_width):
        """Every port of the wrapper, in its Verilog order.

        Parameters
        ----------
        stream_width : int
            The engine's AXI4-Stream ``TDATA`` width in bits.
        memory_width : int
            The memory master's data width in bits (:meth:`ZynqDesign.memory_width`).

        Returns
        -------
        tuple of Port
        """
        lite = dict(_FIXED_WIDTHS, AWADDR=ADDR_WIDTH, ARADDR=ADDR_WIDTH)
        stream = {"TDATA": stream_width, "TKEEP": stream_width // 8}
        memory = dict(_AXI4_WIDTHS, WDATA=memory_width, RDATA=memory_width,
                      WSTRB=memory_width // 8)
        widths = {self.control.name: lite, self.stream_in.name: stream,
                  self.stream_out.name: stream, self.memory.name: memory}
        ports = [Port(self.clock, "in", 1), Port(self.resetn, "in", 1)]
        for bus in self.interfaces:
            ports += [Port(f"{bus.name}_{logical.lower()}", direction,
                           widths[bus.name].get(logical, 1), bus.name, logical)
                      for logical, direction in bus.signals]
        ports.append(Port(self.interrupt, "out", 1))
        return tuple(ports)


@dataclass(frozen=True)
class AxiDma:
    """The AXI DMA that streams to and from the engine.

    Parameters
    ----------
    cell : str
    vlnv_prefix : str
        ``vendor:library:name``; the script takes the newest version in the
        Vivado catalog, the driver accepts any version.
    version : str
        The version the simulated ``.hwh`` names (the current one, 7.1).
    control, segment : str
        Its AXI4-Lite register interface and address segment.
    mm2s, s2mm : str
        The stream to the engine and the stream from it.
    mm2s_master, s2mm_master : str
        Its memory-mapped masters into DDR.
    clocks : tuple of str
    resetn : str
    interrupts : tuple of str
    length_width : int
        Width of the buffer-length register: at most ``2**length_width - 1``
        bytes per transfer (26 bits: 64 MiB - 1).
    burst : int
    register_range : int
    """

    cell: str = "dma"
    vlnv_prefix: str = "xilinx.com:ip:axi_dma"
    version: str = "7.1"
    control: str = "S_AXI_LITE"
    segment: str = "Reg"
    mm2s: str = "M_AXIS_MM2S"
    s2mm: str = "S_AXIS_S2MM"
    mm2s_master: str = "M_AXI_MM2S"
    s2mm_master: str = "M_AXI_S2MM"
    clocks: tuple = ("s_axi_lite_aclk", "m_axi_mm2s_aclk", "m_axi_s2mm_aclk")
    resetn: str = "axi_resetn"
    interrupts: tuple = ("mm2s_introut", "s2mm_introut")
    length_width: int = 26
    burst: int = 16
    register_range: int = 0x1_0000

    @property
    def vlnv(self):
        return f"{self.vlnv_prefix}:{self.version}"

    def config(self, stream_width, addr_width):
        """The IP's ``CONFIG.*`` settings (Vivado's lower-case names), for the script and the .hwh.

        Scatter-gather off: simple (register) mode, the mode ``pynq.lib.dma.DMA``
        drives. Both streams at the engine's width; the memory side at least 32 bits.
        """
        mm = str(max(stream_width, 32))
        return {
            "c_include_sg": "0",
            "c_sg_length_width": str(self.length_width),
            "c_sg_include_stscntrl_strm": "0",
            "c_include_mm2s": "1", "c_include_s2mm": "1",
            "c_m_axis_mm2s_tdata_width": str(stream_width),
            "c_s_axis_s2mm_tdata_width": str(stream_width),
            "c_m_axi_mm2s_data_width": mm, "c_m_axi_s2mm_data_width": mm,
            "c_mm2s_burst_size": str(self.burst), "c_s2mm_burst_size": str(self.burst),
            "c_addr_width": str(addr_width),
        }


@dataclass(frozen=True)
class ProcessingSystem:
    """The processing system of one PS kind, and the address map around it.

    Parameters
    ----------
    family : str
        Board family (``zynq7``, ``zynqmp``).
    ip, version : str
        ``xilinx.com:ip:IP`` (the ``.hwh`` ``MODTYPE``) and the version the
        simulated ``.hwh`` names.
    cell : str
    arch : str
        The ``.hwh`` ``SYSTEMINFO ARCH``.
    master, master_aclk : str
        The general-purpose master port to the registers, and its clock pin.
    hp_slave, hp_aclk : str
        The high-performance slave port the DMA reaches DDR through, and its clock pin.
    clock, resetn, irq : str
        Fabric clock 0, its reset, the fabric interrupt input.
    engine_base, dma_base : int
        Base addresses of the engine's and the DMA's register windows.
    ddr_segment : str
        The DDR segment the DMA and the engine see through ``hp_slave``.
    ddr_base, ddr_range : int
    hp_max_width : int
        The widest data the HP port takes, in bits (the design sets it, and
        the engine's memory master, to :meth:`ZynqDesign.memory_width`).
    dma_addr_width : int
        The DMA's address width (32 on Zynq-7000, 64 on UltraScale+).
    """

    family: str
    ip: str
    version: str
    cell: str
    arch: str
    master: str
    master_aclk: str
    hp_slave: str
    hp_aclk: str
    clock: str
    resetn: str
    irq: str
    engine_base: int
    dma_base: int
    ddr_segment: str
    ddr_base: int
    ddr_range: int
    dma_addr_width: int
    hp_max_width: int = 64
    data_space: str = "Data"

    @property
    def vlnv(self):
        return f"xilinx.com:ip:{self.ip}:{self.version}"


_PS = (
    ProcessingSystem(
        family="zynq7", ip="processing_system7", version="5.5", cell="ps7", arch="zynq",
        master="M_AXI_GP0", master_aclk="M_AXI_GP0_ACLK",
        hp_slave="S_AXI_HP0", hp_aclk="S_AXI_HP0_ACLK",
        clock="FCLK_CLK0", resetn="FCLK_RESET0_N", irq="IRQ_F2P",
        engine_base=0x43C0_0000, dma_base=0x4040_0000,   # the GP0 window PYNQ designs use
        ddr_segment="HP0_DDR_LOWOCM", ddr_base=0, ddr_range=0x2000_0000,
        dma_addr_width=32),
    ProcessingSystem(
        family="zynqmp", ip="zynq_ultra_ps_e", version="3.5", cell="zynq_ps", arch="zynquplus",
        master="M_AXI_HPM0_FPD", master_aclk="maxihpm0_fpd_aclk",
        hp_slave="S_AXI_HP0_FPD", hp_aclk="saxihp0_fpd_aclk",
        clock="pl_clk0", resetn="pl_resetn0", irq="pl_ps_irq0",
        engine_base=0xA000_0000, dma_base=0xA001_0000,   # the HPM0_FPD window
        ddr_segment="HP0_DDR_LOW", ddr_base=0, ddr_range=0x8000_0000,
        dma_addr_width=64, hp_max_width=128),
)


@dataclass(frozen=True)
class ZynqDesign:
    """Everything in the Zynq block design that the script, the ``.hwh`` and the driver share.

    Parameters
    ----------
    engine : EngineCell
    dma : AxiDma
    processing_systems : tuple of ProcessingSystem
    ctrl_xbar, mem_xbar : str
        SmartConnect cells: PS master -> engine and DMA registers; the DMA's
        two masters and the engine's memory master -> the PS's HP port (the
        SmartConnect converts the engine's AXI4 to the Zynq-7000 HP port's
        AXI3; the engine's bursts are at most 16 beats, so none is split).
    reset, irq_concat : str
        The processor system reset cell and the interrupt concatenation cell.
    """

    engine: EngineCell = EngineCell()
    dma: AxiDma = AxiDma()
    processing_systems: tuple = _PS
    ctrl_xbar: str = "ctrl_xbar"
    mem_xbar: str = "mem_xbar"
    reset: str = "rst"
    irq_concat: str = "irq_concat"

    @property
    def families(self):
        return tuple(ps.family for ps in self.processing_systems)

    def ps(self, family):
        """The :class:`ProcessingSystem` of a board family.

        Raises
        ------
        BoardError
            If the family has no Zynq PS.
        """
        for ps in self.processing_systems:
            if ps.family == family:
                return ps
        raise BoardError(f"family {family!r} has no Zynq PS (one of {', '.join(self.families)})")

    def memory_width(self, family, config):
        """The data width in bits of the engine's memory master and the HP port: 64, or
        the engine's memory read or write if wider (:mod:`fpgacnn.core.memory_port`).

        Raises
        ------
        BoardError
            If that is wider than the family's HP port takes, or not a power of
            two (a ``pin`` of 12, say).
        """
        limit = self.ps(family).hp_max_width
        for what, nbytes in (("read", read_bytes(config)), ("write", write_bytes(config))):
            if nbytes & (nbytes - 1):
                raise BoardError(f"the engine's memory {what} of {nbytes} bytes (its input "
                                 f"word) is not a power of two, which an AXI4 beat must be")
            if 8 * nbytes > limit:
                raise BoardError(f"the engine's memory {what} of {nbytes} bytes (its beat or "
                                 f"input word) is wider than the {family} HP port's "
                                 f"{limit} bits")
        return max(64, 8 * read_bytes(config), 8 * write_bytes(config))

    def memory_bytes_per_cycle(self, family, config):
        """Bytes the HP port moves each way in one engine clock cycle: its width as the
        design sets it (:meth:`memory_width`) / 8.

        The engine, the DMA and the HP port run on one fabric clock
        (:meth:`clock_net`), so this is the port's bandwidth in the engine's
        cycles whatever the clock: 8 on a Zynq-7000 (a 64-bit HP port), 16 on
        a Zynq UltraScale+ whose engine reads or writes 128-bit beats. The
        simulated board's memory model takes it
        (``SimulatedBoard.set_memory_timing(bytes_per_cycle=...)``).

        Raises
        ------
        BoardError
            As :meth:`memory_width`, or if the family has no Zynq PS.

        Examples
        --------
        >>> from fpgacnn.core.config import EngineConfig
        >>> DESIGN.memory_bytes_per_cycle("zynqmp", EngineConfig(pin=8, stream_width=128))
        16
        >>> DESIGN.memory_bytes_per_cycle("zynq7", EngineConfig(pin=4, stream_width=64))
        8
        """
        return self.memory_width(family, config) // 8

    def address_map(self, family):
        """``{cell: (segment path, base, range)}`` of the register windows on the PS master."""
        ps = self.ps(family)
        e, d = self.engine, self.dma
        return {e.cell: (f"{e.cell}/{e.control.name}/{e.segment}", ps.engine_base,
                         e.register_range),
                d.cell: (f"{d.cell}/{d.control}/{d.segment}", ps.dma_base, d.register_range)}

    def interface_nets(self, family):
        """Every interface connection, ``(driver pin, driven pin)``, master or initiator first."""
        ps, e, d = self.ps(family), self.engine, self.dma
        c, m = self.ctrl_xbar, self.mem_xbar
        return (
            (f"{ps.cell}/{ps.master}", f"{c}/S00_AXI"),
            (f"{c}/M00_AXI", f"{e.cell}/{e.control.name}"),
            (f"{c}/M01_AXI", f"{d.cell}/{d.control}"),
            (f"{d.cell}/{d.mm2s}", f"{e.cell}/{e.stream_in.name}"),
            (f"{e.cell}/{e.stream_out.name}", f"{d.cell}/{d.s2mm}"),
            (f"{d.cell}/{d.mm2s_master}", f"{m}/S00_AXI"),
            (f"{d.cell}/{d.s2mm_master}", f"{m}/S01_AXI"),
            (f"{e.cell}/{e.memory.name}", f"{m}/S02_AXI"),
            (f"{m}/M00_AXI", f"{ps.cell}/{ps.hp_slave}"),
        )

    def memory_masters(self, family):
        """The pins that reach DDR through ``mem_xbar`` (the DMA's two and the engine's)."""
        return tuple(a for a, b in self.interface_nets(family)
                     if b.startswith(f"{self.mem_xbar}/S"))

    def interrupts(self):
        """``(cell, pin)`` of every interrupt, in the order of the concatenation's inputs."""
        return (*((self.dma.cell, p) for p in self.dma.interrupts),
                (self.engine.cell, self.engine.interrupt))

    def clock_net(self, family):
        """``(source pin, sink pins)``: one fabric clock for every cell."""
        ps, e, d = self.ps(family), self.engine, self.dma
        sinks = (f"{e.cell}/{e.clock}", *(f"{d.cell}/{p}" for p in d.clocks),
                 f"{self.ctrl_xbar}/aclk", f"{self.mem_xbar}/aclk",
                 f"{self.reset}/slowest_sync_clk",
                 f"{ps.cell}/{ps.master_aclk}", f"{ps.cell}/{ps.hp_aclk}")
        return f"{ps.cell}/{ps.clock}", sinks

    def reset_net(self, family):
        """``(source pin, sink pins)``: the synchronised active-low reset."""
        e, d = self.engine, self.dma
        sinks = (f"{e.cell}/{e.resetn}", f"{d.cell}/{d.resetn}",
                 f"{self.ctrl_xbar}/aresetn", f"{self.mem_xbar}/aresetn")
        return f"{self.reset}/peripheral_aresetn", sinks

    def busname(self, pin, family):
        """The interface net ``pin`` is on, named as Vivado names it: driver cell, ``_``, interface.

        Raises
        ------
        BoardError
            If ``pin`` is on no interface net.
        """
        for driver, driven in self.interface_nets(family):
            if pin in (driver, driven):
                return driver.replace("/", "_")
        raise BoardError(f"{pin} is on no interface net of the {family} design")


#: The design every Zynq build, simulated ``.hwh`` and PYNQ driver use.
DESIGN = ZynqDesign()
