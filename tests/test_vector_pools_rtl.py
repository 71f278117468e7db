"""Pooling windows on the vector unit, through the program sequencer on the RTL.

Max pools (ResNet's 3x3 stride-2 pad-1 stem pool among them, with the
output quantized as the input and rescaled) and average pools (2x2 stride
2, and a padded one that counts its padding) between convolutions run on
the program engine's vector unit (:mod:`fpgacnn.core.vector_fields`): the
whole network in one sequencer start, bit-exact with the reference backend,
cold and warm, each vector run taking exactly the cycles
:func:`fpgacnn.host.cycle_model.vector_run_cycles` predicts. The model zoo's
ResNet-18 stem and first block, at a reduced input, runs in one start on the
PYNQ-Z2's sized engine. Fields past their widths leave the layer to the host.
"""

import importlib.util
import logging
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from fpgacnn.core.vector_fields import VECTOR_FIELDS, VECTOR_MAX_PIXELS, VECTOR_TAP_BITS
from fpgacnn.host.accelerator import Accelerator
from fpgacnn.host.cycle_model import vector_run_cycles
from fpgacnn.host.layers import AveragePool, MaxPool
from fpgacnn.host.onnx_import import load_onnx
from fpgacnn.host.program_image import FoldRecord, HostRecord, VectorRecord
from fpgacnn.host.reference import ReferenceBackend
from fpgacnn.host.sequencer_table import vector_record_fields
from fpgacnn.host.vector_mapping import VECTOR_POOL, vector_fields, vector_params

from conftest import SMALL_ENGINE, pynq_z2_engine
from random_models import _Builder
from test_hdl_pixel_writer import ENGINES as WRITER_ENGINES
from test_hdl_vector_unit import _place

logging.getLogger().setLevel(logging.ERROR)

#: The small engine (4-byte words and reads) and "pairs" (4-byte words in 8-byte
#: beats and writes, as the PYNQ-Z2's: pools of whole beats run wide).
ENGINES = {"k3": SMALL_ENGINE, "pairs": WRITER_ENGINES["pairs"]}
#: The simulated board's memory latency (a Zynq-7000 HP port's).
MEMORY_LATENCY = 40


def _pool(b, kind, kernel, stride, pads=(0, 0, 0, 0), **kw):
    """Push a pool onto builder ``b``: ``"max"``, ``"max_rescaled"`` (another output
    quantization) or ``"avg"``."""
    name = b._name(kind)
    common = dict(x_scale=b.scale, x_zero_point=b.zp)
    if kind == "max":
        layer = MaxPool(name, [b.tensor], name, b.shape, kernel, stride, pads, **common, **kw)
    elif kind == "max_rescaled":
        layer = MaxPool(name, [b.tensor], name, b.shape, kernel, stride, pads, **common,
                        y_scale=b.scale * 1.3, y_zero_point=b.zp - 3, **kw)
    else:
        layer = AveragePool(name, [b.tensor], name, b.shape, kernel, stride, pads, **common,
                            y_scale=b.scale * 0.9, y_zero_point=b.zp + 2, **kw)
    return b._push(layer)


def pool_cnn(seed):
    """Convolutions with a 3x3 stride-2 pad-1 max pool, a 2x2 stride-2 average pool
    and a third pool (by the seed: a rescaled 2x3 max pool with ceil_mode, a padded
    average pool counting its padding) between them, then a global pool and Gemm."""
    rng = np.random.default_rng(3000 + seed)
    b = _Builder(seed, (int(rng.integers(1, 5)), int(rng.integers(13, 18)),
                        int(rng.integers(13, 18))))
    b.conv(int(rng.integers(3, 13)), 3, pad=1)
    _pool(b, "max", (3, 3), (2, 2), (1, 1, 1, 1))
    b.conv(int(rng.integers(4, 17)), 3, pad=1)
    _pool(b, "avg", (2, 2), (2, 2))
    b.conv(int(rng.integers(4, 12)), 1)
    if seed % 2:
        _pool(b, "max_rescaled", (2, 3), (1, 2), (0, 1, 1, 0), ceil_mode=True)
    else:
        _pool(b, "avg", (3, 3), (1, 1), (1, 1, 1, 1), count_include_pad=True)
    b.gap()
    b.flatten()
    b.gemm(int(rng.integers(3, 9)))
    return b.model(f"pool_cnn_{seed}")


def _one_start(acc, model, x8, want, latency):
    """Cold then warm: bit-exact, one sequencer start, the pools on the vector unit in
    their modelled cycles."""
    for state in ("cold", "warm"):
        assert_array_equal(acc.run_int8(x8), want, err_msg=f"{model.name} ({state})")
        assert acc.report["sequencer"]["sequencer_starts"] == 1, (model.name, state)
    sequenced = acc.sequenced(len(x8))
    records = sequenced.image.records
    steps = acc.program(len(x8)).steps
    assert not [steps[r.step].name for r in records
                if type(r) is HostRecord], "a host record is left"
    pools = 0
    for i, r in enumerate(records):
        if isinstance(r, VectorRecord) and r.kind == VECTOR_POOL:
            pools += 1
            assert sequenced.on_engine[True][i]
            fields = vector_record_fields(sequenced.image, r)
            assert sequenced.counter_words(i)[0] == vector_run_cycles(
                sequenced.config, fields, latency), steps[r.step].name
    return pools


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.parametrize("batch", [1, 2])
def test_pools_between_convolutions_run_in_one_start(program_boards, engine, batch):
    config = ENGINES[engine]
    board = program_boards(config)
    board.set_memory_timing(latency=MEMORY_LATENCY)
    for seed in range(3):
        model = pool_cnn(seed)
        rng = np.random.default_rng(40 + seed)
        x8 = rng.integers(-128, 128, (batch, *model.input.shape)).astype(np.int8)
        want = ReferenceBackend().run_int8(model, x8)
        acc = Accelerator(model, config=config, board=board)
        assert acc.sequencer is not None
        # three window pools and the global one
        assert _one_start(acc, model, x8, want, MEMORY_LATENCY) == 4


def test_resnet18_stem_runs_in_one_start_on_the_pynq_z2_engine(tmp_path, pynq_z2_board):
    """The zoo's ResNet-18 stem (7x7 stride-2 convolution, the 3x3 stride-2 pad-1 max
    pool) and first basic block, at a 40x40 input (the pool's 20x20x64 to 10x10):
    one sequencer start, bit-exact cold and warm."""
    spec = importlib.util.spec_from_file_location(
        "model_zoo", Path(__file__).resolve().parents[1] / "examples" / "model_zoo.py")
    zoo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(zoo)
    sizes = {"resnet18_stem": {"hw": 40}}
    written = zoo.write_zoo(tmp_path, ["resnet18_stem"], n_calibration=8, sizes=sizes)
    qm = load_onnx(written["resnet18_stem"]["int8"])
    pools = [layer for layer in qm.layers if isinstance(layer, MaxPool)]
    assert [(p.kernel, p.stride, p.pads) for p in pools] == [((3, 3), (2, 2), (1, 1, 1, 1))]
    x = zoo.calibration_data(zoo.build("resnet18_stem", hw=40), 1, seed=300)
    x8 = qm.quantize_input(x)
    want = ReferenceBackend().run_int8(qm, x8)
    config = pynq_z2_engine()
    pynq_z2_board.set_memory_timing(latency=MEMORY_LATENCY)
    acc = Accelerator(qm, config=config, board=pynq_z2_board)
    assert _one_start(acc, qm, x8, want, MEMORY_LATENCY) == 1
    records = acc.sequenced(1).image.records
    pool = next(r for r in records if isinstance(r, VectorRecord) and r.maximum)
    # 64 channels: the pool's words pair into the PYNQ-Z2's 8-byte beats.
    assert vector_record_fields(acc.sequenced(1).image, pool)["wide"] == 1
    assert any(isinstance(r, FoldRecord) for r in records)  # the 7x7 stem: an input fold


def _pool_fields(config, layer, out_offset=1 << 12):
    shape = layer.input_shape
    record = SimpleNamespace(**vector_params(layer, {"a": shape}))
    return vector_fields(config, record, _place(config, 64, shape, 1),
                         None, _place(config, out_offset, layer.output_shape, 1))


def test_window_fields_at_and_past_their_widths():
    """A window whose counts fit their fields gets them; one past a field's width
    (VECTOR_TAP_BITS, the 32-bit word strides) or an average over more taps than
    the accumulator holds stays a host record, never a count cut short."""
    config = SMALL_ENGINE
    widths = {f.name: f.width for f in VECTOR_FIELDS}
    assert all(widths[n] == VECTOR_TAP_BITS for n in (
        "in_rows", "in_cols", "kernel_rows", "kernel_cols", "out_rows", "out_cols",
        "stride_rows", "stride_cols", "pad_top", "pad_left"))
    most = (1 << VECTOR_TAP_BITS) - 1
    # A max pool's row of `most` columns (one window): at the width, and one past it.
    for cols, fits in ((most - 1, True), (most, True), (most + 1, False)):
        layer = MaxPool("row", ["a"], "y", (4, 1, cols), (1, cols))
        fields = _pool_fields(config, layer)
        assert (fields is not None) == fits, cols
        if fits:
            assert fields["kernel_cols"] == fields["in_cols"] == cols
    # A stride past the width, with the output of one column.
    for stride, fits in ((most, True), (most + 1, False)):
        layer = MaxPool("stride", ["a"], "y", (4, 1, 3), (1, 2), (1, stride))
        assert (_pool_fields(config, layer) is not None) == fits, stride
    # The word steps are 32-bit: out_row_words = stride_rows * row_words of one output
    # row, 256 words a row (256 pixels of 4 channels) fits, 257 does not.
    for cols, fits in ((256, True), (257, False)):
        layer = MaxPool("words", ["a"], "y", (4, 1, cols), (1, 1), (most, 1))
        fields = _pool_fields(config, layer)
        assert (fields is not None) == fits, cols
        if fits:
            assert fields["out_row_words"] == most * 256 <= (1 << 32) - 1
    # An average's taps: at the accumulator's limit taken, one over not.
    at = AveragePool("at", ["a"], "y", (1, 1, VECTOR_MAX_PIXELS), (1, VECTOR_MAX_PIXELS))
    over = AveragePool("over", ["a"], "y", (1, 1, VECTOR_MAX_PIXELS + 1),
                       (1, VECTOR_MAX_PIXELS + 1))
    assert _pool_fields(config, at)["kernel_cols"] == VECTOR_MAX_PIXELS
    assert vector_params(over, {"a": over.input_shape}) is None
