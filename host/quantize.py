"""Float ONNX model + calibration data -> int8 ONNX model, by onnxruntime.

fpgacnn does not write its own quantizer: post-training static quantization is
onnxruntime's :func:`onnxruntime.quantization.quantize_static`, so the integer
model fpgacnn imports is exactly what onnxruntime itself executes (the oracle).
The settings are the ones the engine expects (DESIGN.md section 2): int8
weights, symmetric, one scale per output channel; int8 (or uint8) activations
with one scale and zero point per tensor; int32 bias; min/max calibration.

Before onnxruntime sees the model, :func:`prepare_float_model` does what
exporters leave to the user: every BatchNormalization is folded into the
Conv or Gemm before it (``torch.onnx.export`` writes them separately), one
that follows anything else becomes a depthwise 1x1 Conv (or a diagonal Gemm),
and a Softmax or Sigmoid at the graph output stays float after the last
DequantizeLinear (the model's float head, :class:`fpgacnn.host.model.FloatHead`).
"""

import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .arrays import check_array, load_array
from .paths import check_input_file, check_output_file
from ..core.errors import InputError, ModelError

__all__ = ["ACTIVATION_TYPES", "FORMATS", "float_model_input", "prepare_float_model",
           "quantize_model"]

#: ``--activation-type`` choices.
ACTIVATION_TYPES = ("int8", "uint8")
#: ``--format`` choices: QuantizeLinear/DequantizeLinear pairs, or QLinear* operators.
FORMATS = ("qdq", "qoperator")

# Operators that only occur in a model that is already quantized.
_QUANTIZED_OPS = {"QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul",
                  "QLinearAdd", "QLinearGlobalAveragePool", "ConvInteger", "MatMulInteger"}

_ONNX_FLOAT_TYPES = {onnx.TensorProto.FLOAT: np.float32}


def _load_float_model(path):
    path = Path(path)
    check_input_file(path, "model", "an ONNX file")
    try:
        model = onnx.load(str(path))
        onnx.checker.check_model(model)
    except Exception as e:  # onnx raises DecodeError, ValidationError, ... for a bad file
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelError(f"model {path}: not a valid ONNX model ({reason})") from None
    quantized = sorted({n.op_type for n in model.graph.node} & _QUANTIZED_OPS)
    if quantized:
        raise ModelError(
            f"model {path}: already quantized (contains {', '.join(quantized)}); "
            f"quantize takes a float model")
    return model


def float_model_input(model, path="model"):
    """The single float input of a float ONNX model.

    Parameters
    ----------
    model : onnx.ModelProto
    path : str
        Name of the model for messages.

    Returns
    -------
    name : str
    shape : tuple of (int or str)
        Fixed dimensions as ``int``, dynamic ones by their name (``"N"``).
    dtype : numpy.dtype

    Raises
    ------
    ModelError
        The model does not have exactly one float32 input.
    """
    initializers = {t.name for t in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in initializers]
    if len(inputs) != 1:
        raise ModelError(f"model {path}: has {len(inputs)} inputs, fpgacnn supports exactly 1")
    tensor = inputs[0].type.tensor_type
    if tensor.elem_type not in _ONNX_FLOAT_TYPES:
        raise ModelError(
            f"model {path}: input '{inputs[0].name}' is "
            f"{onnx.TensorProto.DataType.Name(tensor.elem_type)}, quantize takes a float32 model")
    shape = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                  for d in tensor.shape.dim)
    return inputs[0].name, shape, np.dtype(_ONNX_FLOAT_TYPES[tensor.elem_type])


def _attr(node, name, default):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _set_attr(node, name, value):
    for a in list(node.attribute):
        if a.name == name:
            node.attribute.remove(a)
    node.attribute.append(helper.make_attribute(name, value))


class _Graph:
    """Constants, producers and readers of a float graph, for rewriting it."""

    def __init__(self, model):
        self.model, self.graph = model, model.graph
        self.inits = {i.name: i for i in self.graph.initializer}
        self.constant_nodes = {n.output[0]: n for n in self.graph.node
                               if n.op_type == "Constant" and n.output}
        self.producer = {o: n for n in self.graph.node for o in n.output}
        self.readers = {}
        for n in self.graph.node:
            for t in n.input:
                self.readers[t] = self.readers.get(t, 0) + 1
        for o in self.graph.output:
            self.readers[o.name] = self.readers.get(o.name, 0) + 1
        self.outputs = {o.name for o in self.graph.output}
        self.names = {t for n in self.graph.node for t in (*n.input, *n.output)} | set(self.inits)

    def value(self, name):
        if name in self.inits:
            return numpy_helper.to_array(self.inits[name])
        node = self.constant_nodes.get(name)
        if node is not None and node.attribute and node.attribute[0].name == "value":
            return numpy_helper.to_array(node.attribute[0].t)
        return None

    def fresh(self, base):
        name, i = base, 0
        while name in self.names:
            i += 1
            name = f"{base}_{i}"
        self.names.add(name)
        return name

    def add_init(self, base, array):
        name = self.fresh(base)
        self.graph.initializer.append(numpy_helper.from_array(np.asarray(array), name))
        self.inits[name] = self.graph.initializer[-1]
        return name

    def rank(self, name):
        """Rank of a tensor from shape inference, or None."""
        for vi in (*self.graph.value_info, *self.graph.input, *self.graph.output):
            if vi.name == name and vi.type.tensor_type.HasField("shape"):
                return len(vi.type.tensor_type.shape.dim)
        return None

    def drop_unused_initializers(self):
        used = {t for n in self.graph.node for t in n.input} | self.outputs
        keep = [i for i in self.graph.initializer if i.name in used]
        del self.graph.initializer[:]
        self.graph.initializer.extend(keep)


def _fold_into(g, prev, bn, a, b):
    """Fold ``y = a * x + b`` (per output channel) into the Conv or Gemm ``prev``."""
    w = g.value(prev.input[1])
    if w is None or w.dtype.kind != "f":
        return False
    if prev.op_type == "Conv":
        cout_axis = 0
    else:
        if _attr(prev, "transA", 0):
            return False
        cout_axis = 0 if _attr(prev, "transB", 0) else 1
    cout = w.shape[cout_axis]
    if a.size != cout:
        return False
    shape = [1] * w.ndim
    shape[cout_axis] = cout
    old = g.value(prev.input[2]) if len(prev.input) > 2 and prev.input[2] else None
    if len(prev.input) > 2 and prev.input[2] and old is None:
        return False  # a bias computed at run time
    if prev.op_type == "Conv":
        bias = (np.zeros(cout, np.float64) if old is None else old.astype(np.float64)) * a + b
    else:
        beta = float(_attr(prev, "beta", 1.0))
        c = np.zeros(cout, np.float64) if old is None else old.astype(np.float64) * beta
        bias = c * a + b   # broadcasts along the last axis, also for a matrix C
        _set_attr(prev, "beta", 1.0)
    new_w = (w.astype(np.float64) * a.reshape(shape)).astype(w.dtype)
    ins = list(prev.input) + [""] * (3 - len(prev.input))
    ins[1] = g.add_init(f"{prev.input[1]}_bn", new_w)
    ins[2] = g.add_init(f"{prev.name or prev.output[0]}_bias_bn", bias.astype(w.dtype))
    del prev.input[:]
    prev.input.extend(ins)
    return True


def prepare_float_model(model):
    """Rewrite a float model the way onnxruntime's quantizer and fpgacnn need it.

    - A BatchNormalization (inference form) after a Conv or Gemm whose result
      nothing else reads is folded into that node's weights and bias:
      ``w' = w * a``, ``b' = (b - mean) * a + beta`` with
      ``a = gamma / sqrt(var + eps)``.
    - Any other BatchNormalization with constant parameters becomes a
      depthwise 1x1 Conv (3-D and 4-D tensors) or a diagonal Gemm (2-D).
    - A Gemm bias of shape (1, C) becomes (C,) (onnxruntime's quantizer
      refuses the row).
    - Unnamed nodes get names.

    Parameters
    ----------
    model : onnx.ModelProto
        Changed in place.

    Returns
    -------
    folded : int
        BatchNormalization nodes folded or replaced.
    heads : list of str
        Names of the Softmax / Sigmoid nodes that write the graph output: the
        float head, which the quantizer must leave alone.
    """
    try:
        model.CopyFrom(onnx.shape_inference.infer_shapes(model))
    except Exception:  # shape inference is only a help for the ranks below
        pass
    g = _Graph(model)
    for i, node in enumerate(g.graph.node):
        if not node.name:
            node.name = g.fresh(f"{node.op_type}_{i}")
    for gemm in [n for n in g.graph.node if n.op_type == "Gemm" and len(n.input) > 2 and n.input[2]]:
        c = g.value(gemm.input[2])
        if c is not None and c.ndim == 2 and c.shape[0] == 1:
            # onnxruntime's quantizer fails on a (1, C) bias; broadcasting makes it (C,)
            gemm.input[2] = g.add_init(f"{gemm.input[2]}_row", c.reshape(-1))
    folded = 0
    for bn in [n for n in g.graph.node if n.op_type == "BatchNormalization"]:
        if any(bn.output[1:]) or _attr(bn, "training_mode", 0):
            continue
        params = [g.value(t) for t in bn.input[1:5]]
        if len(params) != 4 or any(p is None for p in params):
            continue
        gamma, beta, mean, var = (p.astype(np.float64).reshape(-1) for p in params)
        a = gamma / np.sqrt(var + float(_attr(bn, "epsilon", 1e-5)))
        b = beta - mean * a
        x = bn.input[0]
        prev = g.producer.get(x)
        if (prev is not None and prev.op_type in ("Conv", "Gemm") and g.readers.get(x) == 1
                and x not in g.outputs and _fold_into(g, prev, bn, a, b)):
            prev.output[0] = bn.output[0]
            g.producer[bn.output[0]] = prev
            g.graph.node.remove(bn)
            stale = [vi for vi in g.graph.value_info if vi.name == x]
            for vi in stale:
                g.graph.value_info.remove(vi)
            folded += 1
            continue
        rank = g.rank(x)
        dtype = params[0].dtype
        if rank in (3, 4):
            w = a.reshape((-1, 1) + (1,) * (rank - 2)).astype(dtype)
            new = helper.make_node("Conv", [x, g.add_init(f"{bn.name}_W", w),
                                            g.add_init(f"{bn.name}_B", b.astype(dtype))],
                                   [bn.output[0]], name=bn.name, group=int(a.size),
                                   kernel_shape=[1] * (rank - 2))
        elif rank == 2:
            new = helper.make_node("Gemm", [x, g.add_init(f"{bn.name}_W", np.diag(a).astype(dtype)),
                                            g.add_init(f"{bn.name}_B", b.astype(dtype))],
                                   [bn.output[0]], name=bn.name, transB=1)
        else:
            continue
        index = list(g.graph.node).index(bn)
        g.graph.node.remove(bn)
        g.graph.node.insert(index, new)
        folded += 1
    g.drop_unused_initializers()
    heads = [n.name for n in g.graph.node
             if n.op_type in ("Softmax", "Sigmoid") and n.output[0] in g.outputs]
    return folded, heads


class _ArrayReader:
    """onnxruntime CalibrationDataReader over one in-memory array, in batches."""

    def __init__(self, name, data, batch_size):
        self._batches = iter([{name: data[i:i + batch_size]}
                              for i in range(0, len(data), batch_size)])

    def get_next(self):
        return next(self._batches, None)


def quantize_model(model, calibration, output, *, activation_type="int8", quant_format="qdq",
                   reduce_range=False, batch_size=64, calibration_argument="calibration"):
    """Quantize a float ONNX model to int8 with onnxruntime's static quantizer.

    Parameters
    ----------
    model : str or os.PathLike
        Float ONNX model with one float32 input whose first dimension is the batch.
    calibration : numpy.ndarray or str or os.PathLike
        Representative inputs (an array or an ``.npy`` file), shaped like the
        model input with any batch size (a multiple of the batch if the model
        fixes it); min/max ranges are taken over all of them.
    output : str or os.PathLike
        Where to write the quantized model.
    activation_type : {"int8", "uint8"}
        Activation element type. fpgacnn converts uint8 exactly on import.
    quant_format : {"qdq", "qoperator"}
        QuantizeLinear/DequantizeLinear pairs around float operators, or QLinear* operators.
    reduce_range : bool
        Quantize weights to 7 bits (-64..63). Only useful to make onnxruntime's
        own u8s8 kernels exact on x86 CPUs without VNNI, which saturate int16
        sums of pairs of 8-bit products; the engine itself needs no such thing.
    batch_size : int
        Calibration batch size (memory only; the ranges do not depend on it).
        A model with a fixed batch dimension is calibrated in batches of that size.
    calibration_argument : str
        How the user named the calibration data, for error messages.

    Returns
    -------
    pathlib.Path
        ``output``.

    Raises
    ------
    InputError
        Missing file, unwritable output, calibration data of the wrong shape or dtype.
    ModelError
        The model is unreadable, already quantized, or onnxruntime cannot quantize it.

    Examples
    --------
    >>> from fpgacnn.host.quantize import quantize_model
    >>> quantize_model("float.onnx", "calib.npy", "int8.onnx")  # doctest: +SKIP
    """
    if activation_type not in ACTIVATION_TYPES:
        raise InputError(f"activation type must be one of {', '.join(ACTIVATION_TYPES)}, "
                         f"not {activation_type!r}")
    if quant_format not in FORMATS:
        raise InputError(f"format must be one of {', '.join(FORMATS)}, not {quant_format!r}")
    if not isinstance(batch_size, int) or batch_size < 1:
        raise InputError(f"calibration batch size must be a positive integer, not {batch_size!r}")
    model_path = Path(model)
    output = Path(output)
    check_output_file(output, "output", (".onnx",))  # before the calibration runs
    float_model = _load_float_model(model_path)
    name, shape, dtype = float_model_input(float_model, str(model_path))
    if isinstance(calibration, np.ndarray):
        data = calibration
    else:
        data = load_array(calibration, calibration_argument)
        calibration_argument = f"{calibration_argument} {calibration}"
    if not shape:
        raise ModelError(f"model {model_path}: input '{name}' is a scalar, expected a batch axis first")
    # The first axis is the batch, even where the exporter fixed it (often to 1):
    # calibration then runs in batches of that size.
    check_array(data, name=name, shape=("N", *shape[1:]), dtype=dtype,
                argument=calibration_argument)
    bad = ~np.isfinite(data)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise InputError(f"{calibration_argument}: holds {int(bad.sum())} NaN or infinite "
                         f"value(s), the first at index {where}")
    fixed_batch = shape[0] if isinstance(shape[0], int) and shape[0] > 0 else None
    if fixed_batch is not None:
        if len(data) % fixed_batch:
            raise InputError(
                f"{calibration_argument}: {len(data)} samples, but model input '{name}' has a "
                f"fixed batch of {fixed_batch}; give a multiple of {fixed_batch}")
        batch_size = fixed_batch
    if not output.parent.is_dir():
        raise InputError(f"output {output}: directory {output.parent} does not exist")

    # Imported here: onnxruntime.quantization pulls in a lot and only this command needs it.
    from onnxruntime.quantization import (CalibrationMethod, QuantFormat, QuantType,
                                          quantize_static)
    from onnxruntime.quantization.shape_inference import quant_pre_process

    with tempfile.TemporaryDirectory(prefix="fpgacnn-quantize-") as tmp:
        folded_path = Path(tmp) / "folded.onnx"
        prepared = Path(tmp) / "prepared.onnx"
        _, heads = prepare_float_model(float_model)
        onnx.save(float_model, str(folded_path))
        try:
            # onnxruntime's recommended pre-processing, reduced to ONNX shape
            # inference: its graph optimisation pass re-saves the model with
            # every onnxruntime operator domain declared, and symbolic shape
            # inference is for transformers (and needs sympy). The folding it
            # would do is prepare_float_model's.
            quant_pre_process(str(folded_path), str(prepared), skip_optimization=True,
                              skip_symbolic_shape=True)
            quantize_static(
                str(prepared), str(output),
                calibration_data_reader=_ArrayReader(name, data, batch_size),
                nodes_to_exclude=heads,
                quant_format=QuantFormat.QDQ if quant_format == "qdq" else QuantFormat.QOperator,
                per_channel=True,
                reduce_range=bool(reduce_range),
                activation_type=QuantType.QInt8 if activation_type == "int8" else QuantType.QUInt8,
                weight_type=QuantType.QInt8,
                calibrate_method=CalibrationMethod.MinMax,
                extra_options={"ActivationSymmetric": False, "WeightSymmetric": True},
            )
        except (FileNotFoundError, PermissionError, IsADirectoryError) as e:
            raise InputError(f"output {output}: cannot be written ({e.strerror})") from None
        except Exception as e:  # onnxruntime reports unsupported graphs with many types
            reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ModelError(f"model {model_path}: onnxruntime cannot quantize it ({reason})") \
                from None
    return output
