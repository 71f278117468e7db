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

__all__ = ["load_array", "format_shape", "check_array", "check_labels"]


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
        The file is missing, is not an ``.npy`` file (an ``.npz`` archive, a
        truncated or foreign file), or holds Python objects.

    Examples
    --------
    >>> import numpy as np, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "x.npy")
    >>> np.save(path, np.zeros((2, 3), np.int8))
    >>> load_array(path, "--input").shape
    (2, 3)
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{argument} {path}: no such file")
    try:
        with open(path, "rb") as f:
            loaded = np.load(f, allow_pickle=False)
            if isinstance(loaded, np.ndarray):
                # Touch the data while the file is open: a truncated file fails here.
                return np.asarray(loaded)
    except (ValueError, OSError, EOFError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        if "allow_pickle" in reason:
            raise InputError(f"{argument} {path}: holds Python objects, which are not loaded "
                             f"(arrays are read without pickle)") from None
        raise InputError(f"{argument} {path}: not a readable .npy array ({reason})") from None
    raise InputError(f"{argument} {path}: is an .npz archive, expected a single .npy array")


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
