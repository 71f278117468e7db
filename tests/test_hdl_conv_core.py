import dataclasses
import gc
import warnings

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from fpgacnn.core.config import EngineConfig
from fpgacnn.core.contract import engine_contract
from fpgacnn.hdl.datapath.conv_core import ConvCore
from fpgacnn.host.cycle_model import layer_cycles
from fpgacnn.core.errors import MappingError
from fpgacnn.host.packing import (layer_descriptor, map_layer, pack_layer, pack_pixels,
                                    pack_weights, unpack_output)

from arrangement_helpers import ARRANGEMENTS, arranged
from conv_core_helpers import run_core
from engine_model_helpers import emulate_engine
from test_packing import random_layer, reference, set_weights

CFG = EngineConfig(pin=2, pout=2, kmax=3, stream_width=32, max_width=12, max_channels=12,
                   max_out_channels=8)


def layers_for(cfg, seed, count):
    """Random layers covering k 1/2/3, stride 1..3, pads, pool, batch, several tiles."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        k = [3, 2, 1, 3, 3][i % 5]
        layer = random_layer(rng, cfg, k=k, stride=int(rng.integers(1, k + 1)),
                             batch=int(rng.integers(1, 3)))
        if i % 4 == 3:  # several input and output tiles
            h, w = (int(v) for v in rng.integers(3, 7, 2))
            layer["x"] = rng.integers(-128, 128, (layer["x"].shape[0], 5, h, w), dtype=np.int8)
            set_weights(rng, layer, rng.integers(-128, 128, (6, 5, k, k), dtype=np.int8))
        out.append(layer)
    return out


def check_runs(cfg, layers, results, descs):
    for layer, desc, res in zip(layers, descs, results):
        raw, _ = res
        y = unpack_output(cfg, raw, desc, layer["w"].shape[0])
        assert_array_equal(y, reference(layer))


@pytest.mark.parametrize("arrangement", ARRANGEMENTS)
@pytest.mark.parametrize("in_pause, out_pause", [(0.0, 0.0), (0.3, 0.4)],
                         ids=["full-rate", "pauses"])
def test_random_layers_bit_exact(in_pause, out_pause, arrangement):
    cfg = arranged(CFG, arrangement)
    layers = layers_for(cfg, 11 + int(in_pause * 10), 6)
    packed = [pack_layer(cfg, **layer) for layer in layers]
    results = run_core(cfg, packed, seed=3, in_pause=in_pause, out_pause=out_pause)
    check_runs(cfg, layers, results, [d for d, _ in packed])
    if not in_pause and not out_pause:
        for (desc, _), (_, cycles) in zip(packed, results):
            model = layer_cycles(cfg, desc).cycles
            assert abs(model - cycles) <= 0.02 * cycles, f"{desc}: RTL {cycles}, model {model}"


@pytest.mark.parametrize("cfg", [
    EngineConfig(pin=2, pout=4, kmax=3, stream_width=64, max_width=10, max_channels=8,
                 max_out_channels=8),   # several pixel and output words per beat
    EngineConfig(pin=4, pout=4, kmax=1, stream_width=32, max_width=8, max_channels=8,
                 max_out_channels=8),   # 1x1 engine: one bank, two row slots
], ids=["beat8", "kmax1"])
def test_other_geometries(cfg):
    rng = np.random.default_rng(cfg.kmax)
    layers = []
    for i in range(4):
        k = int(rng.integers(1, cfg.kmax + 1))
        layer = random_layer(rng, cfg, k=k, stride=int(rng.integers(1, k + 1)))
        if i % 2:
            layer["x"] = rng.integers(-128, 128, (1, 7, 5, 6), dtype=np.int8)
            set_weights(rng, layer, rng.integers(-128, 128, (6, 7, k, k), dtype=np.int8))
        layers.append(layer)
    packed = [pack_layer(cfg, **layer) for layer in layers]
    results = run_core(cfg, packed, seed=4, in_pause=0.25, out_pause=0.25)
    check_runs(cfg, layers, results, [d for d, _ in packed])


def test_reuse_weights_and_reset_mid_layer():
    rng = np.random.default_rng(5)
    a = random_layer(rng, CFG, k=3, stride=1, pool=True, batch=1)
    b = dict(a, x=rng.integers(-128, 128, (2,) + a["x"].shape[1:], dtype=np.int8))
    c = random_layer(rng, CFG, k=2, stride=2, pool=False, batch=1)
    runs = [pack_layer(CFG, **a), pack_layer(CFG, **b, load_weights=False),
            pack_layer(CFG, **c), pack_layer(CFG, **c)]
    results = run_core(CFG, runs, seed=1, in_pause=0.2, out_pause=0.2, reset_run=2)
    assert results[2] is None
    check_runs(CFG, [a, b, c], [results[0], results[1], results[3]],
               [runs[0][0], runs[1][0], runs[3][0]])


def test_1x1_remap_and_wide_words():
    # pout*8 > stream width (a word spans beats), pin > beat (a pixel spans beats).
    cfg = EngineConfig(pin=8, pout=8, kmax=2, stream_width=32, max_width=8, max_channels=16,
                       max_out_channels=16)
    rng = np.random.default_rng(8)
    a = random_layer(rng, cfg, k=1, stride=1, pool=False, batch=2)
    a["x"] = rng.integers(-128, 128, (2, 20, 3, 4), dtype=np.int8)
    set_weights(rng, a, rng.integers(-128, 128, (10, 20, 1, 1), dtype=np.int8))
    b = random_layer(rng, cfg, k=2, stride=1, pool=True, batch=1)
    packed = [pack_layer(cfg, **a), pack_layer(cfg, **b)]
    assert packed[0][0]["stride"] == 2  # remapped
    results = run_core(cfg, packed, seed=2, in_pause=0.2, out_pause=0.3)
    check_runs(cfg, [a, b], results, [d for d, _ in packed])


def test_output_matches_engine_model_byte_for_byte():
    rng = np.random.default_rng(9)
    layer = random_layer(rng, CFG, k=3, stride=2, pool=False, batch=2)
    desc, data = pack_layer(CFG, **layer)
    (raw, _), = run_core(CFG, [(desc, data)])
    assert_array_equal(raw, emulate_engine(CFG, desc, data))


def test_stall_outputs_name_the_stream_that_holds_the_core_up():
    rng = np.random.default_rng(12)
    layer = random_layer(rng, CFG, k=3, stride=1, pool=False, batch=1)
    run = pack_layer(CFG, **layer)
    stalls = []
    for in_pause, out_pause in [(0, 0), (0.5, 0), (0, 0.7)]:
        run_core(CFG, [run], seed=6, in_pause=in_pause, out_pause=out_pause, stalls=stalls)
    assert stalls[0] == (0, 0)
    assert stalls[1][0] > 0 and stalls[1][1] == 0
    assert stalls[2][0] == 0 and stalls[2][1] > 0


def test_config_type_is_checked():
    with warnings.catch_warnings():  # the half-built component is never elaborated
        warnings.simplefilter("ignore")
        with pytest.raises(TypeError, match=r"^config must be an EngineConfig, not 3$"):
            ConvCore(3)
        gc.collect()


SWEEP_CONFIGS = [
    CFG,
    EngineConfig(pin=1, pout=4, kmax=2, stream_width=32, max_width=12, max_channels=8,
                 max_out_channels=8),
    EngineConfig(pin=4, pout=8, kmax=3, stream_width=32, max_width=12, max_channels=12,
                 max_out_channels=16),
    EngineConfig(pin=2, pout=1, kmax=4, stream_width=64, max_width=12, max_channels=8,
                 max_out_channels=8),
]


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(8))
def test_random_sweep(seed):
    """Wider random sweep (run with -m slow): shapes, strides up to kmax, pads, pool,
    batches, pauses, resets; cycles against the model on the runs without pauses."""
    rng = np.random.default_rng(100 + seed)
    cfg = SWEEP_CONFIGS[seed % len(SWEEP_CONFIGS)]
    layers = []
    while len(layers) < 4:
        k, s = (int(v) for v in rng.integers(1, cfg.kmax + 1, 2))
        cin, cout = (int(v) for v in rng.integers(1, 10, 2))
        h, w = (int(v) for v in rng.integers(k, 9, 2))
        layer = shaped_layer(rng, cfg, k, s, int(rng.integers(1, 3)), (cout, cin, h, w), 0.3)
        if layer is not None:
            layers.append(layer)
    packed = [pack_layer(cfg, **layer) for layer in layers]
    pauses = [(0, 0), (0.3, 0.3), (0.6, 0.1), (0.1, 0.7)][seed % 4]
    reset = 1 if seed % 3 == 2 else None
    results = run_core(cfg, packed, seed=seed, in_pause=pauses[0], out_pause=pauses[1],
                       reset_run=reset)
    for i, (layer, (desc, _), res) in enumerate(zip(layers, packed, results)):
        if i == reset:
            assert res is None
            continue
        raw, cycles = res
        assert_array_equal(unpack_output(cfg, raw, desc, layer["w"].shape[0]), reference(layer))
        if pauses == (0, 0):
            model = layer_cycles(cfg, desc).cycles
            assert abs(model - cycles) <= 0.02 * cycles, f"{desc}: RTL {cycles}, model {model}"


#: Engines whose writer stores two words of a row a cycle (``writer_words`` 2): a
#: 3x3 one as the PYNQ-Z2's (two words a beat), 2x2 and 1x1 ones (a bank's two
#: halves written together, two columns in one bank), and one of four lanes in
#: a 16-byte beat of two 8-byte words.
PAIR_CONFIGS = {
    "k3": EngineConfig(pin=2, pout=2, kmax=3, stream_width=32, max_width=12, max_channels=12,
                       max_out_channels=8, writer_words=2),
    "k2": EngineConfig(pin=4, pout=2, kmax=2, stream_width=64, max_width=9, max_channels=12,
                       max_out_channels=8, writer_words=2),
    "k1": EngineConfig(pin=2, pout=4, kmax=1, stream_width=32, max_width=8, max_channels=8,
                       max_out_channels=8, writer_words=2),
    "k3b16": EngineConfig(pin=8, pout=4, kmax=3, stream_width=128, max_width=8,
                          max_channels=24, max_out_channels=8, writer_words=2),
}


def pair_layers(cfg, rng, count):
    """Random layers for the pair writer: rows of odd and even word counts (a row
    starting on a beat's second word), one column, one tile or several."""
    layers = []
    while len(layers) < count:
        k, s = (int(v) for v in rng.integers(1, cfg.kmax + 1, 2))
        cin, cout = (int(v) for v in rng.integers(1, 3 * cfg.pin + 1, 2))
        h = int(rng.integers(k, 8))
        w = int(rng.integers(max(k, 1), cfg.max_width + 1)) if rng.random() < 0.8 else k
        if not layers:  # the first: one input tile, rows of an odd word count
            cin, w, h = cfg.pin, w | 1, max(h, 2)
        elif len(layers) == 1:  # the second: the line buffer's rows full (its last word),
            # a kmax x kmax kernel (a 1x1 one is remapped to other rows)
            k, cin, w, h = cfg.kmax, cfg.max_channels, cfg.max_width, max(h, cfg.kmax)
        layer = shaped_layer(rng, cfg, k, s, int(rng.integers(1, 4)), (cout, cin, h, w), 0.25)
        if layer is not None:
            layers.append(layer)
    return layers


def shaped_layer(rng, cfg, k, stride, batch, shape, pool_odds):
    """A random ``k x k`` layer of ``shape = (cout, cin, h, w)`` with random pads (and
    a 2x2 pool at ``pool_odds``), or None when it does not fit ``cfg``."""
    cout, cin, h, w = shape
    layer = random_layer(rng, cfg, k=k, stride=stride, batch=batch)
    layer["x"] = rng.integers(-128, 128, (batch, cin, h, w), dtype=np.int8)
    set_weights(rng, layer, rng.integers(-128, 128, (cout, cin, k, k), dtype=np.int8))
    pads = tuple(int(p) for p in rng.integers(0, min(k, cfg.kmax - 1) + 1, 4))
    oh = (h + pads[0] + pads[2] - k) // stride + 1
    ow = (w + pads[1] + pads[3] - k) // stride + 1
    if oh < 1 or ow < 1:
        return None
    layer.update(pads=pads, pool=bool(rng.random() < pool_odds and oh >= 2 and ow >= 2))
    try:
        pack_layer(cfg, **layer)
    except MappingError:
        return None  # does not fit this small engine
    return layer


@pytest.mark.parametrize("arrangement", ARRANGEMENTS)
@pytest.mark.parametrize("key", PAIR_CONFIGS)
def test_pair_writer_bit_exact_and_cycles_exact(key, arrangement):
    """Bit-exact with the reference; with no pauses the cycles are the model's exactly,
    and no more than the one-word writer's."""
    cfg = arranged(PAIR_CONFIGS[key], arrangement)
    rng = np.random.default_rng(sum(map(ord, key)) + 7 * cfg.deep_pipeline)
    layers = pair_layers(cfg, rng, 6)
    packed = [pack_layer(cfg, **layer) for layer in layers]
    odd_rows = [d for d, _ in packed if (d["in_w"] * d["ci_tiles"]) % 2 and d["in_h"] > 1]
    assert odd_rows, "no layer with rows of an odd word count"
    words = engine_contract(cfg).line_buffer.words
    assert any(-(-d["in_w"] // cfg.kmax) * d["ci_tiles"] == words for d, _ in packed), \
        "no layer filling a line-buffer bank"
    for pauses in [(0.0, 0.0), (0.3, 0.4)]:
        results = run_core(cfg, packed, seed=5, in_pause=pauses[0], out_pause=pauses[1])
        check_runs(cfg, layers, results, [d for d, _ in packed])
        if pauses == (0.0, 0.0):
            single = dataclasses.replace(cfg, writer_words=1)
            for (desc, _), (_, cycles) in zip(packed, results):
                assert cycles == layer_cycles(cfg, desc).cycles, desc
                assert cycles <= layer_cycles(single, desc).cycles, desc


#: Engines with the spare bank (``kmax + 1`` column banks): one word a cycle, the
#: pair writer on 3x3 and 2x2 engines, and a 1x1 engine (two banks).
SPARE_BANK_CONFIGS = {
    "k3": dataclasses.replace(CFG, spare_bank=1),
    "k3-pairs": dataclasses.replace(PAIR_CONFIGS["k3"], spare_bank=1),
    "k2-pairs": dataclasses.replace(PAIR_CONFIGS["k2"], spare_bank=1),
    "k1": EngineConfig(pin=2, pout=4, kmax=1, stream_width=32, max_width=8, max_channels=8,
                       max_out_channels=8, spare_bank=1),
}


@pytest.mark.parametrize("arrangement", ARRANGEMENTS)
@pytest.mark.parametrize("key", SPARE_BANK_CONFIGS)
def test_spare_bank_bit_exact_and_cycles_unchanged(key, arrangement):
    """The spare bank moves words between memories, nothing else: bit-exact with the
    reference (with and without pauses), and with no pauses the cycles are the model's,
    which are those of the same engine without it; one layer's rows fill a bank."""
    cfg = arranged(SPARE_BANK_CONFIGS[key], arrangement)
    contract = engine_contract(cfg)
    rng = np.random.default_rng(sum(map(ord, key)) + 3 * cfg.deep_pipeline)
    layers = pair_layers(cfg, rng, 6)
    packed = [pack_layer(cfg, **layer) for layer in layers]
    assert any(contract.line_words(d["in_w"], d["ci_tiles"]) == contract.line_buffer.words
               for d, _ in packed), "no layer filling a line-buffer bank"
    without = dataclasses.replace(cfg, spare_bank=0)
    for pauses in [(0.0, 0.0), (0.3, 0.4)]:
        results = run_core(cfg, packed, seed=9, in_pause=pauses[0], out_pause=pauses[1])
        check_runs(cfg, layers, results, [d for d, _ in packed])
        if pauses == (0.0, 0.0):
            for (desc, _), (_, cycles) in zip(packed, results):
                assert cycles == layer_cycles(cfg, desc).cycles == \
                    layer_cycles(without, desc).cycles, desc


#: Engines with pixel pairs (two adjacent output pixels a window issue): a 3x3 one
#: with one spare bank as the PYNQ-Z2's was (two words a beat, the pair writer,
#: stride-1 pairs), one with two (stride 2 pairs, stride 3 does not), one whose
#: output word spans two beats (a word popped every other cycle) with kmax spare
#: banks (every stride pairs, the 1x1 remap too), a 2x2 one with two (stride 2 and
#: the remap) and a 1x1 one (two column banks).
PIXEL_PAIR_CONFIGS = {
    "k3": EngineConfig(pin=2, pout=2, kmax=3, stream_width=32, max_width=12, max_channels=12,
                       max_out_channels=8, writer_words=2, spare_bank=1, pixel_pairs=1),
    "k3-spare2": EngineConfig(pin=2, pout=2, kmax=3, stream_width=32, max_width=12,
                              max_channels=8, max_out_channels=8, writer_words=2, spare_bank=2,
                              pixel_pairs=1),
    "k3-wide-out": EngineConfig(pin=2, pout=8, kmax=3, stream_width=32, max_width=11,
                                max_channels=8, max_out_channels=24, spare_bank=3,
                                pixel_pairs=1),
    "k2": EngineConfig(pin=4, pout=2, kmax=2, stream_width=64, max_width=9, max_channels=12,
                       max_out_channels=8, writer_words=2, spare_bank=2, pixel_pairs=1),
    "k1": EngineConfig(pin=2, pout=4, kmax=1, stream_width=32, max_width=8, max_channels=8,
                       max_out_channels=8, spare_bank=1, pixel_pairs=1),
}


def pixel_pair_layers(cfg, rng):
    """Random layers for pixel pairs, each slot drawn until it is what it is for: an
    odd output width (a row ending on a single pixel) with one input tile (two words
    out a cycle of issue: output-bound), output-bound for long enough that the
    FIFOs fill (the issue waits for places in both: the odd pixels' FIFO holds up to
    a pixel's words more than the even ones'), every output tile of the engine (a pixel's
    words fill the FIFOs' pixel room), one output column, several input tiles, an
    unremapped 1x1 layer, runs of one pixel a window on the same engine (a pool, a
    stride past the spare banks), pairs at every stride up to the spare banks,
    with ``kmax`` of them a remapped 1x1 layer, and the 1x1 remap with each block
    narrower than ``kmax`` (stride ``b``: paired where ``b`` is within the spare
    banks, one pixel a window past them)."""
    contract = engine_contract(cfg)
    per_word_out = max(1, cfg.pout // cfg.stream_bytes)

    def fifo_fills(d):
        # its words leave slower than they come, by more than both FIFOs hold
        words = d["batch"] * d["out_h"] * d["out_w"] * d["co_tiles"]
        issues = d["batch"] * d["out_h"] * -(-d["out_w"] // 2) * d["co_tiles"] * d["ci_tiles"]
        return words * per_word_out - issues > 2 * contract.latency.output_fifo_depth
    ps = contract.pair_stride
    slots = [
        lambda d, _: d["pixel_pairs"] and d["out_w"] % 2 and d["ci_tiles"] == 1,
        lambda d, _: (d["pixel_pairs"] and fifo_fills(d)
                      and d["co_tiles"] == contract.max_co_tiles),
        lambda d, _: d["pixel_pairs"] and d["co_tiles"] == contract.max_co_tiles,
        lambda d, _: d["pixel_pairs"] and d["out_w"] == 1,
        lambda d, _: d["pixel_pairs"] and d["ci_tiles"] > 1 and d["out_w"] > 2,
        lambda d, _: d["pixel_pairs"] and d["out_w"] % 2 == 0 and d["batch"] == 2,
        lambda d, _: not d["pixel_pairs"] and d["pool"],
    ]
    if ps < cfg.kmax:
        # a stride past the spare banks: one pixel a window
        slots.append(lambda d, _: not d["pixel_pairs"] and d["stride"] > ps)
    for s in range(2, ps + 1):
        # pairs `s` columns apart (two of them odd-width: a row ending on one pixel)
        slots.append(lambda d, layer, s=s: (d["pixel_pairs"] and d["stride"] == s
                                            and layer["remap"] is False and d["out_w"] % 2))
    if ps == cfg.kmax > 1:
        # the 1x1 remap, at stride kmax, pairs too
        slots.append(lambda d, layer: d["pixel_pairs"] and layer["remap"] is None
                     and d["stride"] == cfg.kmax)
    for b in range(2, cfg.kmax):
        # the remap with a b x b block: the window's taps past it on the next block
        slots.append(lambda d, layer, b=b: layer["remap"] == b and d["stride"] == b
                     and d["pixel_pairs"] == (b <= ps))
    if contract.paired_beats:
        # output-bound with FIFO entries that are beats (two output tiles of a pixel)
        slots.append(lambda d, _: (contract.output_entry_words(d) == 2 and d["ci_tiles"] == 1
                                   and d["co_tiles"] >= 4 and d["out_w"] % 2))
    layers = []
    for wanted in slots:
        for _ in range(500):
            k = int(rng.integers(1, cfg.kmax + 1))
            stride = int(rng.integers(1, k + 1)) if rng.random() < 0.3 else 1
            cin = int(rng.integers(1, 3 * cfg.pin + 1))
            cout = (contract.max_co_tiles * cfg.pout if rng.random() < 0.3
                    else int(rng.integers(1, 3 * cfg.pout + 1)))
            h, w = int(rng.integers(k, 6)), int(rng.integers(k, cfg.max_width + 1))
            layer = shaped_layer(rng, cfg, k, stride, int(rng.integers(1, 3)), (cout, cin, h, w),
                                 0.3)
            if layer is None:
                continue
            # a 1x1 layer as it is (stride 1 or more), or remapped (stride kmax) now and then
            layer["remap"] = None if k == 1 and rng.random() < 0.3 else False
            if k == 1 and layer["remap"] is False and cfg.kmax > 2 and rng.random() < 0.3:
                layer["remap"] = int(rng.integers(2, cfg.kmax))  # a block under kmax
            try:
                desc, _ = pack_layer(cfg, **layer)
            except MappingError:
                continue
            if wanted(desc, layer):
                layers.append(layer)
                break
        else:
            raise AssertionError(f"no layer for slot {len(layers)} on {cfg}")
    return layers


def check_pair_runs(cfg, layers, runs, *, seed):
    """Bit-exact with and without pauses; without, the cycles are the model's and no more
    than one pixel a window's by the model (which the other tests hold to the RTL)."""
    descs = [d for d, _ in runs]
    for pauses in [(0.0, 0.0), (0.3, 0.4)]:
        results = run_core(cfg, runs, seed=seed, in_pause=pauses[0], out_pause=pauses[1])
        check_runs(cfg, layers, results, descs)
        if pauses == (0.0, 0.0):
            for desc, (_, cycles) in zip(descs, results):
                assert cycles == layer_cycles(cfg, desc).cycles, desc
                assert cycles <= layer_cycles(cfg, dict(desc, pixel_pairs=0)).cycles, desc


@pytest.mark.parametrize("key", PIXEL_PAIR_CONFIGS)
def test_pixel_pairs_bit_exact_and_cycles_exact(key):
    """Bit-exact with the reference, with and without pauses; with none the cycles are
    the model's exactly and no more than one pixel a window takes on the same engine
    (the model's, which the other tests hold to the RTL)."""
    cfg = PIXEL_PAIR_CONFIGS[key]
    rng = np.random.default_rng(sum(map(ord, key)) + 41)
    layers = pixel_pair_layers(cfg, rng)
    packed = [pack_layer(cfg, **layer) for layer in layers]
    check_pair_runs(cfg, layers, packed, seed=7)


def depthwise_run(cfg, layer):
    """``(desc, stream bytes)`` of ``layer`` (dense weights zero off the diagonal) as a
    depthwise run, with pixel pairs wherever the engine takes them."""
    x, w = layer["x"], layer["w"]
    geo = map_layer(cfg, x.shape, w.shape, stride=layer["stride"], pads=layer["pads"],
                    pool=layer["pool"], depthwise=True)
    desc = layer_descriptor(geo, x_zp=layer["x_zp"], y_zp=layer["y_zp"], clamp=layer["clamp"],
                            load_weights=True)
    weights = pack_weights(cfg, w, layer["bias"], layer["x_zp"], layer["mult"], layer["shift"],
                           depthwise=True)
    pixels = pack_pixels(cfg, x, layer["x_zp"], w.shape, stride=layer["stride"],
                         pads=layer["pads"], remap=geo["remap"])
    return desc, np.concatenate([weights, pixels])


def test_depthwise_pixel_pairs_bit_exact_and_cycles_exact():
    """A depthwise run pairs as a dense one (each lane's two trees are its channel's two
    pixels): bit-exact with and without pauses, cycles the model's and under one pixel a
    window's; odd and even widths, one and several tiles, a stride-2 run between."""
    cfg = PIXEL_PAIR_CONFIGS["k3"]
    assert engine_contract(cfg).depthwise_runs
    rng = np.random.default_rng(77)
    layers = []
    for c, k, stride, h, w in [(2, 3, 1, 5, 7), (5, 3, 1, 4, 8), (6, 2, 1, 3, 9), (4, 3, 2, 6, 7),
                               (3, 1, 1, 2, 5), (8, 3, 1, 4, 7)]:
        layer = random_layer(rng, cfg, k=k, stride=stride, pool=False,
                             batch=int(rng.integers(1, 3)))
        layer["x"] = rng.integers(-128, 128, (layer["x"].shape[0], c, h, w), dtype=np.int8)
        dense = np.zeros((c, c, k, k), np.int8)
        for ch in range(c):
            dense[ch, ch] = rng.integers(-128, 128, (k, k), dtype=np.int8)
        set_weights(rng, layer, dense)
        layers.append(layer)
    runs = [depthwise_run(cfg, layer) for layer in layers]
    descs = [d for d, _ in runs]
    assert [d["pixel_pairs"] for d in descs] == [1, 1, 1, 0, 1, 1]
    assert all(d["depthwise"] for d in descs)
    # two output tiles a FIFO entry (a beat) where a paired run's tiles are even:
    # 3 channels (2 tiles, the 1x1 run) and 8 (4 tiles)
    assert [engine_contract(cfg).output_entry_words(d) for d in descs] == [1, 1, 1, 1, 2, 2]
    check_pair_runs(cfg, layers, runs, seed=8)
