"""The generated Vivado script, run in tclsh with Vivado's commands as recording stubs.

Each stub records its call (command and arguments, after Tcl evaluated them)
and returns what the script needs to go on. The script's own Tcl (procs,
``if``, ``file copy``) runs for real, so the test sees the block design the
script builds and finds ``NAME.bit`` and ``NAME.hwh`` copied side by side.
"""

import os
import re
import shutil
import subprocess
from xml.etree import ElementTree

import pytest

from fpgacnn.boards.board import BoardError, list_boards, load_board
from fpgacnn.boards.zynq_design import DESIGN
from fpgacnn.boards.zynq_vivado import VIVADO_COMMANDS, write_zynq_project
from fpgacnn.core.config import EngineConfig
from fpgacnn.hdl.verilog import ZYNQ_TOP_NAME

WRAPPER_NAME = DESIGN.engine.module

TCLSH = shutil.which("tclsh")
pytestmark = pytest.mark.skipif(TCLSH is None, reason="tclsh is not installed (apt install tcl)")

VIVADO_BOARDS = sorted(b.name for b in list_boards() if b.toolchain == "vivado")
SMALL = EngineConfig(pin=1, pout=1, max_width=8, max_channels=8, max_out_channels=8)

# Stubs: record "cmd<TAB>arg<TAB>arg..." per call (tabs and newlines escaped),
# and return values for the few calls whose results the script uses.
STUBS = r"""
set ::calls [open $::env(CALL_LOG) w]
proc record {cmd args} {
    set fields [list $cmd]
    foreach a $args { lappend fields [string map {"\t" "\\t" "\n" "\\n"} $a] }
    puts $::calls [join $fields "\t"]
    flush $::calls
}
foreach cmd $::env(VIVADO_COMMANDS) {
    proc $cmd {args} [format {record %s {*}$args; return [stub_result %s $args]} $cmd $cmd]
}
proc stub_result {cmd argv} {
    switch -- $cmd {
        get_ipdefs {
            # -all -filter "VLNV =~ vendor:lib:name:*"
            set filter [lindex $argv end]
            regexp {=~ (\S+):\*} $filter -> prefix
            return [list ${prefix}:1.0 ${prefix}:2.1 ${prefix}:10.0]
        }
        get_property {
            switch -- [lindex $argv 0] {
                PROGRESS { return "100%" }
                STATS.WNS { return $::env(STUB_WNS) }
                DIRECTORY { return $::env(STUB_IMPL_DIR) }
                default { return "" }
            }
        }
        get_files {
            if {[string match *.hwh [lindex $argv end]]} { return [list $::env(STUB_HWH)] }
            return [lindex $argv end]
        }
        make_wrapper { return $::env(STUB_WRAPPER) }
        get_runs - get_bd_cells - get_bd_pins - get_bd_intf_pins - get_bd_addr_segs -
        get_bd_addr_spaces { return [lindex $argv end] }
        current_project { return stub_project }
        current_fileset { return sources_1 }
        default { return "" }
    }
}
"""


def run_script(tmp_path, board, config=SMALL, wns="0.125", name="fpgacnn"):
    project = write_zynq_project(board, config, tmp_path / "out", name=name)
    impl = tmp_path / "impl_1"
    impl.mkdir()
    (impl / f"{name}_wrapper.bit").write_bytes(b"BITSTREAM")
    hwh = tmp_path / f"{name}.hwh"
    hwh.write_text("<HWH/>")
    wrapper = tmp_path / f"{name}_wrapper.v"
    wrapper.write_text("")
    log = tmp_path / "calls.txt"
    runner = tmp_path / "run.tcl"
    runner.write_text(STUBS + f"\nsource {{{project.script}}}\n")
    env = dict(os.environ, CALL_LOG=str(log), VIVADO_COMMANDS=" ".join(VIVADO_COMMANDS),
               STUB_WNS=wns, STUB_IMPL_DIR=str(impl), STUB_HWH=str(hwh),
               STUB_WRAPPER=str(wrapper))
    result = subprocess.run([TCLSH, str(runner)], env=env, capture_output=True, text=True,
                            timeout=60)
    calls = [line.split("\t") for line in log.read_text().splitlines()] if log.exists() else []
    return project, result, calls


def _dict_arg(call):
    """The ``-dict`` list of a ``set_property -dict [list K V ...] OBJ`` call."""
    i = call.index("-dict")
    items = call[i + 1].split()
    return dict(zip(items[::2], items[1::2])), call[i + 2]


def _calls(calls, cmd):
    return [c for c in calls if c[0] == cmd]


@pytest.mark.parametrize("name", VIVADO_BOARDS)
def test_script_builds_block_design_and_exports(tmp_path, name):
    board = load_board(name)
    project, result, calls = run_script(tmp_path, board)
    assert result.returncode == 0, result.stderr
    mp = board.family == "zynqmp"

    # Project for the board's part and board files.
    (create,) = _calls(calls, "create_project")
    assert create[create.index("-part") + 1] == board.part
    props = [c for c in _calls(calls, "set_property") if c[1] == "board_part"]
    assert [c[2] for c in props] == [board.vivado.board_part]
    conns = [c for c in _calls(calls, "set_property") if c[1] == "board_connections"]
    assert [c[2] for c in conns] == ([board.vivado.board_connections]
                                    if board.vivado.board_connections else [])
    (sources,) = [c for c in _calls(calls, "add_files") if f"{ZYNQ_TOP_NAME}.v" in c[-1]]
    assert sources[-1].split() == [str(project.directory / "rtl" / f"{ZYNQ_TOP_NAME}.v"),
                                   str(project.directory / "rtl" / f"{WRAPPER_NAME}.v")]

    # The PS, with the board preset; the newest IP version is picked.
    cells = {c[-1]: c for c in _calls(calls, "create_bd_cell")}
    ps_ip, ps = ("zynq_ultra_ps_e", "zynq_ps") if mp else ("processing_system7", "ps7")
    assert cells[ps][cells[ps].index("-vlnv") + 1] == f"xilinx.com:ip:{ps_ip}:10.0"
    (auto,) = _calls(calls, "apply_bd_automation")
    assert auto[auto.index("-rule") + 1] == f"xilinx.com:bd_rule:{ps_ip}"
    assert 'apply_board_preset "1"' in auto[auto.index("-config") + 1]

    # The DMA: simple mode, 26-bit length, both channels at the stream width.
    assert cells["dma"][cells["dma"].index("-vlnv") + 1] == "xilinx.com:ip:axi_dma:10.0"
    dma = [_dict_arg(c)[0] for c in _calls(calls, "set_property")
           if "-dict" in c and _dict_arg(c)[1] == "dma"]
    assert len(dma) == 1
    dma = dma[0]
    assert dma["CONFIG.c_include_sg"] == "0"
    assert dma["CONFIG.c_sg_length_width"] == "26"
    assert dma["CONFIG.c_include_mm2s"] == "1" and dma["CONFIG.c_include_s2mm"] == "1"
    assert dma["CONFIG.c_m_axis_mm2s_tdata_width"] == str(SMALL.stream_width)
    assert dma["CONFIG.c_s_axis_s2mm_tdata_width"] == str(SMALL.stream_width)

    # The engine as an RTL module, wired DMA -> engine -> DMA and to the PS.
    engine = cells["engine"]
    assert engine[1:4] == ["-type", "module", "-reference"] and engine[4] == WRAPPER_NAME
    intf = {(c[1], c[2]) for c in _calls(calls, "connect_bd_intf_net")}
    assert ("dma/M_AXIS_MM2S", "engine/s_axis") in intf
    assert ("engine/m_axis", "dma/S_AXIS_S2MM") in intf
    assert ("ctrl_xbar/M00_AXI", "engine/s_axi") in intf
    hp = "zynq_ps/S_AXI_HP0_FPD" if mp else "ps7/S_AXI_HP0"
    assert ("mem_xbar/M00_AXI", hp) in intf
    # The engine's memory master shares the HP port with the DMA's two.
    assert {("dma/M_AXI_MM2S", "mem_xbar/S00_AXI"), ("dma/M_AXI_S2MM", "mem_xbar/S01_AXI"),
            ("engine/m_axi", "mem_xbar/S02_AXI")} <= intf
    (xbar,) = [_dict_arg(c)[0] for c in _calls(calls, "set_property")
               if "-dict" in c and _dict_arg(c)[1] == "mem_xbar"]
    assert xbar["CONFIG.NUM_SI"] == "3"
    nets = [c[1:] for c in _calls(calls, "connect_bd_net")]
    # The sequencer's interrupt beside the DMA's, on the PS.
    assert ["engine/irq", "irq_concat/In2"] in [list(n) for n in nets]
    (concat,) = [_dict_arg(c)[0] for c in _calls(calls, "set_property")
                 if "-dict" in c and _dict_arg(c)[1] == "irq_concat"]
    assert concat["CONFIG.NUM_PORTS"] == "3"
    clock = "zynq_ps/pl_clk0" if mp else "ps7/FCLK_CLK0"
    (clk_net,) = [n for n in nets if n[0] == clock]
    assert {"engine/aclk", "dma/s_axi_lite_aclk", "dma/m_axi_mm2s_aclk",
            "dma/m_axi_s2mm_aclk"} <= set(clk_net)
    (rst_net,) = [n for n in nets if n[0] == "rst/peripheral_aresetn"]
    assert {"engine/aresetn", "dma/axi_resetn"} <= set(rst_net)

    # Address map.
    addr = {c[-2]: c for c in _calls(calls, "assign_bd_address") if len(c) > 1}
    engine_seg = addr["engine/s_axi/reg0"]
    assert int(engine_seg[engine_seg.index("-offset") + 1], 16) == \
        DESIGN.ps(board.family).engine_base
    # The engine's master sees DDR at physical addresses (offset 0).
    ps_d = DESIGN.ps(board.family)
    ddr = addr[f"{ps_d.cell}/{ps_d.hp_slave}/{ps_d.ddr_segment}"]
    assert ddr[ddr.index("-target_address_space") + 1] == "engine/m_axi"
    assert int(ddr[ddr.index("-offset") + 1], 16) == ps_d.ddr_base == 0

    # Build to a bitstream, then NAME.bit and NAME.hwh side by side.
    runs = [c for c in _calls(calls, "launch_runs")]
    assert runs[0][1] == "synth_1"
    assert runs[1][1:4] == ["impl_1", "-to_step", "write_bitstream"]
    assert project.bitstream.read_bytes() == b"BITSTREAM"
    assert project.hwh.read_text() == "<HWH/>"
    assert project.bitstream.parent == project.hwh.parent
    assert project.bitstream.stem == project.hwh.stem == "fpgacnn"


def test_script_fails_when_timing_is_not_met(tmp_path):
    project, result, _ = run_script(tmp_path, load_board("pynq-z2"), wns="-0.250")
    assert result.returncode != 0
    assert "timing not met at 100 MHz: worst negative slack -0.250 ns" in result.stderr
    assert not project.bitstream.exists()


def test_outputs_follow_the_design_name(tmp_path):
    project, result, _ = run_script(tmp_path, load_board("kv260"), name="mynet")
    assert result.returncode == 0, result.stderr
    assert (project.directory / "mynet.bit").is_file()
    assert (project.directory / "mynet.hwh").is_file()


def test_stream_width_reaches_the_dma(tmp_path):
    config = EngineConfig(pin=4, pout=4, max_width=8, max_channels=8, max_out_channels=8,
                          stream_width=128)
    _, result, calls = run_script(tmp_path, load_board("zcu104"), config=config)
    assert result.returncode == 0, result.stderr
    (dma,) = [_dict_arg(c)[0] for c in _calls(calls, "set_property")
              if "-dict" in c and _dict_arg(c)[1] == "dma"]
    assert dma["CONFIG.c_m_axis_mm2s_tdata_width"] == "128"
    # The engine's master reads 16-byte beats: the UltraScale+ HP port is set as wide.
    (ps,) = [_dict_arg(c)[0] for c in _calls(calls, "set_property")
             if "-dict" in c and _dict_arg(c)[1] == "zynq_ps"]
    assert ps["CONFIG.PSU__SAXIGP2__DATA_WIDTH"] == "128"


def test_a_beat_wider_than_the_hp_port_is_refused(tmp_path):
    """The engine's memory master reads a beat; a Zynq-7000 HP port takes 64 bits."""
    config = EngineConfig(pin=4, pout=4, max_width=8, max_channels=8, max_out_channels=8,
                          stream_width=128)
    with pytest.raises(BoardError, match=r"^the engine's memory read of 16 bytes \(its beat or "
                                         r"input word\) is wider than the zynq7 HP port's 64 "
                                         r"bits$"):
        write_zynq_project(load_board("pynq-z2"), config, tmp_path)
    assert not (tmp_path / "fpgacnn.tcl").exists()  # refused before anything is written


def test_an_input_word_that_is_no_axi_beat_is_refused(tmp_path):
    config = EngineConfig(pin=12, pout=4, kmax=1, max_width=4, max_channels=12,
                          max_out_channels=4, stream_width=32)
    with pytest.raises(BoardError, match=r"^the engine's memory read of 12 bytes \(its input "
                                         r"word\) is not a power of two, which an AXI4 beat "
                                         r"must be$"):
        write_zynq_project(load_board("pynq-z2"), config, tmp_path)


def test_open_board_is_refused(tmp_path):
    with pytest.raises(BoardError, match=r"ulx3s-85f\.toml: board 'ulx3s-85f' is built with "
                                         r"the open toolchain, not Vivado$"):
        write_zynq_project(load_board("ulx3s-85f"), SMALL, tmp_path)


def test_wrapper_matches_engine_ports(tmp_path):
    """Verilator elaborates the wrapper around the generated engine: port names agree."""
    from fpgacnn.sim.verilator_tool import verilator_env, verilator_root
    project = write_zynq_project(load_board("pynq-z1"), SMALL, tmp_path)
    rtl = project.directory / "rtl"
    result = subprocess.run(
        [str(verilator_root() / "bin" / "verilator"), "--lint-only", "-Wno-fatal",
         "-Wno-UNUSEDSIGNAL", "--top-module", WRAPPER_NAME,
         str(rtl / f"{ZYNQ_TOP_NAME}.v"), str(rtl / f"{WRAPPER_NAME}.v")],
        env=verilator_env(), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "PINNOTFOUND" not in result.stderr and "PINMISSING" not in result.stderr


_VERILOG_PORT = re.compile(r"^\s*(input|output) wire (?:\[(\d+):0\] )?(\w+)", re.M)
_INTERFACE_INFO = re.compile(r'X_INTERFACE_INFO = "xilinx\.com:interface:\w+:1\.0 (\w+) (\w+)" '
                             r"\*\)\n\s*(?:input|output) wire (?:\[\d+:0\] )?(\w+)")


@pytest.mark.parametrize("name", VIVADO_BOARDS)
def test_script_hwh_and_wrapper_agree(tmp_path, name):
    """What the script builds, the simulated .hwh the driver is tested on, and the wrapper RTL.

    Cell and module names, interface nets, clock and reset pins, the DMA's
    settings and the address map are read from the recorded Vivado calls and
    compared with the .hwh that fpgacnn.sim.pynq_hwh writes for the same board
    and engine, and the wrapper's Verilog ports with the .hwh's ports and
    port maps; the driver must find in that .hwh what the script assigned.
    """
    from fpgacnn.host.pynq_board import find_engine_in_hwh
    from fpgacnn.sim.pynq_hwh import simulation_hwh
    board = load_board(name)
    project, result, calls = run_script(tmp_path, board)
    assert result.returncode == 0, result.stderr
    hwh_text = simulation_hwh(SMALL, board, name=project.name)
    root = ElementTree.fromstring(hwh_text)
    modules = {m.get("INSTANCE"): m for m in root.iterfind("./MODULES/MODULE")}

    # Cells: the module reference, the DMA and the PS are the .hwh's MODULEs of the same names.
    cells = {c[-1]: c[1:-1] for c in _calls(calls, "create_bd_cell")}
    (engine_cell,) = [cell for cell, args in cells.items() if args[:2] == ["-type", "module"]]
    module = cells[engine_cell][cells[engine_cell].index("-reference") + 1]
    assert (module, engine_cell) == (DESIGN.engine.module, DESIGN.engine.cell)
    engine = modules[engine_cell]
    assert engine.get("MODTYPE") == module
    assert engine.get("VLNV") == f"xilinx.com:module_ref:{module}:1.0"
    ip_of = {cell: args[args.index("-vlnv") + 1].rsplit(":", 1)[0]
             for cell, args in cells.items() if "-vlnv" in args}
    (dma_cell,) = [cell for cell, vlnv in ip_of.items() if vlnv == "xilinx.com:ip:axi_dma"]
    dma = modules[dma_cell]
    assert dma.get("VLNV").rsplit(":", 1)[0] == ip_of[dma_cell]
    (ps,) = [m for m in modules.values() if m.get("IS_PL") == "FALSE"]
    assert ip_of[ps.get("INSTANCE")] == f"xilinx.com:ip:{ps.get('MODTYPE')}"

    # The DMA's settings in the script are its parameters in the .hwh.
    (dma_config,) = [_dict_arg(c)[0] for c in _calls(calls, "set_property")
                     if "-dict" in c and _dict_arg(c)[1] == dma_cell]
    params = {p.get("NAME"): p.get("VALUE") for p in dma.iterfind("./PARAMETERS/PARAMETER")}
    assert {k.removeprefix("CONFIG."): v.strip("{}") for k, v in dma_config.items()} == \
        {k: params[k] for k in (k.removeprefix("CONFIG.") for k in dma_config)}

    # Interface nets: each end the .hwh models is a BUSINTERFACE on the net's BUSNAME,
    # named after the driving pin as Vivado names nets.
    checked = 0
    for driver, driven in {(c[1], c[2]) for c in _calls(calls, "connect_bd_intf_net")}:
        for pin in (driver, driven):
            cell, interface = pin.split("/")
            if cell in modules:
                (bus,) = modules[cell].findall(f"./BUSINTERFACES/BUSINTERFACE[@NAME='{interface}']")
                assert bus.get("BUSNAME") == driver.replace("/", "_"), pin
                checked += 1
    assert checked >= 8  # PS master and HP, DMA control, masters and streams, engine's three

    # Clock and reset: the pins the script wires are the .hwh's clk / rst ports.
    nets = [c[1:] for c in _calls(calls, "connect_bd_net")]
    clock = f"{ps.get('INSTANCE')}/{DESIGN.ps(board.family).clock}"
    (clock_net,) = [n for n in nets if n[0] == clock]
    (reset_net,) = [n for n in nets if n[0].endswith("/peripheral_aresetn")]
    for cell in (engine_cell, dma_cell):
        ports = modules[cell].iterfind("./PORTS/PORT")
        sigis = {p.get("NAME"): p.get("SIGIS") for p in ports}
        assert {p for p, s in sigis.items() if s == "clk"} == \
            {pin.split("/")[1] for pin in clock_net[1:] if pin.startswith(cell + "/")}
        assert {p for p, s in sigis.items() if s == "rst"} == \
            {pin.split("/")[1] for pin in reset_net[1:] if pin.startswith(cell + "/")}

    # Address map: what the script assigns is what the PS's memory map says.
    windows, masters = {}, {}
    for call in _calls(calls, "assign_bd_address"):
        if "-offset" in call:
            cell, interface, block = call[-2].split("/")
            space = call[call.index("-target_address_space") + 1]
            window = (int(call[call.index("-offset") + 1], 16),
                      int(call[call.index("-range") + 1], 16), interface, block)
            if space == f"{ps.get('INSTANCE')}/{DESIGN.ps(board.family).data_space}":
                windows[cell] = window
            else:  # another master's view: the engine's of DDR
                masters[space] = (cell, *window)
    ranges = {r.get("INSTANCE"): (int(r.get("BASEVALUE"), 16),
                                  int(r.get("HIGHVALUE"), 16) - int(r.get("BASEVALUE"), 16) + 1,
                                  r.get("SLAVEBUSINTERFACE"), r.get("ADDRESSBLOCK"))
              for r in ps.iterfind("./MEMORYMAP/MEMRANGE")}
    assert windows == ranges
    (hwh_path := tmp_path / "sim.hwh").write_text(hwh_text)
    base, rng, _, _ = windows[engine_cell]
    assert find_engine_in_hwh(hwh_path) == {"engine": engine_cell, "base": base, "range": rng,
                                           "dma": dma_cell, "memory": True}
    # The engine's master: what the script assigns is the engine's memory map in the .hwh.
    (mem,) = engine.iterfind("./MEMORYMAP/MEMRANGE")
    base = int(mem.get("BASEVALUE"), 16)
    assert masters == {f"{engine_cell}/{mem.get('MASTERBUSINTERFACE')}": (
        mem.get("INSTANCE"), base, int(mem.get("HIGHVALUE"), 16) - base + 1,
        mem.get("SLAVEBUSINTERFACE"), mem.get("ADDRESSBLOCK"))}

    # The wrapper the script adds: its module, ports and interfaces are the .hwh's.
    verilog = (project.directory / "rtl" / f"{module}.v").read_text()
    assert re.search(rf"^module {module} \(", verilog, re.M)
    ports = {n: ("I" if d == "input" else "O", int(msb or 0) + 1)
             for d, msb, n in _VERILOG_PORT.findall(verilog)}
    assert ports == {p.get("NAME"): (p.get("DIR"), int(p.get("LEFT", 0)) + 1)
                     for p in engine.iterfind("./PORTS/PORT")}
    assert {n: (i, s) for i, s, n in _INTERFACE_INFO.findall(verilog)} == {
        pm.get("PHYSICAL"): (bus.get("NAME"), pm.get("LOGICAL"))
        for bus in engine.iterfind("./BUSINTERFACES/BUSINTERFACE")
        for pm in bus.iterfind("./PORTMAPS/PORTMAP")}
