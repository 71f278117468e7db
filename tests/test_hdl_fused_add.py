"""The fused Add (issue 16): a residual Add done on the pixel writer's writes on their
way to memory, bit-exact with the reference Add.

Amaranth simulator, the stage with the vector unit whose lanes it computes on
(idle, as in the program engine). Random writes (unit addresses, bytes, strobes) come in
as the pixel writer gives them, with random pauses; a memory model holding
operand b answers the stage's R-byte reads after a latency, with random
pauses of requests and responses; the memory takes the writes with random
back-pressure. Every write out must be the write in, its bytes
:func:`fpgacnn.host.integer_ops.add` of its bytes and b's (the Add's
integers: docs/semantics.md), in order, with the same address and strobes;
``done`` comes once, after the last. With ``enable`` clear, the writes pass
as they come, in the same cycle.
"""

from collections import deque

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from amaranth.hdl import Elaboratable, Module
from amaranth.lib import wiring
from amaranth.sim import Simulator

from fpgacnn.core.fused_add_fields import fused_add_layout, fused_add_unit, has_fused_add
from fpgacnn.core.memory_port import read_bytes
from fpgacnn.hdl.program.fused_add import FUSED_ADD_STAGES, FusedAdd
from fpgacnn.hdl.program.vector_unit import VectorUnit
from fpgacnn.host.integer_ops import add, add_params

from conftest import SMALL_ENGINE
from limit_layers import CONFIGS
from test_hdl_pixel_writer import ENGINES as WRITER_ENGINES

ENGINES = {
    "k3": SMALL_ENGINE,                   # u 4, R 4
    "k2": CONFIGS["k2"],                  # u 4 in R 8: b's unit is half a read
    "pairs": WRITER_ENGINES["pairs"],     # u 8 (a beat, the writer's wide mode), R 8
}


class WithLanes(Elaboratable):
    """The stage and the (idle) vector unit whose lanes it computes on, connected as
    the program engine connects them; ``add`` is the stage."""

    def __init__(self, config):
        self.add, self.vector = FusedAdd(config), VectorUnit(config)

    def elaborate(self, platform):
        m = Module()
        m.submodules.add, m.submodules.vector = self.add, self.vector
        wiring.connect(m, self.add.lanes, self.vector.lanes)
        return m


def _params(rng):
    ma, mb, shift = add_params(rng.uniform(0.2, 2.0), rng.uniform(0.2, 2.0))
    lo, hi = sorted(int(v) for v in rng.integers(-128, 128, 2))
    return dict(enable=1, za=int(rng.integers(-128, 128)), zb=int(rng.integers(-128, 128)),
                ma=ma, mb=mb, shift=shift, zy=int(rng.integers(-128, 128)),
                lo=min(lo, -100), hi=max(hi, 100))


def run_stage(config, fields, writes, memory, *, latency, pause=0.0, seed=0):
    """Pass ``writes`` (``(addr, data bytes, strobe bits)``) through the stage over
    ``memory`` (b's bytes); the writes out and the cycle of ``done``."""
    top = WithLanes(config)
    dut = top.add
    u, rb = fused_add_unit(config), read_bytes(config)
    rng = np.random.default_rng(seed)
    out = []
    result = {}

    async def source(ctx):
        for addr, data, strb in writes:
            while rng.random() < pause:
                await ctx.tick()
            ctx.set(dut.i_write.payload, {"addr": addr, "data": int.from_bytes(
                data.astype(np.uint8).tobytes(), "little"), "strb": strb})
            ctx.set(dut.i_write.valid, 1)
            await ctx.tick().until(dut.i_write.ready)
            ctx.set(dut.i_write.valid, 0)
        # The writer's done: the cycle its last write left it.
        ctx.set(dut.writer_done, 1)
        await ctx.tick()
        ctx.set(dut.writer_done, 0)

    async def bench(ctx):
        ctx.set(dut.fields, fused_add_layout().const(fields))
        owed, cycle = deque(), 0
        while cycle < 20_000:
            ctx.set(dut.o_addr.ready, int(rng.random() >= pause))
            ctx.set(dut.o_write.ready, int(rng.random() >= pause))
            respond = bool(owed) and owed[0][0] <= cycle and rng.random() >= pause
            if respond:
                ctx.set(dut.i_data.payload, owed[0][1])
            ctx.set(dut.i_data.valid, int(respond))
            if ctx.get(dut.o_addr.valid) and ctx.get(dut.o_addr.ready):
                a = ctx.get(dut.o_addr.payload)
                assert a % rb == 0 and a + rb <= memory.size, a
                owed.append((cycle + latency, int.from_bytes(memory[a:a + rb].tobytes(),
                                                              "little")))
            if respond and ctx.get(dut.i_data.ready):
                owed.popleft()
            if ctx.get(dut.o_write.valid) and ctx.get(dut.o_write.ready):
                p = ctx.get(dut.o_write.payload)
                out.append((p["addr"], np.frombuffer(int(p["data"]).to_bytes(u, "little"),
                                                     np.int8), p["strb"]))
            if ctx.get(dut.done):
                assert "done" not in result
                result["done"] = cycle
            await ctx.tick()
            cycle += 1
            if "done" in result and cycle > result["done"] + 50:
                break

    sim = Simulator(top)
    sim.add_clock(1e-8)
    sim.add_testbench(source)
    sim.add_testbench(bench)
    sim.run()
    return out, result.get("done")


def _writes(rng, config, n, b_delta, memory_bytes):
    u = fused_add_unit(config)
    units = (memory_bytes - max(b_delta, 0)) // u
    addrs = rng.permutation(np.arange(max(-b_delta, 0) // u, units))[:n]
    return [(int(a), rng.integers(-128, 128, u).astype(np.int8),
             int(rng.integers(1, 1 << u))) for a in addrs]


@pytest.mark.parametrize("engine", list(ENGINES))
@pytest.mark.parametrize("latency, pause", [(1, 0.0), (9, 0.3), (3, 0.0)])
def test_each_write_is_the_add_of_its_bytes_and_b(engine, latency, pause):
    config = ENGINES[engine]
    assert has_fused_add(config)
    u = fused_add_unit(config)
    rng = np.random.default_rng(latency * 7 + len(engine))
    memory = rng.integers(0, 256, 4096).astype(np.uint8)
    for b_delta in (1024, -512):
        fields = dict(_params(rng), b_delta=b_delta)
        writes = _writes(rng, config, 60, b_delta, memory.size)
        out, done = run_stage(config, fields, writes, memory, latency=latency, pause=pause,
                              seed=latency)
        assert done is not None and len(out) == len(writes)
        assert [(a, s) for a, _, s in out] == [(a, s) for a, _, s in writes]
        for (addr, a, _), (_, y, _) in zip(writes, out):
            at = addr * u + b_delta
            b = memory[at:at + u].view(np.int8)
            want = add(a, fields["za"], b, fields["zb"], fields["ma"], fields["mb"],
                       fields["shift"], fields["zy"], fields["lo"], fields["hi"])
            assert_array_equal(y, want.astype(np.int8))


@pytest.mark.parametrize("engine", list(ENGINES))
def test_without_enable_the_writes_pass_unchanged(engine):
    config = ENGINES[engine]
    rng = np.random.default_rng(3)
    memory = np.zeros(1024, np.uint8)
    writes = _writes(rng, config, 20, 0, memory.size)
    out, done = run_stage(config, dict(_params(rng), enable=0, b_delta=0), writes, memory,
                          latency=5, pause=0.2)
    assert done is not None
    assert [(a, d.tobytes(), s) for a, d, s in out] == [(a, d.tobytes(), s)
                                                        for a, d, s in writes]


@pytest.mark.parametrize("latency", [1, 40])
def test_a_write_leaves_the_latency_and_the_stages_after_it_came(latency):
    """The Latency section: a write taken in cycle t leaves in t + L + stages + 5."""
    top = WithLanes(ENGINES["pairs"])
    dut = top.add
    seen = {}

    async def bench(ctx):
        ctx.set(dut.fields, fused_add_layout().const(dict(
            enable=1, b_delta=64, za=0, zb=0, ma=1, mb=1, shift=0, zy=0, lo=-128, hi=127)))
        ctx.set(dut.o_addr.ready, 1)
        ctx.set(dut.o_write.ready, 1)
        ctx.set(dut.i_write.payload, {"addr": 1, "data": 5, "strb": 255})
        ctx.set(dut.i_write.valid, 1)
        owed = []
        for cycle in range(latency + 40):
            if ctx.get(dut.i_write.valid) and ctx.get(dut.i_write.ready):
                seen["in"] = cycle
            if ctx.get(dut.o_addr.valid) and ctx.get(dut.o_addr.ready):
                owed.append(cycle + latency)
            respond = bool(owed) and owed[0] <= cycle
            ctx.set(dut.i_data.valid, int(respond))
            if respond and ctx.get(dut.i_data.ready):
                owed.pop(0)
            if ctx.get(dut.o_write.valid):
                seen.setdefault("out", cycle)
            await ctx.tick()
            if "in" in seen:
                ctx.set(dut.i_write.valid, 0)

    sim = Simulator(top)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert seen["out"] - seen["in"] == latency + FUSED_ADD_STAGES + 5
