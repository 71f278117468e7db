import re

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


def fused_run(config, shape, cout, stride=1):
    """The descriptor of a fused 3x3 depthwise + pointwise block run of input ``shape``."""
    from fpgacnn.host.packing import fused_block_descriptor
    return fused_block_descriptor(config, shape, (3, 3), cout, x_zp=0, dw_y_zp=0, y_zp=0,
                                  stride=stride, pads=(1, 1, 1, 1))


def half_and_full():
    """The PYNQ-Z2's sized engine (the half-rate depthwise unit) and the same with the
    full-rate unit."""
    import dataclasses
    from conftest import pynq_z2_engine
    half = pynq_z2_engine()
    assert half.fused_blocks and half.depthwise_pixels == 1
    return half, dataclasses.replace(half, depthwise_pixels=2)


# (input shape, C', stride, pace) -> (depthwise demand, compute demand, bound): MobileNetV1's
# blocks 1, 3, 5 and 2 (stride 2) and DS-CNN's, on the half-rate (2) and full-rate (1) unit;
# the depthwise over, equal to and under the pointwise.
DEPTHWISE_BOUNDS = [
    ((1, 32, 24, 24), 32, 1, 2, (4608, 2304, "depthwise")),  # 288 pairs x 8 tiles x 2
    ((1, 32, 24, 24), 32, 1, 1, (2304, 2304, "depthwise")),  # a tie of all four
    ((1, 8, 48, 48), 16, 1, 2, (4608, 4608, "depthwise")),   # a tie with the array
    ((1, 8, 48, 48), 16, 1, 1, (2304, 4608, "compute")),
    ((1, 64, 12, 12), 64, 1, 2, (2304, 2304, "depthwise")),
    ((1, 64, 12, 12), 64, 1, 1, (1152, 2304, "compute")),
    ((1, 16, 48, 48), 32, 2, 2, (2304, 2304, "input")),      # 24x24 out: 4608 input
    ((1, 64, 25, 5), 64, 1, 2, (2000, 2016, "compute")),     # 25 x (2 pairs x 2 + 1) x 16
    ((1, 64, 25, 5), 64, 1, 1, (1200, 2016, "compute")),
    ((2, 64, 25, 5), 32, 1, 2, (4000, 2016, "depthwise")),   # a batch of two, C' 32
]


@pytest.mark.parametrize("shape, cout, stride, pace, want", DEPTHWISE_BOUNDS)
def test_a_fused_runs_depthwise_unit_is_a_demand_of_its_own(shape, cout, stride, pace, want):
    config = {2: half_and_full()[0], 1: half_and_full()[1]}[pace]
    est = layer_cycles(config, fused_run(config, shape, cout, stride))
    demand = est.detail["demand"]
    assert (demand["depthwise"], demand["compute"], est.bound) == want
    assert est.compute_cycles == demand["compute"]
    # The unit cannot issue faster than its pace: its demand is a floor of the run.
    assert est.cycles >= est.load_cycles + demand["depthwise"]


def test_the_reason_names_the_depthwise_unit_and_its_pace():
    half, full = half_and_full()
    est = layer_cycles(half, fused_run(half, (1, 32, 24, 24), 32))
    assert re.fullmatch(r"the depthwise unit: 288 window pairs x 8 channel tiles at 2 "
                        r"cycle\(s\) each \(4608 cycles\) against the pointwise's 2304 compute "
                        r"cycles", est.reason)
    # an odd row's last pixel is a pair of one, a cycle a window on the half-rate unit
    est = layer_cycles(half, fused_run(half, (2, 64, 25, 5), 32))
    assert re.fullmatch(r"the depthwise unit: 100 window pairs x 16 channel tiles at 2 "
                        r"cycle\(s\) each and 50 one-pixel pairs x 16 at 1 cycle \(4000 "
                        r"cycles\) against the pointwise's 2016 compute cycles", est.reason)
    est = layer_cycles(full, fused_run(full, (1, 32, 24, 24), 32))
    assert est.reason.endswith("(2304 cycles) against the pointwise's 2304 compute cycles; "
                               "as many for the array, the input and the output")
    est = layer_cycles(half, fused_run(half, (1, 64, 25, 5), 64))
    assert re.fullmatch(r"the array \(the pointwise half\): 63 pixel pairs x 16 output tiles x "
                        r"2 windows, one window per cycle \(2016 cycles\) against the "
                        r"depthwise unit's 2000", est.reason)


def test_runs_without_the_unit_have_no_depthwise_demand():
    half, _ = half_and_full()
    for config, shape, w in [(BIG, (1, 64, 32, 32), (64, 64, 3, 3)),
                             (half, (1, 32, 24, 24), (32, 32, 1, 1))]:
        est = conv_cycles(config, shape, w, pads=(0, 0, 0, 0))
        assert est.detail["demand"]["depthwise"] == 0 and est.bound != "depthwise"
