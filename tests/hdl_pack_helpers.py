"""Pack numpy lanes into the raw integers of Amaranth ``ArrayLayout`` signals and back."""

import numpy as np


def pack(values, width):
    """Little-endian two's complement packing of an integer array (flattened, element 0 lowest)."""
    mask = (1 << width) - 1
    raw = 0
    for i, v in enumerate(np.asarray(values).ravel()):
        raw |= (int(v) & mask) << (i * width)
    return raw


def unpack(raw, width, count, *, signed=True):
    """Inverse of :func:`pack`: ``count`` elements of ``width`` bits as int64."""
    out = np.empty(count, dtype=np.int64)
    for i in range(count):
        v = (raw >> (i * width)) & ((1 << width) - 1)
        out[i] = v - (1 << width) if signed and v >> (width - 1) else v
    return out


def wrap(x, width):
    """Two's complement wrap-around of int64 values to ``width`` bits."""
    x = np.asarray(x, dtype=np.int64)
    return ((x + (1 << (width - 1))) % (1 << width)) - (1 << (width - 1))


def run_pipeline(dut, inputs, outputs, latency):
    """Stream rows of int8 lanes through a fixed-latency pipeline in the Amaranth simulator.

    ``inputs`` maps a member name to an array ``(cycles, lanes)`` (one row a
    cycle, packed as 8-bit lanes); ``outputs`` maps a member name to ``(width,
    lanes)``. Returns each output's rows as they come out ``latency`` cycles
    after their inputs, as int64 arrays of the inputs' length.
    """
    from amaranth.sim import Simulator

    cycles = len(next(iter(inputs.values())))
    got = {name: [] for name in outputs}

    async def testbench(ctx):
        for i in range(cycles + latency - 1):
            if i < cycles:
                for name, rows in inputs.items():
                    ctx.set(getattr(dut, name).as_value(), pack(rows[i], 8))
            await ctx.tick()
            if i >= latency - 1:
                for name, (width, lanes) in outputs.items():
                    got[name].append(unpack(ctx.get(getattr(dut, name).as_value()), width, lanes))

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(testbench)
    sim.run()
    return {name: np.array(rows) for name, rows in got.items()}
