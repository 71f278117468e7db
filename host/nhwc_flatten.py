"""Flatten in the arena's order: a Gemm after a Flatten reads the NHWC pixels (issue 16).

ONNX's Flatten of a ``(C, H, W)`` tensor orders its values ``c * H * W + y *
W + x``; the arena keeps the tensor NHWC with ``Cp`` bytes a pixel
(:mod:`fpgacnn.core.arena`), so that Flatten is a gather on the host. When
every reader of the Flatten is a Gemm (a classifier head: digits, most
CNNs with ``H x W > 1`` before their first Gemm), the compiler flattens in
the arena's order instead, ``(y * W + x) * Cp + c``, padding channels
included, and gives the Gemm the same weights with their columns permuted
to that order and zeros at the padding channels. The Gemm's output is the
same integers (the padding values meet zero weights; the bias folding sums
the same weights), and the flatten keeps the arena's bytes: the program
engine's vector unit copies it, or the memory could alias it.

This is what docs/program.md planned ("Flatten / Reshape are free"). The
Flatten's own values are then in another order than ONNX's, so it is done
only where no other layer, and not the model's output, reads them; and only
where the channels fill whole pixels (``Cp == C``), so that the Gemm keeps
its size: padding would grow its input by ``Cp / C`` and could take it past
the engine's limits (the layer classes support the padding; the compiler
does not ask for it).
"""

import numpy as np

from ..core.arena import pixel_bytes
from .layers import Gemm, Layer, Reshape
from .model import QuantizedModel

__all__ = ["FlattenNHWC", "nhwc_flatten", "permuted_gemm"]


class FlattenNHWC(Layer):
    """A ``(C, H, W)`` tensor as the ``(H * W * Cp,)`` vector of its NHWC pixels, each
    padded to ``cp`` channels (the padding 0 here; on the engine, whatever the
    arena's padding lanes hold: only zero weights read them). Reported as a
    Flatten."""

    op = "Flatten"

    def __init__(self, name, inputs, output, input_shape, cp, y_scale, y_zero_point):
        super().__init__(name, inputs, output, input_shape, y_scale, y_zero_point)
        c, h, w = self.input_shape
        if cp < c:
            raise ValueError(f"layer {self.name!r}: {cp} bytes a pixel hold no {c} channels")
        self.cp = int(cp)
        self.output_shape = (h * w * self.cp,)

    def evaluate(self, x):
        n, c, h, w = x.shape
        out = np.zeros((n, h, w, self.cp), np.int8)
        out[..., :c] = x.transpose(0, 2, 3, 1)
        return out.reshape(n, -1)


def _is_flatten(layer):
    shape = layer.input_shape
    return (isinstance(layer, Reshape) and len(shape) == 3 and shape[1] * shape[2] > 1
            and tuple(layer.output_shape) == (int(np.prod(shape)),))


def nhwc_flatten(model, config):
    """``model`` with each Flatten that only Gemms read done in the arena's order.

    Parameters
    ----------
    model : fpgacnn.host.model.QuantizedModel
    config : fpgacnn.core.config.EngineConfig
        Its ``pin`` and ``pout`` set the channel padding ``Cp``.

    Returns
    -------
    fpgacnn.host.model.QuantizedModel
        ``model`` itself when no Flatten qualifies, else a new model whose
        output equals ``model``'s for every input.
    """
    readers = {}
    for layer in model.layers:
        for t in layer.inputs:
            readers.setdefault(t, []).append(layer)
    chosen = {}
    for layer in model.layers:
        if _is_flatten(layer) and layer.output != model.output_tensor and \
                pixel_bytes(config, layer.input_shape[0]) == layer.input_shape[0] and \
                readers.get(layer.output) and \
                all(isinstance(r, Gemm) for r in readers[layer.output]):
            chosen[layer.output] = layer
    if not chosen:
        return model
    layers = []
    for layer in model.layers:
        if layer.output in chosen:
            c = layer.input_shape[0]
            layers.append(FlattenNHWC(layer.name, layer.inputs, layer.output, layer.input_shape,
                                      pixel_bytes(config, c), layer.y_scale,
                                      layer.y_zero_point))
        elif isinstance(layer, Gemm) and layer.inputs[0] in chosen:
            layers.append(permuted_gemm(layer, chosen[layer.inputs[0]].input_shape,
                                    pixel_bytes(config, chosen[layer.inputs[0]].input_shape[0])))
        else:
            layers.append(layer)
    return QuantizedModel(model.name, layers, model.input, model.output, model.input_tensor,
                          model.output_tensor, head=model.head)


def permuted_gemm(gemm, shape, cp):
    """``gemm`` reading the NHWC vector of ``shape`` (padded to ``cp`` channels)."""
    c, h, w = shape
    cout = gemm.weight.shape[0]
    weight = np.zeros((cout, h, w, cp), np.int8)
    weight[..., :c] = gemm.weight.reshape(cout, c, h, w).transpose(0, 2, 3, 1)
    return Gemm(gemm.name, gemm.inputs, gemm.output, (h * w * cp,), weight.reshape(cout, -1),
                gemm.bias, gemm.x_scale, gemm.x_zero_point, gemm.w_scale, gemm.y_scale,
                gemm.y_zero_point, gemm.lo, gemm.hi)
