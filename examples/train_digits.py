"""Train, export and quantize fpgacnn's example model: a small CNN on digits.

The data set is scikit-learn's bundled ``load_digits`` (1797 8x8 grey-level
images, values 0..16, no download). The network is trained in plain numpy
(im2col convolutions, Adam, a fixed seed), exported as a float ONNX model with
``onnx.helper`` and quantized by :func:`fpgacnn.host.quantize.quantize_model`
(onnxruntime's static quantizer: QDQ, per-channel int8 weights, int8
activations, min/max calibration on the training images).

Architecture (engine-friendly; it exercises conv with padding and stride 2,
fused ReLU, max pooling, flatten and a fully connected layer)::

    input (N, 1, 8, 8) float32, pixels / 16
    Conv 3x3, 1 -> 8, pad 1        + Relu   -> (N, 8, 8, 8)
    Conv 3x3, 8 -> 16, pad 1       + Relu   -> (N, 16, 8, 8)
    MaxPool 2x2, stride 2                   -> (N, 16, 4, 4)
    Conv 3x3, 16 -> 32, pad 1, stride 2 + Relu -> (N, 32, 2, 2)
    Flatten                                 -> (N, 128)
    Gemm 128 -> 10                          -> logits (N, 10)

Writes, next to this script (or to ``--out-dir``):

- ``digits_float.onnx``: the float model (opset 17, dynamic batch ``N``),
- ``digits_int8.onnx``: the quantized model,
- ``digits_test.npz``: the held-out 20% (``x`` float32 (N, 1, 8, 8), ``y`` int64).

Run: ``python examples/train_digits.py`` (a few seconds).
"""

import argparse
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

SEED = 0
EPOCHS = 40
BATCH = 32
LEARNING_RATE = 2e-3


# ---------------------------------------------------------------- data

def load_split():
    """The fixed 80/20 split, stratified by class, as float32 NCHW in [0, 1]."""
    digits = load_digits()
    x = (digits.images.astype(np.float32) / 16.0)[:, None, :, :]
    y = digits.target.astype(np.int64)
    return train_test_split(x, y, test_size=0.2, random_state=SEED, stratify=y)


# ---------------------------------------------------------------- layers

def im2col(x, k, pad, stride):
    """(N, C, H, W) -> columns (N, OH, OW, C*k*k) in (c, ky, kx) order, like ONNX weights."""
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    win = np.lib.stride_tricks.sliding_window_view(xp, (k, k), axis=(2, 3))
    win = win[:, :, ::stride, ::stride]                       # (N, C, OH, OW, k, k)
    n, c, oh, ow = win.shape[:4]
    return win.transpose(0, 2, 3, 1, 4, 5).reshape(n, oh, ow, c * k * k)


def col2im(cols, x_shape, k, pad, stride):
    """Adjoint of :func:`im2col`: scatter-add column gradients back to the input."""
    n, c, h, w = x_shape
    oh, ow = cols.shape[1:3]
    cols = cols.reshape(n, oh, ow, c, k, k)
    dxp = np.zeros((n, c, h + 2 * pad, w + 2 * pad), cols.dtype)
    for ky in range(k):
        for kx in range(k):
            dxp[:, :, ky:ky + stride * oh:stride, kx:kx + stride * ow:stride] += \
                cols[:, :, :, :, ky, kx].transpose(0, 3, 1, 2)
    return dxp[:, :, pad:pad + h, pad:pad + w]


class Conv:
    """k x k convolution with bias, followed by ReLU."""

    def __init__(self, rng, cin, cout, k=3, pad=1, stride=1):
        self.k, self.pad, self.stride = k, pad, stride
        fan_in = cin * k * k
        self.params = {"w": (rng.standard_normal((cout, cin, k, k)) * np.sqrt(2 / fan_in))
                       .astype(np.float32),
                       "b": np.zeros(cout, np.float32)}

    def forward(self, x):
        self.x_shape = x.shape
        self.cols = im2col(x, self.k, self.pad, self.stride)
        w = self.params["w"].reshape(len(self.params["b"]), -1)
        z = self.cols @ w.T + self.params["b"]                    # (N, OH, OW, Cout)
        self.mask = z > 0
        return np.where(self.mask, z, 0).transpose(0, 3, 1, 2)

    def backward(self, dy):
        dz = dy.transpose(0, 2, 3, 1) * self.mask
        w = self.params["w"]
        flat = dz.reshape(-1, dz.shape[-1])
        self.grads = {"w": (flat.T @ self.cols.reshape(len(flat), -1)).reshape(w.shape),
                      "b": flat.sum(0)}
        dcols = dz @ w.reshape(len(w), -1)
        return col2im(dcols, self.x_shape, self.k, self.pad, self.stride)


class MaxPool2:
    """2x2 max pooling, stride 2 (even sizes)."""

    params = {}

    def forward(self, x):
        n, c, h, w = x.shape
        win = x.reshape(n, c, h // 2, 2, w // 2, 2)
        y = win.max(axis=(3, 5))
        # Route the gradient to one maximum per window (the first), as ONNX MaxPool picks one.
        flat = win.transpose(0, 1, 2, 4, 3, 5).reshape(n, c, h // 2, w // 2, 4)
        self.arg = flat.argmax(-1)
        self.shape = x.shape
        return y

    def backward(self, dy):
        n, c, h, w = self.shape
        onehot = np.eye(4, dtype=dy.dtype)[self.arg] * dy[..., None]
        self.grads = {}
        return (onehot.reshape(n, c, h // 2, w // 2, 2, 2)
                .transpose(0, 1, 2, 4, 3, 5).reshape(self.shape))


class Dense:
    """Flatten then a fully connected layer (ONNX Flatten + Gemm with transB=1)."""

    def __init__(self, rng, cin, cout):
        self.params = {"w": (rng.standard_normal((cout, cin)) * np.sqrt(1 / cin))
                       .astype(np.float32),
                       "b": np.zeros(cout, np.float32)}

    def forward(self, x):
        self.shape = x.shape
        self.x = x.reshape(len(x), -1)
        return self.x @ self.params["w"].T + self.params["b"]

    def backward(self, dy):
        self.grads = {"w": dy.T @ self.x, "b": dy.sum(0)}
        return (dy @ self.params["w"]).reshape(self.shape)


def build(rng):
    return [Conv(rng, 1, 8), Conv(rng, 8, 16), MaxPool2(), Conv(rng, 16, 32, stride=2),
            Dense(rng, 32 * 2 * 2, 10)]


def forward(net, x):
    for layer in net:
        x = layer.forward(x)
    return x


# ---------------------------------------------------------------- training

def train(x, y, log=print):
    rng = np.random.default_rng(SEED)
    net = build(rng)
    moments = [{k: (np.zeros_like(v), np.zeros_like(v)) for k, v in layer.params.items()}
               for layer in net]
    beta1, beta2, eps, step = 0.9, 0.999, 1e-8, 0
    for epoch in range(EPOCHS):
        order = rng.permutation(len(x))
        total = 0.0
        for i in range(0, len(x), BATCH):
            idx = order[i:i + BATCH]
            logits = forward(net, x[idx])
            # Softmax cross-entropy and its gradient.
            p = np.exp(logits - logits.max(1, keepdims=True))
            p /= p.sum(1, keepdims=True)
            total += -np.log(p[np.arange(len(idx)), y[idx]] + 1e-12).sum()
            grad = p
            grad[np.arange(len(idx)), y[idx]] -= 1
            grad /= len(idx)
            for layer in reversed(net):
                grad = layer.backward(grad)
            step += 1
            for layer, m in zip(net, moments):
                for k, v in layer.params.items():
                    g = layer.grads[k]
                    m1, m2 = m[k]
                    m1[...] = beta1 * m1 + (1 - beta1) * g
                    m2[...] = beta2 * m2 + (1 - beta2) * g * g
                    update = LEARNING_RATE * (m1 / (1 - beta1 ** step)) / (
                        np.sqrt(m2 / (1 - beta2 ** step)) + eps)
                    v -= update.astype(v.dtype)
        if epoch % 10 == 9 or epoch == EPOCHS - 1:
            log(f"epoch {epoch + 1:3d}: loss {total / len(x):.4f}")
    return net


# ---------------------------------------------------------------- export

def export_onnx(net, path):
    """Write the trained network as a float ONNX model (opset 17, batch dimension ``N``)."""
    conv1, conv2, _, conv3, dense = net
    init = []
    nodes = []

    def conv(name, layer, x, y):
        init.append(numpy_helper.from_array(layer.params["w"], f"{name}.weight"))
        init.append(numpy_helper.from_array(layer.params["b"], f"{name}.bias"))
        nodes.append(helper.make_node(
            "Conv", [x, f"{name}.weight", f"{name}.bias"], [f"{name}_out"], name=name,
            kernel_shape=[layer.k, layer.k], pads=[layer.pad] * 4,
            strides=[layer.stride] * 2))
        nodes.append(helper.make_node("Relu", [f"{name}_out"], [y], name=f"{name}_relu"))

    conv("conv1", conv1, "input", "relu1")
    conv("conv2", conv2, "relu1", "relu2")
    nodes.append(helper.make_node("MaxPool", ["relu2"], ["pool"], name="pool",
                                  kernel_shape=[2, 2], strides=[2, 2]))
    conv("conv3", conv3, "pool", "relu3")
    nodes.append(helper.make_node("Flatten", ["relu3"], ["flat"], name="flatten", axis=1))
    init.append(numpy_helper.from_array(dense.params["w"], "fc.weight"))
    init.append(numpy_helper.from_array(dense.params["b"], "fc.bias"))
    nodes.append(helper.make_node("Gemm", ["flat", "fc.weight", "fc.bias"], ["logits"],
                                  name="fc", transB=1))
    graph = helper.make_graph(
        nodes, "digits_cnn",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])],
        initializer=init)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="fpgacnn examples/train_digits.py")
    model.ir_version = 8  # readable by every onnxruntime fpgacnn supports (>= 1.17)
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))


def accuracy_onnxruntime(path, x, y):
    """Top-1 accuracy with onnxruntime running the file as written.

    Graph optimisations are off: with them onnxruntime fuses QDQ groups into
    u8s8 integer kernels that saturate on x86 CPUs without VNNI, so its int8
    result would depend on the CPU. Without them it computes the exact ONNX
    semantics (DequantizeLinear, float operator, QuantizeLinear).
    """
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    logits = session.run(None, {"input": x})[0]
    return float((logits.argmax(1) == y).mean()), logits


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).resolve().parent,
                        help="where to write the models and test data (default: next to this script)")
    args = parser.parse_args(argv)
    from fpgacnn.host.quantize import quantize_model

    out = args.out_dir
    out.mkdir(parents=True, exist_ok=True)
    x_train, x_test, y_train, y_test = load_split()
    start = time.perf_counter()
    net = train(x_train, y_train)
    print(f"trained on {len(x_train)} images in {time.perf_counter() - start:.1f} s")
    numpy_acc = float((forward(net, x_test).argmax(1) == y_test).mean())

    float_path, int8_path = out / "digits_float.onnx", out / "digits_int8.onnx"
    export_onnx(net, float_path)
    float_acc, float_logits = accuracy_onnxruntime(float_path, x_test, y_test)
    # The exported graph must compute what the numpy network computes.
    np.testing.assert_allclose(float_logits, forward(net, x_test), rtol=1e-4, atol=1e-4)
    quantize_model(float_path, x_train, int8_path)
    int8_acc, _ = accuracy_onnxruntime(int8_path, x_test, y_test)
    np.savez_compressed(out / "digits_test.npz", x=x_test, y=y_test)

    print(f"held-out accuracy ({len(x_test)} images): numpy {numpy_acc:.2%}, "
          f"float ONNX {float_acc:.2%}, int8 ONNX (onnxruntime, as written) {int8_acc:.2%}")
    for path in (float_path, int8_path, out / "digits_test.npz"):
        print(f"wrote {path} ({path.stat().st_size / 1024:.1f} KiB)")


if __name__ == "__main__":
    main()
