"""The network input's layout in the arena (core.arena.input_pixel_bytes).

The arena pads a pixel to ``lcm(pin, pout)`` bytes so that one layer's output
words are the next layer's input words. The network's input and its folds
are written by the host, not by the engine: where only engine runs read them
their pixels are whole input words, ``ceil(C / pin) * pin`` bytes. On an
engine whose ``pout`` does not divide ``pin`` (the ZCU104's: pin 8, pout 16)
that puts the words of neighbouring pixels side by side, so the pixel reader
takes the first layer's input a beat a cycle instead of one word of every
``lcm / pin`` (MobileNetV1's and ResNet-8's first layers on the ZCU104).
Tested: the layout on every compile engine, with and without a reader other
than the engine; on the RTL, through the sequencer, bit-exact cold and warm
with the first run a beat a cycle and its cycles the model's.
"""

import math

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from fpgacnn.core.arena import input_pixel_bytes, pixel_bytes
from fpgacnn.core.config import EngineConfig
from fpgacnn.host.accelerator import Accelerator
from fpgacnn.host.compiler import compile_model
from fpgacnn.host.cycle_model import sequenced_run_cycles
from fpgacnn.host.program_image import EngineRecord, FoldRecord, build_image
from fpgacnn.host.reference import ReferenceBackend

from limit_layers import COMPILE_CONFIGS
from random_models import _Builder
from test_sequencer_rtl import _cycles_as_modelled

#: Output words (pout 8) twice the input words (pin 4), 64-bit beats of two input
#: words stored both a cycle, as the ZCU104's engine in small: the arena's
#: pixels are 8 bytes, the input's 4 a word.
WIDE_OUT = EngineConfig(pin=4, pout=8, kmax=3, stream_width=64, max_width=16,
                        max_channels=16, max_out_channels=16, writer_words=2)


def _convs_on_input(seed, channels, size=8, kernel=3):
    """conv -> conv -> global pool -> Gemm on a ``channels``-channel input that only
    the first convolution reads."""
    b = _Builder(seed, (channels, size, size))
    b.conv(6, kernel, pad=kernel // 2)
    b.conv(5, 1, stride=2)
    b.gap()
    b.flatten()
    b.gemm(3)
    return b.model(f"convs_on_input_{seed}")


def _add_on_input(seed, channels, size=6):
    """A residual block whose Add reads the input itself (not only the engine)."""
    b = _Builder(seed, (channels, size, size))
    b.residual()
    return b.model(f"add_on_input_{seed}")


@pytest.mark.parametrize("name", list(COMPILE_CONFIGS) + ["wide-out"])
@pytest.mark.parametrize("channels", [1, 3, 4, 5])
def test_an_input_only_the_engine_reads_takes_whole_input_words(name, channels):
    config = WIDE_OUT if name == "wide-out" else COMPILE_CONFIGS[name]
    # (acc20's 20-bit accumulator takes one input tile: no 3x3 taps folded.)
    model = _convs_on_input(channels, channels, kernel=1 if name == "acc20" else 3)
    image = build_image(compile_model(model, config, batch=2))
    want = -(-channels // config.pin) * config.pin
    assert input_pixel_bytes(config, channels) == want
    assert image.input.cp == want
    assert image.input.image_stride >= image.input.height * image.input.width * want
    # The input's folds (a thin input's taps folded into channels) too; every other
    # tensor keeps the arena's pixels, whole output words.
    folds = {r.out for r in image.records if isinstance(r, FoldRecord)}
    lanes = math.lcm(config.pin, config.pout)
    for i, place in enumerate(image.tensors):
        if i in folds:
            assert place.cp == input_pixel_bytes(config, place.channels)
        elif place is not image.input:
            assert place.cp % lanes == 0 and place.cp == pixel_bytes(config, place.channels)


@pytest.mark.parametrize("name", [n for n in COMPILE_CONFIGS if n != "acc20"] + ["wide-out"])
def test_an_input_an_add_reads_keeps_the_arena_pixels(name):
    """The Add's operands take one layout (the fused Add reads its ``b`` as the
    convolution writes ``a``): an input it reads keeps ``lcm(pin, pout)``. (Not on
    acc20, whose accumulator takes no 3x3 convolution of four channels.)"""
    config = WIDE_OUT if name == "wide-out" else COMPILE_CONFIGS[name]
    channels = 4
    image = build_image(compile_model(_add_on_input(1, channels), config, batch=1))
    assert image.input.cp == pixel_bytes(config, channels)


def test_the_first_run_reads_the_input_a_beat_a_cycle_on_the_rtl(program_boards):
    """On an engine of output words twice its input words, networks of 1 to 4 input
    channels run through the sequencer bit-exact, cold and warm; the first
    convolution's reader is wide (two input words a beat: with the arena's 8-byte
    pixels it read one word of each) and the run takes the model's cycles."""
    board = program_boards(WIDE_OUT)
    board.set_memory_timing(latency=40, bytes_per_cycle=64.0)
    try:
        for seed, channels in enumerate((1, 3, 4)):
            model = _convs_on_input(seed, channels)
            acc = Accelerator(model, config=WIDE_OUT, board=board)
            rng = np.random.default_rng(seed)
            x8 = rng.integers(-128, 128, (2, *model.input.shape)).astype(np.int8)
            want = ReferenceBackend().run_int8(model, x8)
            assert_array_equal(acc.run_int8(x8), want, err_msg=f"{model.name} (cold)")
            assert_array_equal(acc.run_int8(x8), want, err_msg=f"{model.name} (warm)")
            assert acc.report["weights"] == "resident"
            sequenced = acc.sequenced(2)
            assert sequenced.image.input.cp == WIDE_OUT.pin
            first = next(i for i, r in enumerate(sequenced.image.records)
                         if isinstance(r, EngineRecord))
            assert sequenced.table_word(first, "reader_wide", warm=True), model.name
            busy = sequenced.counter_words(first)[0]
            desc = sequenced.image.records[first].warm_descriptor()
            writer = sequenced.table_writer_fields(first, warm=True)
            reader = sequenced.table_reader_fields(first, warm=True)
            assert busy == sequenced_run_cycles(WIDE_OUT, desc, reader=reader,
                                                writer=writer), model.name
            assert _cycles_as_modelled(acc, 40, vector=True)[0] > 0
    finally:
        board.set_memory_timing()
