"""``fpgacnn sim``: simulate one layer on the engine's RTL.

Two forms::

    fpgacnn sim --shape CxHxW --out-channels N [--kernel K] [--stride S] [--pad P]
                [--pool] [--relu] [--batch B] [--seed S]       # a random layer
    fpgacnn sim MODEL.onnx --layer NAME [--batch B] [--seed S]  # a layer of a model

Either way the layer runs on the simulated board with seeded random data and
the command prints whether the output equals the reference backend bit for
bit, the measured cycles next to the cycle model's, the utilization and what
bounds it; ``--waves FILE.vcd`` writes a waveform of the run. A layer of a
model gets its real input: the model's layers before it run on the reference
backend from a seeded random input.
"""

import math
import re

import numpy as np

from ..accelerator import Accelerator
from ..compiler import compile_model
from ..cycle_model import layer_cycles
from ...core.errors import BackendError, InputError
from ..layers import Conv, MaxPool
from ..model import QuantizedModel, TensorSpec
from ..onnx_import import load_onnx
from ..reference import ReferenceBackend
from .run import add_engine_arguments, check_outputs, engine_config, print_progress

__all__ = ["add_parser", "run", "random_layer_model", "model_layer_model"]


def add_parser(subparsers):
    p = subparsers.add_parser(
        "sim", help="simulate one layer on the engine's RTL",
        description="Run one layer (random, or picked from a model) on the simulated board: "
                    "output check against the reference, cycles, utilization, waveform.")
    p.add_argument("model", metavar="MODEL.onnx", nargs="?", help="pick the layer from this model")
    p.add_argument("--layer", metavar="NAME", help="name of the layer in MODEL (see fpgacnn run --report)")
    p.add_argument("--shape", metavar="CxHxW", help="random layer: input channels x rows x columns")
    p.add_argument("--out-channels", type=int, help="random layer: output channels")
    p.add_argument("--kernel", type=int, default=3, help="random layer: kernel size (default 3)")
    p.add_argument("--stride", type=int, default=1, help="random layer: stride (default 1)")
    p.add_argument("--pad", type=int, default=None, help="random layer: padding (default kernel//2)")
    p.add_argument("--pool", action="store_true", help="random layer: fused 2x2 max-pool")
    p.add_argument("--relu", action="store_true", help="random layer: fused Relu")
    p.add_argument("--batch", type=int, default=1, help="images (default 1)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    add_engine_arguments(p)
    return p


def _shape(text):
    match = re.fullmatch(r"(\d+)x(\d+)x(\d+)", text or "")
    if not match:
        raise InputError(f"--shape must look like CxHxW (e.g. 16x32x32), not {text!r}")
    dims = tuple(int(v) for v in match.groups())
    if min(dims) < 1:
        raise InputError(f"--shape {text}: every dimension must be at least 1")
    return dims


def random_layer_model(shape, out_channels, kernel=3, stride=1, pad=None, pool=False, relu=False,
                       seed=0):
    """A one-layer (or Conv + MaxPool) int8 model with seeded random parameters."""
    if out_channels is None or out_channels < 1:
        raise InputError("--out-channels must be a positive integer")
    for name, value, lo in (("--kernel", kernel, 1), ("--stride", stride, 1)):
        if value < lo:
            raise InputError(f"{name} must be at least {lo}, not {value}")
    pad = kernel // 2 if pad is None else pad
    if pad < 0:
        raise InputError(f"--pad must not be negative, not {pad}")
    rng = np.random.default_rng(seed)
    cin, h, w = shape
    weight = rng.integers(-127, 128, (out_channels, cin, kernel, kernel)).astype(np.int8)
    bias = rng.integers(-5000, 5000, out_channels).astype(np.int32)
    x_scale, w_scale = 0.02, rng.uniform(0.5, 1.5, out_channels) / 64
    # Output scale so that the accumulators spread over the int8 range.
    spread = 64 * 74 * math.sqrt(cin * kernel * kernel)
    y_scale = x_scale * float(w_scale.mean()) * spread / 100
    x_zp, y_zp = int(rng.integers(-20, 20)), int(rng.integers(-20, 20))
    try:
        conv = Conv("conv", ["x"], "conv_out", shape, weight, bias, x_scale, x_zp, w_scale,
                    y_scale, y_zp, stride=(stride, stride), pads=(pad,) * 4,
                    lo=y_zp if relu else -128)
    except ValueError as e:
        raise InputError(str(e)) from None
    layers = [conv]
    if pool:
        layers.append(MaxPool("pool", ["conv_out"], "pool_out", conv.output_shape, (2, 2),
                              x_scale=y_scale, x_zero_point=y_zp))
    last = layers[-1]
    return QuantizedModel(
        "random_layer", layers, TensorSpec("x", shape, np.int8, x_scale, x_zp),
        TensorSpec(last.output, last.output_shape, np.int8, y_scale, y_zp), "x", last.output)


def model_layer_model(path, name, batch, seed):
    """The layer ``name`` of the model at ``path`` as a one-layer model, and its real input.

    Returns
    -------
    (QuantizedModel, numpy.ndarray of int8)
    """
    model = load_onnx(path)
    by_name = {layer.name: layer for layer in model.layers}
    if name not in by_name:
        raise InputError(f"model {model.name!r} has no layer {name!r} "
                         f"(layers: {', '.join(by_name)})")
    layer = by_name[name]
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (batch, *model.input.shape)).astype(np.int8)
    tensors = {model.input_tensor: x}
    for earlier in model.layers:
        if earlier is layer:
            break
        tensors[earlier.output] = earlier.evaluate(*(tensors[t] for t in earlier.inputs))
    if len(layer.inputs) != 1:
        raise InputError(f"layer {name!r} ({layer.op}) has {len(layer.inputs)} inputs; "
                         f"fpgacnn sim runs single-input layers")
    x_layer = tensors[layer.inputs[0]]
    one = QuantizedModel(
        f"{model.name}:{name}", [layer],
        TensorSpec(layer.inputs[0], layer.input_shape, np.int8, getattr(layer, "x_scale", 1.0), 0),
        TensorSpec(layer.output, layer.output_shape, np.int8, layer.y_scale, layer.y_zero_point),
        layer.inputs[0], layer.output)
    return one, x_layer


def run(args):
    if args.batch < 1:
        raise InputError(f"--batch must be at least 1, not {args.batch}")
    check_outputs(args)
    if args.model is not None:
        if args.layer is None:
            raise InputError(f"--layer NAME is required with MODEL ({args.model})")
        if args.shape is not None:
            raise InputError("give either MODEL --layer NAME or --shape, not both")
        model, x = model_layer_model(args.model, args.layer, args.batch, args.seed)
    else:
        if args.shape is None:
            raise InputError("give a layer: --shape CxHxW --out-channels N, or MODEL --layer NAME")
        model = random_layer_model(_shape(args.shape), args.out_channels, args.kernel, args.stride,
                                   args.pad, args.pool, args.relu, args.seed)
        x = np.random.default_rng(args.seed + 1).integers(
            -128, 128, (args.batch, *model.input.shape)).astype(np.int8)
    config = engine_config(args)
    step = compile_model(model, config, batch=args.batch).steps[0]
    if not hasattr(step, "runs"):
        raise InputError(f"layer {step.name!r} ({step.op}) runs on the host, not the engine")
    print(f"layer {step.name} ({step.op}): input {'x'.join(map(str, model.input.shape))}, "
          f"output {'x'.join(map(str, model.output.shape))}, batch {args.batch}, "
          f"{step.macs * args.batch:,} MACs, {len(step.runs)} engine run(s)")
    with Accelerator(model, backend="sim", config=config, batch=args.batch, waves=args.waves,
                     clock_hz=args.clock_mhz * 1e6, progress=print_progress) as accelerator:
        y = accelerator.run_int8(x)
        entry = accelerator.report["layers"][0]
    want = ReferenceBackend().run_int8(model, x)
    wrong = int(np.count_nonzero(y != want))
    print(f"output check: {'equal to the reference' if not wrong else f'{wrong} of {want.size} values DIFFER from the reference'}"
          f" ({want.size:,} values)")
    print(f"cycles: {entry['cycles']:,} measured, {entry['predicted_cycles']:,} by the cycle model")
    print(f"utilization: {entry['utilization']:.1%} of {config.peak_macs_per_cycle} MACs/cycle; "
          f"stalled on input {entry['stall_in_cycles']:,}, on output {entry['stall_out_cycles']:,} cycles")
    if len(step.runs) == 1:
        estimate = layer_cycles(config, step.runs[0].descriptor, macs=step.macs * args.batch)
        print(f"bound: {estimate.bound} ({estimate.reason})")
    if args.waves is not None:
        print(f"waveform: {args.waves}")
    if wrong:
        raise BackendError(f"layer {step.name!r}: the RTL output differs from the reference")
    return 0
