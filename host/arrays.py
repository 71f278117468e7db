"""Loading ``.npy`` arrays from the user and checking them against a model.

Inputs, labels and calibration data arrive as ``.npy`` files. They are read
without pickle (an ``.npy`` file may otherwise execute code when loaded) and
checked against what the model declares *before* anything runs, so that a
wrong shape or dtype is reported as one line naming the argument, the file,
what was expected and what was found. Arrays are never cast or reshaped
quietly: an int8 model given float32 data is an error, not a guess.
"""

from pathlib import Path

import numpy as np

from ..core.errors import InputError
from .paths import check_input_file

__all__ = ["load_array", "format_shape", "check_array", "check_labels"]

#: The first bytes of every .npy file (then the format version), and of a zip (.npz) archive.
_NPY_MAGIC = b"\x93NUMPY"
_ZIP_MAGIC = b"PK\x03\x04"


def load_array(path, argument):
    """Read one array from an ``.npy`` file, without pickle.

    Parameters
    ----------
    path : str or os.PathLike
        The ``.npy`` file.
    argument : str
        How the user named it (``"--input"``), used in error messages.

    Returns
    -------
    numpy.ndarray

    Raises
    ------
    InputError
        The file is missing or a directory, is not a NumPy ``.npy`` file (a
        text file, an ``.npz`` archive, a pickle), is truncated, or holds
        Python objects.

    Examples
    --------
    >>> import numpy as np, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "x.npy")
    >>> np.save(path, np.zeros((2, 3), np.int8))
    >>> load_array(path, "--input").shape
    (2, 3)
    """
    path = Path(path)
    check_input_file(path, argument, "a NumPy .npy file")
    try:
        with open(path, "rb") as f:
            # numpy takes anything without the .npy magic string for a pickle
            # (and an .npz for a zip): tell the user what the file is instead.
            magic = f.read(len(_NPY_MAGIC))
            if magic.startswith(_ZIP_MAGIC):
                raise InputError(f"{argument} {path}: is an .npz archive, expected a single "
                                 f".npy array")
            if magic != _NPY_MAGIC:
                empty = " (the file is empty)" if not magic else ""
                raise InputError(f"{argument} {path}: not a NumPy .npy file{empty}")
            f.seek(0)
            # Touch the data while the file is open: a truncated file fails here.
            return np.asarray(np.load(f, allow_pickle=False))
    except (ValueError, OSError, EOFError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        if "allow_pickle" in reason:
            raise InputError(f"{argument} {path}: holds Python objects, which are not loaded "
                             f"(arrays are read without pickle)") from None
        raise InputError(f"{argument} {path}: not a readable .npy array ({reason})") from None


def format_shape(shape):
    """Write a shape the way the user reads it: ``(N, 1, 8, 8)``.

    Symbolic (dynamic) dimensions are written by name, or ``?`` when unnamed.
    """
    dims = ["?" if d is None else str(d) for d in shape]
    return "(" + ", ".join(dims) + ("," if len(dims) == 1 else "") + ")"


def _is_free(dim):
    # A dimension the model leaves open: a name ("N", "batch"), None, or a
    # non-positive placeholder some exporters write.
    return dim is None or isinstance(dim, str) or (isinstance(dim, (int, np.integer)) and dim <= 0)


def check_array(array, *, name, shape, dtype, argument):
    """Check that an array fits a model input exactly (shape and dtype).

    Parameters
    ----------
    array : numpy.ndarray
        The user's data.
    name : str
        The model's input name, for the message.
    shape : sequence of int, str or None
        The declared shape; ``str``/``None`` dimensions (the batch) accept any size >= 1.
    dtype : numpy.dtype or str
        The declared element type; no casting is done.
    argument : str
        How the user named the data (``"--input x.npy"``).

    Raises
    ------
    InputError
        The rank, a fixed dimension, or the dtype differs, or the batch is empty.
    """
    dtype = np.dtype(dtype)
    expected = format_shape(shape)
    if array.ndim != len(shape) or any(
            not _is_free(d) and int(d) != n for d, n in zip(shape, array.shape)):
        raise InputError(
            f"{argument}: shape {format_shape(array.shape)} does not match model input "
            f"'{name}' of shape {expected}")
    if any(n == 0 for n in array.shape):
        raise InputError(f"{argument}: shape {format_shape(array.shape)} is empty")
    if array.dtype != dtype:
        raise InputError(
            f"{argument}: dtype {array.dtype} does not match model input '{name}' "
            f"of dtype {dtype.name}")


def check_labels(labels, batch, argument):
    """Check class labels for a batch: integers, shape ``(batch,)``.

    Raises
    ------
    InputError
        Not an integer array, or not one label per input.
    """
    if labels.dtype.kind not in "iu":
        raise InputError(f"{argument}: dtype {labels.dtype} is not an integer type")
    if labels.shape != (batch,):
        raise InputError(
            f"{argument}: shape {format_shape(labels.shape)} does not match the batch, "
            f"expected ({batch},)")
