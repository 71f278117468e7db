"""Seeded random multi-layer int8 models, built straight from the IR classes.

They cover what the compiler has to get right on the engine: stacks of
convolutions with kernels 1..3, strides 1..2, padding, Relu, fused and unfused
max-pools, a residual Add, global average pooling, Flatten and Gemm, with
channel counts that leave partial tiles.
"""

import math

import numpy as np

from fpgacnn.host.layers import (Add, Conv, DilatedConv, Flatten, Gemm, GlobalAveragePool,
                                 GroupedConv, MaxPool)
from fpgacnn.host.model import QuantizedModel, TensorSpec


class _Builder:
    def __init__(self, seed, shape):
        self.rng = np.random.default_rng(seed)
        self.layers = []
        self.tensor, self.shape = "x", tuple(shape)
        self.scale, self.zp = 0.05, int(self.rng.integers(-10, 10))
        self.count = 0

    def _name(self, kind):
        self.count += 1
        return f"{kind}{self.count}"

    def _push(self, layer):
        self.layers.append(layer)
        self.tensor, self.shape = layer.output, layer.output_shape
        self.scale, self.zp = layer.y_scale, layer.y_zero_point
        return layer

    def conv(self, cout, kernel, stride=1, pad=0, relu=True):
        cin = self.shape[0]
        weight = self.rng.integers(-127, 128, (cout, cin, kernel, kernel)).astype(np.int8)
        w_scale = self.rng.uniform(0.5, 1.5, cout) / 127
        spread = 127 * 70 * math.sqrt(cin * kernel * kernel) * self.scale * w_scale.mean()
        y_scale, y_zp = spread / 90, int(self.rng.integers(-20, 20))
        bias = self.rng.integers(-3000, 3000, cout).astype(np.int32)
        name = self._name("conv")
        return self._push(Conv(name, [self.tensor], name, self.shape, weight, bias, self.scale,
                               self.zp, w_scale, y_scale, y_zp, stride=(stride, stride),
                               pads=(pad,) * 4, lo=y_zp if relu else -128))

    def maxpool(self):
        name = self._name("pool")
        return self._push(MaxPool(name, [self.tensor], name, self.shape, (2, 2),
                                  x_scale=self.scale, x_zero_point=self.zp))

    def residual(self, second=1):
        """conv -> conv (the second ``second x second``), added to the input (same
        shape)."""
        skip, skip_scale, skip_zp = self.tensor, self.scale, self.zp
        c = self.shape[0]
        self.conv(c, 3, pad=1)
        self.conv(c, second, pad=second // 2, relu=False)
        name = self._name("add")
        y_scale = (skip_scale + self.scale) * 0.8
        return self._push(Add(name, [skip, self.tensor], name, self.shape, skip_scale, skip_zp,
                              self.scale, self.zp, y_scale, int(self.rng.integers(-10, 10))))

    def add(self, a, b):
        """Add the tensors ``a`` and ``b`` (names, of this shape; ``(name, scale, zp)``)."""
        (ta, sa, za), (tb, sb, zb) = a, b
        name = self._name("add")
        return self._push(Add(name, [ta, tb], name, self.shape, sa, za, sb, zb, (sa + sb) * 0.8,
                              int(self.rng.integers(-10, 10))))

    def gap(self):
        name = self._name("gap")
        return self._push(GlobalAveragePool(name, [self.tensor], name, self.shape, self.scale,
                                            self.zp, self.scale * 0.7, self.zp))

    def flatten(self):
        name = self._name("flatten")
        return self._push(Flatten(name, [self.tensor], name, self.shape, self.scale, self.zp))

    def gemm(self, cout, relu=False):
        cin = self.shape[0]
        weight = self.rng.integers(-127, 128, (cout, cin)).astype(np.int8)
        w_scale = self.rng.uniform(0.5, 1.5, cout) / 127
        y_scale = 127 * 70 * math.sqrt(cin) * self.scale * w_scale.mean() / 90
        name = self._name("fc")
        return self._push(Gemm(name, [self.tensor], name, self.shape, weight,
                               self.rng.integers(-3000, 3000, cout).astype(np.int32), self.scale,
                               self.zp, w_scale, y_scale, int(self.rng.integers(-20, 20)),
                               lo=-128))

    def model(self, name):
        return QuantizedModel(name, self.layers, TensorSpec("x", self.layers[0].input_shape,
                                                            np.int8, 0.05, self.layers[0].x_zero_point),
                              TensorSpec(self.tensor, self.shape, np.int8, self.scale, self.zp),
                              "x", self.tensor)


def random_cnn(seed):
    """A random CNN: its shape varies with the seed, every layer kind appears."""
    rng = np.random.default_rng(1000 + seed)
    c0 = int(rng.integers(1, 7))
    size = int(rng.integers(7, 13))
    b = _Builder(seed, (c0, size, size))
    b.conv(int(rng.integers(3, 11)), 3, pad=1)
    b.conv(int(rng.integers(4, 20)), int(rng.integers(1, 4)), stride=int(rng.integers(1, 3)),
           pad=int(rng.integers(0, 2)))
    if b.shape[1] >= 4:
        b.maxpool()
    b.residual()
    b.conv(int(rng.integers(5, 24)), 1, stride=int(rng.integers(1, 3)))
    if seed % 2:
        b.gap()
    b.flatten()
    b.gemm(int(rng.integers(3, 12)))
    return b.model(f"random_cnn_{seed}")


def shared_residual_cnn(seed):
    """A residual block whose second convolution's output has two readers: the block's
    Add and a second Add of it to the block's output (a convolution output read
    twice, so no Add fuses into its convolution: docs/program.md)."""
    rng = np.random.default_rng(2000 + seed)
    b = _Builder(seed, (int(rng.integers(3, 9)), 8, 8))
    b.conv(int(rng.integers(4, 13)), 3, pad=1)
    skip = (b.tensor, b.scale, b.zp)
    b.conv(b.shape[0], 3, pad=1)
    b.conv(b.shape[0], 1, relu=False)
    inner = (b.tensor, b.scale, b.zp)
    b.add(skip, inner)
    b.add(inner, (b.tensor, b.scale, b.zp))
    b.conv(int(rng.integers(3, 9)), 1)
    return b.model(f"shared_residual_cnn_{seed}")


def residual_block_cnn(seed, channels=8, size=8):
    """A stem convolution and one residual block of ``channels`` channels at ``size x
    size``, two 3x3 convolutions as ResNet-8's: on an engine of 4-byte words in
    8-byte beats, 8 or 16 channels make its runs read and write whole beats
    (wide), the block's Add fused into its second convolution."""
    b = _Builder(seed, (channels, size, size))
    b.conv(channels, 3, pad=1)
    b.residual(second=3)
    return b.model(f"residual_block_cnn_{seed}_{channels}")


def convolution_model(rng, cin, cout, group, kernel, stride, dilation, pads, hw, *,
                      name="conv", spread=10):
    """A one-layer model of a convolution of any group, dilation, kernel and
    stride (a Conv, GroupedConv or DilatedConv as the importer would make it),
    seeded by ``rng``; outputs spread over about ``+-spread * 12`` steps."""
    weight = rng.integers(-127, 128, (cout, cin // group, *kernel)).astype(np.int8)
    w_scale = rng.uniform(0.5, 1.5, cout) / 127
    x_zp, y_zp = (int(v) for v in rng.integers(-20, 20, 2))
    fan_in = cin // group * kernel[0] * kernel[1]
    y_scale = spread * math.sqrt(fan_in) * 0.05 * w_scale.mean()
    args = (name, ["x"], "y", (cin, *hw), weight, rng.integers(-300, 300, cout).astype(np.int32),
            0.05, x_zp, w_scale, y_scale, y_zp)
    kw = dict(stride=stride, pads=tuple(pads), lo=y_zp if rng.random() < 0.5 else -128)
    if group > 1:
        layer = GroupedConv(*args, group=group, dilation=dilation, **kw)
    elif dilation != (1, 1):
        layer = DilatedConv(*args, dilation=dilation, **kw)
    else:
        layer = Conv(*args, **kw)
    return QuantizedModel("m", [layer], TensorSpec("x", (cin, *hw), np.int8, 0.05, x_zp),
                          TensorSpec("y", layer.output_shape, np.int8, y_scale, y_zp), "x", "y")


def folded_cnn(where, seed=5):
    """A CNN with a 5x5 convolution, whose taps fold into channels on a ``kmax = 3``
    engine: ``where = "input"``, the first layer (a fold of the network input,
    written with it); ``"middle"``, the second (a fold of a tensor of the arena)."""
    b = _Builder(seed, (3, 11, 10))
    if where == "input":
        b.conv(6, 5, stride=1, pad=2)
        b.conv(5, 3, pad=1)
        b.conv(4, 3, stride=2, pad=1)
    elif where == "middle":
        b.conv(6, 3, pad=1)
        b.conv(5, 5, stride=2, pad=2)
    else:
        raise ValueError(f"where must be 'input' or 'middle', not {where!r}")
    return b.model(f"{where}_fold")


def flatten_classifier(seed, channels, heads=1):
    """conv -> Flatten of a ``(channels, 3, 2)`` map -> ``heads`` Gemms reading it."""
    b = _Builder(seed, (3, 5, 4))
    b.conv(channels, 3, stride=1, pad=0)
    b.flatten()
    flat, shape, scale, zp = b.tensor, b.shape, b.scale, b.zp
    b.gemm(7)
    for _ in range(heads - 1):  # another Gemm on the same Flatten
        b.tensor, b.shape, b.scale, b.zp = flat, shape, scale, zp
        b.gemm(5)
    return b.model(f"flatten_classifier_{seed}")
