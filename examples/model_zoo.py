"""A model zoo: the MLPerf Tiny reference architectures, written the way
``torch.onnx.export`` writes them, quantized by ``fpgacnn quantize``.

Accuracy is not the point (the weights are seeded random numbers); the graphs
are. Each model is built with ``onnx.helper`` exactly as PyTorch's exporter
lays it out, so that fpgacnn is tried on what users actually feed it:

- Conv (no bias where a BatchNormalization follows, as ``bias=False``) then a
  separate ``BatchNormalization`` with running statistics,
- ``Relu``, or ``Clip(x, 0, 6)`` for ``nn.ReLU6`` (bounds as ``Constant`` nodes),
- ``x.view(x.size(0), -1)`` as ``Shape -> Gather -> Unsqueeze -> Concat -> Reshape``,
  ``torch.flatten(x, 1)`` as ``Flatten``, ``x.mean([2, 3])`` as ``ReduceMean``,
- ``nn.Linear`` as ``Gemm(transB=1)``, ``nn.AvgPool2d`` with
  ``count_include_pad=1`` and ``ceil_mode=0`` written out, ``F.softmax`` at the end,
- a symbolic batch axis (``dynamic_axes``), opsets 13 to 17, torch's node and
  tensor names (``/layer1/conv1/Conv``, ``layer1.conv1.weight``).

Models (MLPerf Tiny v1.x, benchmark/training of github.com/mlcommons/tiny):

=================  =============  ================================================
name               input          architecture
=================  =============  ================================================
resnet8            (3, 32, 32)    image classification: conv 16, three stacks of
                                  two 3x3 convs (16, 32, 64 channels; 1x1 stride-2
                                  shortcuts), avgpool 8, FC 10, softmax
mobilenet_v1_025   (3, 96, 96)    visual wake words: MobileNetV1 alpha 0.25, conv 8
                                  stride 2 and 13 depthwise-separable blocks (ReLU6),
                                  mean over H, W, FC 2, softmax
ds_cnn             (1, 49, 10)    keyword spotting, DS-CNN small: conv 64 10x4
                                  stride 2, 4 depthwise + pointwise blocks,
                                  avgpool (24, 5), FC 12, softmax
autoencoder        (640,)         anomaly detection: FC autoencoder 128, 128, 128,
                                  128, 8, 128, 128, 128, 128 (each + BatchNorm1d +
                                  ReLU), FC 640
resnet18_stem      (3, 224, 224)  ResNet-18 stem (conv 7x7 stride 2, 64, BN, ReLU,
                                  maxpool 3x3 stride 2) and its first basic block
=================  =============  ================================================

Run::

    python examples/model_zoo.py OUT_DIR [--models resnet8,ds_cnn] [--format qdq]

writes ``NAME_float.onnx``, ``NAME_calibration.npy`` (seeded inputs) and
``NAME_int8.onnx`` (quantized by :func:`fpgacnn.host.quantize.quantize_model`)
for each model; then ``fpgacnn run OUT_DIR/resnet8_int8.onnx --input X.npy
--backend reference`` runs one. From Python: ``write_zoo(out_dir)``.
"""

import argparse
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

__all__ = ["ZOO", "build", "calibration_data", "write_zoo"]


class _TorchStyleGraph:
    """Builds nodes, tensors and initializers named as torch.onnx.export names them."""

    def __init__(self, seed, opset):
        self.rng = np.random.default_rng(seed)
        self.opset = opset
        self.nodes, self.inits = [], []
        self.counts = {}

    def _node(self, op, inputs, scope, **attrs):
        key = f"{scope}/{op}"
        n = self.counts.get(key, 0)
        self.counts[key] = n + 1
        name = key if n == 0 else f"{key}_{n}"
        out = f"{name}_output_0"
        self.nodes.append(helper.make_node(op, inputs, [out], name=name, **attrs))
        return out

    def _param(self, name, array):
        self.inits.append(numpy_helper.from_array(np.asarray(array, np.float32), name))
        return name

    def _constant(self, value, scope):
        """A ``Constant`` node, as torch writes scalar operands."""
        key = f"{scope}/Constant"
        n = self.counts.get(key, 0)
        self.counts[key] = n + 1
        name = key if n == 0 else f"{key}_{n}"
        out = f"{name}_output_0"
        self.nodes.append(helper.make_node("Constant", [], [out], name=name,
                                           value=numpy_helper.from_array(np.asarray(value))))
        return out

    def conv(self, x, scope, cin, cout, k, stride=1, pad=0, group=1, bias=False):
        kh, kw = (k, k) if np.isscalar(k) else k
        ph, pw = (pad, pad) if np.isscalar(pad) else pad
        fan_in = cin // group * kh * kw
        w = self.rng.normal(0, np.sqrt(2.0 / fan_in), size=(cout, cin // group, kh, kw))
        ins = [x, self._param(f"{scope}.weight", w)]
        if bias:
            ins.append(self._param(f"{scope}.bias", self.rng.normal(0, 0.1, cout)))
        return self._node("Conv", ins, f"/{scope}", dilations=[1, 1], group=group,
                          kernel_shape=[kh, kw], pads=[ph, pw, ph, pw], strides=[stride] * 2)

    def bn(self, x, scope, c):
        p = self._param
        ins = [x, p(f"{scope}.weight", self.rng.uniform(0.6, 1.4, c)),
               p(f"{scope}.bias", self.rng.normal(0, 0.2, c)),
               p(f"{scope}.running_mean", self.rng.normal(0, 0.2, c)),
               p(f"{scope}.running_var", self.rng.uniform(0.6, 1.4, c))]
        attrs = dict(epsilon=1e-5, momentum=0.9)
        if self.opset >= 14:
            attrs["training_mode"] = 0
        return self._node("BatchNormalization", ins, f"/{scope}", **attrs)

    def relu(self, x, scope):
        return self._node("Relu", [x], f"/{scope}")

    def relu6(self, x, scope):
        lo = self._constant(np.float32(0.0), f"/{scope}")
        hi = self._constant(np.float32(6.0), f"/{scope}")
        return self._node("Clip", [x, lo, hi], f"/{scope}")

    def add(self, a, b, scope):
        return self._node("Add", [a, b], f"/{scope}")

    def maxpool(self, x, scope, k, stride, pad):
        return self._node("MaxPool", [x], f"/{scope}", ceil_mode=0, dilations=[1, 1],
                          kernel_shape=[k, k], pads=[pad] * 4, strides=[stride] * 2)

    def avgpool(self, x, scope, k):
        kh, kw = (k, k) if np.isscalar(k) else k
        return self._node("AveragePool", [x], f"/{scope}", ceil_mode=0, count_include_pad=1,
                          kernel_shape=[kh, kw], pads=[0, 0, 0, 0], strides=[kh, kw])

    def view_flat(self, x, scope):
        """``x.view(x.size(0), -1)``."""
        shape = self._node("Shape", [x], f"/{scope}")
        zero = self._constant(np.int64(0), f"/{scope}")
        size0 = self._node("Gather", [shape, zero], f"/{scope}", axis=0)
        axes = self._constant(np.array([0], np.int64), f"/{scope}")
        dim0 = self._node("Unsqueeze", [size0, axes], f"/{scope}")
        minus1 = self._constant(np.array([-1], np.int64), f"/{scope}")
        target = self._node("Concat", [dim0, minus1], f"/{scope}", axis=0)
        return self._node("Reshape", [x, target], f"/{scope}")

    def flatten(self, x, scope):
        return self._node("Flatten", [x], f"/{scope}", axis=1)

    def mean_hw(self, x, scope):
        """``x.mean([2, 3])``."""
        return self._node("ReduceMean", [x], f"/{scope}", axes=[2, 3], keepdims=0)

    def linear(self, x, scope, cin, cout):
        w = self.rng.normal(0, np.sqrt(1.0 / cin), size=(cout, cin))
        ins = [x, self._param(f"{scope}.weight", w),
               self._param(f"{scope}.bias", self.rng.normal(0, 0.1, cout))]
        return self._node("Gemm", ins, f"/{scope}", alpha=1.0, beta=1.0, transB=1)

    def softmax(self, x, scope):
        return self._node("Softmax", [x], f"/{scope}", axis=1)

    def model(self, name, in_shape, out, out_shape):
        """The model, with torch's ``input``/``output`` names and a dynamic batch."""
        self.nodes[-1].output[0] = "output"   # torch names the graph output; nothing else reads it
        graph = helper.make_graph(
            self.nodes, name,
            [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch_size", *in_shape])],
            [helper.make_tensor_value_info("output", TensorProto.FLOAT,
                                           ["batch_size", *out_shape])],
            self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)],
                                  producer_name="pytorch", producer_version="2.5.1")
        model.ir_version = 8
        onnx.checker.check_model(model, full_check=True)
        return model


def resnet8(seed=0, hw=32, classes=10):
    """MLPerf Tiny image classification ResNet-8 (16, 32, 64 channels)."""
    g = _TorchStyleGraph(seed, opset=13)
    x = g.relu(g.bn(g.conv("input", "conv1", 3, 16, 3, pad=1), "bn1", 16), "relu")
    cin = 16
    for i, (cout, stride) in enumerate([(16, 1), (32, 2), (64, 2)], start=1):
        s = f"layer{i}"
        y = g.relu(g.bn(g.conv(x, f"{s}/conv1", cin, cout, 3, stride, 1), f"{s}/bn1", cout),
                   f"{s}/relu")
        y = g.bn(g.conv(y, f"{s}/conv2", cout, cout, 3, 1, 1), f"{s}/bn2", cout)
        shortcut = x if stride == 1 else g.conv(x, f"{s}/downsample", cin, cout, 1, stride,
                                                bias=True)
        x = g.relu(g.add(shortcut, y, s), f"{s}/relu_1")
        cin = cout
    x = g.view_flat(g.avgpool(x, "avgpool", hw // 4), "view")
    x = g.softmax(g.linear(x, "fc", 64, classes), "softmax")
    return g.model("resnet8", (3, hw, hw), x, (classes,))


def mobilenet_v1_025(seed=0, hw=96, classes=2):
    """MLPerf Tiny visual wake words MobileNetV1, alpha 0.25 (ReLU6 as torch writes it)."""
    g = _TorchStyleGraph(seed, opset=13)
    x = g.relu6(g.bn(g.conv("input", "features/0/0", 3, 8, 3, 2, 1), "features/0/1", 8),
                "features/0/2")
    cin = 8
    blocks = [(16, 1), (32, 2), (32, 1), (64, 2), (64, 1), (128, 2), (128, 1), (128, 1),
              (128, 1), (128, 1), (128, 1), (256, 2), (256, 1)]
    for i, (cout, stride) in enumerate(blocks, start=1):
        s = f"features/{i}"
        x = g.relu6(g.bn(g.conv(x, f"{s}/dw", cin, cin, 3, stride, 1, group=cin),
                         f"{s}/dw_bn", cin), f"{s}/dw_relu")
        x = g.relu6(g.bn(g.conv(x, f"{s}/pw", cin, cout, 1), f"{s}/pw_bn", cout),
                    f"{s}/pw_relu")
        cin = cout
    x = g.softmax(g.linear(g.mean_hw(x, "pool"), "classifier", cin, classes), "softmax")
    return g.model("mobilenet_v1_025", (3, hw, hw), x, (classes,))


def ds_cnn(seed=0, classes=12):
    """MLPerf Tiny keyword spotting DS-CNN (small): 49 frames x 10 MFCCs."""
    g = _TorchStyleGraph(seed, opset=17)
    x = g.relu(g.bn(g.conv("input", "conv1", 1, 64, (10, 4), 2, (5, 1), bias=True), "bn1", 64),
               "relu1")
    for i in range(1, 5):
        s = f"blocks/{i - 1}"
        x = g.relu(g.bn(g.conv(x, f"{s}/depthwise", 64, 64, 3, 1, 1, group=64, bias=True),
                        f"{s}/bn_dw", 64), f"{s}/relu_dw")
        x = g.relu(g.bn(g.conv(x, f"{s}/pointwise", 64, 64, 1, bias=True), f"{s}/bn_pw", 64),
                   f"{s}/relu_pw")
    x = g.flatten(g.avgpool(x, "avgpool", (24, 5)), "flatten")
    x = g.softmax(g.linear(x, "fc", 64, classes), "softmax")
    return g.model("ds_cnn", (1, 49, 10), x, (classes,))


def autoencoder(seed=0, dim=640):
    """MLPerf Tiny anomaly detection FC autoencoder (Linear + BatchNorm1d + ReLU)."""
    g = _TorchStyleGraph(seed, opset=15)
    x, cin = "input", dim
    for i, cout in enumerate([128, 128, 128, 128, 8, 128, 128, 128, 128]):
        s = f"encoder/{i}" if i < 5 else f"decoder/{i - 5}"
        x = g.relu(g.bn(g.linear(x, f"{s}/linear", cin, cout), f"{s}/bn", cout), f"{s}/relu")
        cin = cout
    x = g.linear(x, "output_layer", cin, dim)
    return g.model("autoencoder", (dim,), x, (dim,))


def resnet18_stem(seed=0, hw=224):
    """ResNet-18's stem and first basic block (``torchvision`` layout), at 224x224."""
    g = _TorchStyleGraph(seed, opset=17)
    x = g.relu(g.bn(g.conv("input", "conv1", 3, 64, 7, 2, 3), "bn1", 64), "relu")
    x = g.maxpool(x, "maxpool", 3, 2, 1)
    s = "layer1/layer1.0"
    y = g.relu(g.bn(g.conv(x, f"{s}/conv1", 64, 64, 3, 1, 1), f"{s}/bn1", 64), f"{s}/relu")
    y = g.bn(g.conv(y, f"{s}/conv2", 64, 64, 3, 1, 1), f"{s}/bn2", 64)
    x = g.relu(g.add(y, x, s), f"{s}/relu_1")
    side = (hw + 1) // 2
    side = (side + 1) // 2
    return g.model("resnet18_stem", (3, hw, hw), x, (64, side, side))


#: name -> builder; each takes ``seed`` (and its size parameters).
ZOO = {
    "resnet8": resnet8,
    "mobilenet_v1_025": mobilenet_v1_025,
    "ds_cnn": ds_cnn,
    "autoencoder": autoencoder,
    "resnet18_stem": resnet18_stem,
}


def build(name, seed=0, **size):
    """The float model ``name`` of :data:`ZOO` (an ``onnx.ModelProto``)."""
    if name not in ZOO:
        raise KeyError(f"unknown zoo model {name!r}; one of {', '.join(ZOO)}")
    return ZOO[name](seed=seed, **size)


def calibration_data(model, n=32, seed=0):
    """Seeded float32 inputs ``(n, ...)`` for the model's input (standard normal)."""
    dims = model.graph.input[0].type.tensor_type.shape.dim[1:]
    shape = [d.dim_value for d in dims]
    return np.random.default_rng(seed).normal(0, 1, size=(n, *shape)).astype(np.float32)


def write_zoo(out_dir, names=None, *, quantize=True, n_calibration=32, seed=0,
              quant_format="qdq", activation_type="int8", sizes=None):
    """Write the zoo into ``out_dir``.

    Parameters
    ----------
    out_dir : str or os.PathLike
        Created if missing.
    names : list of str, optional
        Models of :data:`ZOO` (default: all).
    quantize : bool
        Also write ``NAME_int8.onnx`` with :func:`fpgacnn.host.quantize.quantize_model`.
    n_calibration : int
        Calibration inputs per model.
    sizes : dict, optional
        ``{name: {"hw": 32}}``: size parameters of a builder (smaller images for quick runs).

    Returns
    -------
    dict
        ``name -> {"float": path, "calibration": path, "int8": path or None}``.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = {}
    for name in names or list(ZOO):
        model = build(name, seed=seed, **(sizes or {}).get(name, {}))
        float_path = out_dir / f"{name}_float.onnx"
        calib_path = out_dir / f"{name}_calibration.npy"
        onnx.save(model, str(float_path))
        np.save(calib_path, calibration_data(model, n_calibration, seed + 1))
        int8_path = None
        if quantize:
            from fpgacnn.host.quantize import quantize_model
            int8_path = quantize_model(float_path, calib_path, out_dir / f"{name}_int8.onnx",
                                       quant_format=quant_format, activation_type=activation_type)
        written[name] = {"float": float_path, "calibration": calib_path, "int8": int8_path}
    return written


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path, help="directory to write the models into")
    parser.add_argument("--models", default=",".join(ZOO),
                        help=f"comma-separated subset of: {', '.join(ZOO)}")
    parser.add_argument("--format", choices=("qdq", "qoperator"), default="qdq")
    parser.add_argument("--activation-type", choices=("int8", "uint8"), default="int8")
    parser.add_argument("--no-quantize", action="store_true", help="float models only")
    args = parser.parse_args(argv)
    names = [n for n in args.models.split(",") if n]
    unknown = [n for n in names if n not in ZOO]
    if unknown:
        parser.error(f"unknown models {', '.join(unknown)}; choose from {', '.join(ZOO)}")
    written = write_zoo(args.out_dir, names, quantize=not args.no_quantize,
                        quant_format=args.format, activation_type=args.activation_type)
    for name, paths in written.items():
        print(f"{name}: {paths['int8'] or paths['float']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
