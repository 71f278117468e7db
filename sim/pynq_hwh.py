"""A hardware handoff (.hwh) describing the engine in a PYNQ-Z2-like design.

Vivado writes the real ``.hwh`` of a Zynq build (fpgacnn.boards). To run the
pynq backend's code against the RTL without Vivado, cocotbpynq needs the same
description of the design: a ``processing_system7`` whose memory map holds the
engine's AXI4-Lite window and the AXI DMA, the engine module with its clock,
reset and bus interfaces (port maps onto the Verilog port names), and the DMA
with its MM2S/S2MM streams wired to the engine. This module writes exactly
that, from the engine's actual ports.
"""

from xml.etree import ElementTree as ET

from .native_board import TopPorts

__all__ = ["simulation_hwh"]

_AXIL = ("AWADDR", "AWPROT", "AWVALID", "AWREADY", "WDATA", "WSTRB", "WVALID", "WREADY",
         "BRESP", "BVALID", "BREADY", "ARADDR", "ARPROT", "ARVALID", "ARREADY",
         "RDATA", "RRESP", "RVALID", "RREADY")
_AXIS = ("TDATA", "TVALID", "TREADY", "TLAST", "TKEEP")


def simulation_hwh(verilog, *, top, instance="fpgacnn_engine_0", base=0x43C0_0000,
                   dma_instance="axi_dma_0", dma_base=0x4040_0000):
    """The ``.hwh`` XML text for the engine top ``top`` of ``verilog``.

    Parameters
    ----------
    verilog : str
        The generated Verilog (its port names and widths are used).
    top : str
        The engine's module name (the ``MODTYPE`` drivers look for).
    instance : str
        The engine's instance name in the block design.
    base : int
        Base address of the engine's 4 KiB register window.
    """
    ports = TopPorts(verilog, top)
    root = ET.Element("EDKSYSTEM", {"EDWVERSION": "1.2", "TIMESTAMP": "fpgacnn-simulation",
                                    "VIVADOVERSION": "none (generated for simulation)"})
    ET.SubElement(root, "SYSTEMINFO", {"ARCH": "zynq", "DEVICE": "7z020", "PACKAGE": "clg400",
                                       "SPEEDGRADE": "-1"})
    modules = ET.SubElement(root, "MODULES")

    ps = ET.SubElement(modules, "MODULE", {
        "INSTANCE": "processing_system7_0", "MODTYPE": "processing_system7",
        "FULLNAME": "/processing_system7_0", "VLNV": "xilinx.com:ip:processing_system7:5.5"})
    memmap = ET.SubElement(ps, "MEMORYMAP")
    ET.SubElement(memmap, "MEMRANGE", {
        "INSTANCE": instance, "BASEVALUE": f"0x{base:08X}", "HIGHVALUE": f"0x{base + 0xFFF:08X}",
        "SLAVEBUSINTERFACE": "s_axil", "MEMTYPE": "REGISTER", "IS_DATA": "TRUE", "IS_INSTRUCTION": "TRUE"})
    ET.SubElement(memmap, "MEMRANGE", {
        "INSTANCE": dma_instance, "BASEVALUE": f"0x{dma_base:08X}", "HIGHVALUE": f"0x{dma_base + 0xFFFF:08X}",
        "SLAVEBUSINTERFACE": "S_AXI_LITE", "MEMTYPE": "REGISTER", "IS_DATA": "TRUE", "IS_INSTRUCTION": "TRUE"})

    engine = ET.SubElement(modules, "MODULE", {
        "INSTANCE": instance, "MODTYPE": top, "FULLNAME": f"/{instance}",
        "VLNV": f"fpgacnn:user:{top}:1.0"})
    port_list = ET.SubElement(engine, "PORTS")
    ET.SubElement(port_list, "PORT", {"NAME": "clk", "DIR": "I", "SIGIS": "clk"})
    ET.SubElement(port_list, "PORT", {"NAME": "rst", "DIR": "I", "SIGIS": "rst", "POLARITY": "ACTIVE_HIGH"})
    buses = ET.SubElement(engine, "BUSINTERFACES")
    mm2s_bus, s2mm_bus = f"{dma_instance}_M_AXIS_MM2S", f"{instance}_m_axis"
    for name, busname, kind, vlnv, logical in [
        ("s_axil", "ps7_0_axi_periph_M00_AXI", "SLAVE", "xilinx.com:interface:aximm:1.0", _AXIL),
        ("s_axis", mm2s_bus, "TARGET", "xilinx.com:interface:axis:1.0", _AXIS),
        ("m_axis", s2mm_bus, "INITIATOR", "xilinx.com:interface:axis:1.0", _AXIS),
    ]:
        bus = ET.SubElement(buses, "BUSINTERFACE", {"NAME": name, "BUSNAME": busname,
                                                     "TYPE": kind, "VLNV": vlnv})
        portmaps = ET.SubElement(bus, "PORTMAPS")
        for signal in logical:
            physical = f"{name}__{signal.lower()}"
            if physical in ports.widths:
                ET.SubElement(portmaps, "PORTMAP", {"LOGICAL": signal, "PHYSICAL": physical})

    dma = ET.SubElement(modules, "MODULE", {
        "INSTANCE": dma_instance, "MODTYPE": "axi_dma", "FULLNAME": f"/{dma_instance}",
        "VLNV": "xilinx.com:ip:axi_dma:7.1"})
    params = ET.SubElement(dma, "PARAMETERS")
    for name, value in [("C_INCLUDE_SG", "0"), ("C_SG_LENGTH_WIDTH", "26"),
                        ("C_M_AXIS_MM2S_TDATA_WIDTH", str(ports.stream_width)),
                        ("C_S_AXIS_S2MM_TDATA_WIDTH", str(ports.stream_width))]:
        ET.SubElement(params, "PARAMETER", {"NAME": name, "VALUE": value})
    buses = ET.SubElement(dma, "BUSINTERFACES")
    ET.SubElement(buses, "BUSINTERFACE", {"NAME": "M_AXIS_MM2S", "BUSNAME": mm2s_bus,
                                          "TYPE": "INITIATOR", "VLNV": "xilinx.com:interface:axis:1.0"})
    ET.SubElement(buses, "BUSINTERFACE", {"NAME": "S_AXIS_S2MM", "BUSNAME": s2mm_bus,
                                          "TYPE": "TARGET", "VLNV": "xilinx.com:interface:axis:1.0"})
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"
