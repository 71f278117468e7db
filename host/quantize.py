"""Float ONNX model + calibration data -> int8 ONNX model, by onnxruntime.

fpgacnn does not write its own quantizer: post-training static quantization is
onnxruntime's :func:`onnxruntime.quantization.quantize_static`, so the integer
model fpgacnn imports is exactly what onnxruntime itself executes (the oracle).
The settings are the ones the engine expects (DESIGN.md section 2): int8
weights, symmetric, one scale per output channel; int8 (or uint8) activations
with one scale and zero point per tensor; int32 bias; min/max calibration.
"""

import tempfile
from pathlib import Path

import numpy as np
import onnx

from .arrays import check_array, load_array
from ..core.errors import InputError, ModelError

__all__ = ["ACTIVATION_TYPES", "FORMATS", "float_model_input", "quantize_model"]

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
    if not path.is_file():
        raise InputError(f"model {path}: no such file")
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
        prepared = Path(tmp) / "prepared.onnx"
        try:
            # onnxruntime's recommended pre-processing, reduced to ONNX shape
            # inference: its graph optimisation pass re-saves the model with
            # every onnxruntime operator domain declared, and symbolic shape
            # inference is for transformers (and needs sympy).
            quant_pre_process(str(model_path), str(prepared), skip_optimization=True,
                              skip_symbolic_shape=True)
            quantize_static(
                str(prepared), str(output),
                calibration_data_reader=_ArrayReader(name, data, batch_size),
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
