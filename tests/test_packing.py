import dataclasses

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from fpgacnn.core.config import EngineConfig
from fpgacnn.core.errors import InputError, MappingError
from fpgacnn.host.integer_ops import conv2d, maxpool2d
from fpgacnn.host.packing import (input_nbytes, map_layer, output_nbytes, pack_layer,
                                  remap_block, remap_group, unpack_output)

from engine_model_helpers import emulate_engine

CONFIGS = [
    EngineConfig(pin=2, pout=2, kmax=3, stream_width=32, max_width=16, max_channels=12,
                 max_out_channels=12),
    EngineConfig(pin=8, pout=4, kmax=3, stream_width=64, max_width=16, max_channels=16,
                 max_out_channels=16),
    EngineConfig(pin=4, pout=16, kmax=2, stream_width=32, max_width=16, max_channels=16,
                 max_out_channels=32),
    EngineConfig(pin=1, pout=1, kmax=1, stream_width=32, max_width=16, max_channels=8,
                 max_out_channels=8),
]


def random_layer(rng, cfg, *, k=None, stride=None, pool=None, batch=None):
    k = k or int(rng.integers(1, cfg.kmax + 1))
    stride = stride or int(rng.integers(1, max(k, 1) + 1))
    cin, cout = (int(c) for c in rng.integers(1, 9, 2))
    h, w = (int(v) for v in rng.integers(max(k, 2), 9, 2))
    pads = tuple(int(p) for p in rng.integers(0, min(k, cfg.kmax - 1) + 1, 4)) \
        if k > 1 else (0, 0, 0, 0)
    x = rng.integers(-128, 128, (batch or int(rng.integers(1, 3)), cin, h, w), dtype=np.int8)
    wt = rng.integers(-128, 128, (cout, cin, k, k), dtype=np.int8)
    bias = rng.integers(-5000, 5000, cout).astype(np.int32)
    mult = rng.integers(1 << 23, 1 << 24, cout)
    shift = rng.integers(21, 25, cout) + int(np.log2(k * k * cin) / 2)  # outputs mostly unclamped
    x_zp, y_zp = (int(v) for v in rng.integers(-20, 20, 2))
    lo = y_zp if rng.random() < 0.5 else -128
    oh = (h + pads[0] + pads[2] - k) // stride + 1
    ow = (w + pads[1] + pads[3] - k) // stride + 1
    pool = bool(rng.random() < 0.3) if pool is None else pool
    pool = pool and oh >= 2 and ow >= 2
    return dict(x=x, w=wt, bias=bias, x_zp=x_zp, mult=mult, shift=shift, y_zp=y_zp,
                clamp=(lo, 127), stride=stride, pads=pads, pool=pool)


def set_weights(rng, layer, w):
    cout = w.shape[0]
    layer.update(w=w, bias=rng.integers(-5000, 5000, cout).astype(np.int32),
                 mult=rng.integers(1 << 23, 1 << 24, cout),
                 shift=rng.integers(21, 25, cout) + int(np.log2(w[0].size) / 2))


def reference(layer):
    y = conv2d(layer["x"], layer["w"], layer["bias"], layer["x_zp"], layer["mult"],
               layer["shift"], layer["y_zp"], *layer["clamp"], stride=(layer["stride"],) * 2,
               pads=layer["pads"])
    return maxpool2d(y) if layer["pool"] else y


def run_model(cfg, layer, **kw):
    desc, data = pack_layer(cfg, **layer, **kw)
    assert data.size == input_nbytes(cfg, desc)
    raw = emulate_engine(cfg, desc, data)
    assert raw.size == output_nbytes(cfg, desc)
    return desc, unpack_output(cfg, raw, desc, layer["w"].shape[0])


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"p{c.pin}x{c.pout}k{c.kmax}b{c.stream_bytes}")
def test_random_layers_match_reference(cfg):
    rng = np.random.default_rng(cfg.pin * 100 + cfg.pout)
    for _ in range(25):
        layer = random_layer(rng, cfg)
        _, y = run_model(cfg, layer)
        assert_array_equal(y, reference(layer))


def test_1x1_is_remapped_to_a_kmax_stride_kmax_conv():
    cfg = CONFIGS[1]
    rng = np.random.default_rng(3)
    for stride, pads in [(1, (0, 0, 0, 0)), (2, (0, 0, 0, 0)), (1, (1, 0, 0, 1))]:
        layer = random_layer(rng, cfg, k=1, stride=1, pool=False)
        layer["x"] = rng.integers(-128, 128, (2, 16, 5, 4), dtype=np.int8)
        set_weights(rng, layer, rng.integers(-128, 128, (6, 16, 1, 1), dtype=np.int8))
        layer.update(stride=stride, pads=pads)
        desc, y = run_model(cfg, layer)
        assert (desc["stride"], desc["pad_top"], desc["ci_tiles"]) == (3, 0, 1)
        assert (desc["in_h"], desc["in_w"]) == (3 * desc["out_h"], 3 * desc["out_w"])
        assert_array_equal(y, reference(layer))


def test_gemm_as_1x1_conv_on_a_row_of_pixels():
    cfg = CONFIGS[0]
    rng = np.random.default_rng(4)
    layer = random_layer(rng, cfg, k=1, stride=1, pool=False)
    batch = rng.integers(-128, 128, (5, 11), dtype=np.int8)  # 5 vectors of 11 features
    layer["x"] = batch.T[None, :, None, :].copy()  # 1 image, 11 channels, 1 x 5 pixels
    set_weights(rng, layer, rng.integers(-128, 128, (3, 11, 1, 1), dtype=np.int8))
    layer.update(pads=(0, 0, 0, 0), pool=False)
    desc, y = run_model(cfg, layer)
    assert desc["ci_tiles"] == 1  # ceil(11/9)=2 channels per pixel -> one tile of 2
    assert_array_equal(y, reference(layer))


def test_remap_block_by_default_only_when_it_saves_tiles():
    cfg = CONFIGS[1]  # pin 8, kmax 3
    assert remap_block(cfg, 8, (1, 1)) == 0
    assert remap_block(cfg, 72, (1, 1)) == 3
    assert remap_block(cfg, 72, (3, 3)) == 0
    with pytest.raises(InputError, match=r"^the 1x1 remap needs a 1x1 kernel, not 3x3$"):
        remap_block(cfg, 72, (3, 3), remap=True)


def test_remap_block_at_under_and_over_its_range():
    cfg = CONFIGS[1]  # kmax 3
    assert [remap_block(cfg, 8, (1, 1), remap=r) for r in (True, False, 0, 1, 2, 3)] == \
        [3, 0, 0, 0, 2, 3]
    for over in (4, -1):
        with pytest.raises(InputError, match=rf"^a 1x1 remap block of {over} is outside "
                                             r"1\.\.kmax \(3\)$"):
            remap_block(cfg, 8, (1, 1), remap=over)
    with pytest.raises(InputError, match=r"^the 1x1 remap needs a 1x1 kernel, not 3x3$"):
        remap_block(cfg, 8, (3, 3), remap=2)
    assert remap_block(cfg, 8, (3, 3), remap=1) == 0  # a block of one pixel: no remap


@pytest.mark.parametrize("cfg", [c for c in CONFIGS if c.kmax > 1],
                         ids=lambda c: f"p{c.pin}x{c.pout}k{c.kmax}")
def test_1x1_runs_with_every_remap_block(cfg):
    """Every block from none to kmax (the compiler picks by the cycle model): a
    ``b x b`` block of ``remap_group(b)`` channels a position, stride ``b``,
    bit-exact with and without a stride and pads."""
    rng = np.random.default_rng(cfg.pin * 7 + cfg.kmax)
    for block in (0, *range(2, cfg.kmax + 1)):
        for stride, pads in [(1, (0, 0, 0, 0)), (2, (0, 0, 0, 0)), (1, (1, 0, 0, 1))]:
            cin = int(rng.integers(1, 3 * cfg.pin + 1))
            layer = random_layer(rng, cfg, k=1, stride=1, pool=False)
            layer["x"] = rng.integers(-128, 128, (2, cin, 5, 4), dtype=np.int8)
            set_weights(rng, layer, rng.integers(-128, 128, (6, cin, 1, 1), dtype=np.int8))
            layer.update(stride=stride, pads=pads)
            desc, y = run_model(cfg, layer, remap=block)
            s = block or stride
            assert desc["stride"] == s, (block, stride)
            if block:
                assert (desc["in_h"], desc["in_w"]) == (block * desc["out_h"], block * desc["out_w"])
                assert desc["ci_tiles"] == -(-remap_group(cfg, cin, block) // cfg.pin)
            assert_array_equal(y, reference(layer), err_msg=f"block {block}, stride {stride}")


def test_layout_of_the_stream():
    cfg = EngineConfig(pin=2, pout=2, kmax=2, stream_width=32, max_width=8, max_channels=4,
                       max_out_channels=4)
    x = np.arange(1 * 3 * 2 * 2, dtype=np.int8).reshape(1, 3, 2, 2)
    w = np.arange(2 * 3 * 2 * 2, dtype=np.int8).reshape(2, 3, 2, 2)
    desc, data = pack_layer(cfg, x, w, np.array([100, -7]), 1, [40000, 2], [3, 0], 0)
    # params: one group of 2 records = 16 bytes = 4 beats; folded bias = b - x_zp*sum(w)
    assert data[0:4].view("<i4")[0] == 100 - int(w[0].sum())
    assert int.from_bytes(data[4:7].tobytes(), "little") == 40000 and data[7] == 3
    assert data[8:12].view("<i4")[0] == -7 - int(w[1].sum())
    # weights: (co 0, ci 0) word of 2*2*2*2 = 16 bytes: lane, ky, kx, p
    word = data[16:32].view(np.int8).reshape(2, 2, 2, 2)
    assert word[1, 0, 1, 1] == w[1, 1, 0, 1]
    # (co 0, ci 1): channel 2 real, channel 3 zero
    word = data[32:48].view(np.int8).reshape(2, 2, 2, 2)
    assert word[0, 1, 0, 0] == w[0, 2, 1, 0] and not word[:, :, :, 1].any()
    # pixels: y, x, ci, p; 2x2 pixels x 4 channels = 16 bytes
    px = data[48:64].view(np.int8).reshape(2, 2, 4)
    assert px[1, 0, 2] == x[0, 2, 1, 0] and px[1, 0, 3] == 0
    assert data.size == 64


@pytest.mark.parametrize("change, message", [
    (dict(x=np.zeros((1, 3, 5, 40), np.int8)),
     r"^conv1: a row of 40 px x 2 input tiles takes 28 words of a line-buffer bank, which "
     r"holds 24$"),
    (dict(x=np.zeros((1, 1, 5, 80), np.int8), w=np.zeros((4, 1, 3, 3), np.int8)),
     r"^conv1: in_w = 80 is outside the engine's range 1\.\.74 \(3 columns per word of a "
     r"line-buffer bank of 24 words, and kmax-1 of padding\)$"),
    (dict(w=np.zeros((4, 3, 5, 5), np.int8)), r"^conv1: kernel 5x5 exceeds the engine's kmax 3$"),
    (dict(stride=(1, 2)), r"^conv1: stride 1x2 is not square"),
    (dict(pads=(3, 0, 0, 0)), r"^conv1: pad_top = 3 is outside the engine's range 0\.\.2 "
                              r"\(kmax - 1 = 2\)$"),
    (dict(w=np.zeros((20, 3, 3, 3), np.int8), bias=None, mult=1, shift=1),
     r"^conv1: co_tiles = 10 is outside the engine's range 1\.\.8 \(output channels / pout 2: "
     r"the parameter buffer holds 8 tiles\)$"),
    (dict(mult=[1 << 24] * 4), r"^conv1: mult\[0\] = 16777216 is outside the engine's range 0\.\.16777215$"),
    (dict(x=np.zeros((1, 3, 5, 5), np.float32)), r"^conv1: input must be int8, not float32$"),
    (dict(x_zp=200), r"^conv1: x_zp = 200 is outside -128\.\.127$"),
    (dict(pool=True, x=np.zeros((1, 3, 3, 3), np.int8)),
     r"^conv1: a 2x2 max-pool needs at least a 2x2 output, not 1x1$"),
    (dict(bias=[2**31 - 1] * 4, x_zp=-100, w=np.full((4, 3, 3, 3), 100, np.int8)),
     r"^conv1: folded bias b - x_zp\*sum\(w\) of channel 0 \(2147753647\) does not fit int32$"),
])
def test_limits_raise_mapping_errors(change, message):
    cfg = EngineConfig(pin=2, pout=2, kmax=3, stream_width=32, max_width=24, max_channels=6,
                       max_out_channels=16)
    layer = dict(x=np.zeros((1, 3, 5, 5), np.int8), w=np.zeros((4, 3, 3, 3), np.int8),
                 bias=np.zeros(4, np.int32), x_zp=0, mult=[1 << 23] * 4, shift=[23] * 4, y_zp=0)
    layer.update(change)
    with pytest.raises((MappingError, InputError), match=message):
        pack_layer(cfg, **layer, name="conv1")


def test_pixel_pairs_are_taken_where_allowed_and_refused_by_name_elsewhere():
    # Taken by default at stride 1 without a pool (depthwise too), forced off on
    # request; forced on at stride 2, with a pool or on an engine without them,
    # refused naming the layer and the field.
    pairs = EngineConfig(pin=2, pout=2, kmax=3, stream_width=32, max_width=24, max_channels=6,
                         max_out_channels=16, spare_bank=1, pixel_pairs=1)
    single = dataclasses.replace(pairs, pixel_pairs=0)
    x, w = (1, 3, 6, 6), (4, 3, 3, 3)
    assert map_layer(pairs, x, w)["pixel_pairs"] == 1
    assert map_layer(pairs, (1, 4, 6, 6), (4, 4, 3, 3), depthwise=True)["pixel_pairs"] == 1
    assert map_layer(pairs, x, w, pixel_pairs=False)["pixel_pairs"] == 0
    assert map_layer(pairs, x, w, stride=2)["pixel_pairs"] == 0
    assert map_layer(pairs, x, w, pool=True)["pixel_pairs"] == 0
    assert map_layer(single, x, w)["pixel_pairs"] == 0
    with pytest.raises(MappingError, match=r"^conv1: pixel pairs are two adjacent output "
                                           r"pixels a window issue: not with stride 2 \(at "
                                           r"most 1: the line buffer's 1 spare column "
                                           r"bank\(s\)\)$"):
        map_layer(pairs, x, w, stride=2, pixel_pairs=True, name="conv1")
    with pytest.raises(MappingError, match=r"^conv1: pixel pairs are two adjacent output "
                                           r"pixels a window issue: not with a fused "
                                           r"max-pool$"):
        map_layer(pairs, x, w, pool=True, pixel_pairs=True, name="conv1")
    with pytest.raises(MappingError, match=r"^conv1: pixel_pairs = 1 is outside the engine's "
                                           r"range 0\.\.0 \(the engine was generated without "
                                           r"pixel_pairs\)$"):
        map_layer(single, x, w, pixel_pairs=True, name="conv1")


def test_pixel_pairs_up_to_the_spare_banks_stride():
    # With two spare banks pairs run at strides 1 and 2 (at the limit), not 3
    # (over it: refused by name when forced); with kmax spare banks every
    # stride pairs, the 1x1 remap's (stride kmax) too.
    two = EngineConfig(pin=2, pout=2, kmax=3, stream_width=32, max_width=24, max_channels=6,
                       max_out_channels=16, spare_bank=2, pixel_pairs=1)
    x, w = (1, 3, 9, 9), (4, 3, 3, 3)
    assert [map_layer(two, x, w, stride=s)["pixel_pairs"] for s in (1, 2, 3)] == [1, 1, 0]
    assert map_layer(two, x, w, stride=2, pool=True)["pixel_pairs"] == 0
    with pytest.raises(MappingError, match=r"^conv1: pixel pairs are two adjacent output "
                                           r"pixels a window issue: not with stride 3 \(at "
                                           r"most 2: the line buffer's 2 spare column "
                                           r"bank\(s\)\)$"):
        map_layer(two, x, w, stride=3, pixel_pairs=True, name="conv1")
    one_by_one = (1, 32, 5, 5), (8, 32, 1, 1)
    geo = map_layer(two, *one_by_one)
    assert geo["remap"] and geo["stride"] == 3 and geo["pixel_pairs"] == 0
    full = dataclasses.replace(two, spare_bank=3)
    assert [map_layer(full, x, w, stride=s)["pixel_pairs"] for s in (1, 2, 3)] == [1, 1, 1]
    geo = map_layer(full, *one_by_one)
    assert geo["remap"] and geo["stride"] == 3 and geo["pixel_pairs"] == 1


def test_unpack_rejects_wrong_length():
    cfg = CONFIGS[0]
    layer = random_layer(np.random.default_rng(5), cfg, k=3, stride=1, pool=False)
    desc, _ = pack_layer(cfg, **layer)
    with pytest.raises(InputError, match=r"^output stream has 3 bytes, expected \d+$"):
        unpack_output(cfg, bytes(3), desc, layer["w"].shape[0])
