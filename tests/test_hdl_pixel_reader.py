"""The pixel reader (issue 16 item 3): a run's pixel section read from the program
image's arena equals the host's (``record_stream`` after the constants) byte for byte.

Amaranth simulator, a memory model holding the whole image that answers as
the program engine's top does (a request for word address ``A``, bytes
``pin*A ..``, gets the ``R = read_bytes(config)`` bytes from there: the word
in the low bytes, random bytes above it, or a whole R-aligned R in a wide
section), with a latency, random pauses of requests and responses and
random back-pressure on ``o_stream``; the records of compiled programs
(random CNNs, single convolutions, a Gemm chunk with padding pixels) at
batches 1 and 2, on the two engines of tests/limit_layers.py, on one with
several words to a beat, the PYNQ-Z2's shape (two words to a beat) and one
with several beats to a word. Every record runs as
:func:`~fpgacnn.host.pixel_reader_setup.reader_fields` gives it and, where
:func:`~fpgacnn.host.pixel_reader_setup.wide_fields` takes it, wide. The
arena is first filled with random bytes (so a lane the reader must zero is
never zero by chance), then each record's input tensor is written in, as
tests/test_program_image.py does.
"""

from collections import deque
from functools import partial
import gc
import warnings

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from amaranth.hdl import UnusedElaboratable, unsigned
from amaranth.sim import Simulator

from fpgacnn.core.config import EngineConfig
from fpgacnn.core.contract import engine_contract
from fpgacnn.core.memory_port import words_per_read, ADDRESS_BITS, read_bytes
from fpgacnn.core.pixel_reader_fields import READER_FIELDS, reader_beat_commands, reader_layout
from fpgacnn.hdl.program.pixel_reader import PixelReader
from fpgacnn.host.compiler import EngineStep, compile_model
from fpgacnn.host.layers import Gemm
from fpgacnn.host.model import QuantizedModel, TensorSpec
from fpgacnn.host.pixel_reader_setup import beat_a_cycle, reader_fields, wide_fields
from fpgacnn.host.program_image import (SOURCE_BATCH, SOURCE_STRIP, SOURCE_ZERO_COLUMN,
                                        EngineRecord, FoldRecord, HostRecord, build_image)
from fpgacnn.host.program_runner import record_stream

from conftest import SMALL_ENGINE
from limit_layers import CONFIGS
from random_models import convolution_model, folded_cnn, random_cnn
from test_program_image import CONVOLUTIONS, _tensors

#: Engines with one word to a beat (the two of tests/limit_layers.py), four
#: words to a beat, two (the PYNQ-Z2's engine's shape: pin 4 in 8-byte beats),
#: and a word of four beats. Where a word is narrower than a beat the read port
#: is a beat wide, and sections can be wide.
ENGINES = {
    "k3": SMALL_ENGINE,
    "k2": CONFIGS["k2"],
    "words-per-beat": EngineConfig(pin=2, pout=2, kmax=3, stream_width=64, max_width=16,
                                   max_channels=8, max_out_channels=8),
    "pynq": EngineConfig(pin=4, pout=4, kmax=3, stream_width=64, max_width=16,
                         max_channels=16, max_out_channels=16),
    "beats-per-word": EngineConfig(pin=16, pout=4, kmax=2, stream_width=32, max_width=8,
                                   max_channels=32, max_out_channels=8),
    # Two words a read with 2x2 blocks: every beat pair of a remap line starts in
    # one pixel and ends in the next, or fills one.
    "pairs-k2": EngineConfig(pin=4, pout=4, kmax=2, stream_width=64, max_width=16,
                             max_channels=16, max_out_channels=16),
}


def gemm_model(rng, features, outputs):
    """A Gemm of a flat input, ``features`` of them (more than ``pin``: remapped)."""
    weight = rng.integers(-127, 128, (outputs, features)).astype(np.int8)
    w_scale = rng.uniform(0.5, 1.5, outputs) / 127
    x_zp = int(rng.integers(-20, 20))
    layer = Gemm("fc", ["x"], "y", (features,), weight,
                 rng.integers(-300, 300, outputs).astype(np.int32), 0.05, x_zp, w_scale, 0.5, 3)
    return QuantizedModel("gemm", [layer], TensorSpec("x", (features,), np.int8, 0.05, x_zp),
                          TensorSpec("y", (outputs,), np.int8, 0.5, 3), "x", "y")


#: A 2x2 kernel with two rows of bottom padding: a row of the zero point below
#: the image (packing.zero_point_rows); channels 3 of 4 lanes.
ZERO_ROWS = (3, 4, 1, (2, 2), (1, 1), (1, 1), (0, 1, 2, 0), (4, 5))

#: Per engine: the models whose reader records run, (name, model, batch, records at most).
CASES = {
    "k3": [("random_cnn_0", lambda: random_cnn(0), 2, 2),
           ("random_cnn_1", lambda: random_cnn(1), 1, 3),
           ("random_cnn_2", lambda: random_cnn(2), 1, 3),
           ("random_cnn_3", lambda: random_cnn(3), 2, 2),
           ("zero_rows", lambda: convolution_model(np.random.default_rng(0), *ZERO_ROWS), 2, 1),
           ("zero_column", lambda: convolution_model(np.random.default_rng(8), *CONVOLUTIONS[8]),
            1, 2),
           ("strips", lambda: convolution_model(np.random.default_rng(9), *CONVOLUTIONS[9]),
            2, 2),
           ("groups", lambda: convolution_model(np.random.default_rng(1), *CONVOLUTIONS[1]),
            1, 2),
           ("gemm", lambda: gemm_model(np.random.default_rng(1), 3, 5), 100, 1),
           ("remap_gemm", lambda: gemm_model(np.random.default_rng(3), 41, 5), 23, 2),
           ("remap", lambda: convolution_model(np.random.default_rng(7), *CONVOLUTIONS[7]),
            2, 2)],
    "k2": [("remap", lambda: convolution_model(np.random.default_rng(5), 21, 6, 1, (1, 1),
                                               (2, 2), (1, 1), (0, 0, 0, 0), (5, 7)), 2, 2),
           ("random_cnn_1", lambda: random_cnn(1), 2, 3),
           ("random_cnn_3", lambda: random_cnn(3), 1, 2),
           ("zero_column", lambda: convolution_model(np.random.default_rng(8), *CONVOLUTIONS[8]),
            2, 2),
           ("gemm", lambda: gemm_model(np.random.default_rng(2), 7, 5), 30, 1),
           ("remap_gemm", lambda: gemm_model(np.random.default_rng(4), 21, 3), 13, 2)],
    "words-per-beat": [("conv", lambda: convolution_model(np.random.default_rng(3), 3, 4, 1,
                                                          (3, 3), (1, 1), (1, 1), (1, 1, 1, 1),
                                                          (3, 5)), 2, 1),
                       # Its third record: 8 channels, 4 words (wide: 1).
                       ("random_cnn_3", lambda: random_cnn(3), 1, 3)],
    # Wide: pixels of 2 words with masked lanes (6 channels: the mask ends past
    # the first pin word of a wide one) at batch 2, 4 words of 13 channels, rows
    # of x_zp (masked), the 1x1 remap (positions past the channels: not read),
    # a remapped Gemm chunk with padding pixels. Narrow: 1 and 3 words (not
    # wide), a group of 2 words in pixels of 3 (12 channels: every other pixel
    # starts mid-read, so not wide either), a Gemm chunk's padding pixels.
    "pynq": [("random_cnn_0", lambda: random_cnn(0), 1, 3),
             ("random_cnn_1", lambda: random_cnn(1), 2, 2),
             ("zero_rows", lambda: convolution_model(np.random.default_rng(0), 6,
                                                     *ZERO_ROWS[1:]), 2, 1),
             ("remap", lambda: convolution_model(np.random.default_rng(7), 40, 9, 1, (1, 1),
                                                 (2, 2), (1, 1), (0, 0, 0, 0), (7, 9)), 2, 1),
             ("remap_gemm", lambda: gemm_model(np.random.default_rng(3), 41, 5), 23, 1),
             ("groups", lambda: convolution_model(np.random.default_rng(1), *CONVOLUTIONS[1]),
              1, 2),
             ("gemm", lambda: gemm_model(np.random.default_rng(1), 3, 5), 100, 1),
             # The 1x1 remap of one word a block position (8 and 16 channels, an
             # odd width; a Gemm chunk of 6 features, 7 vectors with padding
             # pixels): its lines past the channels a beat of zeros a cycle.
             ("remap_thin", lambda: convolution_model(np.random.default_rng(11), 8, 6, 1,
                                                      (1, 1), (1, 1), (1, 1), (0, 0, 0, 0),
                                                      (4, 5)), 2, 1),
             ("remap_16", lambda: convolution_model(np.random.default_rng(12), 16, 5, 1,
                                                    (1, 1), (1, 1), (1, 1), (0, 0, 0, 0),
                                                    (3, 3)), 1, 1),
             ("remap_gemm_thin", lambda: gemm_model(np.random.default_rng(5), 6, 3), 7, 1)],
    "beats-per-word": [("conv", lambda: convolution_model(np.random.default_rng(4), 20, 4, 1,
                                                          (2, 2), (1, 1), (1, 1), (0, 0, 1, 1),
                                                          (3, 4)), 1, 1),
                       ("remap", lambda: convolution_model(np.random.default_rng(6), 40, 4, 1,
                                                           (1, 1), (1, 1), (1, 1), (0, 0, 0, 0),
                                                           (3, 4)), 1, 1)],
    "pairs-k2": [("remap_thin", lambda: convolution_model(np.random.default_rng(13), 4, 5, 1,
                                                          (1, 1), (1, 1), (1, 1), (0, 0, 0, 0),
                                                          (3, 5)), 2, 1),
                 ("remap_gemm_thin", lambda: gemm_model(np.random.default_rng(6), 6, 3), 5, 1),
                 ("first_layer", lambda: convolution_model(np.random.default_rng(14), 3, 4, 1,
                                                           (2, 2), (1, 1), (1, 1), (0, 0, 1, 1),
                                                           (4, 6)), 1, 1)],
}


def pixel_section(image, record):
    """The host's pixel section of ``record``: its stream after the constants."""
    desc = record.descriptor
    stream = record_stream(image, record)
    if desc["load_weights"] or desc["load_params"]:
        return stream[len(image.constants(record, warm=not desc["load_weights"])):]
    return stream


def run_reader(config, image, runs, *, latency=3, stall=0.3, backpressure=0.3, seed=0,
               outstanding=16, chain_gap=None):
    """Run the reader over ``runs`` = [(fields, prepare), ...] back to back, on one memory
    holding ``image.data``; ``prepare()`` (may be None) is called before its run starts
    (it may write the arena). Returns per run the bytes sent and the cycles from
    the cycle of ``start`` to the cycle of ``done``.

    The memory answers as the program engine's top does, with ``R`` bytes: for a
    narrow section the requested word in the low ``pin`` bytes and random bytes
    above it (the reader must drop them) or, at an R-aligned address, the R bytes
    there (the word and the next: a pair read as one), for a wide one the R bytes
    at the (R-aligned) address.

    With ``chain_gap`` (cycles, at least 1) the runs are one chain: each started
    ``chain_gap`` cycles after the one before it raised ``issued``, its fields
    set then, every ``prepare`` called before the first; returns one result, the
    chain's bytes, the cycles from the first ``start`` to the last ``done`` and the
    cycle of each run's ``start`` (counted as those)."""
    dut = PixelReader(config, outstanding=outstanding)
    rng = np.random.default_rng(seed)
    # Apart from `rng`, so that the pauses are the same whatever the port's width.
    junk = np.random.default_rng(seed + 1)
    pin, rb = config.pin, read_bytes(config)
    layout = reader_layout()
    results = []
    current = {"wide": 0}  # the run in progress: its requests are wide

    async def memory(ctx):
        pending, cycle, presenting = deque(), 0, False
        offered = None  # a request offered and not yet taken
        while True:
            ctx.set(dut.o_addr.ready, int(rng.random() >= stall))
            # A response once offered stays offered until taken (stream rules).
            if not presenting and pending and pending[0][0] <= cycle:
                presenting = rng.random() >= stall
            ctx.set(dut.i_data.valid, int(presenting))
            if presenting:
                ctx.set(dut.i_data.payload, pending[0][1])
            _, _, a_valid, a_ready, addr, d_ready = await ctx.tick().sample(
                dut.o_addr.valid, dut.o_addr.ready, dut.o_addr.payload, dut.i_data.ready)
            # The reader never stalls the memory: a response finds room at once.
            assert not presenting or d_ready, "i_data.ready low with a response owed"
            if presenting and d_ready:
                pending.popleft()
                presenting = False
            # Stream rules: a request once offered stays, unchanged, until taken.
            assert offered is None or (a_valid and addr == offered), "o_addr withdrawn"
            offered = addr if a_valid and not a_ready else None
            if a_valid and a_ready:
                at = addr * pin
                if current["wide"]:
                    assert at % rb == 0, f"a wide read at word {addr}, not on {rb} bytes"
                if current["wide"] or (at % rb == 0 and rb > pin):
                    word = image.data[at:at + rb]
                    assert word.size == rb, f"read past the image at word {addr}"
                    value = int.from_bytes(word.tobytes(), "little")
                else:
                    word = image.data[at:at + pin]
                    assert word.size == pin, f"read past the image at word {addr}"
                    value = (int.from_bytes(word.tobytes(), "little")
                             | int.from_bytes(junk.bytes(rb - pin), "little") << 8 * pin)
                pending.append((cycle + latency, value))
            cycle += 1

    async def cycle(ctx, offered, beats, extra):
        """One cycle of the stream's side: random back-pressure, ``start`` low after
        it, the stream rules checked, a beat taken kept in ``beats``. Returns the beat
        still offered (or None), ``done`` and ``extra``'s value."""
        ctx.set(dut.o_stream.ready, int(rng.random() >= backpressure))
        _, _, valid, ready, payload, done, value = await ctx.tick().sample(
            dut.o_stream.valid, dut.o_stream.ready, dut.o_stream.payload, dut.done, extra)
        ctx.set(dut.start, 0)
        assert offered is None or (valid and payload == offered), "o_stream withdrawn"
        if valid and ready:
            beats.append(int(payload))
        return (payload if valid and not ready else None), done, value

    async def chain(ctx):
        for _, prepare in runs:
            if prepare is not None:
                prepare()
        current["wide"] = 0  # (the reads of two sections interleave: not checked)
        beats, cycles, offered, started, wait, starts = [], 0, None, 1, None, [0]
        ctx.set(dut.fields, layout.const(runs[0][0]))
        ctx.set(dut.start, 1)
        starting = True  # the cycle sampled is one of a start (issued is the last run's)
        while True:
            offered, done, issued = await cycle(ctx, offered, beats, dut.issued)
            if done:
                assert started == len(runs) and offered is None, "done before the last run"
                break
            if wait is None and issued and not starting and started < len(runs):
                wait = chain_gap
            starting = False
            if wait is not None:
                wait -= 1
                if wait == 0:
                    ctx.set(dut.fields, layout.const(runs[started][0]))
                    ctx.set(dut.start, 1)
                    started, wait, starting = started + 1, None, True
                    starts.append(cycles + 1)
            cycles += 1
            assert cycles < 100_000, "the reader hangs"
        data = b"".join(b.to_bytes(config.stream_bytes, "little") for b in beats)
        results.append((np.frombuffer(data, np.uint8), cycles, starts))

    async def bench(ctx):
        for fields, prepare in runs:
            if prepare is not None:
                prepare()
            current["wide"] = fields["wide"]
            ctx.set(dut.fields, layout.const(fields))
            ctx.set(dut.start, 1)
            beats, cycles, offered = [], 0, None
            while True:
                offered, done, busy = await cycle(ctx, offered, beats, dut.busy)
                assert busy == (cycles > 0), "busy is not high from start to done"
                if done:
                    assert offered is None
                    break
                cycles += 1
                assert cycles < 100_000, "the reader hangs"
            data = b"".join(b.to_bytes(config.stream_bytes, "little") for b in beats)
            results.append((np.frombuffer(data, np.uint8), cycles))
            # A gap between runs, as a sequencer would leave.
            ctx.set(dut.o_stream.ready, 0)
            await ctx.tick().repeat(2)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(memory, background=True)
    sim.add_testbench(bench if chain_gap is None else chain)
    sim.run()
    return results


def reader_runs(engine):
    """Per model of CASES[engine]: (image, [(record, fields, step input), ...])."""
    config = ENGINES[engine]
    for name, make, batch, most in CASES[engine]:
        program = compile_model(make(), config, batch=batch)
        image = build_image(program)
        rng = np.random.default_rng(batch)
        # Random bytes everywhere: tensors' padding channels and other tensors' data.
        arena = slice(image.header.arena_offset, image.nbytes)
        image.data[arena] = rng.integers(0, 256, image.data[arena].size).astype(np.uint8)
        x = rng.integers(-128, 128, (batch, *program.model.input.shape)).astype(np.int8)
        values = _tensors(program, x)
        records = iter(r for r in image.records if isinstance(r, EngineRecord))
        chosen = []
        for step in program.steps:
            if not isinstance(step, EngineStep):
                continue
            for _ in step.runs:
                record = next(records)
                fields = reader_fields(image, record)
                if fields is not None and len(chosen) < most:
                    chosen.append((record, fields, values[step.inputs[0]]))
        assert chosen, f"{engine} {name}: no record for the reader"
        yield name, image, chosen


#: The engines of two words a read (the PYNQ-Z2's shape), with thin remaps and
#: 3-channel inputs among their cases.
PAIRED = ("pynq", "pairs-k2")


def modes(config, fields):
    """``fields`` (narrow) and, where :func:`wide_fields` takes them, their wide form."""
    wide = wide_fields(config, fields)
    return [fields] if wide is None else [fields, wide]


def arrange_input(image, record, x):
    """Write a run's input ``x`` where ``record`` reads it: a tensor of the arena, or,
    when it reads a fold of the network input, the input and its folds as a program
    writes them (:meth:`~fpgacnn.host.program_image.ProgramImage.write_input`)."""
    if any(isinstance(r, FoldRecord) and r.out == record.source.tensor for r in image.records):
        image.write_input(x)
    else:
        # (a pixel-row view of the step's input holds its pixels in the same order)
        view = image.tensors[record.source.tensor].view(image.data)
        view[...] = x.reshape(view.shape)


@pytest.mark.parametrize("engine", list(ENGINES))
def test_reader_makes_the_hosts_pixel_sections(engine):
    """Every record narrow and, where it can be, wide (after its narrow run, so the
    mode changes between runs both ways), with pauses and back-pressure."""
    config = ENGINES[engine]
    kinds, wide_runs, merged_runs = set(), 0, []
    for name, image, chosen in reader_runs(engine):
        expected = []

        def prepare(record, x):
            # The arena holds the run's input when it starts (tensors share space).
            arrange_input(image, record, x)
            expected.append(pixel_section(image, record))

        runs = [(record, fields, f, x) for record, fields, x in chosen
                for f in modes(config, fields)]
        results = run_reader(config, image, [(f, partial(prepare, record, x))
                                             for record, _, f, x in runs], seed=len(name))
        for (record, narrow, fields, _), want, (got, _) in zip(runs, expected, results):
            kinds.add(record.source.kind)
            wide_runs += fields["wide"]
            merged = same_section(config, narrow, fields, got, want,
                                  f"{engine} {name} step {record.step} {fields}")
            if merged is not None:
                merged_runs.append(merged)
    assert SOURCE_STRIP in kinds
    if engine in ("k3", "k2"):
        assert kinds == {SOURCE_STRIP, SOURCE_ZERO_COLUMN, SOURCE_BATCH}
    # Wide mode is there to test exactly where the read port is wider than a word.
    assert (wide_runs > 0) == (read_bytes(config) > config.pin), wide_runs
    if read_bytes(config) > config.pin:  # pixels merged (on pynq, a 3-channel input's)
        assert merged_runs and (engine not in PAIRED or any(merged_runs)), merged_runs


def same_section(config, narrow, fields, got, want, message):
    """Assert the reader's section ``got`` (read with ``fields``) is the host's ``want``.

    Where ``wide_fields`` merged pixels (``narrow`` is the record's narrow form) the
    lanes past the run's channels carry what memory holds (their weights are 0), so
    every other byte is compared; returns then whether there were any such lanes
    (None for a section not merged).
    """
    if fields["channels"] == narrow["channels"]:
        assert_array_equal(got, want, err_msg=message)
        return None
    past = lanes_past_channels(config, narrow, len(want))
    assert not want[past].any()
    assert_array_equal(got[~past], want[~past], err_msg=message)
    return bool(past.any())


def lanes_past_channels(config, fields, nbytes):
    """The bytes of a strip's section (narrow ``fields``, one block position) that are
    lanes past the run's channels, in its read and its ``x_zp`` pixels."""
    pixel = fields["words"] * config.pin
    in_pixel = np.arange(pixel) >= fields["channels"]
    per_image = (fields["rows"] * fields["cols"] + fields["zp_pixels"]) * pixel
    image = np.zeros(per_image + fields["zero_words"] * config.pin, bool)
    image[:per_image] = np.tile(in_pixel, per_image // pixel)
    past = np.tile(image, fields["images"])
    assert past.size == nbytes
    return past


def test_the_tested_sections_have_every_part():
    """Among the records the tests run: rows of x_zp below an image (their lanes
    masked too), a zero column, a Gemm chunk's padding pixels, the padding of an
    image to a whole beat, masked lanes, several words to a pixel, a batch of 2, the
    1x1 remap (with block positions wholly past the channels: not read), a
    remapped Gemm chunk with padding pixels; and wide: several words to a pixel,
    masked lanes (the mask ending past a wide word's first pin word), masked rows of
    x_zp, a batch of 2, the 1x1 remap of a strip (positions not read) and of a Gemm
    chunk with padding pixels. (No record here gives zero words or a zero column
    wide: a wide section's word counts are even, so it needs no padding to a beat,
    and the zero columns here are of one word; the synthesized test has both.)"""
    parts = ("zp_rows", "masked_zp", "zero_column", "pad_pixels", "beat_padding", "masked",
             "words", "images", "remap", "remap_unread", "remap_gemm_padding")
    seen = dict.fromkeys(parts, False)
    seen.update(dict.fromkeys(("wide_words", "wide_masked_past_pin", "wide_masked_zp",
                               "wide_images", "wide_remap_unread", "wide_remap_gemm_padding"),
                              False))
    for engine, config in ENGINES.items():
        for name, image, chosen in reader_runs(engine):
            for record, fields, _ in chosen:
                for f in modes(config, fields):
                    kind, wide = record.source.kind, f["wide"]
                    unit = read_bytes(config) if wide else config.pin
                    masked = f["channels"] % unit != 0
                    now = dict.fromkeys(parts, False)
                    if f["blocks"] > 1:
                        now["remap"] = True
                        now["remap_unread"] = f["channels"] <= (f["blocks"] ** 2 - 1) \
                            * f["words"] * unit
                        now["remap_gemm_padding"] = kind == SOURCE_BATCH \
                            and f["last_cols"] < f["cols"]
                    now["zp_rows"] = f["rows"] > 0 and f["zp_pixels"] > 0
                    now["masked_zp"] = f["zp_pixels"] > 0 and masked
                    now["zero_column"] = kind == SOURCE_ZERO_COLUMN and f["rows"] == 0
                    now["pad_pixels"] = kind == SOURCE_BATCH and f["zero_words"] > 0
                    now["beat_padding"] = kind == SOURCE_STRIP and f["zero_words"] > 0
                    now["masked"] = masked
                    now["words"] = f["words"] > 1
                    now["images"] = f["images"] > 1
                    for part, there in now.items():
                        seen[part] |= there
                        if wide and f"wide_{part}" in seen:
                            seen[f"wide_{part}"] |= there
                    seen["wide_masked_past_pin"] |= bool(wide) \
                        and f["channels"] % unit > config.pin
    assert all(seen.values()), seen


def throughput_case():
    config = SMALL_ENGINE
    program = compile_model(random_cnn(3), config, batch=2)
    image = build_image(program)
    record = next(r for r in image.records if isinstance(r, EngineRecord)
                  and (reader_fields(image, r) or {}).get("words", 0) > 1)
    return config, image, record, reader_fields(image, record)


def expected_cycles(config, fields, nbytes, latency):
    """PixelReader's Latency section: ``max(W, B) + L + 4`` cycles from ``start`` to
    ``done``, or ``max(W, B) + 3`` when nothing is read; ``W`` in the section's words
    (R bytes when wide, so ``W = B``: a beat per cycle), less a cycle for every two
    zero words of a zero line issued as one beat (:func:`paired_beats`)."""
    word = read_bytes(config) if fields["wide"] else config.pin
    words, beats = nbytes // word, nbytes // config.stream_bytes
    words -= paired_beats(config, fields)
    return max(words, beats) + (latency + 4 if fields["rows"] else 3)


def paired_beats(config, fields, *, both=False):
    """Beats the reader issues whole, in one cycle each (its Latency section): on an
    engine of two words to a read, narrow, one word to a block position, two words
    of a line ``(row, ky)`` from a beat's start, of which at most one is read (the
    other past the channels, or of a padding pixel), or both of one pixel, side by
    side from an R-aligned address: the section walked as the counter nest does. With
    ``both``: the beats of the second kind only."""
    if (fields["wide"] or words_per_read(config) != 2 or fields["words"] != 1
            or fields["blocks"] < 2):
        return 0
    blocks, cols, rows = fields["blocks"], fields["cols"], fields["rows"]

    def reads(row, ky, col, kx):
        left = fields["channels"] - ky * fields["ky_channels"] - kx * config.pin
        return left > 0 and not (row == rows - 1 and col >= fields["last_cols"])

    def one_read(image, row, ky, first, second):
        (col, kx), (col2, _) = first, second
        address = (fields["base"] + image * fields["image_stride"] + row * fields["row_stride"]
                   + col * fields["pixel_stride"] + ky * fields["ky_stride"]
                   + kx * fields["block_stride"])
        return col == col2 and fields["block_stride"] == 1 and address % 2 == 0
    phase = beats = 0
    for image in range(fields["images"]):
        for row in range(rows):
            for ky in range(blocks):
                line = [(col, kx) for col in range(cols) for kx in range(blocks)]
                i = 0
                while i < len(line):
                    two = reads(row, ky, *line[i]) and i + 1 < len(line) \
                        and reads(row, ky, *line[i + 1])
                    if (phase == 0 and i + 1 < len(line)
                            and (not two or one_read(image, row, ky, line[i], line[i + 1]))):
                        beats, i = beats + (two or not both), i + 2
                    else:
                        phase, i = phase ^ 1, i + 1
        phase ^= (fields["zp_pixels"] * fields["words"] + fields["zero_words"]) & 1
    return beats


@pytest.mark.parametrize("engine, latency", [("k3", 1), ("k3", 6), ("k2", 2),
                                             ("words-per-beat", 3), ("pynq", 5), ("pairs-k2", 4),
                                             ("beats-per-word", 3)])
def test_one_word_per_cycle_without_stalls(engine, latency):
    """Every section of the engine's cases, narrow and (where it can be) wide, with a
    memory of latency L that never pauses and ``outstanding = L + 3``: one word (or
    beat) per cycle, a beat per cycle when wide, and a fixed number of cycles more."""
    config = ENGINES[engine]
    beats = both = claimed = 0
    for name, image, chosen in reader_runs(engine):
        for record, fields, x in chosen:
            arrange_input(image, record, x)
            runs = modes(config, fields)
            beats += paired_beats(config, fields)
            both += paired_beats(config, fields, both=True)
            results = run_reader(config, image, [(f, None) for f in runs], latency=latency,
                                 stall=0, backpressure=0, outstanding=latency + 3)
            want = pixel_section(image, record)
            for f, (got, cycles) in zip(runs, results):
                same_section(config, fields, f, got, want, f"{engine} {name} {f}")
                assert cycles == expected_cycles(config, f, got.size, latency), \
                    f"{engine} {name} step {record.step} wide {f['wide']}"
                if config.pin < config.stream_bytes:
                    # The cycle model's commands of each beat: a cycle each.
                    commands = reader_beat_commands(config, f)
                    assert len(commands) == got.size // config.stream_bytes
                    assert cycles == sum(commands) + (latency + 4 if f["rows"] else 3), \
                        f"{engine} {name} {f}"
                if beat_a_cycle(config, f):  # as the DMA would feed it, the latency later
                    assert cycles == got.size // config.stream_bytes + (
                        latency + 4 if f["rows"] else 3), f"{engine} {name} {f}"
                    claimed += not f["wide"] and config.pin < config.stream_bytes
    # Zero lines a beat a cycle: on an engine of two words a read (the 1x1 remap's
    # lines of block positions past the channels), and two read words of one R-byte
    # read (its lines of whole pairs).
    assert (beats > 0) == (engine in PAIRED), beats
    assert (both > 0) == (engine in PAIRED), both
    # and so narrow sections a beat a cycle (the cycle model's, as wide ones)
    assert (claimed > 0) == (engine in PAIRED), claimed


def constants_fields(config, image, record):
    """The section of ``record``'s constants as the sequencer sets the reader for it
    (hdl/program/sequencer.py): its words from ``const_offset`` on, one pixel, every
    byte kept, wide where its base and length are whole reads."""
    n = len(image.constants(record, warm=not record.descriptor["load_weights"]))
    base, words = record.const_offset // config.pin, n // config.pin
    fields = dict(dict.fromkeys((f.name for f in READER_FIELDS), 0), base=base, images=1,
                  rows=1, cols=1, words=words, channels=(1 << 32) - 1, blocks=1, last_cols=1)
    k = words_per_read(config)
    if k > 1 and base % k == 0 and words % k == 0:
        fields.update(base=base // k, words=words // k, wide=1)
    return fields


@pytest.mark.parametrize("engine", ["k3", "pynq", "pairs-k2", "beats-per-word"])
def test_sections_back_to_back(engine):
    """A run's constants and then its pixels, the pixels started a cycle or more after
    the constants are issued (as the sequencer does): the stream is the host's
    (``record_stream``), with pauses and back-pressure; and three sections of one
    record's pixels, narrow, wide, narrow (modes and x_zp carried with each word).
    Without pauses, the pixels end as they would alone from their start, or
    ``max(W, B)`` cycles after the constants would end alone, whichever is later
    (their reads issued while the constants drain)."""
    config = ENGINES[engine]
    chained = 0
    for name, image, chosen in reader_runs(engine):
        for n, (record, fields, x) in enumerate(chosen):
            desc = record.descriptor
            if not (desc["load_weights"] or desc["load_params"]):
                continue
            arrange_input(image, record, x)
            want = record_stream(image, record)
            const = constants_fields(config, image, record)
            for f in modes(config, fields):
                gap = 1 + (n + f["wide"]) % 3
                (got, _, _), = run_reader(config, image, [(const, None), (f, None)],
                                          chain_gap=gap, seed=n)
                if f is fields:
                    assert_array_equal(got, want, err_msg=f"{engine} {name} {n}")
                else:  # (merged pixels: lanes past the channels are memory's)
                    same_section(config, fields, f, got[len(want) - len(pixel_section(
                        image, record)):], pixel_section(image, record), f"{engine} {name}")
                alone = [c for _, c in run_reader(config, image, [(const, None), (f, None)],
                                                  stall=0, backpressure=0, latency=5,
                                                  outstanding=8)]
                (_, cycles, starts), = run_reader(
                    config, image, [(const, None), (f, None)], stall=0, backpressure=0,
                    latency=5, outstanding=8, chain_gap=gap)
                pixels = alone[1] - (5 + 4 if f["rows"] else 3)  # max(W, B)
                assert cycles == max(starts[1] + alone[1], alone[0] + pixels), \
                    (engine, name, n, f)
                # (where the pixels' reads are the bound, their issue's c + 1 cycles)
                if f["rows"] and config.pin <= config.stream_bytes:
                    assert cycles == alone[0] + pixels + gap + 1
                chained += 1
            wide = wide_fields(config, fields)
            if wide is not None:
                three = [fields, wide, dict(fields, x_zp=(fields["x_zp"] + 1) % 128)]
                (got, _, _), = run_reader(config, image, [(f, None) for f in three],
                                          chain_gap=2, seed=n)
                section = pixel_section(image, record)
                assert_array_equal(got[:len(section)], section)
                same_section(config, fields, wide, got[len(section):2 * len(section)],
                             section, f"{engine} {name} {n} wide")
                third = got[2 * len(section):]
                if fields["zp_pixels"]:
                    assert not np.array_equal(third, section)
    assert chained > 0


def _synthesized(**values):
    """Fields of a section that reads nothing: every field 0 but ``values``."""
    return dict(dict.fromkeys((f.name for f in READER_FIELDS), 0), images=1, blocks=1,
                **values)


def test_wide_and_narrow_synthesize_the_same_section():
    """A zero column (rows of x_zp, lanes past 13 channels masked) and zero words,
    the parts of a section that no memory read gives: the same bytes in both modes,
    a beat per cycle when wide."""
    config = ENGINES["pynq"]  # two words to a read, a beat
    narrow = _synthesized(words=4, channels=13, x_zp=-7, zp_pixels=3, zero_words=4)
    wide = wide_fields(config, narrow)
    assert wide is not None and (wide["words"], wide["zero_words"]) == (2, 2)
    pixel = np.r_[np.full(13, -7 & 0xFF), np.zeros(3)].astype(np.uint8)
    want = np.r_[np.tile(pixel, 3), np.zeros(4 * config.pin, np.uint8)]
    image = build_image(compile_model(random_cnn(0), config))  # a memory nothing reads
    results = run_reader(config, image, [(narrow, None), (wide, None)], latency=2, stall=0,
                         backpressure=0, outstanding=5)
    for f, (got, cycles) in zip((narrow, wide), results):
        assert_array_equal(got, want)
        assert cycles == expected_cycles(config, f, got.size, 2)
    assert results[1][1] == want.size // config.stream_bytes + 3


@pytest.mark.parametrize("engine", PAIRED)
def test_merged_pixels_meet_zero_weights_past_the_channels(engine):
    """What makes merged reads exact: every run whose pixels wide_fields merges has
    weight 0 in every lane past its channels (those lanes then carry memory's bytes)."""
    config = ENGINES[engine]
    contract = engine_contract(config)
    merged = 0
    for name, image, chosen in reader_runs(engine):
        for record, fields, _ in chosen:
            wide = wide_fields(config, fields)
            if wide is None or wide["channels"] == fields["channels"]:
                continue
            merged += 1
            desc = record.descriptor
            wins = 1 if desc.get("depthwise", 0) else desc["ci_tiles"]
            params = desc["co_tiles"] * contract.param_beats * config.stream_bytes
            word = contract.weight_beats * config.stream_bytes
            words = np.asarray(image.constants(record))[params:params + desc["co_tiles"] * wins
                                                         * word].reshape(-1, word)
            taps = config.pout * config.kmax ** 2 * config.pin
            for i, w in enumerate(words):
                ci = i % wins if wins > 1 else (i if desc.get("depthwise", 0) else 0)
                lanes = w[:taps].reshape(config.pout, config.kmax ** 2, config.pin)
                past = ci * config.pin + np.arange(config.pin) >= fields["channels"]
                assert not lanes[:, :, past].any(), (name, record.step, i)
    assert merged, "no merged run among the cases"


def test_wide_fields_take_only_whole_read_words():
    """Where the read port is two words (the PYNQ-Z2's shape), a section of an odd
    number of words per pixel (strips of 4 and 9 channels: 1 and 3 words) is wide
    only with its pixels merged two to one (back to back in memory, an even number
    to a row); where the port is one word, no section is, even one of 2 words per
    pixel."""
    config = ENGINES["pynq"]
    image = build_image(compile_model(random_cnn(1), config))
    sections = [(r, reader_fields(image, r)) for r in image.records
                if isinstance(r, EngineRecord)]
    odd = [(r, f) for r, f in sections if f is not None and f["words"] % 2]
    assert {(r.source.c1 - r.source.c0, f["words"]) for r, f in odd} >= {(4, 1), (9, 3)}
    merged = 0
    for _, f in odd:
        wide = wide_fields(config, f)
        if wide is None:
            assert f["pixel_stride"] != f["words"] or f["blocks"] != 1 or f["cols"] % 2
        else:
            merged += 1
            assert (f["pixel_stride"], f["blocks"]) == (f["words"], 1)
            assert (wide["words"], wide["cols"], wide["pixel_stride"], wide["channels"]) == \
                (f["words"], f["cols"] // 2, f["words"], 2 * f["words"] * config.pin)
    assert 0 < merged < len(odd), (merged, len(odd))
    assert any(wide_fields(config, f) is not None for _, f in sections if f is not None)
    assert read_bytes(SMALL_ENGINE) == SMALL_ENGINE.pin
    image = build_image(compile_model(random_cnn(1), SMALL_ENGINE))
    sections = [reader_fields(image, r) for r in image.records if isinstance(r, EngineRecord)]
    assert any(f is not None and f["words"] == 2 for f in sections)
    assert all(wide_fields(SMALL_ENGINE, f) is None for f in sections)


@pytest.mark.parametrize("engine", ["k3", "pynq", "beats-per-word"])
def test_responses_are_as_wide_as_the_read_port(engine):
    config = ENGINES[engine]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        dut = PixelReader(config)
        assert dut.i_data.payload.shape() == unsigned(8 * read_bytes(config))
        assert dut.o_addr.payload.shape() == unsigned(ADDRESS_BITS)
        del dut
        gc.collect()


def test_fewer_words_in_flight_than_the_latency_slow_it_down():
    config, image, record, fields = throughput_case()
    [(got, cycles)] = run_reader(config, image, [(fields, None)], latency=8, stall=0,
                                 backpressure=0, outstanding=4)
    assert_array_equal(got, pixel_section(image, record))
    assert cycles > 2 * (got.size // config.pin)


def _records(model, config, batch=1):
    image = build_image(compile_model(model, config, batch=batch))
    return image, image.records


def test_fold_unaligned_channels_and_host_layers_are_not_for_the_reader():
    rng = np.random.default_rng
    # Folded taps of a tensor the network computed (a 5x5 kernel on a 3x3 engine).
    image, records = _records(folded_cnn("middle"), SMALL_ENGINE)
    folded = [r for r in records if isinstance(r, EngineRecord) and r.source.fold]
    assert folded and all(reader_fields(image, r) is None for r in folded)
    # Folded taps of the network input (7x7): an input fold, then plain 1x1 strips of it.
    image, records = _records(convolution_model(rng(2), *CONVOLUTIONS[2]), SMALL_ENGINE)
    assert isinstance(records[0], FoldRecord)
    runs = [r for r in records if isinstance(r, EngineRecord)]
    assert all(r.source.tensor == records[0].out and not r.source.fold for r in runs)
    assert all(reader_fields(image, r)["blocks"] == SMALL_ENGINE.kmax for r in runs)
    # The 1x1 remap of a strip is the reader's (blocks of kmax x kmax positions).
    image, records = _records(convolution_model(rng(7), *CONVOLUTIONS[7]), SMALL_ENGINE)
    assert all(r.layout.remap for r in records)
    assert all(reader_fields(image, r)["blocks"] == SMALL_ENGINE.kmax for r in records)
    # Groups of 6 channels on 4 lanes: every other group starts mid-word.
    image, records = _records(convolution_model(rng(6), *CONVOLUTIONS[6]), SMALL_ENGINE)
    unaligned = [r for r in records if r.source.c0 % SMALL_ENGINE.pin]
    aligned = [r for r in records if not r.source.c0 % SMALL_ENGINE.pin]
    assert unaligned and aligned
    assert all(reader_fields(image, r) is None for r in unaligned)
    assert all(reader_fields(image, r) is not None for r in aligned)
    # A Gemm run through the remap is the reader's; the host layers of a CNN are not.
    image, records = _records(random_cnn(1), SMALL_ENGINE)
    gemm = [r for r in records if isinstance(r, EngineRecord) and r.source.kind == SOURCE_BATCH]
    assert gemm and all(r.layout.remap for r in gemm)
    assert all(reader_fields(image, r)["blocks"] == SMALL_ENGINE.kmax for r in gemm)
    host = [r for r in records if isinstance(r, HostRecord)]
    assert host and all(reader_fields(image, r) is None for r in host)


def test_fields_fit_their_widths_and_are_all_given():
    _, _, _, fields = throughput_case()
    assert set(fields) == {f.name for f in READER_FIELDS}
    for f in READER_FIELDS:
        lo, hi = (-(1 << f.width - 1), 1 << f.width - 1) if f.signed else (0, 1 << f.width)
        assert lo <= fields[f.name] < hi, f.name


@pytest.mark.parametrize("bad", [1, 0, 4.0, True])
def test_outstanding_is_checked(bad):
    # The component object exists (unelaborated) even though __init__ raised.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        with pytest.raises(TypeError,
                           match=rf"^outstanding must be an integer of at least 2, not {bad!r}$"):
            PixelReader(SMALL_ENGINE, outstanding=bad)
        gc.collect()
