"""The example models that ship inside the ``fpgacnn`` package.

Each example is a quantized model, the float model it came from and held-out
data with labels, installed as package data under ``fpgacnn/examples/`` (they
are found relative to the installed package, never the working directory).
``examples/train_digits.py`` in the repository regenerates the digits example.

Example::

    from fpgacnn.host.examples import load_example
    digits = load_example("digits")
    digits.x.shape, digits.y.shape       # (360, 1, 8, 8) float32, (360,) int64
"""

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from ..core.errors import InputError

__all__ = ["EXAMPLES", "Example", "example_dir", "load_example"]

#: Bundled examples: name -> (int8 model, float model, held-out data .npz with ``x`` and ``y``).
EXAMPLES = {
    "digits": ("digits_int8.onnx", "digits_float.onnx", "digits_test.npz"),
}


@dataclass(frozen=True)
class Example:
    """A bundled example.

    Members
    -------
    name : str
    model : pathlib.Path
        The int8 ONNX model.
    float_model : pathlib.Path
        The float ONNX model it was quantized from.
    x : numpy.ndarray
        Held-out inputs, in the model's input dtype and shape.
    y : numpy.ndarray of int64
        Their class labels.
    """

    name: str
    model: Path
    float_model: Path
    x: np.ndarray
    y: np.ndarray


def example_dir():
    """The installed ``fpgacnn/examples`` folder."""
    return Path(str(resources.files("fpgacnn") / "examples"))


def load_example(name):
    """Load a bundled example by name.

    Raises
    ------
    InputError
        Unknown name, or the package was installed without its example files.
    """
    if name not in EXAMPLES:
        raise InputError(f"--example {name}: unknown example, choose from {', '.join(EXAMPLES)}")
    folder = example_dir()
    model, float_model, data = (folder / f for f in EXAMPLES[name])
    for path in (model, float_model, data):
        if not path.is_file():
            raise InputError(f"--example {name}: {path} is missing from the installed package")
    with np.load(data, allow_pickle=False) as archive:
        x, y = archive["x"], archive["y"]
    return Example(name, model, float_model, x, y)
