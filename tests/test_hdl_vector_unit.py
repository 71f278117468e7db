"""The vector unit (issue 16): residual Adds, global average pools and copies from
memory to memory, bit-exact with the layers' reference semantics.

Amaranth simulator, a memory model holding a random arena (word address
``A``: bytes ``pin*A ..``) with a latency, random pauses of requests,
responses and writes, answering R bytes (the read port's,
:func:`fpgacnn.core.memory_port.read_bytes`) as the program engine's top
does: the word in the low ``pin`` bytes and garbage above, or for a wide
run's R-aligned request all R. The operands are written into the arena at
the places a program image gives them (NHWC, padded channels), the unit runs
from the fields :func:`fpgacnn.host.vector_mapping.vector_fields` makes, and
where :func:`~fpgacnn.host.vector_mapping.wide_vector_fields` gives them in
R-byte words, from those too. The output tensor read back must equal the
layer's ``evaluate`` (docs/semantics.md), and the whole arena the counter
nest's (core/vector_fields.py) computed in numpy from the fields, its
padding lanes and untouched bytes included. Without pauses, a run takes
exactly :func:`fpgacnn.host.cycle_model.vector_run_cycles`.
"""

from collections import deque
from types import SimpleNamespace

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from amaranth.sim import Simulator

from fpgacnn.core.arena import pixel_bytes
from fpgacnn.core.config import EngineConfig
from fpgacnn.core.memory_port import read_bytes, write_bytes
from fpgacnn.core.vector_fields import (VECTOR_MAX_PIXELS, VECTOR_RUN_OVERHEAD, vector_layout,
                                        vector_word_bytes)
from fpgacnn.hdl.program.vector_unit import VectorUnit
from fpgacnn.host.cycle_model import vector_run_cycles
from fpgacnn.host.integer_ops import avgpool_counts
from fpgacnn.host.layers import (Add, AveragePool, Flatten, GlobalAveragePool, GlobalMaxPool,
                                 MaxPool)
from fpgacnn.host.program_image import TensorPlace, alignment
from fpgacnn.host.requant import round_shift
from fpgacnn.host.vector_mapping import (VECTOR_COPY, VECTOR_POOL, vector_fields, vector_params,
                                         wide_vector_fields)

from conftest import SMALL_ENGINE
from limit_layers import CONFIGS
from test_hdl_pixel_writer import ENGINES as WRITER_ENGINES

#: The PYNQ-Z2's engine: 4-byte words, 8-byte beats (a wide word is two of them).
PYNQ_Z2_ENGINE = EngineConfig(pin=4, pout=4, kmax=3, stream_width=64, max_width=16,
                              max_channels=16, max_out_channels=16)

ENGINES = {
    "k3": SMALL_ENGINE,   # pin 4, R 4: one write per output word, no wide runs
    "k2": CONFIGS["k2"],  # pin 8, R 8, 4-byte writes: two per word, no wide runs
    "one-lane": WRITER_ENGINES["one-lane"],  # pin 1, R 4: wide words of four
    "pynq-z2": PYNQ_Z2_ENGINE,  # pin 4, R 8: a wide word in two 4-byte writes
    # pin 4, R 8, W 8 (the pixel writer's wide mode, as the sized PYNQ-Z2's): a narrow
    # word in its lanes of an 8-byte write, a wide word in one
    "pairs": WRITER_ENGINES["pairs"],
}


def run_unit(config, fields, memory, *, latency, pause=0.0, seed=0):
    """Run the unit on ``memory`` (uint8, changed in place); cycles from start to done."""
    dut = VectorUnit(config)
    pin, rb, wb = config.pin, read_bytes(config), write_bytes(config)
    wide = bool(fields["wide"]) and rb > pin  # where R is pin the field is ignored
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
                # The port reads the R bytes at R-aligned addresses.
                assert a - a % rb + rb <= memory.size, f"read outside the memory at {a}"
                if wide:
                    assert a % rb == 0, f"a wide read at {a}, not a multiple of R = {rb}"
                    data = memory[a:a + rb].tobytes()
                else:  # the word in the low bytes, the rest other data
                    data = memory[a:a + pin].tobytes() + rng.bytes(rb - pin)
                owed.append((cycle + latency, int.from_bytes(data, "little")))
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


def _nest(config, fields, memory):
    """The arena after a run of ``fields`` on ``memory``: the counter nest of
    core/vector_fields.py in numpy (every lane of a word, padding included)."""
    f = SimpleNamespace(**fields)
    n = vector_word_bytes(config, f.wide)
    signed = memory.view(np.int8).astype(np.int64)
    after = memory.copy()

    def word(address):
        return signed[address * n:(address + 1) * n]

    at = f.out_base * n
    for image in range(f.images):
        for oy in range(f.out_rows):
            for ox in range(f.out_cols):
                for w in range(f.words):
                    taps = []
                    for ky in range(f.kernel_rows):
                        for kx in range(f.kernel_cols):
                            iy = oy * f.stride_rows - f.pad_top + ky
                            ix = ox * f.stride_cols - f.pad_left + kx
                            if 0 <= iy < f.in_rows and 0 <= ix < f.in_cols:
                                taps.append(word(f.a_base + image * f.a_image_stride
                                                 + iy * f.row_words + ix * f.pixel_words
                                                 + w) - f.za)
                    acc = np.max(taps, axis=0) if f.maximum else sum(taps)
                    b = (word(f.b_base + image * f.b_image_stride + w) - f.zb) * f.mb \
                        if f.has_b else 0
                    y = np.clip(round_shift(acc * f.ma + b, f.shift, f.ties_to_even) + f.zy,
                                f.lo, f.hi)
                    after[at:at + n] = y.astype(np.int8).view(np.uint8)
                    at += n
        at = (f.out_base + (image + 1) * f.out_image_stride) * n
    return after


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


def _runs(config, fields):
    """The fields of each run of a case: narrow, and wide where the words allow."""
    wide = wide_vector_fields(config, fields)
    return [("narrow", fields)] + ([("wide", wide)] if wide is not None else [])


@pytest.mark.parametrize("engine", list(ENGINES))
def test_unit_computes_the_layers_bit_exact(engine):
    config = ENGINES[engine]
    rng = np.random.default_rng(11)
    wide_runs = 0
    for i, (layer, shapes) in enumerate(_layers(rng)):
        for batch, latency, pause in ((1, 3, 0.0), (2, 1, 0.35)):
            narrow, memory, out, want = _case(config, layer, shapes, batch, rng)
            before = memory.copy()
            for mode, fields in _runs(config, narrow):
                wide_runs += mode == "wide"
                what = f"{layer.name} batch {batch} {mode}"
                memory = before.copy()
                cycles, counters = run_unit(config, fields, memory, latency=latency,
                                            pause=pause, seed=i)
                assert_array_equal(out.view(memory), want, err_msg=what)
                # Every byte as the nest says: the output's padding lanes, and nothing
                # outside the output changed.
                assert_array_equal(memory, _nest(config, fields, before), err_msg=what)
                mask = np.ones(memory.size, bool)
                mask[out.offset:out.offset + out.nbytes] = False
                assert_array_equal(memory[mask], before[mask], err_msg=what)
                assert counters[0] == cycles
                if pause == 0.0:
                    assert cycles == vector_run_cycles(config, fields, latency), what
                    assert counters[1:] == (0, 0) or latency > 1
    # Engines whose read port is wider than the word run some of the cases wide.
    assert (wide_runs > 0) == (read_bytes(config) > config.pin), wide_runs


def test_a_wide_add_halves_the_reads_time():
    """On the PYNQ-Z2's engine an Add's wide run reads 8 bytes of each operand a
    read instead of 4: its reads take half the cycles, its writes the same."""
    config = PYNQ_Z2_ENGINE
    layer = Add("add", ["a", "b"], "y", (16, 4, 4), 0.03, 5, 0.02, -3, 0.025, 1)
    shapes = {"a": (16, 4, 4), "b": (16, 4, 4)}
    narrow, memory, out, want = _case(config, layer, shapes, 1, np.random.default_rng(5))
    wide = wide_vector_fields(config, narrow)
    assert wide is not None and wide["words"] * 2 == narrow["words"]
    latency = 2
    fixed = latency + VECTOR_RUN_OVERHEAD
    cycles = {}
    for mode, fields in (("narrow", narrow), ("wide", wide)):
        run = memory.copy()
        cycles[mode], _ = run_unit(config, fields, run, latency=latency)
        assert_array_equal(out.view(run), want, err_msg=mode)
        assert cycles[mode] == vector_run_cycles(config, fields, latency), mode
    assert cycles["wide"] < cycles["narrow"]
    # Two reads a word, of 64 words narrow and 32 wide; the last word's writes after
    # its last read (one narrow, two wide).
    assert cycles["narrow"] - fixed == 2 * 64 + 1
    assert cycles["wide"] - fixed == 2 * 32 + 2


def test_the_wide_field_is_ignored_where_the_port_reads_a_word():
    """Where R is ``pin`` (no beat wider than the word) the unit has no wide mode:
    a record with ``wide`` set runs as a narrow one."""
    config = SMALL_ENGINE
    assert read_bytes(config) == config.pin
    layer = Add("add", ["a", "b"], "y", (8, 2, 2), 0.03, 5, 0.02, -3, 0.025, 1)
    fields, memory, out, want = _case(config, layer, {"a": (8, 2, 2), "b": (8, 2, 2)}, 1,
                                      np.random.default_rng(6))
    before = memory.copy()
    cycles, _ = run_unit(config, dict(fields, wide=1), memory, latency=2)
    assert_array_equal(memory, _nest(config, fields, before))
    assert cycles == vector_run_cycles(config, fields, 2)


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
    # The count differs from window to window: the unit has one multiplier a run.
    padded = AveragePool("padded", ["a"], "y", (4, 3, 3), kernel=(3, 3), stride=1,
                         pads=(1, 1, 1, 1))
    overhang = AveragePool("overhang", ["a"], "y", (4, 5, 5), kernel=(2, 2),
                           count_include_pad=True, ceil_mode=True)
    flatten = Flatten("flatten", ["a"], "y", shape, 0.1, 0)  # NCHW order is not NHWC's
    for layer in (const, padded, overhang, flatten):
        assert vector_params(layer, {"a": layer.input_shape}) is None, layer.name
    one = Flatten("flatten1", ["a"], "y", (4, 1, 1), 0.1, 0)
    assert vector_params(one, {"a": (4, 1, 1)})["kind"] == VECTOR_COPY
    # Windows anywhere, padding with count_include_pad, max pools of any window: taken.
    for layer in (AveragePool("pool2", ["a"], "y", (4, 4, 4), kernel=(2, 2)),
                  AveragePool("inner", ["a"], "y", (4, 5, 3), kernel=(4, 2)),
                  AveragePool("counted", ["a"], "y", (4, 5, 5), kernel=(3, 3), stride=2,
                              pads=(1, 1, 1, 1), count_include_pad=True),
                  MaxPool("stem", ["a"], "y", (4, 9, 9), kernel=3, stride=2,
                          pads=(1, 1, 1, 1)),
                  MaxPool("ceil", ["a"], "y", (4, 6, 6), kernel=3, stride=2, ceil_mode=True),
                  GlobalMaxPool("gmp", ["a"], "y", (4, 3, 3), 0.1, 0, 0.2, 3)):
        assert vector_params(layer, {"a": layer.input_shape})["kind"] == VECTOR_POOL, \
            layer.name


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


def _pools(rng, count):
    """Random max and average pools: kernels 1 to 4 (square and not), strides 1 to 3,
    pads 0 to ``k - 1`` on each side, odd and even sizes, several channel counts;
    max pools with and without ``ceil_mode``, with the output quantized as the input
    and not (``rescale``); average pools with and without ``count_include_pad``
    where the windows' counts are one (the others are refused: asserted)."""
    refused = 0
    for i in range(count):
        kh = 1 + i % 4
        kw = kh if i % 3 == 0 else int(rng.integers(1, 5))
        stride = tuple(int(v) for v in rng.integers(1, 4, 2))
        pads = tuple(int(rng.integers(0, k)) for k in (kh, kw, kh, kw))
        c = int(rng.choice([3, 5, 8, 12, 16]))
        shape = (c, int(rng.integers(kh, 10)), int(rng.integers(kw, 10)))
        zx, zy = (int(v) for v in rng.integers(-20, 20, 2))
        if i % 2 == 0:
            requant = i % 4 == 0
            layer = MaxPool(f"max{i}", ["a"], "y", shape, (kh, kw), stride, pads,
                            x_scale=0.05, x_zero_point=zx,
                            y_scale=0.07 if requant else None,
                            y_zero_point=zy if requant else None,
                            lo=-100 if i % 3 == 0 else -128, ceil_mode=bool(rng.random() < 0.4))
        else:
            def average(include, ceil):
                return AveragePool(f"avg{i}", ["a"], "y", shape, (kh, kw), stride, pads,
                                   count_include_pad=include, x_scale=0.05, x_zero_point=zx,
                                   y_scale=0.04, y_zero_point=zy, ceil_mode=ceil)
            layer = average(bool(rng.random() < 0.5), bool(rng.random() < 0.3))
            if vector_params(layer, {"a": shape}) is None:
                refused += 1
                counts = avgpool_counts(shape[1:], layer.kernel, layer.stride, layer.pads,
                                        layer.count_include_pad, layer.extra)
                assert counts.min() != counts.max(), layer.name
                layer = average(True, False)  # every window divides by kh * kw
        yield layer, {"a": shape}
    assert refused > 0


@pytest.mark.parametrize("engine", ["k3", "pynq-z2", "k2"])
def test_unit_computes_pools_of_many_windows_bit_exact(engine):
    """Max and average pools over many windows with strides and padding (the taps in
    the padding skipped, a cycle each), bit-exact, nothing outside the output
    touched, narrow and wide, batch 1 and 2, with random pauses; without them the
    cycles of the model exactly."""
    config = ENGINES[engine]
    rng = np.random.default_rng(23 + len(engine))
    for i, (layer, shapes) in enumerate(_pools(rng, 24)):
        batch, latency, pause = ((1, 3, 0.0), (2, 1, 0.3), (2, 7, 0.0))[i % 3]
        narrow, memory, out, want = _case(config, layer, shapes, batch, rng)
        before = memory.copy()
        for mode, fields in _runs(config, narrow):
            what = f"{layer.name} {layer.input_shape} k{layer.kernel} s{layer.stride} " \
                f"p{layer.pads} batch {batch} {mode}"
            memory = before.copy()
            cycles, counters = run_unit(config, fields, memory, latency=latency, pause=pause,
                                        seed=i)
            assert_array_equal(out.view(memory), want, err_msg=what)
            assert_array_equal(memory, _nest(config, fields, before), err_msg=what)
            assert counters[0] == cycles
            if pause == 0.0:
                assert cycles == vector_run_cycles(config, fields, latency), what
