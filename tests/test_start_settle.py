"""A start never acts on an unsettled descriptor check (docs/engine.md, "Descriptor check").

The check is pipelined (``Latencies.descriptor_check`` stages); after any
descriptor write its ``ready`` stays low until the new descriptor's result
has passed every stage (and its loops). The engine holds a start that comes
earlier in ``status.pending`` and decides it the cycle ``ready`` rises.

Here the engine on its one-cycle register bus (the sequencer's) in the
Amaranth simulator, both arrangements: a descriptor field written at cycle
``t``, ``control.start`` at ``t + gap`` for a gap of one cycle (the earliest
the bus allows: one write a cycle), one under the settle limit, at it and one
over it. The start is decided exactly at ``t + max(gap, limit)``, on the new
descriptor: refused (naming the field) when the write broke a valid one,
accepted when it mended a broken one.
"""

import pytest

from amaranth.sim import Simulator

from fpgacnn.core.contract import descriptor_violations, engine_contract
from fpgacnn.core.descriptor import complete_descriptor
from fpgacnn.hdl.datapath.descriptor_check import DescriptorCheck
from fpgacnn.hdl.engine import ConvEngine

from arrangement_helpers import ARRANGEMENTS, arranged
from conftest import SMALL_ENGINE

BASE = dict(in_h=5, in_w=8, ci_tiles=1, co_tiles=2, out_h=3, out_w=6, stride=1, pad_top=0,
            pad_left=0, batch=1, x_zp=0, y_zp=0, clamp_lo=-128, clamp_hi=127, pool=0,
            load_weights=1)


def _cases(config):
    """(name, field, broken value, valid value, extra fields) for ``config``: a range
    check, the window-below-the-image rule (the rows sum; deep arrangement only)
    and the line buffer's row (the division after a ci_tiles write)."""
    c = engine_contract(config)
    ci_bad = c.max_ci_tiles
    cases = [("range", "batch", 0, 1, {}),
             ("line buffer", "ci_tiles", ci_bad, 1,
              {"in_w": c.widest_row(ci_bad) + 1, "co_tiles": 1})]
    if config.deep_pipeline:  # the rows rule is checked in the deep arrangement only
        cases.append(("rows", "out_h", 6, 3, {}))
    return cases


def _limit(config, desc, field):
    """Cycles from a write of ``field`` (leaving ``desc``) to ``ready``, by the
    documented rule (:class:`DescriptorCheck`'s "Latency"): the settle counter
    (the stages, one more for a registered product with resident weights), the
    rows sum (deep arrangement), the division (a ci_tiles write)."""
    c = engine_contract(config)
    stages = c.latency.descriptor_check
    n = stages + int(c.resident_weights) + 1
    if config.deep_pipeline:
        n = max(n, desc["stride"] + 2 + stages)
    if field == "ci_tiles":
        n = max(n, c.line_buffer.words.bit_length() + 1 + stages)
    return n


def _run(config, cases):
    """Each (field, old value, new value, extra, gap, expected) case on one
    simulated engine; returns what each start did: ("accepted" or
    "refused", the fields named, the cycle decided relative to the write)."""
    dut = ConvEngine(config, register_bus=True)
    regs = dut.regmap
    bus = dut.bus
    fields = [f.name for f in engine_contract(config).descriptor_fields
              if regs[f"desc_{f.name}"].access != "const"]
    results = []

    async def write(ctx, name, **values):
        ctx.set(bus.w_stb, 1)
        ctx.set(bus.w_strb, 0xF)
        ctx.set(bus.w_addr, regs.address(name) >> 2)
        ctx.set(bus.w_data, regs.encode(name, **values) if values else 0)
        await ctx.tick()
        ctx.set(bus.w_stb, 0)

    async def write_desc(ctx, name, value):
        await write(ctx, f"desc_{name}", value=value)

    def status(ctx):
        ctx.set(bus.r_addr, regs.address("status") >> 2)
        return regs.decode("status", ctx.get(bus.r_data))

    async def bench(ctx):
        settle = 64  # past any check's max_latency
        for field, old, new, extra, gap in cases:
            # The old descriptor, settled; the engine idle.
            await write(ctx, "control", soft_reset=1)
            for name in fields:
                await write_desc(ctx, name, complete_descriptor(dict(BASE, **extra, **{field: old}))
                                 [name])
            await ctx.tick().repeat(settle)
            assert status(ctx)["busy"] == 0
            # Cycle t: the write; the start at t + gap (idle cycles between).
            await write_desc(ctx, field, new)
            if gap > 1:
                await ctx.tick().repeat(gap - 1)
            await write(ctx, "control", start=1)
            cycle = gap + 1  # the cycle after the start's: the first its status shows
            s = status(ctx)
            while s["pending"]:
                assert s["busy"] == 1 and s["error"] == 0
                await ctx.tick()
                cycle += 1
                s = status(ctx)
            named = {f.name for i, f in enumerate(engine_contract(config).descriptor_fields)
                     if s["error_fields"] >> i & 1}
            outcome = "refused" if s["error"] else "accepted" if s["busy"] else "idle"
            results.append((outcome, named, cycle - 1))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return results


@pytest.mark.parametrize("arrangement", list(ARRANGEMENTS))
def test_start_after_a_descriptor_write_acts_on_the_new_descriptor(arrangement):
    config = arranged(SMALL_ENGINE, arrangement)
    assert engine_contract(config).latency.descriptor_check == (2 if config.deep_pipeline else 1)
    runs, expected = [], []
    for name, field, bad, good, extra in _cases(config):
        for old, new in ((good, bad), (bad, good)):
            new_desc = complete_descriptor(dict(BASE, **extra, **{field: new}))
            old_desc = complete_descriptor(dict(BASE, **extra, **{field: old}))
            want = {f for f, _ in descriptor_violations(config, new_desc)}
            assert bool(want) == (new == bad), (name, want)
            assert bool(descriptor_violations(config, old_desc)) == (old == bad)
            limit = _limit(config, new_desc, field)
            assert limit >= 2  # so that 1 is under it
            for gap in sorted({1, limit - 1, limit, limit + 1}):
                runs.append((field, old, new, extra, gap))
                expected.append(("refused" if want else "accepted", want, max(gap, limit)))
    got = _run(config, runs)
    for run, g, w in zip(runs, got, expected):
        assert g == w, (run, g, w)


def test_ready_is_low_in_a_write_cycle():
    """The check's ``ready`` is low in the cycle of a write too, so a start in that
    cycle (from any initiator beside the bus) is held as well."""
    dut = DescriptorCheck(SMALL_ENGINE)
    seen = []

    async def bench(ctx):
        for f, v in complete_descriptor(BASE).items():
            ctx.set(dut.desc[f], v)
        await ctx.tick().repeat(dut.max_latency + 1)
        seen.append(ctx.get(dut.ready))
        for name in ("written", "ci_tiles_written"):
            ctx.set(getattr(dut, name), 1)
            seen.append(ctx.get(dut.ready))
            ctx.set(getattr(dut, name), 0)
            seen.append(ctx.get(dut.ready))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert seen == [1, 0, 1, 0, 1]
    assert dut.max_latency < 64  # the engine test's wait for a settled check
