"""The register map: derived from the configuration and the descriptor, exported consistently."""

import dataclasses
from dataclasses import fields
import subprocess
import shutil

import pytest

from fpgacnn.core.contract import engine_contract

from fpgacnn.core.config import EngineConfig
from fpgacnn.core.descriptor import DESCRIPTOR_FIELDS
from fpgacnn.core.regmap import (MAGIC, VERSION, RegisterMap, RegisterMapBuilder,
                                RegisterMapError, build_regmap)
from fpgacnn.core.errors import BackendError

CONFIG = EngineConfig(pin=4, pout=8, kmax=3, max_width=40, max_channels=24,
                      max_out_channels=16, stream_width=32, acc_width=24)


@pytest.fixture
def regs():
    return build_regmap(CONFIG)


def test_addresses_are_unique_aligned_and_fit(regs):
    addrs = [r.address for r in regs]
    assert len(set(addrs)) == len(addrs)
    assert all(a % 4 == 0 and a + 4 <= 1 << regs.addr_width for a in addrs)
    for group in ("id", "ctrl", "desc", "perf"):
        assert regs.group(group)[0].address % 64 == 0
    assert regs["magic"].address == 0


def test_id_rom_holds_every_parameter(regs):
    assert regs["magic"].value == MAGIC == int.from_bytes(b"FCNN", "little")
    # (2.6's registers, the fused block's, exist only on an engine with it: the
    # ROM of one without says 2.5 and holds no cfg_fused_blocks)
    assert regs.decode("version", regs["version"].value) == {"major": 2, "minor": 5}
    assert "cfg_fused_blocks" not in regs and CONFIG.fused_blocks == 0
    # (nor, with the default full-rate unit, 2.7's cfg_depthwise_pixels)
    assert "cfg_depthwise_pixels" not in regs and CONFIG.depthwise_pixels == 2
    for f in fields(EngineConfig):
        if f.name in ("fused_blocks", "depthwise_pixels"):
            continue
        reg = regs[f"cfg_{f.name}"]
        assert reg.access == "const"
        assert reg.value == getattr(CONFIG, f.name)


def test_descriptor_registers_follow_the_descriptor(regs):
    desc = regs.group("desc")
    assert [r.name for r in desc] == [f"desc_{f.name}" for f in DESCRIPTOR_FIELDS]
    supported = engine_contract(CONFIG).supported_fields
    for r, f in zip(desc, DESCRIPTOR_FIELDS):
        assert r.access == ("rw" if supported.get(f.name, True) else "const"), f.name
        (field,) = r.fields
        assert (field.width, field.signed) == (f.width, f.signed)


def test_control_status_and_counters(regs):
    assert regs["control"].access == "pulse"
    assert regs.encode("control", start=1) == 1
    assert regs.encode("control", soft_reset=1) == 2
    assert regs.decode("status", 3) == {"busy": 1, "done": 1, "error": 0, "pending": 0,
                                        "error_fields": 0}
    assert regs.decode("status", 0b10_1100) == {"busy": 0, "done": 0, "error": 1, "pending": 1,
                                                "error_fields": 0b10}
    for name in ("perf_busy_cycles", "perf_stall_in_cycles", "perf_stall_out_cycles"):
        assert regs[name].access == "ro" and regs[name].width == 32


def test_status_error_fields_follow_the_descriptor(regs):
    # Bit i of status.error_fields is DESCRIPTOR_FIELDS[i], as the gateware's check orders them.
    field = regs["status"].field("error_fields")
    assert (field.offset, field.width) == (4, len(DESCRIPTOR_FIELDS))
    assert regs["status"].access == "ro"


def test_version_2_moves_only_the_counters(regs):
    # 2.0 added the resident-weights fields (load_params, weight_base): the
    # descriptor's registers take a 128-byte block, so the counters moved
    # from 0xC0 to 0x100; everything else is where 1.1 had it. 2.1 added
    # depthwise after them; 2.2 the ID register cfg_writer_words, in the ID
    # block (0x38), which moves nothing; 2.3 cfg_spare_bank, the ID block's
    # last free word (0x3C); 2.4 desc_pixel_pairs after depthwise, and
    # cfg_pixel_pairs in a block of its own after the counters (0x140), so
    # that the control block stays where it was; 2.5 desc_param_base after
    # pixel_pairs and cfg_param_words after cfg_pixel_pairs. 2.6 the fused
    # block's registers, on engines with it only (tests/test_fused_contract.py).
    assert VERSION == (2, 6)
    assert regs.address("cfg_writer_words") == 0x38
    assert regs.address("cfg_spare_bank") == 0x3C
    assert regs.address("desc_pixel_pairs") == 0xCC
    assert regs.address("cfg_pixel_pairs") == 0x140
    assert regs.address("desc_param_base") == 0xD0
    assert regs.address("cfg_param_words") == 0x144
    assert [(r, regs.address(r)) for r in ("control", "status", "desc_in_h", "desc_load_weights",
                                           "desc_load_params", "desc_weight_base",
                                           "desc_depthwise", "perf_busy_cycles")] \
        == [("control", 0x40), ("status", 0x44), ("desc_in_h", 0x80), ("desc_load_weights", 0xBC),
            ("desc_load_params", 0xC0), ("desc_weight_base", 0xC4), ("desc_depthwise", 0xC8),
            ("perf_busy_cycles", 0x100)]
    assert [(f.name, f.offset) for f in regs["status"].fields][:2] == [("busy", 0), ("done", 1)]


def test_compact_engines_have_no_resident_weight_registers():
    """On the compact arrangement the two fields are constants 0 (no flip-flops):
    writes do nothing, reads give 0, and the contract's range is 0..0."""
    from fpgacnn.core.config import EngineConfig
    from fpgacnn.core.contract import engine_contract
    from fpgacnn.core.regmap import build_regmap
    compact = EngineConfig(pin=1, pout=1, kmax=3, deep_pipeline=0, stream_width=32,
                           max_width=16, max_channels=8, max_out_channels=8)
    regs = build_regmap(compact)
    for name in ("desc_load_params", "desc_weight_base"):
        assert regs[name].access == "const" and regs.decode(name, regs[name].value)["value"] == 0
    assert engine_contract(compact).ranges["weight_base"] == (0, 0)
    assert engine_contract(compact).ranges["load_params"] == (0, 0)


def test_param_base_is_a_register_only_with_a_deeper_parameter_buffer():
    """param_base is a constant 0 (range 0..0) where the parameter buffer holds one
    run's output tiles (param_words 0, the default); with more words and resident
    weights it is a register ranging over the buffer's words."""
    import dataclasses
    from fpgacnn.core.config import EngineConfig
    from fpgacnn.core.contract import engine_contract
    from fpgacnn.core.regmap import build_regmap
    base = EngineConfig(pin=4, pout=4, kmax=3, stream_width=32, max_width=16, max_channels=16,
                        max_out_channels=16)
    for config, access, rng in ((base, "const", (0, 0)),
                                (dataclasses.replace(base, param_words=4), "const", (0, 0)),
                                (dataclasses.replace(base, param_words=20), "rw", (0, 19))):
        assert build_regmap(config)["desc_param_base"].access == access
        assert engine_contract(config).ranges["param_base"] == rng
        assert build_regmap(config)["cfg_param_words"].value == config.param_words


def test_signed_fields_round_trip(regs):
    for v in (-128, -3, 0, 127):
        word = regs.encode("desc_x_zp", v)
        assert 0 <= word < 256
        assert regs.decode("desc_x_zp", word) == {"value": v}


def test_field_range_is_checked(regs):
    with pytest.raises(RegisterMapError, match=r"^field 'value' holds -128\.\.127, not 128$"):
        regs.encode("desc_x_zp", 128)
    with pytest.raises(RegisterMapError, match=r"^field 'value' holds 0\.\.15, not -1$"):
        regs.encode("desc_stride", -1)
    with pytest.raises(RegisterMapError, match=r"^register 'control' has no field 'go' "):
        regs.encode("control", go=1)
    with pytest.raises(RegisterMapError, match=r"^no register named 'nope'$"):
        regs["nope"]


def test_json_round_trip(regs):
    again = RegisterMap.from_json(regs.to_json())
    assert list(again) == list(regs)
    assert again.config == CONFIG
    assert again.to_json() == regs.to_json()


def test_malformed_json_is_refused():
    with pytest.raises(RegisterMapError, match=r"^not an fpgacnn register map"):
        RegisterMap.from_json('{"format": "other"}')
    with pytest.raises(RegisterMapError, match=r"^malformed register map JSON"):
        RegisterMap.from_json("[1, 2")


def test_read_config_checks_the_rom(regs):
    rom = {r.address: r.value for r in regs if r.access == "const"}
    assert regs.read_config(rom.__getitem__) == CONFIG

    bad_magic = {**rom, 0: 0xDEADBEEF}
    with pytest.raises(BackendError, match=r"^no fpgacnn engine at this address: ID magic is 0xdeadbeef"):
        regs.read_config(bad_magic.__getitem__)

    bad_version = dict(rom)
    bad_version[regs.address("version")] = regs.encode("version", major=VERSION[0] + 1, minor=0)
    with pytest.raises(BackendError, match=rf"^engine register map version {VERSION[0] + 1}\.0 "):
        regs.read_config(bad_version.__getitem__)

    bad_param = dict(rom)
    bad_param[regs.address("cfg_pin")] = 0
    with pytest.raises(BackendError, match=r"^pin must be between 1 and 64, not 0$"):
        regs.read_config(bad_param.__getitem__)

    # a parameter of the second ID block (after the counters) is read too
    pairs = dataclasses.replace(CONFIG, spare_bank=1, pixel_pairs=1)
    pair_regs = build_regmap(pairs)
    pair_rom = {r.address: r.value for r in pair_regs if r.access == "const"}
    assert pair_regs["cfg_pixel_pairs"].group == "id_more"
    assert pair_regs.read_config(pair_rom.__getitem__) == pairs
    assert regs.read_config(pair_rom.__getitem__) == pairs


def test_builder_rejects_bad_declarations():
    b = RegisterMapBuilder()
    with pytest.raises(RegisterMapError, match=r"^begin_group\(\) before add\(\)$"):
        b.add("x", "rw", [("value", 8)])
    b.begin_group("g")
    b.add("x", "rw", [("value", 8)])
    with pytest.raises(RegisterMapError, match=r"^register 'x' declared twice$"):
        b.add("x", "rw", [("value", 8)])
    with pytest.raises(RegisterMapError, match=r"^register 'y': fields take 33 bits, more than 32$"):
        b.add("y", "rw", [("a", 16), ("b", 17)])
    with pytest.raises(RegisterMapError, match=r"^const register 'z' needs a value$"):
        b.add("z", "const", [("value", 8)])
    with pytest.raises(RegisterMapError, match=r"^register 'w': access must be one of"):
        b.add("w", "rw1c", [("value", 8)])
    with pytest.raises(RegisterMapError, match=r"^register name must be a lower-case identifier, not 'Q'$"):
        b.add("Q", "rw", [("value", 8)])


def test_builder_refuses_overflowing_the_address_space():
    b = RegisterMapBuilder(addr_width=4)
    b.begin_group("g")
    for i in range(4):
        b.add(f"r{i}", "rw", [("value", 8)])
    with pytest.raises(RegisterMapError, match=r"^register 'r4' at 0x10 does not fit a 4-bit address space$"):
        b.add("r4", "rw", [("value", 8)])


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_c_header_compiles_and_agrees(regs, tmp_path):
    (tmp_path / "fpgacnn_regs.h").write_text(regs.c_header())
    checks = [
        ("FPGACNN_MAGIC", MAGIC),
        ("FPGACNN_REG_MAGIC_VALUE", MAGIC),
        ("FPGACNN_REG_CONTROL", regs.address("control")),
        ("FPGACNN_REG_CONTROL_SOFT_RESET_MASK", regs["control"].field("soft_reset").mask),
        ("FPGACNN_REG_STATUS_DONE_SHIFT", regs["status"].field("done").offset),
        ("FPGACNN_REG_STATUS_ERROR_MASK", regs["status"].field("error").mask),
        ("FPGACNN_REG_STATUS_ERROR_FIELDS_SHIFT", 4),
        ("FPGACNN_REG_DESC_X_ZP", regs.address("desc_x_zp")),
        ("FPGACNN_REG_DESC_X_ZP_WIDTH", 8),
        ("FPGACNN_REG_CFG_PIN_VALUE", CONFIG.pin),
        ("FPGACNN_REG_PERF_STALL_OUT_CYCLES", regs.address("perf_stall_out_cycles")),
    ]
    body = "\n".join(f'    printf("%lu\\n", (unsigned long)({name}));' for name, _ in checks)
    (tmp_path / "main.c").write_text(
        '#include <stdio.h>\n#include "fpgacnn_regs.h"\n'
        f"int main(void) {{\n{body}\n    return 0;\n}}\n")
    subprocess.run(["cc", "-Wall", "-Werror", "-o", str(tmp_path / "main"), str(tmp_path / "main.c")],
                   check=True, cwd=tmp_path)
    out = subprocess.run([str(tmp_path / "main")], check=True, capture_output=True, text=True).stdout
    assert [int(x) for x in out.split()] == [v for _, v in checks]
