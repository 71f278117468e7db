"""The hardware handoff (``.hwh``) of a Zynq build, written without Vivado.

Vivado writes ``NAME.hwh`` beside ``NAME.bit`` when it builds the block
design of :mod:`fpgacnn.boards.zynq_vivado`; ``pynq.Overlay`` reads it to find
the IP, and so does :class:`fpgacnn.host.pynq_board.PynqBoard`. To run the
pynq backend against the RTL in CI (cocotbpynq standing in for pynq), the
simulated board needs that file, so this module writes it from the same
design description the script is generated from
(:data:`fpgacnn.boards.zynq_design.DESIGN`): one MODULE per cell the driver
and the parsers look at, with the names, ports and address map the script
creates.

It follows what Vivado writes (checked against a Vivado 2025.2 handoff of a
PYNQ-Z2 design with an AXI DMA, ``cnn_accel.hwh`` in the public repository
a3d2ddk/Binary-CNN-Accelerator) and what the parsers read (PYNQ 2.x's
``pynq/pl_server/hwh_parser.py`` and PYNQ 3's ``pynqmetadata/frontends/
hwh_frontend.py`` in Xilinx/PYNQ and Xilinx/PYNQ-Metadata; cocotbpynq's
``overlay.py``, ``mmio.py`` and ``dma.py``):

- the PS is the MODULE with ``IS_PL="FALSE"`` and ``MODTYPE``
  ``processing_system7`` / ``zynq_ultra_ps_e``; its ``MEMORYMAP`` holds one
  ``MEMRANGE`` per register window (``INSTANCE``, ``BASEVALUE``/
  ``HIGHVALUE``, ``MASTERBUSINTERFACE`` on the PS, ``SLAVEBUSINTERFACE`` on
  the cell), and the parsers' ``ip_dict`` keys are the cells' ``FULLNAME``
  without the leading ``/`` (``engine``, ``dma``);
- a module-reference cell is a MODULE whose ``MODTYPE`` is the Verilog
  module (``fpgacnn_axi``) and whose ``VLNV`` is
  ``xilinx.com:module_ref:MODULE:1.0``, without ``BDTYPE`` (PYNQ 2.x would
  otherwise key it by interface, ``engine/s_axi``);
- an interface net is one ``BUSNAME`` on both ends, named after the driving
  cell and interface (``dma_M_AXIS_MM2S``), which is how cocotbpynq pairs
  the DMA's channels with the engine's streams; every ``PORTMAP`` names a
  ``PORT`` of its own MODULE, and a ``PORT``'s ``CONNECTION`` names a port of
  another MODULE in the file;
- the DMA lists its IP parameters both as HDL generics (``C_INCLUDE_SG``)
  and as the lower-case ``CONFIG`` names the script sets;
- the engine's AXI4 memory master (``m_axi``) is a ``MASTER`` bus interface
  with its port map, which the simulated board binds a DDR model to, and the
  engine's ``MEMORYMAP`` holds the DDR segment it reaches.

What no reader of the file needs is left out: the SmartConnects, the reset
and interrupt cells (nets to them keep their ``SIGNAME`` but carry no
``CONNECTION``), the port maps of the DMA's AXI4 memory masters, register
descriptions and the PS's pins to DDR and MIO.
"""

from xml.etree import ElementTree as ET

from ..boards.board import BoardError, require_board
from ..boards.zynq_design import DESIGN
from ..boards.zynq_vivado import ps_config
from ..core.config import require_config
from ..core.memory_port import ADDRESS_BITS, AXI_ID_BITS, AXI_MAX_BURST
from ..core.regmap import ADDR_WIDTH, DATA_WIDTH

__all__ = ["simulation_hwh"]

# The DMA's register slave: AXI4-Lite without PROT and WSTRB, 10 address bits.
_DMA_LITE = (("AWADDR", "in", 10), ("AWVALID", "in", 1), ("AWREADY", "out", 1),
             ("WDATA", "in", 32), ("WVALID", "in", 1), ("WREADY", "out", 1),
             ("BRESP", "out", 2), ("BVALID", "out", 1), ("BREADY", "in", 1),
             ("ARADDR", "in", 10), ("ARVALID", "in", 1), ("ARREADY", "out", 1),
             ("RDATA", "out", 32), ("RRESP", "out", 2), ("RVALID", "out", 1),
             ("RREADY", "in", 1))
# Fabric clock sources: Zynq-7000 IO PLL, UltraScale+ IOPLL (MHz).
_PLL_MHZ = {"zynq7": 1000.0, "zynqmp": 1500.0}


def _hex(n):
    return f"0x{n:08X}" if n < 1 << 32 else f"0x{n:016X}"


def _port(ports, name, direction, width, sigis="undef", signame=None, connect=(), **extra):
    attrs = {"DIR": "I" if direction == "in" else "O", "NAME": name, "SIGIS": sigis}
    if width > 1:
        attrs.update(LEFT=str(width - 1), RIGHT="0")
    if signame is not None:
        attrs["SIGNAME"] = signame
    attrs.update(extra)
    port = ET.SubElement(ports, "PORT", attrs)
    if connect:
        conns = ET.SubElement(port, "CONNECTIONS")
        for instance, pin in connect:
            ET.SubElement(conns, "CONNECTION", {"INSTANCE": instance, "PORT": pin})
    return port


def _parameters(module, params):
    el = ET.SubElement(module, "PARAMETERS")
    for name, value in params.items():
        ET.SubElement(el, "PARAMETER", {"NAME": name, "VALUE": str(value)})


def _busif(buses, name, busname, mode, vlnv, params=None, portmap=None, **extra):
    bus = ET.SubElement(buses, "BUSINTERFACE", {"BUSNAME": busname, "NAME": name, "TYPE": mode,
                                                "VLNV": vlnv, **extra})
    for key, value in (params or {}).items():
        ET.SubElement(bus, "PARAMETER", {"NAME": key, "VALUE": str(value)})
    if portmap is not None:
        maps = ET.SubElement(bus, "PORTMAPS")
        for logical, physical in portmap:
            ET.SubElement(maps, "PORTMAP", {"LOGICAL": logical, "PHYSICAL": physical})
    return bus


def _memrange(memmap, instance, block, base, rng, master, slave, memtype, basename="C_BASEADDR"):
    ET.SubElement(memmap, "MEMRANGE", {
        "ADDRESSBLOCK": block, "BASENAME": basename, "BASEVALUE": _hex(base),
        "HIGHNAME": basename.replace("BASEADDR", "HIGHADDR"), "HIGHVALUE": _hex(base + rng - 1),
        "INSTANCE": instance, "IS_DATA": "TRUE", "IS_INSTRUCTION": "TRUE",
        "MASTERBUSINTERFACE": master, "MEMTYPE": memtype, "SLAVEBUSINTERFACE": slave})


def _clock_parameters(family, mhz):
    """The PS parameters PYNQ reads to set the fabric clocks: clock 0 on, the rest off."""
    d0 = max(1, min(63, round(_PLL_MHZ[family] / mhz)))
    params = {}
    for i in range(4):
        if family == "zynqmp":
            params[f"PSU__FPGA_PL{i}_ENABLE"] = int(i == 0)
            params[f"PSU__CRL_APB__PL{i}_REF_CTRL__DIVISOR0"] = d0 if i == 0 else 15
            params[f"PSU__CRL_APB__PL{i}_REF_CTRL__DIVISOR1"] = 1
        else:
            params[f"PCW_FPGA_FCLK{i}_ENABLE"] = int(i == 0)
            params[f"PCW_FCLK{i}_PERIPHERAL_DIVISOR0"] = d0 if i == 0 else 10
            params[f"PCW_FCLK{i}_PERIPHERAL_DIVISOR1"] = 1
    return params


def simulation_hwh(config, board, *, name="design", design=DESIGN):
    """The ``.hwh`` XML text Vivado would write for the Zynq build of ``config`` on ``board``.

    Parameters
    ----------
    config : EngineConfig
        Sets the stream widths (wrapper ports, DMA parameters).
    board : Board
        A Vivado board: its family picks the PS and the address map, its
        clock the fabric clock, its part the ``SYSTEMINFO``.
    name : str
        The block design's name (``NAME.hwh``).
    design : ZynqDesign
        The design description (default: the one the script is built from).

    Returns
    -------
    str

    Raises
    ------
    BoardError
        If the board has no Zynq PS.

    Examples
    --------
    >>> from fpgacnn.boards.board import load_board
    >>> from fpgacnn.core.config import EngineConfig
    >>> text = simulation_hwh(EngineConfig(), load_board("pynq-z2"))
    >>> 'MODTYPE="fpgacnn_axi"' in text and 'INSTANCE="dma"' in text
    True
    """
    require_config(config)
    require_board(board)
    if board.vivado is None:
        raise BoardError(f"{board.path}: board {board.name!r} is not a Vivado (Zynq) board")
    family = board.family
    ps, engine, dma = design.ps(family), design.engine, design.dma
    sw = config.stream_width
    hz = int(round(board.clock.target_mhz * 1e6))
    clock_net = f"{ps.cell}_{ps.clock}"
    reset_net = design.reset_net(family)[0].replace("/", "_")

    root = ET.Element("EDKSYSTEM", {"EDWVERSION": "1.2", "TIMESTAMP": "fpgacnn simulation",
                                    "VIVADOVERSION": "none (fpgacnn.sim.pynq_hwh)"})
    device = board.device.removeprefix("xc").split(board.package)[0].rstrip("-")
    ET.SubElement(root, "SYSTEMINFO", {"ARCH": ps.arch, "BOARD": board.vivado.board_part,
                                       "DEVICE": device, "NAME": name, "PACKAGE": board.package,
                                       "SPEEDGRADE": board.speed})
    ET.SubElement(root, "EXTERNALPORTS")  # the PS's DDR and MIO pins: no reader needs them
    ET.SubElement(root, "EXTERNALINTERFACES")
    modules = ET.SubElement(root, "MODULES")

    # Stream nets carry the names of the interface that drives them, on both ends.
    mm2s_ports = {lg: f"m_axis_mm2s_{lg.lower()}" for lg, _ in engine.stream_in.signals}
    s2mm_ports = {lg: f"s_axis_s2mm_{lg.lower()}" for lg, _ in engine.stream_out.signals}
    stream_in_net = {lg: f"{dma.cell}_{p}" for lg, p in mm2s_ports.items()}
    stream_out_net = {lg: f"{engine.cell}_{engine.stream_out.name}_{lg.lower()}"
                      for lg in s2mm_ports}

    # -- the DMA -----------------------------------------------------------------
    m = ET.SubElement(modules, "MODULE", {
        "FULLNAME": f"/{dma.cell}", "HWVERSION": dma.version, "INSTANCE": dma.cell,
        "IPTYPE": "PERIPHERAL", "IS_ENABLE": "1", "MODCLASS": "PERIPHERAL",
        "MODTYPE": dma.vlnv_prefix.split(":")[-1], "VLNV": dma.vlnv})
    cfg = dma.config(sw, ps.dma_addr_width)
    generics = {k.upper(): v for k, v in cfg.items() if k != "c_addr_width"}
    generics["C_M_AXI_MM2S_ADDR_WIDTH"] = generics["C_M_AXI_S2MM_ADDR_WIDTH"] = cfg["c_addr_width"]
    _parameters(m, {**generics, "Component_Name": f"{name}_{dma.cell}_0", **cfg,
                    "EDK_IPTYPE": "PERIPHERAL", "C_BASEADDR": _hex(ps.dma_base),
                    "C_HIGHADDR": _hex(ps.dma_base + dma.register_range - 1)})
    ports = ET.SubElement(m, "PORTS")
    _port(ports, dma.resetn, "in", 1, "rst", reset_net, POLARITY="ACTIVE_LOW")
    for clk in dma.clocks:
        _port(ports, clk, "in", 1, "clk", clock_net, [(ps.cell, ps.clock)],
              CLKFREQUENCY=str(hz))
    lite = dma.control.lower()
    for logical, direction, width in _DMA_LITE:
        _port(ports, f"{lite}_{logical.lower()}", direction, width,
              signame=f"{dma.cell}_{lite}_{logical.lower()}")
    for (logical, into), port in zip(engine.stream_in.signals, mm2s_ports.values()):
        width = {"TDATA": sw, "TKEEP": sw // 8}.get(logical, 1)
        # The engine's stream in is the DMA's stream out: directions swap.
        _port(ports, port, "out" if into == "in" else "in", width, signame=stream_in_net[logical],
              connect=[(engine.cell, f"{engine.stream_in.name}_{logical.lower()}")])
    for (logical, out), port in zip(engine.stream_out.signals, s2mm_ports.values()):
        width = {"TDATA": sw, "TKEEP": sw // 8}.get(logical, 1)
        _port(ports, port, "in" if out == "out" else "out", width,
              signame=stream_out_net[logical],
              connect=[(engine.cell, f"{engine.stream_out.name}_{logical.lower()}")])
    for irq in dma.interrupts:
        _port(ports, irq, "out", 1, "INTERRUPT", f"{dma.cell}_{irq}", SENSITIVITY="LEVEL_HIGH")
    buses = ET.SubElement(m, "BUSINTERFACES")
    _busif(buses, dma.control, design.busname(f"{dma.cell}/{dma.control}", family), "SLAVE",
           "xilinx.com:interface:aximm:1.0",
           {"PROTOCOL": "AXI4LITE", "ADDR_WIDTH": 10, "DATA_WIDTH": 32, "FREQ_HZ": hz},
           [(lg, f"{lite}_{lg.lower()}") for lg, _, _ in _DMA_LITE], DATAWIDTH="32")
    mm_width = cfg["c_m_axi_mm2s_data_width"]
    for master, mode in ((dma.mm2s_master, "READ_ONLY"), (dma.s2mm_master, "WRITE_ONLY")):
        _busif(buses, master, design.busname(f"{dma.cell}/{master}", family), "MASTER",
               "xilinx.com:interface:aximm:1.0",
               {"PROTOCOL": "AXI4", "ADDR_WIDTH": ps.dma_addr_width, "DATA_WIDTH": mm_width,
                "READ_WRITE_MODE": mode, "FREQ_HZ": hz}, DATAWIDTH=mm_width)
    axis = {"HAS_TKEEP": 1, "HAS_TLAST": 1, "HAS_TREADY": 1, "TDATA_NUM_BYTES": sw // 8,
            "FREQ_HZ": hz}
    _busif(buses, dma.mm2s, design.busname(f"{dma.cell}/{dma.mm2s}", family), "INITIATOR",
           "xilinx.com:interface:axis:1.0", axis, list(mm2s_ports.items()))
    _busif(buses, dma.s2mm, design.busname(f"{dma.cell}/{dma.s2mm}", family), "TARGET",
           "xilinx.com:interface:axis:1.0", axis, list(s2mm_ports.items()))
    memmap = ET.SubElement(m, "MEMORYMAP")
    for master in (dma.mm2s_master, dma.s2mm_master):
        _memrange(memmap, ps.cell, ps.ddr_segment, ps.ddr_base, ps.ddr_range, master,
                  ps.hp_slave, "MEMORY")

    # -- the engine: a module reference to the wrapper -------------------------------
    m = ET.SubElement(modules, "MODULE", {
        "COREREVISION": "1", "FULLNAME": f"/{engine.cell}", "HWVERSION": "1.0",
        "INSTANCE": engine.cell, "IPTYPE": "PERIPHERAL", "IS_ENABLE": "1",
        "MODCLASS": "PERIPHERAL", "MODTYPE": engine.module, "VLNV": engine.vlnv})
    _parameters(m, {"Component_Name": f"{name}_{engine.cell}_0", "EDK_IPTYPE": "PERIPHERAL"})
    memory_width = design.memory_width(family, config)
    ports = ET.SubElement(m, "PORTS")
    for port in engine.ports(sw, memory_width):
        if port.name == engine.clock:
            _port(ports, port.name, "in", 1, "clk", clock_net, [(ps.cell, ps.clock)],
                  CLKFREQUENCY=str(hz))
        elif port.name == engine.resetn:
            _port(ports, port.name, "in", 1, "rst", reset_net, POLARITY="ACTIVE_LOW")
        elif port.interface == engine.stream_in.name:
            _port(ports, port.name, port.direction, port.width, signame=stream_in_net[port.logical],
                  connect=[(dma.cell, mm2s_ports[port.logical])])
        elif port.interface == engine.stream_out.name:
            _port(ports, port.name, port.direction, port.width,
                  signame=stream_out_net[port.logical],
                  connect=[(dma.cell, s2mm_ports[port.logical])])
        elif port.name == engine.interrupt:
            _port(ports, port.name, "out", 1, "INTERRUPT", f"{engine.cell}_{port.name}",
                  SENSITIVITY="LEVEL_HIGH")
        else:
            _port(ports, port.name, port.direction, port.width,
                  signame=f"{engine.cell}_{port.name}")
    buses = ET.SubElement(m, "BUSINTERFACES")
    for bus in engine.interfaces:
        if bus is engine.memory:
            params = {"PROTOCOL": "AXI4", "ADDR_WIDTH": ADDRESS_BITS, "DATA_WIDTH": memory_width,
                      "ID_WIDTH": AXI_ID_BITS, "MAX_BURST_LENGTH": AXI_MAX_BURST,
                      "READ_WRITE_MODE": "READ_WRITE", "FREQ_HZ": hz}
            extra = {"DATAWIDTH": str(memory_width)}
        elif bus.kind == "aximm":
            params = {"PROTOCOL": "AXI4LITE", "ADDR_WIDTH": ADDR_WIDTH, "DATA_WIDTH": DATA_WIDTH,
                      "FREQ_HZ": hz}
            extra = {"DATAWIDTH": str(DATA_WIDTH)}
        else:
            params, extra = axis, {}
        _busif(buses, bus.name, design.busname(f"{engine.cell}/{bus.name}", family), bus.mode,
               bus.vlnv, params,
               [(lg, f"{bus.name}_{lg.lower()}") for lg, _ in bus.signals], **extra)

    memmap = ET.SubElement(m, "MEMORYMAP")  # what the engine's master reaches: DDR
    _memrange(memmap, ps.cell, ps.ddr_segment, ps.ddr_base, ps.ddr_range, engine.memory.name,
              ps.hp_slave, "MEMORY")

    # -- the processing system and its address map ---------------------------------
    m = ET.SubElement(modules, "MODULE", {
        "CONFIGURABLE": "TRUE", "FULLNAME": f"/{ps.cell}", "HWVERSION": ps.version,
        "INSTANCE": ps.cell, "IPTYPE": "PERIPHERAL", "IS_ENABLE": "1", "IS_PL": "FALSE",
        "MODTYPE": ps.ip, "VLNV": ps.vlnv})
    _parameters(m, {**_clock_parameters(family, board.clock.target_mhz),
                    **ps_config(family, board.clock.target_mhz, memory_width)})
    ports = ET.SubElement(m, "PORTS")
    sinks = [(engine.cell, engine.clock), *((dma.cell, c) for c in dma.clocks),
             (ps.cell, ps.master_aclk), (ps.cell, ps.hp_aclk)]
    _port(ports, ps.clock, "out", 1, "clk", clock_net, sinks, CLKFREQUENCY=str(hz))
    _port(ports, ps.resetn, "out", 1, "rst", f"{ps.cell}_{ps.resetn}", POLARITY="ACTIVE_LOW")
    for pin in (ps.master_aclk, ps.hp_aclk):
        _port(ports, pin, "in", 1, "clk", clock_net, [(ps.cell, ps.clock)], CLKFREQUENCY=str(hz))
    _port(ports, ps.irq, "in", 1, "INTERRUPT", f"{design.irq_concat}_dout",
          SENSITIVITY="LEVEL_HIGH")
    buses = ET.SubElement(m, "BUSINTERFACES")
    _busif(buses, ps.master, design.busname(f"{ps.cell}/{ps.master}", family), "MASTER",
           "xilinx.com:interface:aximm:1.0", {"PROTOCOL": "AXI4", "DATA_WIDTH": 32,
                                              "FREQ_HZ": hz}, DATAWIDTH="32")
    _busif(buses, ps.hp_slave, design.busname(f"{ps.cell}/{ps.hp_slave}", family), "SLAVE",
           "xilinx.com:interface:aximm:1.0", {"PROTOCOL": "AXI4", "DATA_WIDTH": memory_width,
                                              "FREQ_HZ": hz}, DATAWIDTH=str(memory_width))
    memmap = ET.SubElement(m, "MEMORYMAP")
    for cell, (segment, base, rng) in design.address_map(family).items():
        _, slave, block = segment.split("/")
        _memrange(memmap, cell, block, base, rng, ps.master, slave, "REGISTER")
    peripherals = ET.SubElement(m, "PERIPHERALS")
    for cell in design.address_map(family):
        ET.SubElement(peripherals, "PERIPHERAL", {"INSTANCE": cell})

    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
