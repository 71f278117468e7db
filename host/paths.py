"""Checking the user's file and folder arguments before anything long runs.

Every command reads its input files and checks every path it will write
*before* it generates, builds or runs anything, so that a typo in
``--report`` costs a second, not a simulation whose results are then lost.
Each problem is one :class:`~fpgacnn.core.errors.InputError` line naming the
argument and the path.

>>> from pathlib import Path
>>> import tempfile
>>> out = Path(tempfile.mkdtemp())
>>> check_output_file(out / "y.npy", "--output", (".npy",))
>>> check_output_file(out, "--output", (".npy",))  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
fpgacnn.core.errors.InputError: --output ...: is a directory, not a file
"""

import os
from pathlib import Path

from ..core.errors import InputError

__all__ = ["check_input_file", "check_output_file", "check_output_directory"]


def check_input_file(path, argument, what):
    """Check that ``path`` is a file this process can read.

    Parameters
    ----------
    path : path-like
    argument : str
        How the user named it (``"--input"``, ``"MODEL"``), for the message.
    what : str
        What the file should be (``"a NumPy .npy file"``), for the message.

    Raises
    ------
    InputError
        The path does not exist, is a directory (or another non-file), or
        cannot be read.
    """
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{argument} {path}: is a directory, not {what}")
    if not path.exists():
        raise InputError(f"{argument} {path}: no such file")
    if not path.is_file():
        raise InputError(f"{argument} {path}: not a regular file, expected {what}")
    if not os.access(path, os.R_OK):
        raise InputError(f"{argument} {path}: cannot be read (permission denied)")


def _writable_dir(directory):
    return os.access(directory, os.W_OK | os.X_OK)


def check_output_file(path, argument, suffixes=None):
    """Check, before a long run, that a file can be written at ``path`` later.

    The folder must exist (it is not created) and be writable, the path must
    not be a folder, an existing file is overwritten only if it is writable,
    and the name must end in one of ``suffixes`` (case-insensitive).

    Parameters
    ----------
    path : path-like or None
        ``None`` (the option was not given) passes.
    argument : str
        The option (``"--report"``), for the message.
    suffixes : sequence of str, optional
        Accepted endings, with the dot (``(".vcd", ".fst")``).

    Raises
    ------
    InputError
    """
    if path is None:
        return
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{argument} {path}: is a directory, not a file")
    if suffixes and path.suffix.lower() not in suffixes:
        endings = " or ".join(suffixes)
        raise InputError(f"{argument} {path}: the file name must end in {endings}")
    parent = path.parent
    if not parent.exists():
        raise InputError(f"{argument} {path}: directory {parent} does not exist")
    if not parent.is_dir():
        raise InputError(f"{argument} {path}: {parent} is not a directory")
    if not _writable_dir(parent):
        raise InputError(f"{argument} {path}: directory {parent} is not writable")
    if path.exists() and not os.access(path, os.W_OK):
        raise InputError(f"{argument} {path}: the file exists and is not writable")


def check_output_directory(path, argument):
    """Check that ``path`` is a writable folder, or one that can be created.

    A missing folder is fine (the command creates it, with its parents) when
    its nearest existing ancestor is a writable folder.

    Raises
    ------
    InputError
        The path (or an ancestor) is a file, or the folder cannot be written.
    """
    path = Path(path)
    if path.exists():
        if not path.is_dir():
            raise InputError(f"{argument} {path}: exists and is not a directory")
        if not _writable_dir(path):
            raise InputError(f"{argument} {path}: directory is not writable")
        return
    ancestor = path.parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise InputError(f"{argument} {path}: cannot create it, {ancestor} is not a directory")
    if not _writable_dir(ancestor):
        raise InputError(f"{argument} {path}: cannot create it, directory {ancestor} is not "
                         f"writable")
