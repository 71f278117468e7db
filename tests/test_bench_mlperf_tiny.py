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
    ultra, block = bench.engines(["ultra96-v2", "ultra96-v2+block"])
    assert ultra.config.fused_blocks == 0 and block.config.fused_blocks > 0
    assert block.config == size_engine(load_board("ultra96-v2"), fused_block=True).config
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
