"""``fpgacnn quantize``: float ONNX model + calibration data -> int8 ONNX model.

::

    fpgacnn quantize MODEL.onnx --calibration DATA.npy -o OUT.onnx
                     [--activation-type int8|uint8] [--format qdq|qoperator] [--reduce-range]

The quantizer is onnxruntime's own (:mod:`fpgacnn.host.quantize`). ``DATA.npy``
holds representative inputs shaped like the model input, any batch size, in
its dtype (float32). BatchNormalization is folded into the Conv or Gemm before
it first, and a final Softmax or Sigmoid stays float (the model's float head).
"""

import sys
from pathlib import Path

from ...core.errors import ModelError
from ..onnx_import import load_onnx
from ..quantize import ACTIVATION_TYPES, FORMATS, quantize_model

__all__ = ["add_parser", "run"]


def add_parser(subparsers):
    p = subparsers.add_parser(
        "quantize", help="quantize a float ONNX model to int8 (onnxruntime)",
        description="Quantize a float ONNX model to int8 with onnxruntime's static quantizer: "
                    "per-channel symmetric int8 weights, per-tensor activations calibrated "
                    "(min/max) on DATA.npy. BatchNormalization is folded into the Conv or Gemm "
                    "before it; a final Softmax or Sigmoid stays float.")
    p.add_argument("model", metavar="MODEL.onnx", type=Path, help="float ONNX model")
    p.add_argument("--calibration", metavar="DATA.npy", type=Path, required=True,
                   help="calibration inputs (N, ...) float32, shaped like the model input")
    p.add_argument("-o", "--output", metavar="OUT.onnx", type=Path, required=True,
                   help="where to write the quantized model")
    p.add_argument("--activation-type", choices=ACTIVATION_TYPES, default="int8",
                   help="activation element type (default: %(default)s)")
    p.add_argument("--format", choices=FORMATS, default="qdq",
                   help="QuantizeLinear/DequantizeLinear pairs or QLinear* operators "
                        "(default: %(default)s)")
    p.add_argument("--reduce-range", action="store_true",
                   help="7-bit weights, so that onnxruntime's own u8s8 kernels do not saturate "
                        "on x86 CPUs without VNNI (costs weight precision)")
    return p


def run(args):
    out = quantize_model(args.model, args.calibration, args.output,
                         activation_type=args.activation_type, quant_format=args.format,
                         reduce_range=args.reduce_range,
                         calibration_argument="--calibration")
    weights = "7-bit" if args.reduce_range else "int8"
    print(f"wrote {out} ({args.format}, {args.activation_type} activations, "
          f"per-channel {weights} weights)")
    # The file is valid for onnxruntime either way; say so if fpgacnn cannot run it.
    try:
        model = load_onnx(out)
    except ModelError as e:
        print(f"fpgacnn: warning: {out} cannot be run by fpgacnn: {e}", file=sys.stderr)
    else:
        head = "" if model.head is None else f", float {model.head.op} head"
        print(f"fpgacnn imports it: {len(model.layers)} layers, {model.macs:,} MACs per image{head}")
    return 0
