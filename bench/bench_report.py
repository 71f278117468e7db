"""Shared helpers of the benchmarks: replace one generated section of BENCHMARKS.md,
load the model zoo."""

import importlib.util
import re
from pathlib import Path

__all__ = ["replace_section", "load_zoo"]

REPO = Path(__file__).resolve().parents[1]


def load_zoo():
    """The ``examples/model_zoo.py`` module."""
    spec = importlib.util.spec_from_file_location("model_zoo", REPO / "examples" / "model_zoo.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def replace_section(path, name, text):
    """Put ``text`` between ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->`` in ``path``.

    The markers (and the text) are appended when the file lacks them, so the
    hand-written reading around the sections survives a re-run.
    """
    path = Path(path)
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    block = f"{begin}\n{text.rstrip()}\n{end}"
    old = path.read_text() if path.exists() else ""
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    new = pattern.sub(lambda _: block, old) if pattern.search(old) else old.rstrip() + "\n\n" + block + "\n"
    path.write_text(new.lstrip())
