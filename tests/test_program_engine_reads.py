"""The program engine's memory reads (Amaranth simulator): the record fetch's
addresses on the read port, for a port as wide as ``pin`` (any ``pin``, a power
of two or not) and for one a beat wide where ``pin`` is narrower (R-aligned
reads, each client's word shifted to its low bytes), and the record those reads
assemble, a word a read or R bytes a read (on an engine with the fused block,
its five more descriptor words too)."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from fpgacnn.core.config import EngineConfig
from fpgacnn.core.memory_port import read_bytes
from fpgacnn.core.regmap import build_regmap
from fpgacnn.core.sequencer import (RECORD_ENGINE, build_sequencer_regmap, descriptor_words,
                                    record_bytes, record_fields, record_word)
from fpgacnn.hdl.program.program_engine import ProgramEngine

from test_axi_lite import Manager

CONFIGS = {
    # pin 12: a word of three beats, R = pin, not a power of two.
    "pin12": EngineConfig(pin=12, pout=4, kmax=1, stream_width=32, max_width=4,
                          max_channels=12, max_out_channels=4),
    # pin 4 in 8-byte beats: R = 8, two words a read.
    "pin4-beat8": EngineConfig(pin=4, pout=4, kmax=1, stream_width=64, max_width=4,
                               max_channels=8, max_out_channels=4),
    # the fused block (register map 2.6): a record of 70 words, 26 descriptor registers
    "fused": EngineConfig(pin=4, pout=4, kmax=3, stream_width=64, max_width=4,
                          max_channels=8, max_out_channels=4, spare_bank=2, pixel_pairs=1,
                          fused_blocks=1),
}


@pytest.mark.parametrize("table", [7, 8])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_the_record_fetch_reads_the_record_at_its_address(name, table):
    config = CONFIGS[name]
    pin, r = config.pin, read_bytes(config)
    dut = ProgramEngine(config, outstanding=4)
    regs = build_sequencer_regmap(config)
    # The image on an R boundary (as the driver requires: 0x1800 is 512 * 12 and 768 * 8),
    # the table at pin word 7 (for R = 8 half-way into a read) or 8 (on a read's
    # boundary, as the host places every table: the record is fetched R bytes a read).
    image = 0x1800
    wide = r > pin and table * pin % r == 0
    assert record_bytes(config) % r == 0  # a record is whole reads
    words = record_bytes(config) // (r if wide else pin)
    seen = []

    async def bench(ctx):
        host = Manager(ctx, dut.s_axil)
        await host.write(regs.address("seq_memory"), image)
        await host.write(regs.address("seq_table"), table)
        await host.write(regs.address("seq_range"), regs.encode("seq_range", first=0, count=1))
        await host.write(regs.address("seq_control"), regs.encode("seq_control", start=1))
        ctx.set(dut.mem_rd.ready, 1)
        for _ in range(20 * words):
            if ctx.get(dut.mem_rd.valid):
                seen.append(ctx.get(dut.mem_rd.addr))
            await ctx.tick()
            if len(seen) == words:
                break

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    # Each of the record's pin words read once, in order: at its own address where the
    # port is pin wide, at the R bytes around it where the port is wider; on an R-aligned
    # table each R bytes once.
    if wide:
        assert seen == [image + table * pin + k * r for k in range(words)]
    else:
        assert seen == [(image + (table + k) * pin) // r * r if r > pin
                        else image + (table + k) * pin for k in range(words)]


@pytest.mark.parametrize("table", [7, 8])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_the_record_fetch_assembles_the_record_read(name, table):
    """The record the sequencer fetched (a word a read, or R bytes a read from an
    R-aligned table) is the one in memory: an engine record whose descriptor the
    engine refuses stops the sequencer with ``error`` at record 0, and the engine's
    descriptor registers then hold the record's descriptor words, random bits
    included (those of a field the engine has), and nothing of the words around
    them. (The pixel reader starts on the record's random fields as the sequencer
    decodes it, before the engine judges the descriptor: its reads past the
    memory here get random bytes, and the refusal clears it and drains them.)"""
    config = CONFIGS[name]
    pin, r = config.pin, read_bytes(config)
    dut = ProgramEngine(config, outstanding=4)
    seq_regs, regs = build_sequencer_regmap(config), build_regmap(config)
    rng = np.random.default_rng(table)
    image = 0x1800
    record = rng.integers(0, 1 << 32, len(record_fields(config)),
                          dtype=np.uint64).astype("<u4")
    record[record_word("op")] = RECORD_ENGINE
    # past the engine's widest row, whatever the other words say: refused
    at_in_w = record_word("desc_in_w")
    record[at_in_w] = (int(record[at_in_w]) & 0xFFFF_0000) | (config.max_width + 1)
    # no fused Add: with a fused block on the vector unit's lanes the sequencer would
    # refuse the pair itself, before writing the descriptor (core.sequencer.lanes_conflict)
    at_add = record_word("add_enable")
    record[at_add] = int(record[at_add]) & ~1
    memory = rng.integers(0, 256, 64 * r, dtype=np.int64).astype(np.uint8)  # the neighbours
    start = table * pin
    memory[start:start + 4 * len(record)] = record.view(np.uint8)
    result = {}

    async def memory_model(ctx):
        owed, cycle = [], 0  # (cycle the response is presented from, its data)
        ctx.set(dut.mem_rd.ready, 1)
        while True:
            due = bool(owed) and owed[0][0] <= cycle
            ctx.set(dut.mem_rdata.valid, due)
            if due:
                ctx.set(dut.mem_rdata.data, owed[0][1])
            taken = due and ctx.get(dut.mem_rdata.ready)
            if ctx.get(dut.mem_rd.valid):
                at = (ctx.get(dut.mem_rd.addr) - image) % (1 << 32)
                if at <= memory.size - r:
                    assert at % r == 0
                    data = int.from_bytes(memory[at:at + r].tobytes(), "little")
                else:
                    data = int.from_bytes(rng.bytes(r), "little")
                owed.append((cycle + 3, data))
            await ctx.tick()
            if taken:
                owed.pop(0)
            cycle += 1

    async def bench(ctx):
        host = Manager(ctx, dut.s_axil)
        await host.write(seq_regs.address("seq_memory"), image)
        await host.write(seq_regs.address("seq_table"), table)
        await host.write(seq_regs.address("seq_range"),
                         seq_regs.encode("seq_range", first=0, count=1))
        await host.write(seq_regs.address("seq_control"),
                         seq_regs.encode("seq_control", start=1))
        for _ in range(100):
            status = seq_regs.decode("seq_status", await host.read(
                seq_regs.address("seq_status")))
            if not status["busy"]:
                break
        result["status"] = status
        result["desc"] = {f.name: await host.read(regs.address(f"desc_{f.name}"))
                          for f, _ in descriptor_words(config)}

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(memory_model, background=True)
    sim.add_testbench(bench)
    sim.run()
    assert result["status"]["error"] and result["status"]["index"] == 0, result["status"]
    for f, at in descriptor_words(config):
        name = f"desc_{f.name}"
        if regs[name].access == "const":  # a field this engine does not have
            continue
        assert at == record_word(name, config)
        assert regs.decode(name, result["desc"][f.name]) == regs.decode(
            name, int(record[at])), f.name
