"""``fpgacnn generate``: the files it writes and its errors."""

from pathlib import Path
import re

import pytest

from fpgacnn.core.contract import engine_contract

from fpgacnn.core.config import EngineConfig
from fpgacnn.core.regmap import RegisterMap, build_regmap
from fpgacnn.hdl.verilog import TOP_NAME
from fpgacnn.host.cli import main

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

SMALL = """\
[engine]
pin = 4
pout = 4
kmax = 3
stream_width = 32
max_width = 16
max_channels = 16
max_out_channels = 16
"""


def generate(tmp_path, toml_text, capsys, *extra):
    cfg = tmp_path / "engine.toml"
    cfg.write_text(toml_text)
    code = main(["generate", "--config", str(cfg), "-o", str(tmp_path / "out"), *extra])
    out, err = capsys.readouterr()
    return code, out, err


def test_writes_verilog_regmap_and_summary(tmp_path, capsys):
    code, out, err = generate(tmp_path, SMALL, capsys)
    assert code == 0, err
    config = EngineConfig(pin=4, pout=4, kmax=3, stream_width=32, max_width=16,
                          max_channels=16, max_out_channels=16)
    d = tmp_path / "out"
    verilog = (d / f"{TOP_NAME}.v").read_text()
    assert f"module {TOP_NAME}(" in verilog
    for port in ("s_axil__awaddr", "s_axil__rdata", "s_axis__tdata", "s_axis__tready",
                 "m_axis__tdata", "m_axis__tlast", "m_axis__tvalid"):
        assert port in verilog
    regs = RegisterMap.from_json((d / f"{TOP_NAME}_regs.json").read_text())
    assert regs.config == config
    assert list(regs) == list(build_regmap(config))
    assert (d / f"{TOP_NAME}_regs.h").read_text() == build_regmap(config).c_header()
    summary = (d / f"{TOP_NAME}_summary.txt").read_text()
    assert "peak MACs/cycle         144" in summary
    contract = engine_contract(config)
    for buffer in (contract.line_buffer, contract.weights, contract.params, contract.pool_row):
        assert f"{buffer.total_bytes:,} B" in summary
    assert summary in out
    assert out.count("wrote ") == 4


def test_example_config_is_the_default():
    assert EngineConfig.from_toml(EXAMPLES / "engine_default.toml") == EngineConfig()


@pytest.mark.parametrize("text,message", [
    ("pin = [", r"^fpgacnn: error: .*engine\.toml: not valid TOML \(.+\)$"),
    ("[engine]\npinn = 4\n", r"^fpgacnn: error: .*engine\.toml: unknown engine parameter 'pinn' \(known: "),
    ("[engine]\npin = 0\n", r"^fpgacnn: error: pin must be between 1 and 64, not 0$"),
    ("[engine]\nstream_width = 48\n", r"^fpgacnn: error: stream_width must be 32, 64 or 128, not 48$"),
    ("[engine]\npin = 3\n", r"^fpgacnn: error: pin \(3 bytes per word\) and stream_width \(8 bytes per beat\) "
                            r"must divide one another$"),
    ("[engine]\nkmax = \"3\"\n", r"^fpgacnn: error: kmax must be an integer, not '3'$"),
    ("[engine]\nwriter_words = 0\n", r"^fpgacnn: error: writer_words must be between 1 and 2, not 0$"),
    ("[engine]\nwriter_words = 3\n", r"^fpgacnn: error: writer_words must be between 1 and 2, not 3$"),
    ("[engine]\nwriter_words = 2\n", r"^fpgacnn: error: writer_words 2 needs a beat of two input words: "
                                     r"stream_width 64 is 8 bytes, pin is 8$"),
    ("[engine]\nspare_bank = -1\n", r"^fpgacnn: error: spare_bank must be between 0 and 3, not -1$"),
    ("[engine]\nspare_bank = 4\n", r"^fpgacnn: error: spare_bank must be between 0 and 3, not 4$"),
    ("[engine]\nkmax = 2\nspare_bank = 3\n",
     r"^fpgacnn: error: spare_bank must be between 0 and 2, not 3$"),
    ("[engine]\nspare_bank = true\n", r"^fpgacnn: error: spare_bank must be an integer, not True$"),
    ("[engine]\nspare_bank = 1\npixel_pairs = 2\n",
     r"^fpgacnn: error: pixel_pairs must be between 0 and 1, not 2$"),
    ("[engine]\nspare_bank = 1\npixel_pairs = true\n",
     r"^fpgacnn: error: pixel_pairs must be an integer, not True$"),
    ("[engine]\npixel_pairs = 1\n",
     r"^fpgacnn: error: pixel_pairs 1 needs spare_bank >= 1 \(the two windows of a pair in one "
     r"read\) and deep_pipeline 1, not spare_bank 0 and deep_pipeline 1$"),
    ("[engine]\nspare_bank = 1\npixel_pairs = 1\ndeep_pipeline = 0\n",
     r"^fpgacnn: error: pixel_pairs 1 needs spare_bank >= 1 \(the two windows of a pair in one "
     r"read\) and deep_pipeline 1, not spare_bank 1 and deep_pipeline 0$"),
    # the default engine: 64 output channels in 8 tiles of pout 8
    ("[engine]\nparam_words = 7\n",
     r"^fpgacnn: error: param_words must be 0 \(one run's 8 output tiles\) or at least "
     r"max_out_channels / pout = 8, not 7$"),
    ("[engine]\nparam_words = -1\n",
     r"^fpgacnn: error: param_words must be between 0 and 4096, not -1$"),
    ("[engine]\nparam_words = 4097\n",
     r"^fpgacnn: error: param_words must be between 0 and 4096, not 4097$"),
    ("[engine]\nparam_words = 9\ndeep_pipeline = 0\n",
     r"^fpgacnn: error: param_words 9 \(more than one run's 8\) needs deep_pipeline 1, whose "
     r"runs keep their parameters resident$"),
    ("[engine]\npin = 4\nstream_width = 32\nwriter_words = 2\n",
     r"^fpgacnn: error: writer_words 2 needs a beat of two input words: stream_width 32 is 4 "
     r"bytes, pin is 4$"),
])
def test_bad_configuration_is_named(tmp_path, capsys, text, message):
    code, out, err = generate(tmp_path, text, capsys)
    assert code == 1
    assert err.count("\n") == 1
    assert re.match(message, err.strip()), err
    assert not (tmp_path / "out").exists()


def test_spare_bank_takes_0_to_kmax():
    assert EngineConfig().column_banks == 3
    assert EngineConfig(spare_bank=1).column_banks == 4
    assert EngineConfig(spare_bank=3).column_banks == 6
    assert EngineConfig(kmax=1, spare_bank=1).column_banks == 2
    assert EngineConfig(kmax=7, spare_bank=7).column_banks == 14


def test_pair_stride_is_the_spare_banks_with_pixel_pairs():
    # the largest stride a pixel-pair run takes (core.contract): one definition
    # for the compiler, the descriptor checks and the line buffer
    for spare in (1, 2, 3):
        assert engine_contract(EngineConfig(spare_bank=spare, pixel_pairs=1)).pair_stride == spare
        assert engine_contract(EngineConfig(spare_bank=spare)).pair_stride == 0


def test_pixel_pairs_take_0_and_1_and_count_both_windows():
    one = EngineConfig(spare_bank=1)
    two = EngineConfig(spare_bank=1, pixel_pairs=1)
    assert one.peak_macs_per_cycle == one.window_macs == two.window_macs == 576
    assert two.peak_macs_per_cycle == 2 * 576


def test_pair_writer_takes_a_beat_of_two_words():
    assert EngineConfig(pin=4, stream_width=64, writer_words=2).writer_words == 2
    assert EngineConfig(pin=2, stream_width=32, writer_words=2).writer_words == 2
    assert EngineConfig(pin=4, stream_width=32).writer_words == 1


def test_missing_config_file(tmp_path, capsys):
    code = main(["generate", "--config", str(tmp_path / "nope.toml"), "-o", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 1
    assert re.match(r"^fpgacnn: error: .*nope\.toml: no such configuration file$", err.strip())


def test_output_must_be_a_directory(tmp_path, capsys):
    (tmp_path / "out").write_text("")
    code, out, err = generate(tmp_path, SMALL, capsys)
    assert code == 1
    assert re.match(r"^fpgacnn: error: .*out: exists and is not a directory$", err.strip())


def test_output_option_is_required(capsys):
    with pytest.raises(SystemExit) as e:
        main(["generate"])
    assert e.value.code == 2
    assert "-o/--output" in capsys.readouterr().err


def test_verilog_needs_an_engine_config():
    from fpgacnn.hdl.verilog import engine_verilog
    with pytest.raises(TypeError, match=r"^config must be an EngineConfig, not 'pin=4'$"):
        engine_verilog("pin=4")
