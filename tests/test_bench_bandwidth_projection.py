"""bench/bandwidth_projection.py on DS-CNN (keeps the projection honest and from rotting).

At the board's own bandwidth (``scale`` 1) the projection is the compiled
program's cycles, step by step; wider memory and full lanes never add a
cycle, and the memory's share of a step shrinks as it should.
"""

import pytest

from bench_helpers import load_bench


@pytest.fixture(scope="module")
def bench():
    return load_bench("bandwidth_projection")


@pytest.fixture(scope="module")
def ds_cnn(bench, tmp_path_factory):
    from fpgacnn.host.onnx_import import load_onnx
    written = bench.load_zoo().write_zoo(tmp_path_factory.mktemp("zoo"), ["ds_cnn"],
                                         n_calibration=4)
    engine, = bench.mlperf_tiny.engines(["pynq-z2+block"])
    return bench.compile_with_demands("ds_cnn", load_onnx(written["ds_cnn"]["int8"]), engine)


def test_scale_one_is_the_compiled_program(bench, ds_cnn):
    assert ds_cnn.error is None
    for layer in ds_cnn.layers:
        assert bench.projected(layer, 1) == layer.cycles
        assert bench.projected(layer, 2) <= layer.cycles
        assert bench.projected(layer, 2, dram=21.3 / 8) >= bench.projected(layer, 2)
        assert bench.projected(layer, 2, dram=21.3 / 8, lanes_full=True) \
            <= bench.projected(layer, 2, dram=21.3 / 8)


def test_a_fused_blocks_depthwise_is_the_cycle_models_demand(bench, ds_cnn):
    fused = [l for l in ds_cnn.layers if l.mapping == "fused"]
    assert len(fused) == 4
    for layer in fused:
        # the array's floor: the pointwise, 1x1 64->64 at 25x5 on 288 products
        assert layer.floor == pytest.approx(512_000 / 288)
        # the unit's, the cycle model's: 25 rows of 2 pairs at 2 cycles and a pair of one
        # at 1, 16 channel tiles: 2,000, the depthwise's 72,000 MACs at the half-rate
        # unit's 36 products a cycle (its tiles full)
        assert layer.demands["depthwise"] == 2_000 == 72_000 / 36
        assert layer.demands["compute"] == 2_016  # 63 pixel pairs x 16 tiles x 2 windows
        # full lanes leave the array's 1,778 under the unit's 2,000: the unit binds
        rest = layer.cycles - layer.parts["compute"]
        assert bench.projected(layer, 4, lanes_full=True) == rest + 2_000


def test_a_depthwise_bound_block_keeps_its_units_cycles(bench, tmp_path):
    """MobileNetV1's 32 -> 32 block on the half-rate unit: the split's stream phase is the
    unit's 4,608 cycles, which neither the memory nor full lanes shorten."""
    from fpgacnn.host.onnx_import import load_onnx
    written = bench.load_zoo().write_zoo(tmp_path, ["mobilenet_v1_025"], n_calibration=4)
    engine, = bench.mlperf_tiny.engines(["pynq-z2"])
    r = bench.compile_with_demands("mobilenet_v1_025",
                                   load_onnx(written["mobilenet_v1_025"]["int8"]), engine)
    block, = [l for l in r.layers if l.shape == "dw 3x3 32 ch @24x24 + 1x1 32->32"]
    assert block.demands["depthwise"] == block.parts["depthwise"] == 4_608
    assert block.demands["compute"] == 2_304 and block.floor == pytest.approx(589_824 / 288)
    for kwargs in ({}, {"dram": 21.3 / 8}, {"dram": 21.3 / 8, "lanes_full": True}):
        assert bench.projected(block, 2, **kwargs) == block.cycles


def test_main_writes_its_section(bench, tmp_path):
    target = tmp_path / "B.md"
    target.write_text("x\n")
    assert bench.main(["--models", "ds_cnn", "--write", str(target)]) == 0
    text = target.read_text()
    assert "<!-- bandwidth_projection:begin -->\nCommand: `python bench/bandwidth_projection.py"\
        in text and "| ds_cnn | " in text and "**ds_cnn** per step:" in text
