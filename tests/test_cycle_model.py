import numpy as np
import pytest

from fpgacnn.core.config import EngineConfig
from fpgacnn.host.cycle_model import conv_cycles, layer_cycles
from fpgacnn.core.errors import MappingError
from fpgacnn.host.packing import pack_layer

from conv_core_helpers import run_core
from test_packing import random_layer, set_weights

SMALL = EngineConfig(pin=2, pout=2, kmax=3, stream_width=32, max_width=16, max_channels=16,
                     max_out_channels=16)
WIDE = EngineConfig(pin=8, pout=8, kmax=2, stream_width=32, max_width=8, max_channels=16,
                    max_out_channels=16)  # a pixel word and an output word span 2 beats
BIG = EngineConfig(pin=8, pout=8, kmax=3, stream_width=64, max_width=64, max_channels=256,
                   max_out_channels=256)


def layer(cfg, rng, cin, cout, hw, k, stride, pads, pool=False, batch=1):
    out = random_layer(rng, cfg, k=k, stride=stride, pool=pool, batch=batch)
    out["x"] = rng.integers(-128, 128, (batch, cin) + hw, dtype=np.int8)
    set_weights(rng, out, rng.integers(-128, 128, (cout, cin, k, k), dtype=np.int8))
    out.update(pads=pads, pool=pool)
    return out


# (config, cin, cout, (h, w), k, stride, pads, pool, batch): compute-, input-, output- and
# weight-bound runs, pooling with an odd last row, batches, the 1x1 remap.
RTL_CASES = [
    (SMALL, 8, 8, (8, 8), 3, 1, (1, 1, 1, 1), False, 1),
    (SMALL, 4, 4, (8, 8), 3, 2, (1, 1, 1, 1), False, 2),
    (SMALL, 2, 8, (7, 8), 3, 1, (0, 0, 0, 0), True, 2),
    (SMALL, 4, 2, (7, 9), 3, 3, (0, 0, 0, 0), False, 1),
    (SMALL, 18, 4, (4, 4), 1, 1, (0, 0, 0, 0), False, 1),
    (WIDE, 16, 16, (6, 6), 2, 1, (0, 0, 1, 1), False, 1),
    (WIDE, 8, 8, (6, 6), 2, 2, (0, 0, 0, 0), False, 1),
    (WIDE, 8, 16, (6, 6), 2, 1, (1, 1, 1, 1), True, 2),
]


@pytest.mark.parametrize("cfg", [SMALL, WIDE], ids=["small", "wide"])
def test_model_matches_rtl_cycles(cfg):
    rng = np.random.default_rng(21)
    cases = [c for c in RTL_CASES if c[0] is cfg]
    packed = [pack_layer(cfg, **layer(cfg, rng, *c[1:])) for c in cases]
    results = run_core(cfg, packed)
    for (desc, _), (_, cycles) in zip(packed, results):
        model = layer_cycles(cfg, desc).cycles
        assert abs(model - cycles) <= 0.02 * cycles, f"{desc}: RTL {cycles}, model {model}"


def test_bounds_are_named():
    est = conv_cycles(BIG, (1, 64, 32, 32), (64, 64, 3, 3), pads=(1, 1, 1, 1))
    assert est.bound == "compute" and est.compute_utilization > 0.95
    # stride 2 with one output tile: two input rows per output row of half the width
    est = conv_cycles(BIG, (1, 8, 32, 32), (8, 8, 3, 3), stride=2, pads=(1, 1, 1, 1))
    assert est.bound == "input" and est.reason.startswith("input bandwidth")
    # 1x1 remapped, few output tiles: 9 input pixels per output pixel
    est = conv_cycles(BIG, (1, 72, 16, 16), (16, 72, 1, 1))
    assert est.bound == "input"
    # a small image after many weights
    est = conv_cycles(BIG, (1, 128, 4, 4), (128, 128, 3, 3), pads=(1, 1, 1, 1))
    assert est.bound == "weights" and est.utilization < 0.2
    # output words of 2 beats against one input tile per word
    est = conv_cycles(WIDE, (4, 8, 8, 8), (16, 8, 2, 2), load_weights=False)
    assert est.bound == "output" and est.output_wait_cycles > 0


def test_utilization_counts_real_macs():
    full = conv_cycles(BIG, (1, 64, 16, 16), (64, 64, 3, 3), pads=(1, 1, 1, 1))
    ragged = conv_cycles(BIG, (1, 60, 16, 16), (60, 60, 3, 3), pads=(1, 1, 1, 1))
    assert ragged.cycles == full.cycles  # same tiles
    assert ragged.macs == 16 * 16 * 60 * 60 * 9
    assert ragged.utilization == pytest.approx(full.utilization * (60 / 64) ** 2)


def test_reusing_weights_saves_the_load():
    a = conv_cycles(BIG, (2, 64, 16, 16), (64, 64, 3, 3), pads=(1, 1, 1, 1))
    b = conv_cycles(BIG, (2, 64, 16, 16), (64, 64, 3, 3), pads=(1, 1, 1, 1), load_weights=False)
    assert a.cycles - b.cycles == a.load_cycles == 8 * 8 + 64 * 72
    assert b.load_cycles == 0


def test_layers_that_do_not_fit_raise():
    with pytest.raises(MappingError, match=r"^conv9: kernel 5x5 exceeds the engine's kmax 3$"):
        conv_cycles(BIG, (1, 8, 8, 8), (8, 8, 5, 5), name="conv9")
