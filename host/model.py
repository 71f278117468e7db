"""A quantized model: layers in topological order plus its graph boundary.

The layers compute on int8 tensors (DESIGN.md s.2). The graph input and output
keep the dtype the ONNX file gives them (float32 for a QDQ model with float
I/O, int8 or uint8 otherwise); :meth:`QuantizedModel.quantize_input` and
:meth:`QuantizedModel.dequantize_output` convert at the boundary exactly as
onnxruntime's QuantizeLinear / DequantizeLinear do. A float head (Softmax or
Sigmoid after the last DequantizeLinear, as exporters end classifiers) is
part of :meth:`~QuantizedModel.dequantize_output`: :class:`FloatHead`.

Example::

    from fpgacnn.host.onnx_import import load_onnx
    model = load_onnx("m.onnx")
    x8 = model.quantize_input(x)           # graph dtype -> int8
    [(l.name, l.op, l.macs) for l in model.layers]
"""

import math
from dataclasses import dataclass

import numpy as np

from ..core.errors import InputError
from .input_quantizer import InputQuantizer

__all__ = ["TensorSpec", "FloatHead", "QuantizedModel"]

_INT8, _UINT8 = np.dtype(np.int8), np.dtype(np.uint8)


@dataclass(frozen=True)
class TensorSpec:
    """A graph input or output.

    Members
    -------
    name : str
        The ONNX graph tensor name.
    shape : tuple of int
        Per image, without the leading batch axis (``(C, H, W)`` or ``(C,)``).
    dtype : numpy.dtype
        The graph tensor's dtype: float32, int8 or uint8.
    scale : float
        Quantization scale of the int8 tensor behind it.
    zero_point : int
        Its zero point in the int8 domain (a uint8 graph zero point minus 128).
    """

    name: str
    shape: tuple
    dtype: np.dtype
    scale: float
    zero_point: int


@dataclass(frozen=True)
class FloatHead:
    """A float function of the dequantized output: the Softmax or Sigmoid a
    classifier ends with, left in float after the last DequantizeLinear.

    Members
    -------
    op : str
        ``"Softmax"`` or ``"Sigmoid"``.
    name : str
        The ONNX node.
    axes : tuple of int
        Softmax axes of the output batch tensor (1 .. rank-1); unused by Sigmoid.
    """

    op: str
    name: str
    axes: tuple = (1,)

    def __post_init__(self):
        if self.op not in ("Softmax", "Sigmoid"):
            raise ValueError(f"a float head is Softmax or Sigmoid, not {self.op!r}")

    def apply(self, y):
        """float32 in, float32 out, computed as onnxruntime does (in float32)."""
        y = np.asarray(y, dtype=np.float32)
        # In place where the arithmetic allows: each numpy call costs the host
        # more than its 10 or so values do.
        if self.op == "Sigmoid":
            e = np.negative(y)
            np.exp(e, out=e)
            e += np.float32(1)
            return np.divide(np.float32(1), e, out=e)
        # The ufuncs' reductions themselves (what ndarray.max and .sum call,
        # without their Python layers).
        axes = tuple(self.axes)
        e = np.subtract(y, np.maximum.reduce(y, axis=axes, keepdims=True))
        np.exp(e, out=e)
        np.divide(e, np.add.reduce(e, axis=axes, keepdims=True), out=e)
        return e


class _HeadAfter:
    """A table of values whose gather is followed by a head: ``table[y]`` is
    ``head.apply(values[y])`` (a head :meth:`QuantizedModel.dequantize_output` has
    no table of its own for)."""

    def __init__(self, values, head):
        self.values, self.head = values, head

    def __getitem__(self, y):
        return self.head.apply(self.values[y])


class QuantizedModel:
    """Layers in topological order, wired by int8 tensor names.

    Parameters
    ----------
    name : str
    layers : list of fpgacnn.host.layers.Layer
        Topologically ordered: every layer input is ``input_tensor`` or the
        ``output`` of an earlier layer.
    input, output : TensorSpec
    input_tensor, output_tensor : str
        Names of the int8 tensors behind the graph input and output.
    head : FloatHead, optional
        Applied to the dequantized output (the graph output is then float32).
    """

    def __init__(self, name, layers, input, output, input_tensor, output_tensor, head=None):
        self.name = str(name)
        self.head = head
        if head is not None and not np.issubdtype(output.dtype, np.floating):
            raise ValueError(f"a float head needs a float output, not {output.dtype}")
        self.layers = list(layers)
        self.input = input
        self.output = output
        self.input_tensor = str(input_tensor)
        self.output_tensor = str(output_tensor)
        self._dequantized_for = self._dequantized = None  # dequantize_output's tables
        self._quantize_for = self._quantizer = None  # quantize_input's InputQuantizer
        known = {self.input_tensor}
        for layer in self.layers:
            for t in layer.inputs:
                if t not in known:
                    raise ValueError(f"layer {layer.name!r} reads {t!r} before it is computed")
            known.add(layer.output)
        if self.output_tensor not in known:
            raise ValueError(f"output tensor {self.output_tensor!r} is never computed")

    @property
    def macs(self):
        """Multiply-accumulates per image, all layers."""
        return sum(layer.macs for layer in self.layers)

    def check_input(self, x, what="input"):
        """Raise :class:`~fpgacnn.core.errors.InputError` unless ``x`` is a batch
        of the graph input: shape ``(N, *input.shape)``, dtype ``input.dtype``
        (any float dtype for a float input)."""
        x = np.asarray(x)
        want = np.dtype(self.input.dtype)
        ok = x.dtype.kind == "f" if want.kind == "f" else x.dtype == want
        if not ok:
            raise InputError(f"{what} has dtype {x.dtype}, model {self.name!r} input "
                             f"{self.input.name!r} takes {want}")
        if x.ndim != len(self.input.shape) + 1 or tuple(x.shape[1:]) != tuple(self.input.shape):
            raise InputError(f"{what} has shape {tuple(x.shape)}, model {self.name!r} input "
                             f"{self.input.name!r} takes (N, {', '.join(map(str, self.input.shape))})")
        if x.shape[0] < 1:
            raise InputError(f"{what} has an empty batch")

    def int8_input(self, x8):
        """``x8`` as the int8 graph input the engine takes, refused if of another dtype
        (not cast: another integer type's values past int8 would wrap).

        Raises
        ------
        InputError
        """
        x8 = np.asarray(x8)
        if x8.dtype != np.int8:
            raise InputError(f"int8 graph inputs must be int8, not {x8.dtype} (run() and "
                             f"run_stream() quantize the model's own input dtype)")
        return x8

    def quantize_input(self, x, out=None):
        """Graph input -> int8: float ``clip(rint(x / scale) + zp)`` (ties to
        even, as onnxruntime), uint8 ``x - 128``, int8 unchanged.

        Parameters
        ----------
        x : array_like
            A batch of the graph input.
        out : numpy.ndarray of int8, optional
            Where to write the result, of ``x``'s shape and any strides (the
            input's view of a program's arena in board memory: the host
            quantizes straight into it), instead of a new array.

        Returns
        -------
        numpy.ndarray of int8
            ``out`` if given.

        Raises
        ------
        fpgacnn.core.errors.InputError
            Wrong shape or dtype, or a float input holding NaN or infinity
            (a NaN has no int8 code; onnxruntime gives it an arbitrary one).
        """
        if self._quantize_for is not self.input:
            self._input_quantizer()
        quantizer = self._quantizer
        if quantizer is not None:
            # The common case, in a few numpy calls (None: anything else, checked
            # below, which says what is wrong).
            q = quantizer(x, out)
            if q is not None:
                return q
        self.check_input(x)
        x = np.asarray(x)
        if out is not None and out.shape != x.shape:
            raise InputError(f"cannot quantize an input of shape {x.shape} into one of "
                             f"{out.shape}")
        if x.dtype.kind == "f":
            return self._quantized_float(x, out)
        if self.input.dtype == np.uint8:
            q = x.astype(np.int16) - 128
        else:
            q = x
        if out is None:
            return q.astype(np.int8)
        np.copyto(out, q, casting="unsafe")  # codes in int8's range (int16 from uint8)
        return out

    def _input_quantizer(self):
        """The :class:`~fpgacnn.host.input_quantizer.InputQuantizer` of a float input
        (made once per input spec), or None."""
        if self._quantize_for is not self.input:
            spec = self.input
            self._quantizer = (InputQuantizer(spec.shape, spec.scale, spec.zero_point)
                               if np.dtype(spec.dtype).kind == "f" else None)
            self._quantize_for = spec
        return self._quantizer

    def _quantized_float(self, x, out=None):
        """``clip(rint(x / scale) + zp)`` of a float ``x`` of any float dtype into ``out``
        (or a new int8 array), or InputError for a NaN or an infinity in it."""
        lo, hi = float(np.minimum.reduce(x, axis=None)), float(np.maximum.reduce(x, axis=None))
        if not (math.isfinite(lo) and math.isfinite(hi)):
            bad = ~np.isfinite(x)
            where = tuple(int(i) for i in np.argwhere(bad)[0])
            raise InputError(f"input {self.input.name!r} holds {int(bad.sum())} NaN "
                             f"or infinite value(s), the first at index {where}; "
                             "fpgacnn quantizes finite values only")
        quantizer = self._input_quantizer()
        with quantizer.overflow_guard(lo, hi):  # a float64 past float32's range
            x = x.astype(np.float32, copy=False)
        return quantizer.codes(x, lo, hi, out)

    def dequantize_output(self, y):
        """int8 result -> graph output dtype: float ``(y - zp) * scale`` in float32
        (as onnxruntime), then the :class:`FloatHead` if any; uint8 ``y + 128``,
        int8 unchanged (``y`` itself where it is an int8 array: a caller
        passing a view of board memory copies an int8 result)."""
        if not (type(y) is np.ndarray and y.dtype is _INT8):  # as a view of the arena is
            y = np.asarray(y, dtype=np.int8)
        made = self._dequantized_for
        if made is None or made[0] is not self.output or made[1] is not self.head:
            self._dequantized = self._dequantize_tables()
            self._dequantized_for = (self.output, self.head)
        tables = self._dequantized
        if tables is not None:
            # Tables of the 256 codes, made once, indexed by the int8 codes
            # themselves (a negative index counts from the end: code -1 is
            # entry 255, as its uint8 view would be): one gather a run.
            values, head, axis = tables
            if head is None:
                return values[y]
            if axis is None:  # the head applied to the table: elementwise
                return head[y]
            # Softmax: head[m, c] is exp(value[c] - value[m]), and the greatest
            # code m of each row has the greatest value (scale > 0).
            if y.size == y.shape[axis]:
                # One row (batch 1): its row of the table, the sum a scalar (the
                # same additions in the same order, fewer and lighter calls).
                e = head[np.maximum.reduce(y, axis=None)][y]
                return np.divide(e, np.add.reduce(e, axis=None), out=e)
            e = head[np.maximum.reduce(y, axis=axis, keepdims=True), y]
            return np.divide(e, np.add.reduce(e, axis=axis, keepdims=True), out=e)
        if self.output.dtype == np.uint8:
            return (y.astype(np.int16) + 128).astype(np.uint8)
        return y

    def _dequantize_tables(self):
        """:meth:`dequantize_output`'s tables, made once per output spec and head:
        ``(values, head, axis)``, or None for an output that is not float.

        ``values`` holds the 256 codes' float values (computed as the formula
        does, in float32), ``head`` None, the head applied to ``values``
        (Sigmoid: elementwise), or, for a Softmax over one axis of an output
        whose scale is positive, the ``(256, 256)`` table of ``exp(values[c] -
        values[m])``, computed by the same float32 ``subtract`` and ``exp`` as
        :meth:`FloatHead.apply` (``axis`` then the Softmax's); a head of
        several axes, or a scale that does not order the codes, is applied as
        it is written, after the gather (``values`` and the head both None:
        :meth:`FloatHead.apply`'s own path on ``values[y]``).
        """
        spec = self.output
        if np.dtype(spec.dtype).kind != "f":
            return None
        codes = np.arange(-128, 128, dtype=np.int32)
        d = (codes - spec.zero_point).astype(np.float32)
        values = np.roll((d * np.float32(spec.scale)).astype(spec.dtype), -128)  # index 0: code 0
        if self.head is None:
            return values, None, None
        # The tables hold codes no output may reach (a Sigmoid's exp(-y) of the
        # least codes, a Softmax's exp of a code over the greatest): an overflow
        # there is their value (inf, as the head computes it), not a warning.
        with np.errstate(over="ignore"):
            if self.head.op == "Sigmoid":
                return values, self.head.apply(values), None
            if len(self.head.axes) == 1 and float(spec.scale) > 0 and spec.dtype == np.float32:
                return values, np.exp(np.subtract(values[None, :], values[:, None])), \
                    self.head.axes[0]
        return _HeadAfter(values, self.head), None, None

    def __repr__(self):
        head = "" if self.head is None else f" + float {self.head.op}"
        return (f"<QuantizedModel {self.name!r}: {len(self.layers)} layers{head}, "
                f"{self.macs} MACs/image>")
