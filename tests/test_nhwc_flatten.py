"""The compiler's flatten in the arena's NHWC order (host/nhwc_flatten.py, issue 16)."""

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from fpgacnn.core.arena import pixel_bytes
from fpgacnn.core.config import EngineConfig
from fpgacnn.host.compiler import compile_model
from fpgacnn.host.layers import Flatten, Gemm
from fpgacnn.host.model import QuantizedModel
from fpgacnn.host.nhwc_flatten import FlattenNHWC, permuted_gemm, nhwc_flatten
from fpgacnn.host.program_image import VectorRecord, build_image
from fpgacnn.host.reference import ReferenceBackend
from fpgacnn.host.vector_mapping import VECTOR_COPY

from conftest import SMALL_ENGINE
from random_models import _Builder, flatten_classifier, random_cnn

#: Channel paddings: none (pin = pout = 4, 8 channels), 4 to 8, 5 to 8 (lcm 8).
ENGINES = {"k3": SMALL_ENGINE,
           "p8": EngineConfig(pin=8, pout=4, kmax=3, stream_width=64, max_width=16,
                              max_channels=16, max_out_channels=16)}


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.parametrize("channels", [4, 5, 8])
def test_the_gemm_reads_the_nhwc_pixels_and_gives_the_same_output(engine, channels):
    config = ENGINES[engine]
    model = flatten_classifier(channels, channels)
    if pixel_bytes(config, channels) != channels:  # the compiler leaves it (Gemm size)
        assert nhwc_flatten(model, config) is model
    rewritten = _rewrite(model, config)
    flat = next(l for l in rewritten.layers if isinstance(l, FlattenNHWC))
    cp = pixel_bytes(config, channels)
    assert flat.cp == cp and flat.output_shape == (3 * 2 * cp,)
    gemm = next(l for l in rewritten.layers if isinstance(l, Gemm))
    assert gemm.weight.shape == (7, 3 * 2 * cp)
    rng = np.random.default_rng(channels)
    for batch in (1, 3):
        x = rng.integers(-128, 128, (batch, *model.input.shape)).astype(np.int8)
        assert_array_equal(ReferenceBackend().run_int8(rewritten, x),
                           ReferenceBackend().run_int8(model, x))
    # Whatever the arena holds in the padding channels meets zero weights.
    x = rng.integers(-128, 128, (2, channels, 3, 2)).astype(np.int8)
    noisy = flat.evaluate(x).reshape(2, 3, 2, cp)
    noisy[..., channels:] = rng.integers(-128, 128, noisy[..., channels:].shape)
    assert_array_equal(gemm.evaluate(noisy.reshape(2, -1)),
                       model.layers[-1].evaluate(Flatten("f", ["a"], "b", x.shape[1:], 1.0, 0)
                                                 .evaluate(x)))


def _rewrite(model, config):
    """The rewrite with the padding channels too (what the layers allow)."""
    flat = next(l for l in model.layers if isinstance(l, Flatten))
    gemms = [l for l in model.layers if isinstance(l, Gemm) and l.inputs[0] == flat.output]
    cp = pixel_bytes(config, flat.input_shape[0])
    layers = [FlattenNHWC(l.name, l.inputs, l.output, l.input_shape, cp, l.y_scale,
                          l.y_zero_point) if l is flat
              else permuted_gemm(l, flat.input_shape, cp) if l in gemms else l
              for l in model.layers]
    return QuantizedModel(model.name, layers, model.input, model.output, model.input_tensor,
                          model.output_tensor)


def test_it_is_a_copy_of_the_vector_unit_in_the_program():
    program = compile_model(flatten_classifier(1, 8), SMALL_ENGINE)
    records = [r for r in build_image(program).records if isinstance(r, VectorRecord)]
    assert [r.kind for r in records] == [VECTOR_COPY]
    assert program.steps[records[0].step].op == "Flatten"


def test_only_where_gemms_alone_read_it():
    config = SMALL_ENGINE
    two = nhwc_flatten(flatten_classifier(2, 8, heads=2), config)  # two Gemms: both permuted
    assert sum(isinstance(l, FlattenNHWC) for l in two.layers) == 1
    assert [l.weight.shape[1] for l in two.layers if isinstance(l, Gemm)] == [3 * 2 * 8] * 2
    b = _Builder(3, (3, 5, 4))
    b.conv(8, 3)
    b.flatten()
    out = b.model("flatten_out")  # the Flatten is the model's output: ONNX's order stays
    assert nhwc_flatten(out, config) is out
    pooled = random_cnn(1)  # (C, 1, 1) after the pool: already the arena's bytes
    assert nhwc_flatten(pooled, config) is pooled
