"""README.md's two commands and what CI runs stay the same.

The README gives a fresh machine exactly two commands: install + run the main
job, and install + run the tests. ``.ci/run`` must run the README's test
command literally, so that what users are told to run is what CI checks.
"""

import re
import stat
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
CI = ROOT / ".ci" / "run"


def readme_commands():
    """The commands of the README's shell blocks that create a virtual environment."""
    blocks = re.findall(r"^```sh\n(.*?)^```$", README.read_text(), re.M | re.S)
    return [line for block in blocks for line in block.splitlines()
            if line.startswith("python3 -m venv ")]


def ci_commands():
    """The commands ``.ci/run`` executes (no comments, no blank lines)."""
    return [line.strip() for line in CI.read_text().splitlines()
            if line.strip() and not line.strip().startswith("#")]


def test_readme_has_exactly_two_fresh_machine_commands():
    commands = readme_commands()
    assert len(commands) == 2, commands
    run, test = commands
    assert re.fullmatch(r"python3 -m venv \.venv && \.venv/bin/pip install -e '\.\[dev\]' && "
                        r"\.venv/bin/fpgacnn demo", run), run
    assert re.fullmatch(r"python3 -m venv \.venv && \.venv/bin/pip install -e '\.\[dev\]' && "
                        r"\.venv/bin/python -m pytest", test), test


def test_ci_runs_the_readme_test_command():
    test = readme_commands()[1]
    lines = ci_commands()
    assert lines[0] == "#!/usr/bin/env bash" or CI.read_text().startswith("#!/usr/bin/env bash\n")
    assert "set -euo pipefail" in lines
    # The README's command runs as it is, outside any condition, so that
    # `set -e` stops the script on its failure (pytest's 5, "no tests
    # collected", included).
    assert lines.count(test) == 1
    # Then the real bitstream builds, in a step of their own whose status
    # (5 included) is the script's.
    bitstream = [line for line in lines if "pytest" in line and line != test]
    assert bitstream == ['.venv/bin/python -m pytest -m "bitstream and not slow" || status=$?']
    assert lines.index(test) < lines.index(bitstream[0]) and lines[-1] == 'exit "$status"'


def test_ci_script_is_executable():
    assert CI.stat().st_mode & stat.S_IXUSR


def test_readme_links_exist():
    for target in re.findall(r"\]\(([^)#]+)\)", README.read_text()):
        if "://" not in target:
            assert (ROOT / target).exists(), f"README links to missing {target}"


def test_readme_python_example_runs(capsys):
    first, on_the_board = re.findall(r"^```python\n(.*?)^```$", README.read_text(), re.M | re.S)[:2]
    namespace = {}
    exec(compile(first, "README.md", "exec"), namespace)
    out = capsys.readouterr().out
    assert re.search(r"^conv1 Conv \(8, 8, 8\) 4608$", out, re.M), out
    assert re.search(r"^top-1: 0\.9\d+$", out, re.M), out
    exec(compile(on_the_board, "README.md", "exec"), namespace)
    out = capsys.readouterr().out
    assert re.search(r"^top-1: 0\.9\d+$", out, re.M), out
    assert re.search(r"^conv2\+pool Conv\+MaxPool \d+ 0\.\d+$", out, re.M), out
    assert re.search(r"^flatten Flatten host None$", out, re.M), out
    assert re.search(r"^\d+ cycles; \d+ images/s at 100\.0 MHz$", out, re.M), out
    assert re.search(r"^\d+ images/s end to end \(engine \+ host\)$", out, re.M), out
