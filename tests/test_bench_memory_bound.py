"""bench/memory_bound.py on DS-CNN and ResNet-8 (keeps the benchmark from rotting, and
checks what it claims): no layer's predicted cycles fall below its floor, the
model floor is the sum of the layers', and ``--write`` replaces only the text
between its markers."""

import pytest

from bench_helpers import load_bench


@pytest.fixture(scope="module")
def bench():
    return load_bench("memory_bound")


@pytest.mark.parametrize("name", ["ds_cnn", "resnet8"])
def test_no_layer_beats_its_floor(bench, tmp_path, name):
    from fpgacnn.boards.board import load_board
    from fpgacnn.boards.engine_sizing import size_engine
    from fpgacnn.host.compiler import compile_model
    from fpgacnn.host.onnx_import import load_onnx

    written = bench.load_zoo().write_zoo(tmp_path, [name], n_calibration=4)
    config = size_engine(load_board("pynq-z2")).config
    rows = bench.layer_bounds(compile_model(load_onnx(written[name]["int8"]), config),
                              config.stream_bytes)
    assert rows
    for layer, macs, in_bytes, out_bytes, cycles, compute, memory in rows:
        assert compute == macs / config.peak_macs_per_cycle
        assert memory == max(in_bytes, out_bytes) / config.stream_bytes
        assert cycles >= max(compute, memory), layer
    floor, ceiling = bench.model_bound(rows, config.peak_macs_per_cycle)
    assert floor == pytest.approx(sum(max(r[5], r[6]) for r in rows))
    assert 0 < ceiling <= 1
    floor2, _ = bench.model_bound(rows, config.peak_macs_per_cycle, 2)
    assert floor / 2 <= floor2 <= floor


def test_write_replaces_the_marked_section(bench, tmp_path):
    path = tmp_path / "B.md"
    begin, end = f"<!-- {bench.SECTION}:begin -->", f"<!-- {bench.SECTION}:end -->"
    path.write_text(f"# head\n{begin}\nold\n{end}\ntail\n")
    bench.main(["--boards", "pynq-z2", "--models", "ds_cnn", "--write", str(path)])
    text = path.read_text()
    assert text.startswith(f"# head\n{begin}\n") and text.endswith(f"{end}\ntail\n")
    assert "old" not in text and "| pynq-z2 (pin 4 x pout 4, B 8) | ds_cnn |" in text


def test_fused_blocks_are_the_depthwise_layers_and_the_pointwise_after_them(bench, tmp_path):
    """DS-CNN's four depthwise layers each fuse with the 1x1 convolution after it (and
    nothing else does); a fused floor is at most the layer-by-layer one and at least
    each block's input and output at the memory's bytes a cycle; on the array, the
    depthwise's MACs at 1/pout of the peak then the pointwise's."""
    from fpgacnn.boards.board import load_board
    from fpgacnn.boards.engine_sizing import size_engine
    from fpgacnn.host.compiler import compile_model
    from fpgacnn.host.onnx_import import load_onnx

    written = bench.load_zoo().write_zoo(tmp_path, ["ds_cnn"], n_calibration=4)
    # (the layer-by-layer engine: the PYNQ-Z2's sized engine without its block)
    config = size_engine(load_board("pynq-z2"), fused_block=False).config
    peak, b = config.peak_macs_per_cycle, config.stream_bytes
    blocks = bench._bounds_and_blocks(
        compile_model(load_onnx(written["ds_cnn"]["int8"]), config), b)
    fused = [row[0] for row, fusable in blocks if fusable]
    assert fused == [f"/blocks/{i}/depthwise/Conv" for i in range(4)]
    rows = [row for row, _ in blocks]
    floor, _ = bench.model_bound(rows, peak)
    rate = peak / config.pout
    for unit in (("array", rate), rate, rate / 2):
        f = bench.fused_floor(blocks, peak, b, unit)
        assert f <= floor + 1e-9
    # A unit too slow to matter leaves the depthwise MACs the bound of each block.
    slow = bench.fused_floor(blocks, peak, b, 1)
    dw = [row for row, fusable in blocks if fusable]
    # (the layers in no block: neither a depthwise layer that fuses nor the one after it)
    after_one = [False] + [fusable for _, fusable in blocks[:-1]]
    others = [max(r[5], r[6]) for (r, fusable), pw in zip(blocks, after_one)
              if not (fusable or pw)]
    assert slow == pytest.approx(sum(r[1] for r in dw) + sum(others))
    # On the array: depthwise at 1/pout of the peak, then the pointwise, or the memory.
    on_array = bench.fused_floor(blocks, peak, b, ("array", rate))
    pw = [blocks[i + 1][0] for i, (_, fusable) in enumerate(blocks) if fusable]
    want = sum(max(d[1] / rate + p[1] / peak, max(d[2], p[3]) / b) for d, p in zip(dw, pw))
    assert on_array == pytest.approx(want + sum(others))
    # Projected (compiled=True): the pointwise and the layers in no block at their
    # compiled cycles; between the fused floor and the compiled program.
    compiled_others = [r[4] for (r, fusable), pw_ in zip(blocks, after_one)
                       if not (fusable or pw_)]
    for unit in (("array", rate), rate, rate / 2):
        projected = bench.fused_floor(blocks, peak, b, unit, compiled=True)
        assert bench.fused_floor(blocks, peak, b, unit) <= projected <= sum(r[4] for r in rows)
        if not isinstance(unit, tuple):
            want = sum(max(p[4], d[1] / unit, max(d[2], p[3]) / b) for d, p in zip(dw, pw))
            assert projected == pytest.approx(want + sum(compiled_others))
