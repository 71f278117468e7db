"""The simulated board: the engine's Verilog in Verilator, driven from C++.

:class:`SimulatedBoard` is the ``sim`` backend's board. It offers the narrow
board interface of DESIGN.md section 4 (MMIO read/write, buffer allocation,
DMA send/receive, wait with a timeout) over a Verilator model of an engine
top with an AXI4-Lite slave ``s_axil`` and AXI4-Stream ports ``s_axis`` /
``m_axis``. The AXI-Lite master and an AXI DMA model run in C++
(``board_harness.cpp``), so the streams never wait on Python once per beat;
Python only starts transfers and waits for them.

A top that also has the memory port of :mod:`fpgacnn.core.memory_port` (the
program engine) gets a memory model in the same harness: a numpy array as
the board's memory, reads with a latency, writes with byte strobes, one
bandwidth for both (docs/program.md, "The simulated board's memory model"),
and :meth:`SimulatedBoard.wait_irq`.

Builds are cached by a hash of everything that goes into them (Verilog,
harness, port map, Verilator version, flags), so a second run with the same
configuration does not recompile. :func:`build_harness_library` is the same
build for any top and C++ harness (the serial backend's simulated board,
:mod:`fpgacnn.sim.uart_board`, uses it with ``uart_harness.cpp``).
"""

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from ..core.errors import BackendError
from ..core.memory_port import MEMORY_PORTS
from .verilator_tool import build_lock, verilator_env, verilator_version

__all__ = ["SimulatedBoard", "build_board_library", "build_harness_library", "TopPorts",
           "waveform_format", "load_library"]

_HARNESS = Path(__file__).with_name("board_harness.cpp")
_MODEL_HEADER = Path(__file__).with_name("verilator_model.h")

_REQUIRED = {
    "clk": 1, "rst": 1,
    "s_axil__awaddr": None, "s_axil__awvalid": 1, "s_axil__awready": 1,
    "s_axil__wdata": 32, "s_axil__wvalid": 1, "s_axil__wready": 1,
    "s_axil__bresp": 2, "s_axil__bvalid": 1, "s_axil__bready": 1,
    "s_axil__araddr": None, "s_axil__arvalid": 1, "s_axil__arready": 1,
    "s_axil__rdata": 32, "s_axil__rresp": 2, "s_axil__rvalid": 1, "s_axil__rready": 1,
    "s_axis__tdata": None, "s_axis__tvalid": 1, "s_axis__tready": 1, "s_axis__tlast": 1,
    "m_axis__tdata": None, "m_axis__tvalid": 1, "m_axis__tready": 1, "m_axis__tlast": 1,
}
_OPTIONAL = ("s_axil__wstrb", "s_axil__awprot", "s_axil__arprot", "s_axis__tkeep")

_PORT_DECL = re.compile(r"^\s*(input|output)\s+(?:wire\s+|reg\s+)?(?:\[(\d+):(\d+)\]\s+)?(\\?\S+?)\s*;", re.M)


def _mangle(name):
    """Verilator's C++ name for a port: every ``__`` is escaped as ``___05F``."""
    return name.replace("__", "___05F")


class TopPorts:
    """Port names and widths of the top module, read from its Verilog.

    Raises
    ------
    BackendError
        If a port the board needs is missing or has an unexpected width.
    """

    def __init__(self, verilog, top):
        match = re.search(rf"^module\s+{re.escape(top)}\s*\(.*?^endmodule", verilog, re.M | re.S)
        if not match:
            raise BackendError(f"the Verilog has no module named {top!r}")
        self.widths, self.directions = {}, {}
        for direction, msb, lsb, name in _PORT_DECL.findall(match.group(0)):
            width = int(msb) - int(lsb) + 1 if msb else 1
            self.widths[name.lstrip("\\")] = width
            self.directions[name.lstrip("\\")] = direction
        for name, width in _REQUIRED.items():
            if name not in self.widths:
                raise BackendError(f"engine top {top!r} has no port {name!r}; the simulated board "
                                   f"needs an AXI4-Lite slave s_axil and AXI4-Streams s_axis/m_axis")
            if width is not None and self.widths[name] != width:
                raise BackendError(f"engine top port {name!r} is {self.widths[name]} bits wide, "
                                   f"expected {width}")
        self.stream_width = self.widths["s_axis__tdata"]
        if self.stream_width % 8 or self.widths["m_axis__tdata"] != self.stream_width:
            raise BackendError(
                f"s_axis__tdata ({self.stream_width} bits) and m_axis__tdata "
                f"({self.widths['m_axis__tdata']} bits) must be equal whole bytes")
        self.read_bytes = self.write_bytes = 0
        self.has_memory = self._check_memory_ports(top)

    def _check_memory_ports(self, top):
        """True if the top has the memory port of core/memory_port.py (all of it).

        Sets ``read_bytes`` (R) and ``write_bytes`` (W). Part of the port is an
        error, not a top without memory: the board would leave the rest unconnected.
        """
        present = [name for name in MEMORY_PORTS if name in self.widths]
        if not present:
            return False
        missing = [name for name in MEMORY_PORTS if name not in self.widths]
        if missing:
            raise BackendError(f"engine top {top!r} has memory ports but not "
                               + ", ".join(repr(n) for n in missing))
        for name, (direction, _) in MEMORY_PORTS.items():
            if self.directions[name] != direction + "put":
                raise BackendError(f"engine top port {name!r} is an {self.directions[name]}, "
                                   f"expected an {direction}put")
        rdata, wdata = self.widths["mem_rdata__data"], self.widths["mem_wr__data"]
        if rdata % 8 or not 1 <= rdata // 8 <= 64:
            raise BackendError(f"engine top port 'mem_rdata__data' is {rdata} bits wide, "
                               f"expected 8*R bits with R from 1 to 64 bytes")
        w = wdata // 8
        if wdata % 8 or w < 4 or w & (w - 1):
            raise BackendError(f"engine top port 'mem_wr__data' is {wdata} bits wide, "
                               f"expected 8*W bits with W a power of two of at least 4")
        sizes = {"R": rdata, "W": wdata, "Wstrb": w}
        for name, (_, width) in MEMORY_PORTS.items():
            want = sizes.get(width, width)
            if self.widths[name] != want:
                raise BackendError(f"engine top port {name!r} is {self.widths[name]} bits wide, "
                                   f"expected {want}")
        self.read_bytes, self.write_bytes = rdata // 8, w
        return True

    @property
    def beat_bytes(self):
        return self.stream_width // 8

    def header(self):
        """``board_ports.h``: accessors the harness uses, for this top's names and widths."""
        m = _mangle
        lines = ["// Generated by fpgacnn.sim.native_board: do not edit.", "#pragma once",
                 f"#define BEAT_BYTES {self.beat_bytes}"]
        for macro, port in [
            ("S_TVALID", "s_axis__tvalid"), ("S_TREADY", "s_axis__tready"), ("S_TLAST", "s_axis__tlast"),
            ("M_TVALID", "m_axis__tvalid"), ("M_TREADY", "m_axis__tready"), ("M_TLAST", "m_axis__tlast"),
            ("AXIL_AWADDR", "s_axil__awaddr"), ("AXIL_AWVALID", "s_axil__awvalid"),
            ("AXIL_AWREADY", "s_axil__awready"), ("AXIL_WDATA", "s_axil__wdata"),
            ("AXIL_WVALID", "s_axil__wvalid"), ("AXIL_WREADY", "s_axil__wready"),
            ("AXIL_BRESP", "s_axil__bresp"), ("AXIL_BVALID", "s_axil__bvalid"),
            ("AXIL_BREADY", "s_axil__bready"), ("AXIL_ARADDR", "s_axil__araddr"),
            ("AXIL_ARVALID", "s_axil__arvalid"), ("AXIL_ARREADY", "s_axil__arready"),
            ("AXIL_RDATA", "s_axil__rdata"), ("AXIL_RRESP", "s_axil__rresp"),
            ("AXIL_RVALID", "s_axil__rvalid"), ("AXIL_RREADY", "s_axil__rready"),
        ]:
            lines.append(f"#define {macro}(t) ((t)->{m(port)})")
        for macro, port in [("AXIL_SET_WSTRB", "s_axil__wstrb"), ("AXIL_SET_AWPROT", "s_axil__awprot"),
                            ("AXIL_SET_ARPROT", "s_axil__arprot")]:
            body = f"((t)->{m(port)} = (v))" if port in self.widths else "((void)(t), (void)(v))"
            lines.append(f"#define {macro}(t, v) {body}")
        keep = ""
        if "s_axis__tkeep" in self.widths:
            keep = f"    t->{m('s_axis__tkeep')} = {(1 << self.widths['s_axis__tkeep']) - 1}ULL;\n"
        lines.append(self._data_accessor("set_s_tdata", "s_axis__tdata", write=True, extra=keep))
        lines.append(self._data_accessor("get_m_tdata", "m_axis__tdata", write=False))
        lines += self._memory_header()
        return "\n".join(lines) + "\n"

    def _memory_header(self):
        """The memory port's part of ``board_ports.h`` (only the flag on a top without one)."""
        lines = [f"#define HAS_MEMORY_PORT {int(self.has_memory)}",
                 f"#define READ_BYTES {self.read_bytes}", f"#define WRITE_BYTES {self.write_bytes}"]
        if not self.has_memory:
            return lines
        for macro, port in [
            ("MEM_RD_ADDR", "mem_rd__addr"), ("MEM_RD_VALID", "mem_rd__valid"),
            ("MEM_RD_READY", "mem_rd__ready"), ("MEM_RDATA_VALID", "mem_rdata__valid"),
            ("MEM_RDATA_READY", "mem_rdata__ready"), ("MEM_WR_ADDR", "mem_wr__addr"),
            ("MEM_WR_VALID", "mem_wr__valid"), ("MEM_WR_READY", "mem_wr__ready"),
            ("MEM_WR_PENDING", "mem_wr__pending"), ("MEM_FAULT_KIND", "mem_fault__kind"),
            ("MEM_FAULT_ADDR", "mem_fault__addr"), ("MEM_IRQ", "irq"),
        ]:
            lines.append(f"#define {macro}(t) ((t)->{_mangle(port)})")
        lines.append(self._data_accessor("set_mem_rdata", "mem_rdata__data", write=True))
        lines.append(self._data_accessor("get_mem_wr_data", "mem_wr__data", write=False))
        # The strobe as one byte (0 or 1) per lane, so the harness need not know its C type.
        name, w = _mangle("mem_wr__strb"), self.write_bytes
        if w <= 64:
            body = (f"    uint64_t v = t->{name};\n"
                    f"    for (int i = 0; i < {w}; i++) lanes[i] = (v >> i) & 1;\n")
        else:
            body = f"    for (int i = 0; i < {w}; i++) lanes[i] = (t->{name}[i / 32] >> (i % 32)) & 1;\n"
        lines.append(f"static inline void get_mem_wr_strb(Vtop* t, uint8_t* lanes) {{\n{body}}}")
        return lines

    def _data_accessor(self, fn, port, *, write, extra=""):
        """A C function copying bytes to (``write``) or from a data port of whole bytes.

        Byte k is bits 8k..8k+7. Verilator keeps a port of up to 64 bits in an
        integer and a wider one in a VlWide of 32-bit words, least significant
        first (the last word partly used when the width is not a multiple of 32).
        """
        name, nbytes = _mangle(port), self.widths[port] // 8
        if nbytes <= 8:
            if write:
                body = (f"    uint64_t v = 0;\n    for (int i = {nbytes} - 1; i >= 0; i--) v = (v << 8) | beat[i];\n"
                        f"    t->{name} = v;\n")
            else:
                body = (f"    uint64_t v = t->{name};\n"
                        f"    for (int i = 0; i < {nbytes}; i++) {{ beat[i] = v & 0xff; v >>= 8; }}\n")
        elif write:
            body = (f"    for (int w = 0; w < {(nbytes + 3) // 4}; w++) {{\n"
                    f"        uint32_t v = 0;\n"
                    f"        for (int i = 3; i >= 0; i--) v = (v << 8) | (4*w+i < {nbytes} ? beat[4*w+i] : 0);\n"
                    f"        t->{name}[w] = v;\n    }}\n")
        else:
            body = f"    for (int i = 0; i < {nbytes}; i++) beat[i] = (t->{name}[i / 4] >> (8 * (i % 4))) & 0xff;\n"
        arg = "const uint8_t* beat" if write else "uint8_t* beat"
        return f"static inline void {fn}(Vtop* t, {arg}) {{\n{extra}{body}}}"


def _cache_root():
    from .verilator import cache_dir  # one cache folder for every Verilator build
    return cache_dir()


def build_board_library(verilog, *, top="top", trace=None, cache_dir=None, progress=None):
    """Build (or find in the cache) the simulated board's shared library.

    Parameters
    ----------
    verilog : str
        Verilog of the engine top.
    top : str
        Name of the top module.
    trace : {None, "vcd", "fst"}
        Compile in waveform support of this format (a separate cached build).
        FST needs the lz4 development headers (Debian: liblz4-dev).
    cache_dir : path-like, optional
        Where builds are kept; default ``$FPGACNN_CACHE_DIR/verilator`` or
        ``~/.cache/fpgacnn/verilator``.
    progress : callable, optional
        Called with one-line status messages while building.

    Returns
    -------
    pathlib.Path
        The shared library.

    Raises
    ------
    BackendError
        If the top lacks a port or Verilator/g++ fails (with the lines that matter).
    """
    ports = TopPorts(verilog, top)
    return build_harness_library(verilog, _HARNESS, top=top, headers={"board_ports.h": ports.header()},
                                 trace=trace, cache_dir=cache_dir, progress=progress,
                                 what=f"the simulated board ({ports.stream_width}-bit streams)")


def build_harness_library(verilog, harness, *, top="top", headers=None, trace=None,
                          cache_dir=None, progress=None, what="the simulated board"):
    """Build (or find in the cache) a Verilator model of ``top`` linked with a C++ harness.

    The model's C++ class is ``Vtop`` whatever the module is called, so one
    harness serves every top with the same ports. The result is a shared
    library for ctypes; the harness gives it its C ABI.

    Parameters
    ----------
    verilog : str
        Verilog of the top.
    harness : path-like
        The C++ source that drives the model (e.g. ``board_harness.cpp``).
    top : str
        Name of the top module.
    headers : dict of str to str, optional
        Generated headers the harness includes, ``{file name: text}``
        (``verilator_model.h``, the model every harness drives, always goes in).
    trace, cache_dir, progress
        As for :func:`build_board_library`.
    what : str
        What is being built, for the progress message.

    Returns
    -------
    pathlib.Path
        The shared library.

    Raises
    ------
    BackendError
        If Verilator or g++ fails (with the lines that matter).
    """
    harness = Path(harness)
    source = harness.read_text()
    # Every harness drives its model through the shared VerilatorModel.
    headers = {_MODEL_HEADER.name: _MODEL_HEADER.read_text(), **(headers or {})}
    # The model's evaluation code at -O2 (OPT_FAST), its constructors and
    # initial blocks at the compiler's default (OPT_SLOW): a -O2 in CFLAGS
    # would reach both, and the slow half (big for engines with ROMs and wide
    # memories) then takes a third of the build for no simulation speed
    # (measured, 2026-12-07: tests/test_zoo_on_rtl.py's engine 49 -> 41 s, the
    # resident-weights test's three 115 -> 74 s, the simulation as fast).
    flags = ["--cc", "-Wno-fatal", "-O3", "--prefix", "Vtop", "--top-module", top,
             "-CFLAGS", "-fPIC", "-MAKEFLAGS", "OPT_FAST=-O2",
             "--build", "-j", str(min(os.cpu_count() or 1, 4))]
    if trace not in (None, "vcd", "fst"):
        raise BackendError(f"waveform format must be 'vcd' or 'fst', not {trace!r}")
    if trace == "fst" and not _have_lz4_headers():
        raise BackendError("FST waveforms need the lz4 development headers (Debian: apt-get "
                           "install liblz4-dev); name the waveform file *.vcd for a VCD instead")
    if trace:
        flags += [f"--trace-{trace}"]
    # The key covers everything that goes into the library.
    header_text = "".join(text for _, text in sorted(headers.items()))
    key = hashlib.sha256("\0".join([verilog, source, header_text, verilator_version(), " ".join(flags)])
                         .encode()).hexdigest()[:20]
    root = Path(cache_dir) if cache_dir else _cache_root()
    final = root / key
    lib = final / "libboard.so"
    if lib.exists():
        return lib
    # Under the build lock: a process that wants the same library (an xdist
    # worker) waits for this build and then finds it, instead of compiling it too.
    with build_lock(root / f"{key}.lock"):
        if lib.exists():
            return lib
        work = Path(tempfile.mkdtemp(prefix=f"{key}.", dir=root))
        try:
            (work / "top.v").write_text(verilog)
            for name, text in headers.items():
                (work / name).write_text(text)
            (work / harness.name).write_text(source)
            if progress:
                progress(f"building {what} with Verilator"
                         f"{f' ({trace} waveforms)' if trace else ''}; cached for the next run")
            start = time.monotonic()
            env = verilator_env()
            cmd = ["verilator", *flags, "-Mdir", "obj", "-CFLAGS", f"-I{work}", "top.v", harness.name]
            _run(cmd, work, env, "Verilator")
            libs = [str(work / "obj" / f"{harness.stem}.o"), str(work / "obj" / "libVtop.a"),
                    str(work / "obj" / "libverilated.a")]
            link = ["g++", "-shared", "-o", "libboard.so", *libs, "-pthread", "-latomic"]
            if trace == "fst":
                link += ["-lz", "-llz4"]
            _run(link, work, env, f"linking {what}")
            if progress:
                progress(f"{what} built in {time.monotonic() - start:.0f} s")
            shutil.rmtree(work / "obj", ignore_errors=True)
            try:
                os.replace(work, final)
            except OSError:  # a process without the lock (an older fpgacnn) finished it first
                shutil.rmtree(work, ignore_errors=True)
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
    return lib


def _have_lz4_headers():
    proc = subprocess.run(["g++", "-x", "c++", "-E", "-"], input="#include <lz4.h>\n",
                          capture_output=True, text=True)
    return proc.returncode == 0


def waveform_format(path):
    """``"fst"`` or ``"vcd"`` from a waveform file name.

    Raises
    ------
    BackendError
        For any other suffix.
    """
    suffix = Path(path).suffix.lower()
    if suffix not in (".fst", ".vcd"):
        raise BackendError(f"waveform file {str(path)!r} must end in .fst or .vcd")
    return suffix[1:]


def _run(cmd, cwd, env, what):
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode:
        log = (proc.stdout + proc.stderr).splitlines()
        important = [l for l in log if re.search(r"error|Error|undefined", l)][:12] or log[-12:]
        (Path(cwd) / "build.log").write_text(proc.stdout + proc.stderr)
        raise BackendError(f"{what} failed (exit {proc.returncode}):\n  " + "\n  ".join(important))


_vp, _u64, _u32, _int = ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_int

#: The C ABI of board_harness.cpp: name -> (argument types, result type).
BOARD_ABI = {
    "board_new": ([ctypes.c_char_p], _vp),
    "board_free": ([_vp], None),
    "board_cycles": ([_vp], _u64),
    "board_set_pauses": ([_vp, _u32, _u32, _u32], None),
    "board_reset": ([_vp, _u32], None),
    "board_step": ([_vp, _u64], None),
    "board_mmio_write": ([_vp, _u32, _u32, _u64], _int),
    "board_mmio_read": ([_vp, _u32, ctypes.POINTER(_u32), _u64], _int),
    "board_dma_send": ([_vp, _vp, _u64], _int),
    "board_dma_recv": ([_vp, _vp, _u64], _int),
    "board_dma_received": ([_vp], _u64),
    "board_dma_send_busy": ([_vp], _int),
    "board_dma_recv_busy": ([_vp], _int),
    "board_dma_wait": ([_vp, _u64], _int),
    "board_dma_abort": ([_vp], None),
    "board_free_run": ([_vp, _u64], None),
    # The memory model (board_harness.cpp; each answers -1 on a top without the memory port).
    "board_mem_present": ([_vp], _int),
    "board_mem_attach": ([_vp, _vp, _u64], _int),
    "board_mem_timing": ([_vp, _u32, ctypes.c_double], _int),
    "board_mem_error": ([_vp, ctypes.POINTER(_int), ctypes.POINTER(_u32)], _int),
    "board_mem_clear_error": ([_vp], _int),
    "board_mem_stats": ([_vp, ctypes.POINTER(_u64), _u32], _int),
    "board_mem_reset_stats": ([_vp], _int),
    "board_wait_irq": ([_vp, _u64], _int),
}

#: board_mem_stats' values, in its order (cycles are UINT64_MAX until seen).
MEMORY_STATS = ("reads", "writes", "bytes_read", "bytes_written", "wait_cycles",
                "first_read_cycle", "last_read_cycle", "first_write_cycle", "last_write_cycle",
                "response_wait_cycles")
_NEVER = 2**64 - 1

_LOADED = {}


def load_library(path, abi):
    """The harness library at ``path`` through ctypes, its functions typed by ``abi``.

    One dlopen per library file: Verilator models keep global state per
    library, so several boards of one build share it safely (each has its
    own VerilatedContext), and repeated opens do not leak handles.
    """
    key = str(path)
    if key not in _LOADED:
        lib = ctypes.CDLL(key)
        for name, (args, res) in abi.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, res
        _LOADED[key] = lib
    return _LOADED[key]


class SimulatedBoard:
    """A board whose FPGA is a Verilator model of the engine top.

    Parameters
    ----------
    verilog : str
        Verilog of the top (ports ``clk``, ``rst``, ``s_axil__*``, ``s_axis__*``,
        ``m_axis__*``; optionally the memory port ``mem_rd__*``, ``mem_rdata__*``,
        ``mem_wr__*`` and ``irq``, all of it).
    top : str
        Top module name.
    waves : path-like, optional
        Write a waveform of everything this board does to this file
        (``.vcd``, or ``.fst`` where the lz4 headers are installed).
    clock_hz : float
        The clock the simulated engine is taken to run at: timeouts (seconds,
        as on a real board) are counted in simulated time at this clock.
    progress : callable, optional
        Receives one-line status messages (the first build takes a while).
    """

    def __init__(self, verilog, *, top="top", waves=None, clock_hz=100e6, cache_dir=None,
                 progress=None):
        trace = waveform_format(waves) if waves is not None else None
        path = build_board_library(verilog, top=top, trace=trace,
                                   cache_dir=cache_dir, progress=progress)
        self._lib = load_library(path, BOARD_ABI)
        ports = TopPorts(verilog, top)
        self.beat_bytes = ports.beat_bytes
        #: Bytes of one memory read (R) and write (W); 0 on a top without the memory port.
        self.read_bytes, self.write_bytes = ports.read_bytes, ports.write_bytes
        self.clock_hz = float(clock_hz)
        self._handle = self._lib.board_new(os.fsencode(waves) if waves is not None else None)
        self._pinned = []  # buffers the C++ DMA model points into
        self._memory = None  # the buffer the C++ memory model points into (kept over resets)
        self.reset()

    # -- lifetime -------------------------------------------------------------

    def close(self):
        """Free the model (and close the waveform file)."""
        if getattr(self, "_handle", None):
            self._lib.board_free(self._handle)
            self._handle = None
            self._pinned = []
            self._memory = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        self.close()

    def _h(self):
        if not self._handle:
            raise BackendError("the simulated board is closed")
        return self._handle

    # -- the narrow board interface -------------------------------------------

    @property
    def cycles(self):
        """Clock cycles simulated since the board was made."""
        return self._lib.board_cycles(self._h())

    def reset(self, cycles=4):
        """Hold the top in reset for ``cycles`` cycles; also cancels any DMA transfer."""
        self._lib.board_reset(self._h(), cycles)
        self._pinned = []

    def step(self, cycles):
        """Let the board run for ``cycles`` cycles."""
        self._lib.board_step(self._h(), cycles)

    def mmio_write(self, addr, value, timeout=10_000):
        """Write a 32-bit register through AXI4-Lite.

        Raises
        ------
        BackendError
            On an error response or no response within ``timeout`` clock cycles.
        """
        resp = self._lib.board_mmio_write(self._h(), addr, value & 0xFFFF_FFFF, timeout)
        if resp:
            raise BackendError(f"MMIO write to 0x{addr:04x} "
                               + ("timed out" if resp < 0 else f"answered with error response {resp}"))

    def mmio_read(self, addr, timeout=10_000):
        """Read a 32-bit register through AXI4-Lite (see :meth:`mmio_write`)."""
        value = ctypes.c_uint32()
        resp = self._lib.board_mmio_read(self._h(), addr, ctypes.byref(value), timeout)
        if resp:
            raise BackendError(f"MMIO read from 0x{addr:04x} "
                               + ("timed out" if resp < 0 else f"answered with error response {resp}"))
        return value.value

    def allocate(self, nbytes):
        """A DMA-able buffer: a contiguous ``uint8`` array."""
        return np.zeros(int(nbytes), dtype=np.uint8)

    def set_backpressure(self, in_permille=0, out_permille=0, seed=1):
        """Random pauses: the DMA withholds input beats / output ready with these odds."""
        self._lib.board_set_pauses(self._h(), in_permille, out_permille, seed)

    def dma_send(self, buf):
        """Start streaming ``buf`` (bytes) into ``s_axis``; TLAST marks its last beat."""
        buf = np.ascontiguousarray(buf, dtype=np.uint8)
        if self._lib.board_dma_send(self._h(), buf.ctypes.data, buf.nbytes):
            raise BackendError("DMA send started while the previous send is still running "
                               "(or the buffer is empty)")
        self._pinned.append(buf)

    def dma_recv(self, buf):
        """Start receiving ``m_axis`` into ``buf`` (a ``uint8`` array) until TLAST or full."""
        if not (isinstance(buf, np.ndarray) and buf.dtype == np.uint8 and buf.flags.c_contiguous):
            raise BackendError("DMA receive buffer must be a contiguous uint8 array from allocate()")
        if self._lib.board_dma_recv(self._h(), buf.ctypes.data, buf.nbytes):
            raise BackendError("DMA receive started while the previous one is still running "
                               "(or the buffer is empty)")
        self._pinned.append(buf)

    @property
    def received(self):
        """Bytes the last :meth:`dma_recv` has written so far."""
        return self._lib.board_dma_received(self._h())

    def dma_busy(self):
        """``(send_busy, recv_busy)``."""
        h = self._h()
        return bool(self._lib.board_dma_send_busy(h)), bool(self._lib.board_dma_recv_busy(h))

    def dma_wait(self, timeout):
        """Run until both DMA channels are idle; False if ``timeout`` seconds of
        simulated time (at ``clock_hz``) pass first."""
        cycles = max(1, int(timeout * self.clock_hz))
        done = self._lib.board_dma_wait(self._h(), cycles) == 0
        if done:
            self._pinned = []
        return done

    def dma_abort(self):
        """Cancel both DMA channels (as a DMA reset would)."""
        self._lib.board_dma_abort(self._h())
        self._pinned = []

    # -- benchmarking -----------------------------------------------------------

    def free_run(self, cycles):
        """Clock the model ``cycles`` cycles with no host work (the speed ceiling).

        The input stream holds a constant valid beat and the output stream is
        always ready, so an engine started beforehand stays busy; the DMA model
        and the AXI-Lite master are bypassed. Only for benchmarks: the engine
        is left mid-run, :meth:`reset` the board afterwards.

        Raises
        ------
        BackendError
            If a DMA transfer is running (the free run would corrupt it).
        """
        if any(self.dma_busy()):
            raise BackendError("free_run needs idle DMA channels; dma_abort() or reset() first")
        self._lib.board_free_run(self._h(), int(cycles))

    # -- the memory model (a top with the memory port of core/memory_port.py) ---

    @property
    def has_memory(self):
        """True if the top has the memory port, so the board gives it a memory."""
        return bool(self._lib.board_mem_present(self._h()))

    def _mem_h(self):
        h = self._h()
        if not self._lib.board_mem_present(h):
            raise BackendError("this engine top has no memory port")
        return h

    def attach_memory(self, buf):
        """Make ``buf`` the board's memory: address ``a`` is ``buf.reshape(-1)[a]``.

        The board reads and writes the array in place and keeps a reference to
        it until another is attached or the board is closed (a reset keeps it).

        Parameters
        ----------
        buf : numpy.ndarray or None
            A C-contiguous, writeable ``uint8`` array; None detaches the memory
            (every access is then an error).

        Returns
        -------
        int or None
            The buffer's address on the engine's bus: 0 (addresses are
            offsets into it); None when detached.

        Raises
        ------
        BackendError
            If the top has no memory port, or ``buf`` is not such an array.
        """
        h = self._mem_h()
        if buf is None:
            self._lib.board_mem_attach(h, None, 0)
            self._memory = None
            return
        if not (isinstance(buf, np.ndarray) and buf.dtype == np.uint8 and buf.flags.c_contiguous
                and buf.flags.writeable):
            raise BackendError("the board's memory must be a C-contiguous, writeable uint8 array")
        self._lib.board_mem_attach(h, buf.ctypes.data, buf.nbytes)
        self._memory = buf
        return 0

    def memory_to_device(self):
        """Nothing: the model reads the buffer itself, no cache between (a Zynq
        board writes the CPU's cached copy back here)."""

    def memory_from_device(self):
        """Nothing: the host reads the buffer the model wrote (a Zynq board drops
        the CPU's cached copy here)."""

    def set_memory_timing(self, latency=40, bytes_per_cycle=8.0):
        """Set the memory's latency and bandwidth (defaults: a Zynq-7000 HP port at 100 MHz).

        A Zynq board's own bandwidth is
        ``fpgacnn.boards.zynq_design.DESIGN.memory_bytes_per_cycle(family, config)``
        (16 bytes a cycle on a Zynq UltraScale+ board whose engine takes
        128-bit beats).

        Parameters
        ----------
        latency : int
            Cycles from the cycle a read is taken to the first cycle its
            response can be presented, at least 1.
        bytes_per_cycle : float
            Bandwidth of each channel, above 0: reads and writes have their own
            (as an AXI port's read and write channels); a read takes R bytes of
            the read channel's, a write W of the write channel's (whatever its
            strobe), and each keeps up to ``max(2 * bytes_per_cycle, R or W)``
            bytes of unused bandwidth.

        Raises
        ------
        BackendError
            If the top has no memory port or a value is out of range.
        """
        h = self._mem_h()
        if isinstance(latency, bool) or not isinstance(latency, (int, np.integer)) \
                or not 1 <= latency < 2**32:
            raise BackendError(f"memory latency must be a whole number of cycles of at least 1, "
                               f"not {latency!r}")
        if isinstance(bytes_per_cycle, bool) or not isinstance(bytes_per_cycle, (int, float, np.number)) \
                or not 0 < float(bytes_per_cycle) < float("inf"):
            raise BackendError(f"memory bandwidth must be a positive number of bytes per cycle, "
                               f"not {bytes_per_cycle!r}")
        if self._lib.board_mem_timing(h, int(latency), float(bytes_per_cycle)):
            raise BackendError(f"the memory model refused latency {latency} and "
                               f"bandwidth {bytes_per_cycle} bytes per cycle")

    def memory_error(self):
        """The first memory error since :meth:`clear_memory_error`, or None.

        A read or write outside the attached buffer (or with none attached),
        or at an address not a multiple of its size, is an error: such a read
        answers zeros and such a write is dropped, so the buffer's other bytes
        are never touched.

        Returns
        -------
        str or None
            One line naming the read or write and its address.

        Raises
        ------
        BackendError
            If the top has no memory port.
        """
        kind, addr = ctypes.c_int(), ctypes.c_uint32()
        reason = self._lib.board_mem_error(self._mem_h(), ctypes.byref(kind), ctypes.byref(addr))
        if not reason:
            return None
        what, size = ("read", self.read_bytes) if kind.value == 1 else ("write", self.write_bytes)
        where = f"memory {what} of {size} bytes at 0x{addr.value:08x}"
        if reason == 2:
            return f"{where} is not at a multiple of {size}"
        if self._memory is None:
            return f"{where} with no memory attached"
        return f"{where} is outside the {self._memory.nbytes}-byte memory"

    def clear_memory_error(self):
        """Forget the memory error (see :meth:`memory_error`).

        Raises
        ------
        BackendError
            If the top has no memory port.
        """
        self._lib.board_mem_clear_error(self._mem_h())

    def memory_stats(self):
        """What the memory has done since :meth:`reset_memory_stats` (or the board was made).

        Returns
        -------
        dict
            ``reads``, ``writes``: requests taken; ``bytes_read``: bytes read
            from the buffer (R per read inside it); ``bytes_written``: bytes
            stored (strobe set, write inside it); ``wait_cycles``: cycles in
            which a request was valid and not taken (waiting for bandwidth);
            ``first_read_cycle``, ``last_read_cycle``, ``first_write_cycle``,
            ``last_write_cycle``: board cycles (:attr:`cycles` counts them) in
            which requests were taken, None before the first;
            ``response_wait_cycles``: cycles in which a read response was
            presented and the top did not take it.

        Raises
        ------
        BackendError
            If the top has no memory port.
        """
        out = (_u64 * len(MEMORY_STATS))()
        self._lib.board_mem_stats(self._mem_h(), out, len(MEMORY_STATS))
        stats = dict(zip(MEMORY_STATS, out))
        for name in MEMORY_STATS:
            if name.endswith("_cycle") and stats[name] == _NEVER:
                stats[name] = None
        return stats

    def reset_memory_stats(self):
        """Zero :meth:`memory_stats`.

        Raises
        ------
        BackendError
            If the top has no memory port.
        """
        self._lib.board_mem_reset_stats(self._mem_h())

    def wait_irq(self, timeout):
        """Run until the top raises ``irq``.

        Parameters
        ----------
        timeout : float
            Seconds of simulated time at ``clock_hz`` (as :meth:`dma_wait`).

        Returns
        -------
        bool
            True when ``irq`` is high (at once if it already is), False if
            ``timeout`` passed first.

        Raises
        ------
        BackendError
            If the top has no memory port (and so no irq).
        """
        cycles = max(1, int(timeout * self.clock_hz))
        return self._lib.board_wait_irq(self._mem_h(), cycles) == 0
