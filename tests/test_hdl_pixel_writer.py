"""The pixel writer (issue 16 item 3): a run's output stream written into the
program image's arena leaves it exactly as the host's ``store_output`` does.

Amaranth simulator, a memory model holding the whole image (unit address
``A``: bytes ``u*A ..``, byte strobes), random pauses of the output stream
and random back-pressure on the writes; the records of compiled programs
(random CNNs with their Gemms, single convolutions of every mapping, strips
and channel groups) at batches 1 and 2 on engines with one unit to a beat,
several units to a beat, and an output word of two units, and on an engine
whose writer has the wide mode (a beat a cycle) in both of its modes. The
arena is first
filled with random bytes, so a byte the writer must leave alone (the next
channel group's, a padding channel) is checked too, and each output stream is
random bytes, its padding included.
"""

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from amaranth.sim import Simulator

from fpgacnn.core.config import EngineConfig
from fpgacnn.core.memory_port import writer_has_wide, writer_unit
from fpgacnn.core.pixel_writer_fields import writer_beat_cycles, writer_layout
from fpgacnn.hdl.program.pixel_writer import PixelWriter
from fpgacnn.host.compiler import compile_model
from fpgacnn.host.program_image import EngineRecord, HostRecord, ProgramImage, build_image
from fpgacnn.host.program_runner import store_output
from fpgacnn.host.pixel_writer_setup import unit_bytes, wide_writer_fields, writer_fields

from conftest import SMALL_ENGINE
from limit_layers import CONFIGS
from random_models import convolution_model, random_cnn
from test_program_image import CONVOLUTIONS

ENGINES = {
    "k3": SMALL_ENGINE,                  # a 4-byte unit, one to a beat
    "k2": CONFIGS["k2"],                 # pout 4 in 8-byte beats: two units to a beat
    "wide-out": EngineConfig(pin=4, pout=8, kmax=3, stream_width=32, max_width=16,
                             max_channels=16, max_out_channels=16),  # a word of two units
    "one-lane": EngineConfig(pin=1, pout=1, kmax=3, stream_width=32, max_width=16,
                             max_channels=8, max_out_channels=8, deep_pipeline=0),
    # pixel pairs with two output words a beat, as the PYNQ-Z2's: the writer's wide mode
    "pairs": EngineConfig(pin=4, pout=4, kmax=3, stream_width=64, max_width=16,
                          max_channels=16, max_out_channels=16, writer_words=2, spare_bank=1,
                          pixel_pairs=1),
    # the same with 8-byte words in 16-byte beats, as the KV260's
    "pairs-16": EngineConfig(pin=8, pout=8, kmax=3, stream_width=128, max_width=16,
                             max_channels=16, max_out_channels=16, writer_words=2,
                             spare_bank=1, pixel_pairs=1),
}


def write_stream(config, fields, raw, memory, *, seed, pause=0.3, stall=0.3):
    """Run the writer on the output stream ``raw`` into ``memory`` (bytes, changed in
    place); returns the cycles from ``start`` to ``done``."""
    dut = PixelWriter(config)
    u, beat = dut.unit, config.stream_bytes
    beats = [int.from_bytes(raw[i:i + beat].tobytes(), "little")
             for i in range(0, len(raw), beat)]
    rng = np.random.default_rng(seed)
    result = {}

    async def bench(ctx):
        ctx.set(dut.fields, writer_layout().const(fields))
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        sent = cycles = 0
        while True:
            cycles += 1
            assert cycles < 20 * len(beats) * max(1, beat // u) + 100, "the writer hangs"
            offer = sent < len(beats) and rng.random() >= pause
            ctx.set(dut.i_stream.valid, int(offer))
            if offer:
                ctx.set(dut.i_stream.payload, beats[sent])
            ctx.set(dut.o_write.ready, int(rng.random() >= stall))
            if offer and ctx.get(dut.i_stream.ready):
                sent += 1
            if ctx.get(dut.o_write.valid) and ctx.get(dut.o_write.ready):
                w = ctx.get(dut.o_write.payload)
                data = int(w.data).to_bytes(u, "little")
                for k in range(u):
                    if int(w.strb) >> k & 1:
                        memory[int(w.addr) * u + k] = data[k]
            done = ctx.get(dut.done)
            await ctx.tick()
            if done:
                break
        result.update(sent=sent, cycles=cycles)
        ctx.set(dut.i_stream.valid, 0)
        await ctx.tick()
        assert not ctx.get(dut.busy)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert result["sent"] == len(beats), "the run ended before its stream did"
    return result["cycles"]


def _programs(config):
    for seed in range(3):
        yield random_cnn(seed)
    for i, case in enumerate(CONVOLUTIONS):
        yield convolution_model(np.random.default_rng(i), *case)


@pytest.mark.parametrize("engine", list(ENGINES))
def test_writer_leaves_the_arena_as_the_host_does(engine):
    config = ENGINES[engine]
    rng = np.random.default_rng(7)
    written = skipped = wide_written = 0
    for batch in (1, 2):
        for model in _programs(config):
            try:
                image = build_image(compile_model(model, config, batch=batch))
            except Exception as e:  # a model past this engine's limits: nothing to write
                assert type(e).__name__ == "MappingError", e
                continue
            records = [r for r in image.records if isinstance(r, EngineRecord)]
            # A few records per program keep the simulator's time down.
            for record in records[:2] + records[-1:]:
                fields = writer_fields(image, record)
                if fields is None:
                    skipped += 1
                    continue
                arena = image.data.copy()
                start = image.header.arena_offset
                arena[start:] = rng.integers(0, 256, arena.size - start, dtype=np.int64)
                raw = rng.integers(0, 256, record.out_nbytes, dtype=np.int64).astype(np.uint8)
                want = ProgramImage(arena.tobytes())
                store_output(want, want.records[image.records.index(record)], raw)
                wide = wide_writer_fields(config, fields)
                for mode in [fields] + ([wide] if wide is not None else []):
                    got = arena.copy()
                    write_stream(config, mode, raw, got, seed=written)
                    assert_array_equal(got, want.data, err_msg=f"{model.name} record "
                                       f"{image.records.index(record)} wide {mode['wide']}")
                    written += 1
                    wide_written += mode["wide"]
    assert written >= 12 and skipped <= written
    # Where the writer has the wide mode, records take it (those whose pixels are whole
    # beats), and nowhere else.
    assert (wide_written > 0) == writer_has_wide(config)


def test_fields_refuse_what_the_writer_cannot_take():
    # Groups of 3 channels on 4 lanes: views whose channel ranges start inside a unit.
    model = convolution_model(np.random.default_rng(0), 30, 30, 10, (3, 3), (1, 1), (1, 1),
                              (1, 1, 1, 1), (5, 5))
    image = build_image(compile_model(model, SMALL_ENGINE, batch=1))
    u = unit_bytes(SMALL_ENGINE)
    for record in image.records:
        if isinstance(record, HostRecord):
            assert writer_fields(image, record) is None
        elif record.dest.c0 % u:
            assert writer_fields(image, record) is None
        else:
            assert writer_fields(image, record) is not None


def _writer_cycles(config, fields):
    """The writer's cycles from start to done with no stalls: a unit (a beat, wide) a
    cycle, but an image's dropped tail a whole beat a cycle, nothing of it in the beat
    of the image's last written unit."""
    per_beat = config.stream_bytes // writer_unit(config, wide=bool(fields["wide"]))
    written = fields["rows"] * fields["cols"] * fields["units"]
    in_last_beat = -written % per_beat
    tail_beats = max(0, fields["drop_units"] - in_last_beat) // per_beat
    return fields["images"] * (written + tail_beats) + 1


def _beat_by_beat(config, fields):
    """The same from the cycles the model reads, beat by beat (``writer_beat_cycles``)."""
    per_beat = config.stream_bytes // writer_unit(config, wide=bool(fields["wide"]))
    beats = (fields["rows"] * fields["cols"] * fields["units"] + fields["drop_units"]) \
        // per_beat
    return fields["images"] * sum(writer_beat_cycles(config, fields, b)
                                  for b in range(beats)) + 1


@pytest.mark.parametrize("engine", ["k3", "k2", "wide-out", "pairs", "pairs-16"])
def test_one_unit_a_cycle_and_the_tail_a_beat_without_stalls(engine):
    """Every record of a random CNN at batches 1 and 3 (tails within a beat, over
    several beats, none): the cycles as the Latency section says, a beat a cycle
    in the wide mode; a tail that took a cycle a unit put a k2 engine's
    output-bound batch a cycle an image behind the DMA's."""
    config = ENGINES[engine]
    tails, modes = set(), set()
    for batch in (1, 3):
        image = build_image(compile_model(random_cnn(1), config, batch=batch))
        for record in image.records:
            fields = writer_fields(image, record) if isinstance(record, EngineRecord) else None
            if fields is None:
                continue
            for mode in filter(None, (fields, wide_writer_fields(config, fields))):
                raw = np.arange(record.out_nbytes, dtype=np.uint8)
                memory = image.data.copy()
                cycles = write_stream(config, mode, raw, memory, seed=0, pause=0, stall=0)
                assert cycles == _writer_cycles(config, mode) == _beat_by_beat(config, mode), \
                    (batch, record.step, mode)
                modes.add(mode["wide"])
                if not mode["wide"]:
                    tails.add(fields["drop_units"] > 0)
    # A tail where a beat holds several units (k3's beat is one unit: none).
    assert tails == ({True, False} if config.stream_bytes > unit_bytes(config) else {False})
    assert modes == ({0, 1} if writer_has_wide(config) else {0})


@pytest.mark.parametrize("engine,drop", [("k2", 5), ("k2", 1), ("one-lane", 9), ("one-lane", 1)])
def test_a_tail_over_several_beats_leaves_a_beat_a_cycle(engine, drop):
    """Fields as no compiled program of the suite has them (a tail of several beats):
    the written units land where the nest says, nothing else is touched, and the
    tail costs a cycle a whole beat."""
    config = ENGINES[engine]
    u = unit_bytes(config)
    fields = {"base": 3, "image_stride": 40, "row_stride": 0, "pixel_stride": 5,
              "images": 2, "rows": 1, "cols": 3, "units": 1, "kept_units": 1,
              "last_lanes": u, "drop_units": drop, "wide": 0}
    per_image = 3 + drop
    assert per_image % (config.stream_bytes // u) == 0  # an image ends on a beat's end
    rng = np.random.default_rng(4)
    raw = rng.integers(0, 256, 2 * per_image * u).astype(np.uint8)
    memory = np.zeros(100 * config.stream_bytes, np.uint8)
    cycles = write_stream(config, fields, raw, memory, seed=1, pause=0, stall=0)
    assert cycles == _writer_cycles(config, fields) == _beat_by_beat(config, fields)
    want = np.zeros_like(memory)
    for i in range(2):
        for c in range(3):
            at = (3 + 40 * i + 5 * c) * u
            want[at:at + u] = raw[(i * per_image + c) * u:(i * per_image + c + 1) * u]
    assert_array_equal(memory, want)
    again = np.zeros_like(memory)  # and under pauses and back-pressure
    write_stream(config, fields, raw, again, seed=2)
    assert_array_equal(again, want)


@pytest.mark.parametrize("last_lanes", [1, 4, 5, 8])
@pytest.mark.parametrize("kept_units", [1, 2])
def test_wide_mode_writes_whole_beats_and_the_last_kept_lanes(kept_units, last_lanes):
    """Wide fields as no compiled program has them: pixels of three beats of which
    the first ``kept_units`` are written, the last one's ``last_lanes`` bytes only
    (the lowest, a narrow unit's, one more than it, the whole beat); a tail of two
    beats. A beat a cycle without stalls; the same bytes under pauses and
    back-pressure; nothing else touched."""
    config = ENGINES["pairs"]
    beat = writer_unit(config, wide=True)
    assert beat == config.stream_bytes == 2 * writer_unit(config)
    fields = {"base": 5, "image_stride": 50, "row_stride": 11, "pixel_stride": 4,
              "images": 2, "rows": 2, "cols": 2, "units": 3, "kept_units": kept_units,
              "last_lanes": last_lanes, "drop_units": 2, "wide": 1}
    per_image = 2 * 2 * 3 + 2
    rng = np.random.default_rng(kept_units * 10 + last_lanes)
    raw = rng.integers(0, 256, 2 * per_image * beat).astype(np.uint8)
    before = rng.integers(0, 256, 120 * beat).astype(np.uint8)
    want = before.copy()
    for i in range(2):
        for r in range(2):
            for c in range(2):
                at = (5 + 50 * i + 11 * r + 4 * c) * beat
                src = (i * per_image + (2 * r + c) * 3) * beat
                n = (kept_units - 1) * beat + last_lanes
                want[at:at + n] = raw[src:src + n]
    memory = before.copy()
    cycles = write_stream(config, fields, raw, memory, seed=3, pause=0, stall=0)
    assert cycles == _writer_cycles(config, fields) == 2 * (2 * 2 * 3 + 2) + 1
    assert_array_equal(memory, want)
    again = before.copy()
    write_stream(config, fields, raw, again, seed=4)
    assert_array_equal(again, want)


def test_wide_fields_only_where_whole_beats():
    """wide_writer_fields: taken when every address, stride and pixel is whole beats
    (at), refused one unit off on each (over), and on an engine without the mode;
    the kept bytes carried over exactly."""
    config = ENGINES["pairs"]
    narrow = {"base": 4, "image_stride": 40, "row_stride": 12, "pixel_stride": 6,
              "images": 2, "rows": 2, "cols": 2, "units": 4, "kept_units": 3,
              "last_lanes": 2, "drop_units": 2, "wide": 0}
    wide = wide_writer_fields(config, narrow)
    assert wide == {"base": 2, "image_stride": 20, "row_stride": 6, "pixel_stride": 3,
                    "images": 2, "rows": 2, "cols": 2, "units": 2, "kept_units": 2,
                    "last_lanes": 2, "drop_units": 1, "wide": 1}
    # kept bytes: 2 * 4 + 2 = 10 narrow, 8 + 2 wide; a whole last beat:
    assert wide_writer_fields(config, dict(narrow, kept_units=4, last_lanes=4))[
        "last_lanes"] == 8
    assert wide_writer_fields(config, dict(narrow, kept_units=1, last_lanes=1))[
        "kept_units"] == 1
    for name in ("base", "image_stride", "row_stride", "pixel_stride", "units",
                 "drop_units"):
        assert wide_writer_fields(config, dict(narrow, **{name: narrow[name] + 1})) is None, name
    assert wide_writer_fields(config, None) is None
    for engine in ("k3", "k2", "wide-out", "one-lane"):
        assert not writer_has_wide(ENGINES[engine])
        assert wide_writer_fields(ENGINES[engine], narrow) is None
        with pytest.raises(ValueError, match=r"^the pixel writer of this engine has no wide "
                                             r"mode \(pout \d+, a \d+-byte beat, pixel pairs \d\)$"):
            writer_unit(ENGINES[engine], wide=True)


def test_beat_cycles_only_of_an_image_s_beats():
    """``writer_beat_cycles`` counts the beats of one image (four here: three written
    units and a tail of five, in k2's beats of two units): a cycle a unit up to the
    last written one, a cycle a whole beat of the tail; it refuses any other beat."""
    config = ENGINES["k2"]
    fields = {"base": 0, "image_stride": 8, "row_stride": 0, "pixel_stride": 1,
              "images": 2, "rows": 1, "cols": 3, "units": 1, "kept_units": 1,
              "last_lanes": 1, "drop_units": 5, "wide": 0}
    assert [writer_beat_cycles(config, fields, b) for b in range(4)] == [2, 1, 1, 1]
    for beat in (-1, 4):
        with pytest.raises(ValueError, match=rf"^beat {beat} is not one of the image's 4$"):
            writer_beat_cycles(config, fields, beat)
