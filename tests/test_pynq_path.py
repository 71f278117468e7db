"""The pynq backend's code (PynqBoard) on what a Zynq build ships, cocotbpynq standing in for pynq.

The simulated top is the wrapper ``fpgacnn_axi`` that ``fpgacnn build``
writes for Vivado, around the generated Zynq top (the program engine and its
AXI4 memory master; one Verilator build, cached),
and the ``.hwh`` is the one fpgacnn.sim.pynq_hwh writes for the same block
design. The driver finds the engine and the DMA in that file as it does on a
board, and cocotbpynq binds its AXI4-Lite master and DMA channels to the
wrapper's ports through the ``.hwh``'s port maps.
"""

import hashlib
import json
import os
import re
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest

from fpgacnn.boards.board import load_board
from fpgacnn.boards.zynq_design import DESIGN
from fpgacnn.boards.zynq_vivado import wrapper_verilog, write_zynq_project
from fpgacnn.core.errors import BackendError
from fpgacnn.host.pynq_board import find_engine_in_hwh
from fpgacnn.sim.pynq_hwh import simulation_hwh

from conftest import SMALL_ENGINE

TESTS = Path(__file__).parent
#: cocotbpynq models a processing_system7, so the simulated board is a Zynq-7000.
BOARD = "pynq-z2"


@pytest.fixture(scope="module")
def wrapper_build():
    """Verilator build of the wrapper and engine exactly as the Vivado project adds them."""
    from fpgacnn.hdl.verilog import ZYNQ_TOP_NAME
    from fpgacnn.sim.verilator import ZYNQ_ROOTS, build_verilog, engine_build_key, prune_cache
    board = load_board(BOARD)
    module = DESIGN.engine.module
    text = wrapper_verilog(SMALL_ENGINE, memory_width=DESIGN.memory_width(board.family,
                                                                         SMALL_ENGINE))
    key = "zynq-axi-" + hashlib.sha256(
        (engine_build_key(SMALL_ENGINE, roots=ZYNQ_ROOTS) + text).encode()).hexdigest()[:16]

    def write(d):
        project = write_zynq_project(board, SMALL_ENGINE, d)
        rtl = project.directory / "rtl"
        assert (rtl / f"{module}.v").read_text() == text
        return [rtl / f"{ZYNQ_TOP_NAME}.v", rtl / f"{module}.v"]

    build = build_verilog(key, module, write)
    prune_cache(prefix="zynq-axi-", keep=2)
    return build


def run_on_wrapper(build, tmp_path, testcase):
    from fpgacnn.sim.verilator import run_cocotb
    (tmp_path / "design.hwh").write_text(simulation_hwh(SMALL_ENGINE, load_board(BOARD)))
    return run_cocotb(build, "cocotb_pynq_engine", testcase=testcase, test_dir=tmp_path, env={
        "HWH_LOCATION_DIR": str(tmp_path), "COCOTB_SYS_ARGV": "fpgacnn",
        "FPGACNN_CONFIG": json.dumps(SMALL_ENGINE.as_dict()),
        "PYTHONPATH": os.pathsep.join([str(TESTS), *sys.path])})


def test_pynq_board_reaches_the_engine_registers_through_the_wrapper(wrapper_build, tmp_path):
    result = run_on_wrapper(wrapper_build, tmp_path,
                            "pynq_board_reads_and_writes_the_engine_registers")
    assert result.failed == [], result.messages
    assert len(result.passed) == 1


def test_pynq_backend_runs_the_example_model_on_the_wrapper(wrapper_build, tmp_path):
    """Accelerator(backend="pynq", sequencer=False) on the shipped RTL, every layer a run
    through the DMA: same output as the reference."""
    result = run_on_wrapper(wrapper_build, tmp_path, "pynq_backend_runs_the_example_model")
    assert result.failed == [], result.messages
    assert len(result.passed) == 1


def test_pynq_backend_runs_the_example_program_from_ddr(wrapper_build, tmp_path):
    """Accelerator(backend="pynq") on the shipped RTL with a DDR on its AXI4 master: the
    whole network in one sequencer start, twice, bit-exact, then three batches
    streamed through two copies of the program; buffers flushed and invalidated
    as on a board; writes seen by reads only after their B responses."""
    result = run_on_wrapper(wrapper_build, tmp_path, "pynq_backend_runs_the_example_program")
    assert result.failed == [], result.messages
    assert len(result.passed) == 1


def test_a_memory_access_the_ddr_refuses_is_reported(wrapper_build, tmp_path):
    """An AXI4 error response (the program's base moved out of DDR) is kept in
    seq_fault with its burst's address and reported by the driver, then cleared."""
    result = run_on_wrapper(wrapper_build, tmp_path, "a_memory_access_the_ddr_refuses_is_reported")
    assert result.failed == [], result.messages
    assert len(result.passed) == 1


@pytest.mark.parametrize("name", ["pynq-z2", "kv260"])
def test_hwh_locates_engine_and_dma(tmp_path, name):
    board = load_board(name)
    ps = DESIGN.ps(board.family)
    (tmp_path / "d.hwh").write_text(simulation_hwh(SMALL_ENGINE, board))
    assert find_engine_in_hwh(tmp_path / "d.hwh") == {
        "engine": "engine", "base": ps.engine_base, "range": 0x1000, "dma": "dma",
        "memory": True}


def _hwh(tmp_path, edit):
    """The simulated .hwh of the PYNQ-Z2 build, changed by ``edit(root)``."""
    root = ElementTree.fromstring(simulation_hwh(SMALL_ENGINE, load_board(BOARD)))
    edit(root)
    path = tmp_path / "d.hwh"
    path.write_text(ElementTree.tostring(root, encoding="unicode"))
    return path


def _module(root, instance):
    return root.find(f"./MODULES/MODULE[@INSTANCE='{instance}']")


def test_engine_is_found_by_its_module_reference_inside_a_hierarchy(tmp_path):
    """In a hierarchy ``accel`` Vivado prefixes the instance names and the full names
    carry the path, which pynq's Overlay uses (``overlay.accel.dma``)."""
    def nest(root):
        for cell in ("engine", "dma"):
            _module(root, cell).set("FULLNAME", f"/accel/{cell}")
            for el in root.iter():
                if el.tag in ("MODULE", "MEMRANGE", "CONNECTION") and el.get("INSTANCE") == cell:
                    el.set("INSTANCE", f"accel_{cell}")
    found = find_engine_in_hwh(_hwh(tmp_path, nest))
    assert found == {"engine": "accel/engine", "base": 0x43C0_0000, "range": 0x1000,
                     "dma": "accel/dma", "memory": True}


def test_missing_hwh_is_named(tmp_path):
    with pytest.raises(BackendError, match=r"^.*nothere\.hwh: no such hardware handoff file"):
        find_engine_in_hwh(tmp_path / "nothere.hwh")


def test_design_without_the_wrapper_is_refused(tmp_path):
    def bare_engine(root):  # the bare engine under another name, as before the wrapper
        m = _module(root, "engine")
        m.set("MODTYPE", "fpgacnn_engine")
        m.set("VLNV", "fpgacnn:user:fpgacnn_engine:1.0")
    with pytest.raises(BackendError, match=r"^.*d\.hwh: no fpgacnn_axi module \(the engine's "
                                           r"wrapper, xilinx\.com:module_ref:fpgacnn_axi:1\.0\) "
                                           r"in this design$"):
        find_engine_in_hwh(_hwh(tmp_path, bare_engine))


def test_engine_without_an_address_is_refused(tmp_path):
    def unmapped(root):
        memmap = _module(root, "ps7").find("MEMORYMAP")
        for memrange in memmap.findall("MEMRANGE"):
            if memrange.get("INSTANCE") == "engine":
                memmap.remove(memrange)
    with pytest.raises(BackendError, match=r"^.*d\.hwh: the engine 'engine' has no address on "
                                           r"the processing system \(no MEMRANGE for its s_axi\)$"):
        find_engine_in_hwh(_hwh(tmp_path, unmapped))


def test_dma_that_does_not_feed_the_engine_is_refused(tmp_path):
    def rewired(root):
        bus = _module(root, "dma").find("./BUSINTERFACES/BUSINTERFACE[@NAME='M_AXIS_MM2S']")
        bus.set("BUSNAME", "dma_M_AXIS_MM2S_elsewhere")
    with pytest.raises(BackendError, match=r"^.*d\.hwh: no AXI DMA \(xilinx\.com:ip:axi_dma\) "
                                           r"drives the engine's s_axis \(found dma\)$"):
        find_engine_in_hwh(_hwh(tmp_path, rewired))


@pytest.mark.parametrize("name", ["pynq-z2", "kv260"])
def test_hwh_holds_together_as_pynq_parses_it(name):
    """The rules PYNQ's parsers and cocotbpynq rely on, checked on the simulated .hwh.

    pynq 3 (pynqmetadata/frontends/hwh_frontend.py) builds ``ip_dict`` from
    the PS (``IS_PL="FALSE"``): each MEMRANGE's MASTERBUSINTERFACE is a MASTER
    interface of the PS, its INSTANCE a MODULE whose FULLNAME is the key, its
    SLAVEBUSINTERFACE a SLAVE interface of that module; every PORTMAP names
    a PORT of its module; every CONNECTION names a port of another module.
    cocotbpynq pairs the DMA's channels with the engine's streams by BUSNAME.
    """
    board = load_board(name)
    ps_d = DESIGN.ps(board.family)
    root = ElementTree.fromstring(simulation_hwh(SMALL_ENGINE, board))
    modules = {m.get("INSTANCE"): m for m in root.iterfind("./MODULES/MODULE")}
    (ps,) = [m for m in modules.values() if m.get("IS_PL") == "FALSE"]
    assert (ps.get("MODTYPE"), ps.get("INSTANCE")) == (ps_d.ip, ps_d.cell)

    def busif(module, name):
        return module.find(f"./BUSINTERFACES/BUSINTERFACE[@NAME='{name}']")

    ip_dict = {}
    for memrange in ps.iterfind("./MEMORYMAP/MEMRANGE"):
        assert busif(ps, memrange.get("MASTERBUSINTERFACE")).get("TYPE") == "MASTER"
        target = modules[memrange.get("INSTANCE")]
        assert busif(target, memrange.get("SLAVEBUSINTERFACE")).get("TYPE") == "SLAVE"
        assert target.get("BDTYPE") is None  # else pynq 2.x keys it by interface
        base, high = (int(memrange.get(k), 16) for k in ("BASEVALUE", "HIGHVALUE"))
        ip_dict[target.get("FULLNAME").lstrip("/")] = (target.get("VLNV"), base, high - base + 1)
    assert ip_dict == {
        "engine": ("xilinx.com:module_ref:fpgacnn_axi:1.0", ps_d.engine_base, 0x1000),
        "dma": ("xilinx.com:ip:axi_dma:7.1", ps_d.dma_base, 0x10000)}

    for module in modules.values():
        ports = {p.get("NAME"): p for p in module.iterfind("./PORTS/PORT")}
        for portmap in module.iterfind("./BUSINTERFACES/BUSINTERFACE/PORTMAPS/PORTMAP"):
            assert portmap.get("PHYSICAL") in ports, (module.get("INSTANCE"), portmap.attrib)
        for port in ports.values():
            for conn in port.iterfind("./CONNECTIONS/CONNECTION"):
                peer = modules[conn.get("INSTANCE")]
                (back,) = peer.findall(f"./PORTS/PORT[@NAME='{conn.get('PORT')}']")
                assert back.get("SIGNAME") == port.get("SIGNAME")

    engine, dma = modules["engine"], modules["dma"]
    for engine_if, dma_if, engine_type, dma_type in [
            ("s_axis", "M_AXIS_MM2S", "TARGET", "INITIATOR"),
            ("m_axis", "S_AXIS_S2MM", "INITIATOR", "TARGET")]:
        e, d = busif(engine, engine_if), busif(dma, dma_if)
        assert e.get("BUSNAME") == d.get("BUSNAME")
        assert (e.get("TYPE"), d.get("TYPE")) == (engine_type, dma_type)
    params = {p.get("NAME"): p.get("VALUE") for p in dma.iterfind("./PARAMETERS/PARAMETER")}
    assert params["C_INCLUDE_SG"] == "0"
    assert params["C_M_AXIS_MM2S_TDATA_WIDTH"] == str(SMALL_ENGINE.stream_width)
    (clk,) = engine.findall("./PORTS/PORT[@SIGIS='clk']")
    (rst,) = engine.findall("./PORTS/PORT[@SIGIS='rst']")
    assert (clk.get("NAME"), rst.get("NAME"), rst.get("POLARITY")) == ("aclk", "aresetn",
                                                                       "ACTIVE_LOW")
    assert re.fullmatch(r"\d+", clk.get("CLKFREQUENCY"))
