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
