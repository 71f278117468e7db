"""The examples in the package's docstrings run, and print what they say.

Every ``fpgacnn`` module whose source holds a ``>>>`` example (not marked
``+SKIP``: those need a board or a Verilator build) is imported by
its package name (``fpgacnn.host.packing``, not ``host.packing``: the
repository root is the package, so pytest's ``--doctest-modules`` on a file
path would import a second copy of it) and its examples run with
:mod:`doctest`.
"""

import doctest
import importlib
from pathlib import Path

import pytest

import fpgacnn

ROOT = Path(fpgacnn.__file__).resolve().parent
#: The package's own folders (DESIGN.md section 1); tests, benchmarks and examples
#: are not modules of it.
PACKAGES = ("core", "hdl", "host", "sim", "boards")


def _modules_with_examples():
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            lines = path.read_text().splitlines()
            # (examples marked +SKIP need a board or a build: read, not run)
            if any(">>>" in line and "+SKIP" not in line for line in lines):
                parts = path.relative_to(ROOT).with_suffix("").parts
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                yield "fpgacnn." + ".".join(parts)


MODULES = list(_modules_with_examples())


def test_the_package_has_examples():
    assert len(MODULES) >= 5, MODULES


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE,
                             report=True)
    assert result.attempted > 0, f"{name}: its '>>>' lines are not docstring examples"
    assert result.failed == 0, f"{name}: {result.failed} of {result.attempted} examples failed"
