"""Every convolution on the RTL: random single layers with kernels 1 to 7 and
10x4 (square and not), strides 1 and 2 (non-square too), groups 1, C and in
between, dilations, bit-exact with the reference on two engine
configurations, with and without stream back-pressure (issue 15, item 2).

They reach the engine as the views of ``fpgacnn.host.conv_views``
(block-diagonal groups, zeros between dilated taps, taps folded into
channels). A layer past an engine limit (a folded kernel's channels beyond the
line buffer, say) must be refused by the compiler with a message naming the
layer, before anything reaches the board; most layers here fit. Without
back-pressure the engine's cycles equal the cycle model's prediction.

``FPGACNN_VIEW_LAYERS`` (default 60) sets the layers per configuration.
"""

import os
import re

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from fpgacnn.core.errors import MappingError
from fpgacnn.host.accelerator import Accelerator, open_board
from fpgacnn.host.compiler import EngineStep, compile_model
from fpgacnn.host.reference import ReferenceBackend

from limit_layers import CONFIGS
from random_models import convolution_model

N_LAYERS = int(os.environ.get("FPGACNN_VIEW_LAYERS", "60"))
SEED = 1500


def random_view_layer(seed):
    """A random convolution layer model and its input ``(model, x, pauses)``."""
    rng = np.random.default_rng(seed)
    kind = ("dense", "grouped", "depthwise", "dilated")[seed % 4]
    if rng.random() < 0.1:
        kernel = (10, 4)
    elif rng.random() < 0.4:  # kernels the engine takes as they are
        kernel = tuple(int(k) for k in rng.integers(1, 4, 2))
    else:
        kernel = tuple(int(k) for k in rng.integers(1, 8, 2))
        if rng.random() < 0.4:
            kernel = (kernel[0], kernel[0])
    stride = tuple(int(s) for s in rng.integers(1, 3, 2))
    if rng.random() < 0.5:
        stride = (stride[0], stride[0])
    dilation = (1, 1)
    if kind == "dilated" or (kind != "dense" and rng.random() < 0.3):
        dilation = tuple(int(d) for d in rng.integers(1, 4, 2))
        if dilation == (1, 1):
            dilation = (2, 2)
        kernel = tuple(min(k, 3) for k in kernel)
        if rng.random() < 0.4:  # a dilated span the engine takes with zeros between taps
            kernel, dilation = (2, 2), (2, 2)
    if kind == "depthwise":
        cin = int(rng.integers(2, 13))
        group, cout = cin, cin * int(rng.integers(1, 3))
    elif kind == "grouped":
        group = int(rng.integers(2, 4))
        cin, cout = group * int(rng.integers(1, 4)), group * int(rng.integers(1, 4))
    else:
        group = 1
        cin = int(rng.integers(1, 4)) if max(kernel) > 3 else int(rng.integers(1, 9))
        cout = int(rng.integers(1, 9))
    span = [(k - 1) * d + 1 for k, d in zip(kernel, dilation)]
    h, w = (int(span[i] + rng.integers(0, 8)) for i in range(2))
    pads = [int(rng.integers(0, span[i % 2])) if rng.random() < 0.7 else 0 for i in range(4)]
    model = convolution_model(rng, cin, cout, group, kernel, stride, dilation, pads, (h, w))
    batch = int(rng.integers(1, 3))
    x = rng.integers(-128, 128, (batch, cin, h, w), dtype=np.int8)
    pauses = (0, 0) if rng.random() < 0.4 else tuple(int(p) for p in rng.integers(1, 4, 2))
    return model, x, pauses


@pytest.fixture(scope="module")
def boards():
    opened = {}

    def board(key):
        if key not in opened:
            opened[key] = open_board("sim", CONFIGS[key])
        return opened[key]

    yield board
    for b in opened.values():
        b.close()


@pytest.mark.parametrize("index", range(N_LAYERS))
@pytest.mark.parametrize("key", list(CONFIGS))
def test_random_convolution_is_exact_on_rtl(key, index, boards):
    seed = SEED + index
    model, x, pauses = random_view_layer(seed)
    layer = model.layers[0]
    what = (f"seed {seed} on {key}: {layer.op} {layer.input_shape} kernel {layer.kernel} "
            f"stride {layer.stride} dilation {layer.dilation} group {layer.group} pads "
            f"{layer.pads}")
    config = CONFIGS[key]
    try:
        (step,) = compile_model(model, config, batch=len(x)).steps
    except MappingError as e:
        assert re.match(r"^layer 'conv': ", str(e)), f"{what}: {e}"
        pytest.skip(f"refused by the compiler: {e}")
    assert isinstance(step, EngineStep), what
    board = boards(key)
    acc = Accelerator(model, config=config, board=board)
    board.set_backpressure(*pauses, seed=seed)
    try:
        y = acc.run_int8(x)
    finally:
        board.set_backpressure(0, 0)
    assert_array_equal(y, ReferenceBackend().run_int8(model, x),
                       err_msg=f"WRONG ANSWER: {what} ({step.mapping})")
    report = acc.report["layers"][0]
    if pauses == (0, 0):
        assert report["cycles"] == report["predicted_cycles"], what
