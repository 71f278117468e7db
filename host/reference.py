"""The reference backend: the integer semantics in vectorised numpy.

This is the single definition the RTL must match bit for bit (DESIGN.md s.2);
it is itself checked against onnxruntime (within 1 LSB, almost all exact).

Example::

    from fpgacnn.host.onnx_import import load_onnx
    from fpgacnn.host.reference import ReferenceBackend
    model = load_onnx("m.onnx")
    y = ReferenceBackend().run(model, x)                 # graph dtypes, batch N >= 1
    per_layer = ReferenceBackend().trace_int8(model, model.quantize_input(x))
"""

import numpy as np

from ..core.errors import InputError

__all__ = ["ReferenceBackend"]


class ReferenceBackend:
    """Runs a :class:`~fpgacnn.host.model.QuantizedModel` with numpy."""

    name = "reference"

    def run(self, model, x):
        """Run a batch: ``x`` and the result in the model's graph dtype and shape.

        Raises
        ------
        fpgacnn.core.errors.InputError
            If ``x`` has the wrong shape or dtype.
        """
        return model.dequantize_output(self.run_int8(model, model.quantize_input(x)))

    def run_int8(self, model, x):
        """int8 input batch -> int8 output batch (the graph output's int8 tensor)."""
        return self._execute(model, x)[model.output_tensor]

    def trace_int8(self, model, x):
        """Every layer's int8 output: ``{layer.name: array (N, *layer.output_shape)}``,
        in layer order (for bit-exact comparison with the RTL, layer by layer)."""
        tensors = self._execute(model, x)
        return {layer.name: tensors[layer.output] for layer in model.layers}

    @staticmethod
    def _execute(model, x):
        x = np.asarray(x)
        if x.dtype != np.int8 or tuple(x.shape[1:]) != tuple(model.input.shape) or x.shape[0] < 1:
            raise InputError(f"int8 input must be int8 of shape (N, {', '.join(map(str, model.input.shape))}),"
                             f" not {x.dtype} {tuple(x.shape)}")
        tensors = {model.input_tensor: x}
        for layer in model.layers:
            y = layer.evaluate(*(tensors[t] for t in layer.inputs))
            if y.dtype != np.int8 or tuple(y.shape[1:]) != layer.output_shape:
                raise AssertionError(f"layer {layer.name!r} produced {y.dtype} {y.shape[1:]}, "
                                     f"declared {layer.output_shape}")  # an internal bug, not user input
            tensors[layer.output] = y
        return tensors
