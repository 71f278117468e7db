"""``fpgacnn compile``: a model's network program without a board (issue 16)."""

from pathlib import Path

from fpgacnn.boards.board import load_board
from fpgacnn.core.config import EngineConfig
from fpgacnn.boards.engine_sizing import size_engine
from fpgacnn.host.cli import main
from fpgacnn.host.compiler import compile_model
from fpgacnn.host.onnx_import import load_onnx
from fpgacnn.host.program_image import ProgramImage, build_image

from onnx_model_builders import quantize, residual_model

DIGITS = Path(__file__).resolve().parents[1] / "examples" / "digits_int8.onnx"


def test_compile_prints_each_layer_and_writes_the_image(capsys, tmp_path):
    out = tmp_path / "digits.fcnp"
    assert main(["compile", str(DIGITS), "--board", "pynq-z2", "--batch", "2",
                 "-o", str(out)]) == 0
    text = capsys.readouterr().out
    config = size_engine(load_board("pynq-z2")).config
    program = compile_model(load_onnx(DIGITS), config, batch=2)
    for step in program.steps:
        assert step.name in text
    assert "flatten     Flatten          vector (the sequencer's unit)" in text
    image = ProgramImage(out.read_bytes())
    assert image.config == config and image.header.batch == 2
    assert image.header == build_image(program).header
    cycles = sum(r.warm_predicted_cycles for s in program.steps for r in getattr(s, "runs", ()))
    assert f"engine: {cycles:,} cycles per batch (weights resident" in text


def test_memory_budget_and_bad_arguments_are_one_line(capsys, tmp_path):
    total = build_image(compile_model(load_onnx(DIGITS), EngineConfig())).nbytes
    assert main(["compile", str(DIGITS), "--memory-bytes", str(total)]) == 0
    capsys.readouterr()
    assert main(["compile", str(DIGITS), "--memory-bytes", str(total - 1)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "over the board memory budget" in err
    assert "layer " in err
    for args, message in (
            (["--batch", "0"], "--batch must be at least 1"),
            (["-o", str(tmp_path / "no" / "x.fcnp")], "does not exist"),
            (["-o", str(tmp_path / "x.bin")], "must end in .fcnp"),
            (["--board", "no-such-board"], "no-such-board")):
        assert main(["compile", str(DIGITS), *args]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, (args, err)
    assert not (tmp_path / "x.bin").exists()


def test_layers_of_the_vector_unit_are_named_so(capsys, tmp_path):
    """A residual CNN: its Add, global pool and Flatten are the sequencer's vector
    unit's (their vector records), not host layers."""
    path = quantize(residual_model(), tmp_path / "residual.onnx")
    assert main(["compile", str(path), "--board", "pynq-z2"]) == 0
    text = capsys.readouterr().out
    rows = {line.split()[1]: line for line in text.splitlines() if line.startswith("  ")}
    for op in ("Add", "GlobalAveragePool", "Flatten"):
        assert "vector (the sequencer's unit)" in rows[op], rows[op]
    assert "host" not in "".join(rows.values())


def test_fused_block_compiles_for_the_sized_engine_with_the_block(capsys, tmp_path):
    """``--board NAME --fused-block``: the image is for the engine ``fpgacnn build --board
    NAME --fused-block`` makes (size_engine's rule 4d), whose header says its blocks;
    without --board the flag is one line of error."""
    out = tmp_path / "digits.fcnp"
    assert main(["compile", str(DIGITS), "--board", "pynq-z2", "--fused-block",
                 "-o", str(out)]) == 0
    assert "board pynq-z2's sized engine with the fused block" in capsys.readouterr().out
    config = size_engine(load_board("pynq-z2"), fused_block=True).config
    image = ProgramImage(out.read_bytes())
    assert image.config == config and image.header.fused_blocks == config.fused_blocks > 0
    assert main(["compile", str(DIGITS), "--fused-block"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--[no-]fused-block sizes a board's engine" in err
