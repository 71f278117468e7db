"""Drive a ConvCore in the Amaranth simulator: layer runs in, output bytes and cycle counts out."""

import numpy as np

from amaranth.hdl import ClockDomain, Module
from amaranth.sim import Simulator

from fpgacnn.hdl.datapath.conv_core import ConvCore
from fpgacnn.core.contract import engine_contract
from fpgacnn.core.descriptor import descriptor_layout


def beats_of(cfg, data):
    b = cfg.stream_bytes
    data = np.asarray(data, np.uint8).reshape(-1, b).astype(object)
    return [int(sum(int(v) << (8 * i) for i, v in enumerate(row))) for row in data]


def bytes_of(cfg, beats):
    out = bytearray()
    for v in beats:
        out += int(v).to_bytes(cfg.stream_bytes, "little")
    return np.frombuffer(bytes(out), np.uint8)


def run_core(cfg, runs, *, seed=0, in_pause=0.0, out_pause=0.0, reset_run=None,
             max_cycles=200000, stalls=None, make_dut=ConvCore):
    """Run ``runs`` = [(desc, input bytes), ...] back to back on one simulated core.

    ``reset_run``: index of a run that is interrupted by a reset after a third
    of its input (its result is then None, and the next run starts clean).
    Returns a list of (output bytes, cycles from start to done) per run; the
    cycles in which ``stall_in`` / ``stall_out`` were high go to ``stalls``
    (a list of (stall_in, stall_out) per run) when given. ``make_dut(cfg)``: the
    core, or a component with its ports around one.
    """
    dut = make_dut(cfg)
    # (the engine's fields: the fused block's too on an engine with it)
    layout = descriptor_layout(engine_contract(cfg).descriptor_fields)
    rng = np.random.default_rng(seed)
    results = []
    state = {}

    async def source(ctx):
        while True:
            run = state.get("feed")
            if run is None:
                await ctx.tick()
                continue
            beats, limit = run
            for i, beat in enumerate(beats):
                if limit is not None and i >= limit:
                    break
                while rng.random() < in_pause:
                    ctx.set(dut.i_stream.valid, 0)
                    await ctx.tick()
                ctx.set(dut.i_stream.valid, 1)
                ctx.set(dut.i_stream.payload, beat)
                await ctx.tick().until(dut.i_stream.ready)
            ctx.set(dut.i_stream.valid, 0)
            state["feed"] = None
            state["fed"] = True

    async def sink(ctx):
        while True:
            ctx.set(dut.o_stream.ready, int(rng.random() >= out_pause))
            _, _, valid, ready, payload = await ctx.tick().sample(
                dut.o_stream.valid, dut.o_stream.ready, dut.o_stream.payload)
            if valid and ready and state.get("out") is not None:
                state["out"].append((int(payload.data), int(payload.last)))

    async def control(ctx):
        ctx.set(dut.i_stream.valid, 0)
        await ctx.tick()
        for index, (desc, data) in enumerate(runs):
            beats = beats_of(cfg, data)
            interrupted = index == reset_run
            state["out"] = []
            state["fed"] = False
            ctx.set(dut.desc, layout.const(desc))
            await ctx.tick()
            state["feed"] = (beats, len(beats) // 3 if interrupted else None)
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            cycles = 1
            if interrupted:
                while not state["fed"]:
                    await ctx.tick()
                for _ in range(5):
                    await ctx.tick()
                assert ctx.get(dut.busy)
                ctx.set(cd.rst, 1)
                await ctx.tick()
                ctx.set(cd.rst, 0)
                assert not ctx.get(dut.busy)
                results.append(None)
                continue
            stall_in = stall_out = 0
            while True:
                _, _, done, s_in, s_out = await ctx.tick().sample(dut.done, dut.stall_in,
                                                                  dut.stall_out)
                stall_in += s_in
                stall_out += s_out
                if done:
                    break
                cycles += 1
                assert cycles < max_cycles, f"run {index} hung (busy={ctx.get(dut.busy)})"
            assert not ctx.get(dut.busy)
            assert state["fed"], f"run {index}: done before the input stream was taken"
            out = state["out"]
            assert out and out[-1][1] == 1 and not any(last for _, last in out[:-1]), \
                f"run {index}: `last` not on exactly the final beat"
            results.append((bytes_of(cfg, [d for d, _ in out]), cycles))
            if stalls is not None:
                stalls.append((stall_in, stall_out))
            for _ in range(2):
                await ctx.tick()

    top = Module()
    top.domains.sync = cd = ClockDomain("sync")
    top.submodules.dut = dut
    sim = Simulator(top)
    sim.add_clock(1e-8, domain="sync")
    sim.add_testbench(source, background=True)
    sim.add_testbench(sink, background=True)
    sim.add_testbench(control)
    sim.run()
    return results
