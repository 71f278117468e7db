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


def test_a_fused_blocks_floor_is_its_slower_half(bench, ds_cnn):
    fused = [l for l in ds_cnn.layers if l.mapping == "fused"]
    assert len(fused) == 4
    for layer in fused:
        # 1x1 64->64 at 25x5 on 288 products: 512,000 / 288 = 1,778; the depthwise's
        # 72,000 MACs on the PYNQ-Z2's half-rate unit, 36 products a cycle: 2,000
        assert layer.floor == pytest.approx(72_000 / 36)


def test_main_writes_its_section(bench, tmp_path):
    target = tmp_path / "B.md"
    target.write_text("x\n")
    assert bench.main(["--models", "ds_cnn", "--write", str(target)]) == 0
    text = target.read_text()
    assert "<!-- bandwidth_projection:begin -->\nCommand: `python bench/bandwidth_projection.py"\
        in text and "| ds_cnn | " in text and "**ds_cnn** per step:" in text
