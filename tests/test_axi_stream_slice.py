"""AXI4-Stream register slice (hdl/bus/axi_stream.py): order, no loss, full rate."""

import random

import pytest
from amaranth.sim import Simulator

from fpgacnn.hdl.bus.axi_stream import AXI4StreamRegisterSlice


def _run(beats, p_valid, p_ready, seed, cycles_limit=5000):
    dut = AXI4StreamRegisterSlice(16)
    rng = random.Random(seed)
    received, cycles = [], [0]

    async def source(ctx):
        for data, last in beats:
            ctx.set(dut.s_axis.tdata, data)
            ctx.set(dut.s_axis.tlast, last)
            while True:
                valid = rng.random() < p_valid
                ctx.set(dut.s_axis.tvalid, valid)
                await ctx.delay(1e-9)   # sample tready after the sink has set its side
                ready = ctx.get(dut.s_axis.tready)
                await ctx.tick()
                if valid and ready:
                    break
        ctx.set(dut.s_axis.tvalid, 0)

    async def sink(ctx):
        while len(received) < len(beats) and cycles[0] < cycles_limit:
            ready = rng.random() < p_ready
            ctx.set(dut.m_axis.tready, ready)
            await ctx.delay(1e-9)
            if ready and ctx.get(dut.m_axis.tvalid):
                received.append((ctx.get(dut.m_axis.tdata), ctx.get(dut.m_axis.tlast)))
            await ctx.tick()
            cycles[0] += 1

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(source)
    sim.add_testbench(sink)
    sim.run()
    return received, cycles[0]


@pytest.mark.parametrize("p_valid, p_ready", [(1.0, 1.0), (0.5, 1.0), (1.0, 0.3), (0.6, 0.6)])
@pytest.mark.parametrize("seed", [1, 2])
def test_beats_pass_in_order_under_back_pressure(p_valid, p_ready, seed):
    rng = random.Random(seed * 100)
    beats = [(rng.randrange(1 << 16), rng.random() < 0.2) for _ in range(200)]
    received, _ = _run(beats, p_valid, p_ready, seed)
    assert received == beats


def test_full_rate_with_one_cycle_of_latency():
    beats = [(i, i == 99) for i in range(100)]
    received, cycles = _run(beats, 1.0, 1.0, 0)
    assert received == beats
    assert cycles == len(beats) + 1
