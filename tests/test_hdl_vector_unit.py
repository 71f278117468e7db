"""The vector unit (issue 16): residual Adds, global average pools and copies from
memory to memory, bit-exact with the layers' reference semantics.

Amaranth simulator, a memory model holding a random arena (word address
``A``: bytes ``pin*A ..``) with a latency, random pauses of requests,
responses and writes; the operands are written into the arena at the places
a program image gives them (NHWC, padded channels), the unit runs from the
fields :func:`fpgacnn.host.vector_mapping.vector_fields` makes, and the
output tensor read back must equal the layer's ``evaluate`` (docs/semantics.md)
while every byte outside it is left as it was. Without pauses, a run takes
exactly :func:`fpgacnn.host.cycle_model.vector_run_cycles`.
"""

from collections import deque
from types import SimpleNamespace

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from amaranth.sim import Simulator

from fpgacnn.core.arena import pixel_bytes
from fpgacnn.core.memory_port import write_bytes
from fpgacnn.core.vector_fields import VECTOR_MAX_PIXELS, vector_layout
from fpgacnn.hdl.program.vector_unit import VectorUnit
from fpgacnn.host.cycle_model import vector_run_cycles
from fpgacnn.host.layers import Add, AveragePool, Flatten, GlobalAveragePool
from fpgacnn.host.program_image import TensorPlace, alignment
from fpgacnn.host.vector_mapping import VECTOR_COPY, VECTOR_POOL, vector_fields, vector_params

from conftest import SMALL_ENGINE
from limit_layers import CONFIGS
from test_hdl_pixel_writer import ENGINES as WRITER_ENGINES

ENGINES = {
    "k3": SMALL_ENGINE,   # pin 4: one write per output word
    "k2": CONFIGS["k2"],  # pin 8, 4-byte writes: two per word
    "one-lane": WRITER_ENGINES["one-lane"],
}


def run_unit(config, fields, memory, *, latency, pause=0.0, seed=0):
    """Run the unit on ``memory`` (uint8, changed in place); cycles from start to done."""
    dut = VectorUnit(config)
    pin, wb = config.pin, write_bytes(config)
    rng = np.random.default_rng(seed)
    result = {}

    async def bench(ctx):
        ctx.set(dut.fields, vector_layout().const(fields))
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        cycle, owed = 1, deque()
        while True:
            ctx.set(dut.o_addr.ready, int(rng.random() >= pause))
            if ctx.get(dut.o_addr.valid) and ctx.get(dut.o_addr.ready):
                a = ctx.get(dut.o_addr.payload) * pin
                assert 0 <= a and a + pin <= memory.size, f"read outside the memory at {a}"
                owed.append((cycle + latency, int.from_bytes(memory[a:a + pin].tobytes(),
                                                              "little")))
            answer = bool(owed) and owed[0][0] <= cycle and rng.random() >= pause
            ctx.set(dut.i_data.valid, int(answer))
            if answer:
                ctx.set(dut.i_data.payload, owed[0][1])
                if ctx.get(dut.i_data.ready):
                    owed.popleft()
            ctx.set(dut.o_write.ready, int(rng.random() >= pause))
            if ctx.get(dut.o_write.valid) and ctx.get(dut.o_write.ready):
                w = ctx.get(dut.o_write.payload)
                assert int(w.addr) % wb == 0
                data = int(w.data).to_bytes(wb, "little")
                for k in range(wb):
                    if (int(w.strb) >> k) & 1:
                        memory[int(w.addr) + k] = data[k]
            done = ctx.get(dut.done)
            await ctx.tick()
            if done:
                break
            cycle += 1
            assert cycle < 200_000, "the unit never finished"
        result["cycles"] = cycle
        result["counters"] = (ctx.get(dut.busy_cycles), ctx.get(dut.stall_in_cycles),
                              ctx.get(dut.stall_out_cycles))
        assert not ctx.get(dut.busy) and not owed

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return result["cycles"], result["counters"]


def _place(config, offset, shape, batch):
    flat = len(shape) == 1
    c, h, w = (shape[0], 1, 1) if flat else shape
    cp = pixel_bytes(config, c)
    align = alignment(config)
    stride = -(-h * w * cp // align) * align
    return TensorPlace(offset, c, h, w, cp, stride, batch, int(flat))


def _layers(rng):
    """(layer, shapes) cases: Adds (ties up, wide and narrow scale ratios, clamps),
    pools (one pixel, many, odd channel counts) and a copy."""
    def add(name, shape, ratio):
        za, zb, zy = (int(v) for v in rng.integers(-40, 40, 3))
        return Add(name, ["a", "b"], "y", shape, 0.02 * ratio, za, 0.02, zb, 0.025, zy,
                   lo=zy if rng.random() < 0.5 else -128), {"a": shape, "b": shape}

    def gap(name, shape, kind, kernel=None):
        zx, zy = (int(v) for v in rng.integers(-30, 30, 2))
        if kind == "avg":
            layer = AveragePool(name, ["a"], "y", shape, kernel=kernel or shape[1:],
                                x_scale=0.05,
                                x_zero_point=zx, y_scale=0.05, y_zero_point=zy)
        else:
            layer = GlobalAveragePool(name, ["a"], "y", shape, 0.05, zx, 0.031, zy,
                                      keepdims=kind == "keep")
        return layer, {"a": shape}

    yield add("add", (6, 3, 5), 1.7)
    yield add("add_small_ratio", (16, 2, 2), 0.01)
    yield add("add_one_pixel", (3, 1, 1), 1.0)
    yield gap("avgpool", (16, 4, 4), "avg")          # sum / 16 with equal scales: halves
    yield gap("gap_flat", (5, 3, 7), "flat")
    yield gap("gap_one_pixel", (8, 1, 1), "keep")
    yield gap("leading_rows", (8, 5, 3), "avg", (4, 3))  # DS-CNN's pool: last row left out
    yield gap("leading_pixels", (4, 1, 5), "avg", (1, 4))
    yield Flatten("flatten", ["a"], "y", (12, 1, 1), 0.1, 3), {"a": (12, 1, 1)}


def _case(config, layer, shapes, batch, rng):
    params = vector_params(layer, shapes)
    assert params is not None, layer.name
    record = SimpleNamespace(**params)
    align = alignment(config)
    offset, places = align, {}
    for name, shape in list(shapes.items()) + [("y", tuple(layer.output_shape))]:
        places[name] = _place(config, offset, shape, batch)
        offset += places[name].nbytes + align
    memory = rng.integers(0, 256, offset + align, dtype=np.int64).astype(np.uint8)
    inputs = []
    for name in shapes:
        x = rng.integers(-128, 128, (batch, *shapes[name])).astype(np.int8)
        places[name].view(memory)[...] = x
        inputs.append(x)
    fields = vector_fields(config, record, places["a"], places.get("b"), places["y"])
    return fields, memory, places["y"], layer.evaluate(*inputs)


@pytest.mark.parametrize("engine", list(ENGINES))
def test_unit_computes_the_layers_bit_exact(engine):
    config = ENGINES[engine]
    rng = np.random.default_rng(11)
    for i, (layer, shapes) in enumerate(_layers(rng)):
        for batch, latency, pause in ((1, 3, 0.0), (2, 1, 0.35)):
            fields, memory, out, want = _case(config, layer, shapes, batch, rng)
            before = memory.copy()
            cycles, counters = run_unit(config, fields, memory, latency=latency,
                                        pause=pause, seed=i)
            assert_array_equal(out.view(memory), want, err_msg=f"{layer.name} batch {batch}")
            # Nothing but the output's bytes changed (its padding lanes may).
            mask = np.ones(memory.size, bool)
            mask[out.offset:out.offset + out.nbytes] = False
            assert_array_equal(memory[mask], before[mask], err_msg=layer.name)
            assert counters[0] == cycles
            if pause == 0.0:
                assert cycles == vector_run_cycles(config, fields, latency), (layer.name, batch)
                assert counters[1:] == (0, 0) or latency > 1


def test_ties_round_to_even_in_pools_and_up_in_adds():
    """Exact halves: a pool of 2 pixels at equal scales rounds 0.5 and 1.5 to even,
    an Add whose sum is a half rounds it up (the reference's rules)."""
    config = SMALL_ENGINE
    pool = AveragePool("pool", ["a"], "y", (4, 1, 2), kernel=(1, 2), x_scale=0.1,
                       x_zero_point=0, y_scale=0.1, y_zero_point=0)
    shapes = {"a": (4, 1, 2)}
    rng = np.random.default_rng(0)
    fields, memory, out, _ = _case(config, pool, shapes, 1, rng)
    place = _place(config, fields["a_base"] * config.pin, (4, 1, 2), 1)
    x = np.array([[[[0, 1]], [[1, 2]], [[-1, 0]], [[-3, 0]]]], np.int8)  # 0.5 1.5 -0.5 -1.5
    place.view(memory)[...] = x
    run_unit(config, fields, memory, latency=2)
    assert_array_equal(out.view(memory)[0, :, 0, 0], [0, 2, 0, -2])
    assert_array_equal(out.view(memory), pool.evaluate(x))


def test_the_pixel_limit_is_the_accumulator_s():
    """At the limit the sum of 255s fits the signed accumulator; past it the unit does
    not take the pool (a host layer)."""
    assert 255 * VECTOR_MAX_PIXELS < 2 ** 31 <= 255 * (VECTOR_MAX_PIXELS + 1) + 255
    at = GlobalAveragePool("at", ["a"], "y", (1, VECTOR_MAX_PIXELS, 1), 0.1, 0, 0.1, 0)
    over = GlobalAveragePool("over", ["a"], "y", (1, VECTOR_MAX_PIXELS + 1, 1), 0.1, 0, 0.1, 0)
    assert vector_params(at, {"a": (1, VECTOR_MAX_PIXELS, 1)})["kind"] == VECTOR_POOL
    assert vector_params(over, {"a": (1, VECTOR_MAX_PIXELS + 1, 1)}) is None


def test_layers_the_unit_does_not_take():
    shape = (4, 3, 3)
    const = Add("bias", ["a"], "y", shape, 0.1, 0, 0.1, 0, 0.1, 0,
                constant=np.ones(shape, np.int8))
    windows = AveragePool("pool2", ["a"], "y", (4, 4, 4), kernel=(2, 2))
    padded = AveragePool("padded", ["a"], "y", (4, 3, 3), kernel=(3, 3), pads=(1, 1, 1, 1))
    flatten = Flatten("flatten", ["a"], "y", shape, 0.1, 0)  # NCHW order is not NHWC's
    # One window, but its taps are not the first pixels in raster order.
    inner = AveragePool("inner", ["a"], "y", (4, 5, 3), kernel=(4, 2))
    tall = AveragePool("tall", ["a"], "y", (4, 3, 3), kernel=(2, 2))
    for layer in (const, windows, padded, flatten, inner, tall):
        assert vector_params(layer, {"a": layer.input_shape}) is None, layer.name
    one = Flatten("flatten1", ["a"], "y", (4, 1, 1), 0.1, 0)
    assert vector_params(one, {"a": (4, 1, 1)})["kind"] == VECTOR_COPY


def test_fields_past_their_widths_leave_the_record_to_the_host():
    """A vector record whose fields do not fit (images past the 16-bit count, an
    address past the 32-bit word space) gets no fields: at the limit it does."""
    config = SMALL_ENGINE
    layer = Add("add", ["a", "b"], "y", (4, 2, 2), 0.02, 0, 0.02, 0, 0.025, 0)
    record = SimpleNamespace(**vector_params(layer, {"a": (4, 2, 2), "b": (4, 2, 2)}))

    def fields(batch, out_offset):
        a, b = (_place(config, off, (4, 2, 2), batch) for off in (64, 128))
        return vector_fields(config, record, a, b, _place(config, out_offset, (4, 2, 2), batch))

    most = (1 << 32) - 1  # the last word address
    assert fields(2 ** 16 - 1, 192)["images"] == 2 ** 16 - 1
    assert fields(2 ** 16, 192) is None
    assert fields(1, most * config.pin)["out_base"] == most
    assert fields(1, (most + 1) * config.pin) is None
