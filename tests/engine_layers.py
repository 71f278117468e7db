"""Seeded random layers of every kind the ConvEngine runs, and their reference outputs.

Shared by the cocotb tests of the engine (tests/cocotb_engine.py, the bare
engine under cocotbext-axi's bus models) and by the same scenarios on the
simulated board (tests/test_engine_rtl.py), so that one engine
configuration's layers are one definition whichever bus drives them.
"""

from dataclasses import dataclass

import numpy as np
from numpy.testing import assert_array_equal

from fpgacnn.core.config import EngineConfig
from fpgacnn.host.integer_ops import conv2d, maxpool2d
from fpgacnn.host.packing import pack_layer, unpack_output
from fpgacnn.host.requant import requant_params

__all__ = ["KINDS", "Layer", "random_layer", "check_output", "model_cycles"]

#: Layer kinds of the random scenario, each run with and without stream pauses.
KINDS = ("kxk", "kxk_stride2", "kxk_stride_kmax", "kxk_pool_relu", "smaller_kernel", "1x1_remap",
         "1x1_stride2_remap", "batch_pad0", "largest")


@dataclass
class Layer:
    """A quantized convolution (``params``: the weights and requantization) on input
    ``x``, packed for ``config``."""

    config: EngineConfig
    kind: str
    x: np.ndarray
    params: dict
    cout: int
    desc: dict = None
    data: bytes = None
    expected: np.ndarray = None

    def __post_init__(self):
        if self.desc is None:
            self.desc, data = pack_layer(self.config, self.x, name=self.kind, **self.params)
            self.data = bytes(data)
            self.expected = self.reference(self.x)

    def reference(self, x):
        p = self.params
        y = conv2d(x, p["w"], p["bias"], p["x_zp"], p["mult"], p["shift"], p["y_zp"],
                   *p["clamp"], stride=(p["stride"],) * 2, pads=p["pads"])
        return maxpool2d(y) if p["pool"] else y

    def with_input(self, x, *, load_weights):
        """The same layer on other images (``load_weights=False``: weights already loaded)."""
        desc, data = pack_layer(self.config, x, name=self.kind, load_weights=load_weights,
                                **self.params)
        return Layer(self.config, self.kind, x, self.params, self.cout, desc, bytes(data),
                     self.reference(x))

    def __str__(self):
        p = self.params
        return (f"{self.kind}: input {self.x.shape}, weights {p['w'].shape}, stride {p['stride']}, "
                f"pads {p['pads']}, pool {p['pool']}, clamp {p['clamp']}")


def random_layer(rng, kind, cfg):
    """A random quantized convolution of ``kind`` that fits ``cfg``."""
    k, stride, pool, batch, relu = cfg.kmax, 1, False, 1, bool(rng.integers(2))
    pads = (1, 1, 1, 1)
    if kind == "kxk_stride2":
        stride, pads = 2, tuple(int(p) for p in rng.integers(0, 2, size=4))
    elif kind == "kxk_pool_relu":
        pool, relu = True, True
    elif kind == "kxk_stride_kmax":
        stride, pads = cfg.kmax, (1, 0, 1, 0)
    elif kind == "smaller_kernel":  # embedded in the kmax x kmax window
        k, pads = max(1, cfg.kmax - 1), (int(rng.integers(2)), int(rng.integers(2)), 0, 1)
    elif kind in ("1x1_remap", "1x1_stride2_remap"):
        k, pads = 1, (0, 0, 0, 0)
        stride = 2 if kind == "1x1_stride2_remap" else 1
    elif kind == "batch_pad0":
        batch, pads = 2, (0, 0, 0, 0)
    cin = int(rng.integers(1, min(cfg.max_channels, 3 * cfg.pin) + 1))
    if kind.startswith("1x1"):
        cin = int(rng.integers(cfg.pin + 1, min(cfg.max_channels, cfg.kmax ** 2 * cfg.pin) + 1))
    cout = int(rng.integers(1, min(cfg.max_out_channels, 3 * cfg.pout) + 1))
    h = int(rng.integers(max(k, 4), 9))
    w = int(rng.integers(max(k, 4), min(cfg.max_width, 10) + 1))
    if kind == "largest":
        # The widest row at the deepest input the line buffer holds, every output channel.
        cin, cout, w = cfg.max_channels, cfg.max_out_channels, cfg.max_width
    x = rng.integers(-128, 128, size=(batch, cin, h, w), dtype=np.int8)
    wt = rng.integers(-128, 128, size=(cout, cin, k, k), dtype=np.int8)
    bias = rng.integers(-(1 << 14), 1 << 14, size=cout).astype(np.int32)
    x_zp = int(rng.integers(-20, 21))
    y_zp = int(rng.integers(-10, 11))
    # Scales that spread the accumulators over the int8 range, so clamping
    # and rounding are both exercised.
    acc_std = 75.0 * 75.0 * np.sqrt(cin * k * k)
    mult, shift = requant_params(rng.uniform(20.0, 80.0, size=cout) / acc_std)
    clamp = (y_zp if relu else -128, int(rng.integers(90, 128)))
    params = dict(w=wt, bias=bias, x_zp=x_zp, mult=mult, shift=shift, y_zp=y_zp, clamp=clamp,
                  stride=stride, pads=pads, pool=pool)
    return Layer(cfg, kind, x, params, cout)


def check_output(layer, output):
    """The engine's output bytes of ``layer``, unpacked, equal the reference."""
    got = unpack_output(layer.config, output, layer.desc, layer.cout)
    assert_array_equal(got, layer.expected, err_msg=str(layer))


def model_cycles(layer):
    """Cycles the analytic model predicts for the run of ``layer``."""
    from fpgacnn.host.cycle_model import layer_cycles
    return layer_cycles(layer.config, layer.desc).cycles
