"""bench/mlperf_tiny.py's model-only path on one small model (keeps the benchmark from rotting).

DS-CNN on the PYNQ-Z2 sized engine, batches 1 and 2, cycle model only: the
tables come out, the bound split adds up to the predicted cycles, and
``--write`` replaces only the text between the section's markers.
"""

import pytest

from bench_helpers import load_bench


@pytest.fixture(scope="module")
def bench():
    return load_bench("mlperf_tiny")


@pytest.fixture(scope="module")
def ds_cnn(bench, tmp_path_factory):
    """DS-CNN written by the zoo and compiled at batches 1 and 2 on the PYNQ-Z2 engine."""
    from fpgacnn.host.onnx_import import load_onnx
    written = bench.load_zoo().write_zoo(tmp_path_factory.mktemp("zoo"), ["ds_cnn"],
                                         n_calibration=4)
    model = load_onnx(written["ds_cnn"]["int8"])
    engine, = bench.engines(["pynq-z2"])
    return model, engine, {b: bench.compile_network("ds_cnn", model, engine, b) for b in (1, 2)}


def test_parts_add_up_to_the_predicted_cycles(bench, ds_cnn):
    _, _, results = ds_cnn
    for r in results.values():
        assert r.error is None and r.host_steps == ["AveragePool", "Flatten"]
        for layer in r.layers:
            assert sum(layer.parts[p] for p in bench.PARTS) == layer.cycles
            assert min(layer.parts[p] for p in bench.PARTS) >= 0
        assert 0 < r.utilization <= r.lane_use() <= 1
    kinds = {layer.mapping.split("/")[0] for layer in results[1].layers}
    # the PYNQ-Z2's engine fuses each depthwise layer with the pointwise after it
    assert kinds == {"im2col", "fused", "gemm"}
    assert [l.depthwise for l in results[1].layers].count(True) == 0


def test_main_writes_only_its_section(bench, tmp_path):
    target = tmp_path / "BENCHMARKS.md"
    target.write_text("# B\n\nbefore\n\n<!-- mlperf_tiny:begin -->\nold\n<!-- mlperf_tiny:end -->\n"
                      "\nafter\n")
    assert bench.main(["--models", "ds_cnn", "--boards", "pynq-z2", "--batches", "1,2",
                       "--write", str(target)]) == 0
    text = target.read_text()
    assert text.startswith("# B\n\nbefore\n\n<!-- mlperf_tiny:begin -->\nCommand: "
                           "`python bench/mlperf_tiny.py --models ds_cnn")
    assert text.endswith("<!-- mlperf_tiny:end -->\n\nafter\n") and "old" not in text
    assert "| ds_cnn | 2,656,768 |" in text and "fpgaConvNet" in text
    assert "Per layer, **ds_cnn** on pynq-z2" in text


def test_block_engine_reports_the_fused_blocks(bench, ds_cnn):
    """``BOARD+block`` is the board's sized engine with the fused block: the PYNQ-Z2's
    own (its file chooses the block: one engine, both names), the Ultra96-V2's where
    asked. DS-CNN's four depthwise layers run in fused blocks, which the depthwise
    cell reports against the goal (their MACs both halves'), and none is left alone."""
    from fpgacnn.boards.board import load_board
    from fpgacnn.boards.engine_sizing import size_engine
    model, plain, _ = ds_cnn
    engine, = bench.engines(["pynq-z2", "pynq-z2+block"])
    assert engine.config == plain.config == size_engine(load_board("pynq-z2")).config
    assert engine.names == ["pynq-z2", "pynq-z2+block"] and engine.config.fused_blocks
    # BOARD+block is size_engine(board, fused_block=True): the ZCU104's has no block
    # (none fits its block RAMs), so it is the board's own engine.
    zcu104, = bench.engines(["zcu104", "zcu104+block"])
    assert zcu104.config == size_engine(load_board("zcu104"), fused_block=True).config
    assert zcu104.config.fused_blocks == 0 and zcu104.names == ["zcu104", "zcu104+block"]
    r = bench.compile_network("ds_cnn", model, engine, 1)
    assert r.depthwise() is None
    n, utilization, cycles, macs = r.fused_blocks()
    fused = [l for l in r.layers if l.mapping == "fused"]
    assert n == len(fused) == 4
    assert utilization == pytest.approx(sum(l.macs for l in fused)
                                        / (sum(l.cycles for l in fused) * r.peak))
    cell = bench._depthwise_cell(r.depthwise(), r.fused_blocks())
    assert cell.startswith(f"in 4 fused blocks: {utilization:.1%} (")
    assert ("(yes;" in cell) == (utilization >= bench.DEPTHWISE_GOAL)


def test_unknown_engine_names_one_line(bench):
    with pytest.raises(SystemExit, match="unknown board nope[+]block; choose from"):
        bench.parse_args(["--boards", "nope+block"])


def test_a_depthwise_bound_block_is_named_depthwise(bench, tmp_path):
    """MobileNetV1's 32 -> 32 block (/features/3) on the PYNQ-Z2's half-rate unit: 288
    window pairs of 8 channel tiles at 2 cycles each, twice its pointwise's 2,304: the
    unit's part, not overhead. With the full-rate unit its four demands tie (2,304 each:
    the unit named first); DS-CNN's blocks stay compute-bound on both (2,016 pointwise
    cycles against 2,000 and 1,200 of the unit's)."""
    import dataclasses
    from fpgacnn.host.onnx_import import load_onnx
    written = bench.load_zoo().write_zoo(tmp_path, ["mobilenet_v1_025", "ds_cnn"],
                                         n_calibration=4)
    half, = bench.engines(["pynq-z2"])
    assert half.config.depthwise_pixels == 1
    full = bench.Engine(["full rate"], dataclasses.replace(half.config, depthwise_pixels=2),
                        half.clock_mhz)
    mobilenet = {}
    for engine, want in ((half, (4608, "depthwise")), (full, (2304, "depthwise"))):
        r = mobilenet[engine.names[0]] = bench.compile_network(
            "mobilenet_v1_025", load_onnx(written["mobilenet_v1_025"]["int8"]), engine, 1)
        block, = [l for l in r.layers if l.shape == "dw 3x3 32 ch @24x24 + 1x1 32->32"]
        assert (block.parts["depthwise"], bench.bound_of(block.parts)[0]) == want
        assert block.parts["compute"] == block.parts["input"] == block.parts["output"] == 0
        assert sum(block.parts[p] for p in bench.PARTS) == block.cycles
        d = bench.compile_network("ds_cnn", load_onnx(written["ds_cnn"]["int8"]), engine, 1)
        fused = [l for l in d.layers if l.mapping == "fused"]
        assert len(fused) == 4
        assert {(bench.bound_of(l.parts)[0], l.parts["compute"]) for l in fused} \
            == {("compute", 2016)}
    table = bench.layer_table({1: mobilenet["pynq-z2"]}, [1])
    assert "| w / dw / c / i / o / ovh % b1 |" in table
    row, = [line for line in table.splitlines() if "| dw 3x3 32 ch @24x24 +" in line]
    assert "| depthwise 95% |" in row and "| 0 / 95 / 0 / 0 / 0 / 5 |" in row
