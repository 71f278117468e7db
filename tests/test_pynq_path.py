"""The pynq backend's code (PynqBoard) against RTL, with cocotbpynq standing in for pynq."""

import os
import sys
from pathlib import Path

import pytest

from fpgacnn.core.errors import BackendError
from fpgacnn.host.pynq_board import find_engine_in_hwh
from fpgacnn.sim.pynq_hwh import simulation_hwh
from fpgacnn.sim.verilator_tool import verilator_env

from axi_loopback_top import AxiLoopbackTop

TESTS = Path(__file__).parent


def run_cocotb(tmp_path, verilog, top, test_module):
    """Build ``verilog`` with Verilator through cocotb's runner and run ``test_module``."""
    from cocotb_tools.runner import get_results, get_runner
    (tmp_path / f"{top}.v").write_text(verilog)
    (tmp_path / "design.hwh").write_text(simulation_hwh(verilog, top=top))
    os.environ.update({k: v for k, v in verilator_env().items() if k in ("PATH", "VERILATOR_ROOT")})
    runner = get_runner("verilator")
    runner.build(sources=[tmp_path / f"{top}.v"], hdl_toplevel=top, build_dir=tmp_path / "build",
                 build_args=["-Wno-fatal"], timescale=("1ns", "1ps"))
    results = runner.test(hdl_toplevel=top, test_module=test_module, build_dir=tmp_path / "build",
                          test_dir=tmp_path, extra_env={
                              "HWH_LOCATION_DIR": str(tmp_path), "COCOTB_SYS_ARGV": "fpgacnn",
                              "FPGACNN_TOP": top,
                              "PYTHONPATH": os.pathsep.join([str(TESTS), *sys.path])})
    return get_results(results)


def test_pynq_board_code_path_on_rtl(tmp_path):
    from amaranth.back import verilog
    top = "loopback_engine"
    text = verilog.convert(AxiLoopbackTop(32), name=top)
    total, failed = run_cocotb(tmp_path, text, top, "cocotb_pynq_loopback")
    assert (total, failed) == (1, 0)


def test_pynq_backend_runs_the_example_model_on_the_engine_rtl(tmp_path):
    """Accelerator(backend="pynq") on ConvEngine's RTL: same output as the reference."""
    import json
    from conftest import SMALL_ENGINE
    from fpgacnn.hdl.verilog import TOP_NAME, engine_verilog
    from fpgacnn.sim.verilator import build_engine, run_cocotb as run_engine_cocotb
    build = build_engine(SMALL_ENGINE)
    hwh = simulation_hwh(engine_verilog(SMALL_ENGINE), top=TOP_NAME)
    (tmp_path / "design.hwh").write_text(hwh)
    result = run_engine_cocotb(build, "cocotb_pynq_engine", test_dir=tmp_path, env={
        "HWH_LOCATION_DIR": str(tmp_path), "COCOTB_SYS_ARGV": "fpgacnn",
        "FPGACNN_CONFIG": json.dumps(SMALL_ENGINE.as_dict()),
        "PYTHONPATH": os.pathsep.join([str(TESTS), *sys.path])})
    assert result.failed == [], result.messages
    assert len(result.passed) == 1


def test_hwh_locates_engine_and_dma(tmp_path):
    from amaranth.back import verilog
    text = verilog.convert(AxiLoopbackTop(32), name="fpgacnn_engine")
    (tmp_path / "d.hwh").write_text(simulation_hwh(text, top="fpgacnn_engine", base=0x43C1_0000))
    assert find_engine_in_hwh(tmp_path / "d.hwh") == {
        "engine": "fpgacnn_engine_0", "base": 0x43C1_0000, "range": 0x1000, "dma": "axi_dma_0"}


def test_missing_hwh_is_named(tmp_path):
    with pytest.raises(BackendError, match=r"^.*nothere\.hwh: no such hardware handoff file"):
        find_engine_in_hwh(tmp_path / "nothere.hwh")
