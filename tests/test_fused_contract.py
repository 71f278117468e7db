"""The fused depthwise + pointwise block's configuration, contract, descriptor and registers.

Step 3, first increment, of docs/engine.md's "The fused depthwise + pointwise
block": ``EngineConfig.fused_blocks``, the contract's view of the block (read
from :mod:`fpgacnn.core.fused_block`), the descriptor fields of a fused run
(register map 2.6, on engines with the block only) and
:func:`~fpgacnn.core.contract.descriptor_violations` at, under and over each
of the block's limits, and the gateware's DescriptorCheck against it (the
datapath and the engine top: tests/test_fused_core.py).
"""

import dataclasses
import math

import numpy as np
import pytest

from fpgacnn.core.config import ConfigError, EngineConfig
from fpgacnn.core.contract import descriptor_violations, engine_contract
from fpgacnn.core.descriptor import DESCRIPTOR_FIELDS, FUSED_DESCRIPTOR_FIELDS, complete_descriptor
from fpgacnn.core.fused_block import (depthwise_memory_words, depthwise_unit_latency,
                                      depthwise_word_bytes, pair_buffer_shape, pointwise_tiles)
from fpgacnn.core.regmap import VERSION, build_regmap, rom_version

#: The step's test engine: pin 4, pout 4, kmax 3, 64-bit beats, pairs at strides 1 and 2.
PAIRS = EngineConfig(pin=4, pout=4, kmax=3, stream_width=64, max_width=16, max_channels=32,
                     max_out_channels=16, spare_bank=2, pixel_pairs=1)
FUSED = dataclasses.replace(PAIRS, fused_blocks=2)


def fused_desc(**changes):
    """A fused block that fits :data:`FUSED`: 32 -> 16 channels, 3x3 stride 1, 8 x 8."""
    desc = dict(in_h=8, in_w=8, ci_tiles=8, co_tiles=4, out_h=8, out_w=8, stride=1, pad_top=1,
                pad_left=1, batch=1, x_zp=-3, y_zp=5, clamp_lo=-128, clamp_hi=127, pool=0,
                load_weights=1, pixel_pairs=1, fused=1, dw_base=0, dw_y_zp=2, dw_clamp_lo=-128,
                dw_clamp_hi=127)
    desc.update(changes)
    return desc


def fields_of(violations):
    return [field for field, _ in violations]


def test_fused_blocks_is_off_by_default_and_needs_pixel_pairs():
    assert EngineConfig().fused_blocks == 0
    with pytest.raises(ConfigError, match=r"^fused_blocks 1 needs pixel_pairs 1 \(the depthwise "
                                          r"unit takes the line buffer's window pairs\), not "
                                          r"pixel_pairs 0$"):
        dataclasses.replace(PAIRS, pixel_pairs=0, fused_blocks=1)
    with pytest.raises(ConfigError, match=r"^fused_blocks must be between 0 and 64, not 65$"):
        dataclasses.replace(PAIRS, fused_blocks=65)
    with pytest.raises(ConfigError, match=r"^fused_blocks must be an integer, not True$"):
        dataclasses.replace(PAIRS, fused_blocks=True)
    assert dataclasses.replace(PAIRS, fused_blocks=64).fused_blocks == 64


def test_contract_refuses_an_accumulator_narrower_than_a_depthwise_sum():
    narrow = dataclasses.replace(FUSED, acc_width=19)
    with pytest.raises(ConfigError, match=r"^the depthwise unit's sums of 3x3 products need "
                                          r"acc_width >= 20, not 19$"):
        engine_contract(narrow)
    assert engine_contract(dataclasses.replace(FUSED, acc_width=20)).fused is not None
    # without the block the accumulator is the array's business only
    assert engine_contract(dataclasses.replace(PAIRS, acc_width=19)).fused is None


def test_contract_reads_the_block_from_fused_block():
    c = engine_contract(FUSED)
    assert c.fused.pair_buffer == pair_buffer_shape(FUSED)
    assert c.fused.max_tiles == math.ceil(32 / 4) == 8
    mem = c.fused.depthwise_memory
    assert (mem.words, mem.word_bytes) == (depthwise_memory_words(FUSED),
                                           depthwise_word_bytes(FUSED)) == (2 * 8, 4 * (9 + 8))
    assert c.latency.depthwise_unit == depthwise_unit_latency(FUSED) == 7
    assert c.depthwise_beats == math.ceil(68 / 8)
    assert c.descriptor_fields == DESCRIPTOR_FIELDS + FUSED_DESCRIPTOR_FIELDS
    assert c.ranges["dw_base"] == (0, 15) and c.ranges["fused"] == (0, 1)
    # the block's rows in the contract's tables
    table = c.markdown()
    assert "| depthwise memory | 16 | 68 | 1 | 1,088 |" in table
    assert "| `dw_base` | 0..15 | a word of the depthwise memory of 16 |" in table
    assert "| depthwise unit (window pair to sums) | 7 |" in table
    # the depthwise half's requantization: the requantizer's, on any lanes
    assert c.latency.depthwise_requant == c.latency.requantizer == 9
    assert "| depthwise requantization (sums to the pair buffer) | 9 |" in table


@pytest.mark.parametrize("config", [EngineConfig(), PAIRS], ids=["default", "pairs"])
def test_engines_without_the_block_have_none_of_it(config):
    c = engine_contract(config)
    assert c.fused is None and c.descriptor_fields == DESCRIPTOR_FIELDS
    assert c.latency.depthwise_unit == c.latency.depthwise_requant == c.depthwise_beats == 0
    for f in FUSED_DESCRIPTOR_FIELDS:
        assert c.ranges[f.name] == (0, 0)
        assert c.range_reason(f.name) == "the engine was generated without fused_blocks"
    assert "depthwise memory" not in c.markdown() and "`fused`" not in c.markdown()
    # a fused descriptor is refused on the field, whatever else it says
    # (on the default engine pixel_pairs is out of its range too)
    assert fields_of(descriptor_violations(config, fused_desc(dw_y_zp=0, dw_clamp_lo=0,
                                                              dw_clamp_hi=0)))[-1] == "fused"
    regs = build_regmap(config)
    assert rom_version(config) == (2, 5)
    assert not any(r.name.startswith(("desc_fused", "desc_dw_")) for r in regs)
    assert "cfg_fused_blocks" not in regs
    assert regs["status"].field("error_fields").width == len(DESCRIPTOR_FIELDS)


def test_register_map_2_6_on_an_engine_with_the_block():
    regs = build_regmap(FUSED)
    assert VERSION == rom_version(FUSED) == (2, 6) == regs.version
    assert regs.decode("version", regs["version"].value) == {"major": 2, "minor": 6}
    desc = regs.group("desc")
    assert [r.name for r in desc] == [f"desc_{f.name}" for f in DESCRIPTOR_FIELDS
                                      + FUSED_DESCRIPTOR_FIELDS]
    # after desc_param_base (0xD0), inside the descriptor's 128-byte block
    assert [(r.name, r.address, r.access) for r in desc[len(DESCRIPTOR_FIELDS):]] == [
        ("desc_fused", 0xD4, "rw"), ("desc_dw_base", 0xD8, "rw"), ("desc_dw_y_zp", 0xDC, "rw"),
        ("desc_dw_clamp_lo", 0xE0, "rw"), ("desc_dw_clamp_hi", 0xE4, "rw")]
    assert desc[-1].address < 0x100 == regs.address("perf_busy_cycles")
    assert regs.decode("desc_dw_y_zp", regs.encode("desc_dw_y_zp", -7)) == {"value": -7}
    field = regs["status"].field("error_fields")
    assert (field.offset, field.width) == (4, len(DESCRIPTOR_FIELDS) + len(FUSED_DESCRIPTOR_FIELDS))
    assert field.offset + field.width <= 32
    assert regs["cfg_fused_blocks"].group == "id_more" and regs["cfg_fused_blocks"].value == 2
    assert regs.address("cfg_fused_blocks") == regs.address("cfg_param_words") + 4
    rom = {r.address: r.value for r in regs if r.access == "const"}
    assert regs.read_config(rom.__getitem__) == FUSED
    # every 2.5 register where it was
    old = build_regmap(PAIRS)
    assert all(regs.address(r.name) == r.address for r in old)
    assert "#define FPGACNN_VERSION_MINOR 6" in regs.c_header()
    assert "#define FPGACNN_VERSION_MINOR 5" in old.c_header()


def test_a_fused_block_at_the_limits_fits():
    c = engine_contract(FUSED)
    assert descriptor_violations(FUSED, fused_desc()) == []
    # the pair buffer's every tile, the depthwise memory's last block, strides up to the pairs'
    assert descriptor_violations(FUSED, fused_desc(ci_tiles=8, dw_base=8)) == []
    assert descriptor_violations(FUSED, fused_desc(stride=2, in_h=16, in_w=16)) == []
    # the pointwise weights, co_tiles * ceil(ci_tiles / 9) words, up to the buffer's last word
    top = c.weights.words - pointwise_tiles(FUSED, 8) * 4
    assert descriptor_violations(FUSED, fused_desc(weight_base=top)) == []
    assert c.weight_words(fused_desc()) == 4 * 1
    # an unfused run on the same engine still fits as before
    plain = {k: v for k, v in fused_desc().items()
             if k not in {f.name for f in FUSED_DESCRIPTOR_FIELDS}}
    assert descriptor_violations(FUSED, plain) == descriptor_violations(PAIRS, plain) == []


@pytest.mark.parametrize("changes, field, reason", [
    (dict(ci_tiles=9), "ci_tiles",
     r"^a fused block of 9 input tiles exceeds the pair buffer's 8 a pixel \(max_channels 32 / "
     r"pin 4\)$"),
    (dict(dw_base=9), "dw_base",
     r"^8 depthwise words from word 9 exceed the depthwise memory's 16$"),
    (dict(dw_base=16), "dw_base", r"^dw_base = 16 is outside the engine's range 0\.\.15 "),
    (dict(pixel_pairs=0), "fused",
     r"^a fused block takes the depthwise unit's window pairs: pixel_pairs must be 1 and "
     r"depthwise 0, not 0 and 0$"),
    (dict(depthwise=1, co_tiles=4, ci_tiles=4), "fused", r"^a fused block takes the depthwise "),
    (dict(stride=3, in_h=24, in_w=24), "pixel_pairs", r"^pixel pairs are two adjacent output "
     r"pixels a window issue: not with stride 3 \(at most 2"),
    (dict(pool=1), "pixel_pairs", r"^pixel pairs .*: not with a fused max-pool$"),
    (dict(weight_base=29), "weight_base",
     r"^4 x 1 pointwise weight words from word 29 exceed the weight buffer's 32$"),
    (dict(fused=2), "fused", r"^fused = 2 is outside the engine's range 0\.\.1"),
    (dict(dw_y_zp=128), "dw_y_zp", r"^dw_y_zp = 128 is outside the engine's range -128\.\.127"),
])
def test_a_fused_block_over_a_limit_is_refused_naming_it(changes, field, reason):
    found = dict(reversed(descriptor_violations(FUSED, fused_desc(**changes))))
    assert field in found, found
    assert pytest.importorskip("re").search(reason, found[field]), found[field]


def test_the_depthwise_memory_alone_refuses_on_ci_tiles():
    one = dataclasses.replace(PAIRS, fused_blocks=1, max_channels=36)  # 9 tiles, 9 words
    assert engine_contract(one).fused.depthwise_memory.words == 9
    assert descriptor_violations(one, fused_desc(ci_tiles=9)) == []
    assert fields_of(descriptor_violations(one, fused_desc(ci_tiles=9, dw_base=1))) == ["dw_base"]


def test_a_fused_run_streams_its_depthwise_words_with_the_weights():
    c = engine_contract(FUSED)
    b = FUSED.stream_bytes
    loaded = c.input_nbytes(fused_desc())
    images = c.image_beats(8, 8, 8) * b
    assert loaded == (4 * c.param_beats + 4 * c.weight_beats + 8 * c.depthwise_beats) * b + images
    assert c.input_nbytes(fused_desc(load_weights=0, load_params=1)) == 4 * c.param_beats * b \
        + images
    assert c.input_nbytes(fused_desc(load_weights=0)) == images


def random_fused_descriptor(config, rng):
    """A fused block's descriptor near the block's limits, now and then with a field of
    the block or the pairs out of range or against a rule."""
    c = engine_contract(config)
    fb = c.fused
    ci = int(rng.choice([1, 2, fb.max_tiles, fb.max_tiles + 1, c.max_ci_tiles,
                         rng.integers(1, c.max_ci_tiles + 1)]))
    words = fb.depthwise_memory.words
    d = fused_desc(ci_tiles=ci, co_tiles=int(rng.integers(1, c.max_co_tiles + 1)),
                   dw_base=int(rng.choice([0, 1, words - ci - 1, words - ci, words - ci + 1,
                                           words - 1, words, rng.integers(0, 1 << 16)])),
                   stride=int(rng.integers(1, config.kmax + 1)), in_h=16, in_w=16,
                   pool=int(rng.random() < 0.2), pixel_pairs=int(rng.random() < 0.85),
                   depthwise=int(rng.random() < 0.15), fused=int(rng.random() < 0.9))
    d["dw_base"] = max(0, d["dw_base"])
    if d["depthwise"] and rng.random() < 0.5:
        d["co_tiles"] = min(ci, c.max_co_tiles)
    wwords = c.weight_words(d)
    d["weight_base"] = int(max(0, rng.choice([0, c.weights.words - wwords,
                                              c.weights.words - wwords + 1,
                                              rng.integers(0, c.weights.words + 2)])))
    for name in ("dw_y_zp", "dw_clamp_lo", "dw_clamp_hi"):
        d[name] = int(rng.integers(-128, 128))
    if rng.random() < 0.1:
        d["fused"] = 1  # (a 1-bit register: always in range)
    return d


def test_descriptor_check_agrees_on_fused_descriptors():
    """DescriptorCheck of an engine with the block flags exactly the fields
    descriptor_violations names, over the block's rules and bases."""
    from amaranth.sim import Simulator
    from fpgacnn.hdl.datapath.descriptor_check import DescriptorCheck
    dut = DescriptorCheck(FUSED)
    fields = engine_contract(FUSED).descriptor_fields
    assert len(dut.fields) == len(fields) == len(DESCRIPTOR_FIELDS) + 5
    rng = np.random.default_rng(17)
    descs = [random_fused_descriptor(FUSED, rng) for _ in range(300)]
    seen = {field for d in descs for field, _ in descriptor_violations(FUSED, d)}
    assert {"fused", "ci_tiles", "dw_base", "weight_base", "pixel_pairs"} <= seen, seen
    assert any(not descriptor_violations(FUSED, d) for d in descs)
    mismatches = []

    async def bench(ctx):
        for d in descs:
            full = complete_descriptor(d, fields)
            for f in fields:
                ctx.set(dut.desc[f.name], full[f.name])
            ctx.set(dut.written, 1)
            ctx.set(dut.ci_tiles_written, 1)
            await ctx.tick()
            ctx.set(dut.written, 0)
            ctx.set(dut.ci_tiles_written, 0)
            while not ctx.get(dut.ready):
                await ctx.tick()
            want = {name for name, _ in descriptor_violations(FUSED, d)}
            word = ctx.get(dut.fields)
            got = {f.name for i, f in enumerate(fields) if word >> i & 1}
            if got != want or ctx.get(dut.error) != bool(want):
                mismatches.append((d, sorted(want), sorted(got)))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert not mismatches, f"{len(mismatches)} of {len(descs)}; first: {mismatches[0]}"


def test_a_driver_reads_the_block_from_a_2_6_rom_with_a_map_without_it():
    # The driver opens a board with the default map (no cfg_fused_blocks) and reads
    # the ROM: a 2.6 engine's parameter is read where 2.6 places it.
    rom = {r.address: r.value for r in build_regmap(FUSED) if r.access == "const"}
    assert build_regmap(EngineConfig()).read_config(lambda a: rom.get(a, 0)) == FUSED
    plain = {r.address: r.value for r in build_regmap(PAIRS) if r.access == "const"}
    assert build_regmap(EngineConfig()).read_config(lambda a: plain.get(a, 0)) == PAIRS


def test_register_map_2_7_on_an_engine_with_the_half_rate_unit():
    """``cfg_depthwise_pixels`` (1) after ``cfg_fused_blocks``, every 2.6 register where it
    was, the ROM saying 2.7; read back with its own map and with the default one."""
    half = dataclasses.replace(FUSED, depthwise_pixels=1)
    regs, full = build_regmap(half), build_regmap(FUSED)
    assert rom_version(half) == (2, 7) == regs.version
    assert regs["cfg_depthwise_pixels"].value == 1
    assert regs.address("cfg_depthwise_pixels") == regs.address("cfg_fused_blocks") + 4
    assert [(r.name, r.address) for r in full] == [
        (r.name, r.address) for r in regs if r.name != "cfg_depthwise_pixels"]
    rom = {r.address: r.value for r in regs if r.access == "const"}
    assert regs.read_config(rom.__getitem__) == half
    assert build_regmap(EngineConfig()).read_config(lambda a: rom.get(a, 0)) == half
    # a 2.6 engine's ROM has none: the full-rate unit
    old = {r.address: r.value for r in full if r.access == "const"}
    assert build_regmap(half).read_config(lambda a: old.get(a, 0)) == FUSED


@pytest.mark.parametrize("check", [True, False])
def test_a_driver_refuses_a_fused_field_on_an_engine_without_the_registers(check):
    """``EngineDriver.run_layer`` refuses before it writes anything (check=False too:
    the engine has no register to refuse it by), one line naming the layer and the
    field, through the one rule of ``core.sequencer.engine_descriptor``."""
    from fpgacnn.core.errors import BackendError
    from fpgacnn.host.engine_driver import EngineDriver
    rom = {r.address: r.value for r in build_regmap(PAIRS) if r.access == "const"}

    class RomOnly:  # answers the ID ROM; any write would be a run begun
        def mmio_read(self, addr, timeout=None):
            return rom.get(addr, 0)

        def mmio_write(self, addr, value, timeout=None):
            raise AssertionError(f"write to {addr:#x} before the refusal")

    driver = EngineDriver(RomOnly(), expected=PAIRS)
    with pytest.raises(BackendError, match=r"^layer 'blk': the engine has no descriptor field "
                                           r"fused, dw_base, dw_y_zp, dw_clamp_lo, dw_clamp_hi "
                                           r"\(generated without fused_blocks\)$"):
        driver.run_layer(fused_desc(dw_base=1), b"", 0, timeout=1.0, name="blk", check=check)
