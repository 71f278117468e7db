"""The program engine's memory reads (Amaranth simulator): the record fetch's
addresses on the read port, for a port as wide as ``pin`` (any ``pin``, a power
of two or not) and for one a beat wide where ``pin`` is narrower (R-aligned
reads, each client's word shifted to its low bytes)."""

import pytest
from amaranth.sim import Simulator

from fpgacnn.core.config import EngineConfig
from fpgacnn.core.memory_port import read_bytes
from fpgacnn.core.sequencer import build_sequencer_regmap, record_bytes
from fpgacnn.hdl.program.program_engine import ProgramEngine

from test_axi_lite import Manager

CONFIGS = {
    # pin 12: a word of three beats, R = pin, not a power of two.
    "pin12": EngineConfig(pin=12, pout=4, kmax=1, stream_width=32, max_width=4,
                          max_channels=12, max_out_channels=4),
    # pin 4 in 8-byte beats: R = 8, two words a read.
    "pin4-beat8": EngineConfig(pin=4, pout=4, kmax=1, stream_width=64, max_width=4,
                               max_channels=8, max_out_channels=4),
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_the_record_fetch_reads_the_record_at_its_address(name):
    config = CONFIGS[name]
    pin, r = config.pin, read_bytes(config)
    dut = ProgramEngine(config, outstanding=4)
    regs = build_sequencer_regmap(config)
    # The image on an R boundary (as the driver requires: 0x1800 is 512 * 12 and 768 * 8),
    # the table at pin word 7: for R = 8 half-way into a read.
    image, table = 0x1800, 7
    words = record_bytes(config) // pin
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
    # port is pin wide, at the R bytes around it where the port is wider.
    assert seen == [(image + (table + k) * pin) // r * r if r > pin else image + (table + k) * pin
                    for k in range(words)]
