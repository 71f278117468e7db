"""PipelinedMemory in the Amaranth simulator: a dict model of the memory, read two or three cycles later."""

import numpy as np
import pytest

from amaranth.sim import Simulator

from fpgacnn.hdl.tech.pipelined_memory import PipelinedMemory, part_depth


@pytest.mark.parametrize("width, depth, granularity, register_output", [
    (16, 700, None, False),     # one 1024-word part
    (16, 700, None, True),      # ... nothing to register: two cycles
    (16, 2500, 8, False),       # three parts, byte enables
    (16, 2500, 8, True),        # ... and the selected word registered: three cycles
    (64, 1300, 32, False),      # 512-word parts
    (8, 5, None, False),
])
@pytest.mark.parametrize("register_write", [False, True], ids=["write", "registered-write"])
def test_reads_later_what_was_written(width, depth, granularity, register_output, register_write):
    dut = PipelinedMemory(width, depth, granularity=granularity, register_output=register_output,
                          register_write=register_write)
    assert dut.latency == 2 + (register_output and dut.parts > 1)
    assert dut.write_latency == register_write
    lanes = width // (granularity or width)
    lane_bits = width // lanes
    assert dut.parts == -(-depth // part_depth(width))
    rng = np.random.default_rng(width + depth)
    model = {}
    reads = []  # (cycle of the address, expected word)
    got = []

    pending = []

    def land(w_addr, w_data, w_en):
        old = model.get(w_addr, 0)
        for lane in range(lanes):
            if w_en >> lane & 1:
                mask = ((1 << lane_bits) - 1) << (lane * lane_bits)
                old = (old & ~mask) | (w_data & mask)
        if w_en:
            model[w_addr] = old

    async def testbench(ctx):
        for cycle in range(600):
            w_addr = int(rng.integers(depth))
            w_data = int(rng.integers(1 << 62)) & ((1 << width) - 1)
            w_en = int(rng.integers(1 << lanes)) if rng.random() < 0.6 else 0
            written = list(model)
            r_addr = (written[int(rng.integers(len(written)))] if written and rng.random() < 0.7
                      else int(rng.choice([w_addr, int(rng.integers(depth))])))
            ctx.set(dut.w_addr, w_addr)
            ctx.set(dut.w_data, w_data)
            ctx.set(dut.w_en, w_en)
            ctx.set(dut.r_addr, r_addr)
            if r_addr in model:
                reads.append((cycle, model[r_addr]))   # before this cycle's write: not transparent
            else:
                reads.append((cycle, None))
            if cycle >= dut.latency:
                got.append(ctx.get(dut.r_data))
            await ctx.tick()
            # The write lands now, or a cycle later when registered.
            pending.append((w_addr, w_data, w_en))
            if len(pending) > register_write:
                land(*pending.pop(0))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(testbench)
    sim.run()
    checked = 0
    for (cycle, want), value in zip(reads, got):
        if want is not None:
            assert value == want, f"read issued at cycle {cycle}"
            checked += 1
    assert checked > 300
