"""Which residual Adds the run table fuses into the convolution before them (issue 16,
docs/program.md "The residual Add fused into the convolution"), without the RTL.

An Add whose operand is the output of the engine records just before it,
read by nothing else, fuses: its record is RECORD_SKIP, the runs write the
Add's output with the Add's integers (its operands swapped where the
convolution makes the Add's second input). Each condition the run table
checks keeps the Add a vector record when it fails, one at a time: an
engine without the stage, a conv output read twice, the output overlapping
the runs' input or b, operands of another layout, b not a whole number of
the stage's units away.
"""

import dataclasses

import pytest

from fpgacnn.core.config import EngineConfig
from fpgacnn.core.fused_add_fields import fused_add_unit, has_fused_add
from fpgacnn.core.sequencer import RECORD_SKIP, RECORD_VECTOR
from fpgacnn.host.compiler import compile_model
from fpgacnn.host.fused_add import fusions
from fpgacnn.host.program_image import VectorRecord, build_image
from fpgacnn.host.sequencer_table import SequencerProgram

from conftest import SMALL_ENGINE
from random_models import random_cnn, shared_residual_cnn

#: pin 12: R = 12 bytes, not a power of two: no fused Add is built.
PIN12 = EngineConfig(pin=12, pout=4, kmax=3, stream_width=32, max_width=16,
                     max_channels=24, max_out_channels=16)


def _image(model, config=SMALL_ENGINE, batch=1):
    return build_image(compile_model(model, config, batch=batch))


def _add(image):
    return next(i for i, r in enumerate(image.records)
                if isinstance(r, VectorRecord) and r.has_b)


@pytest.mark.parametrize("batch", [1, 2])
def test_an_add_after_its_operands_convolution_fuses(batch):
    image = _image(random_cnn(0), batch=batch)
    i = _add(image)
    add = image.records[i]
    assert add.fusable
    (fusion,) = fusions(image)
    assert fusion.add == i and fusion.runs[-1] == i - 1 and fusion.out == add.out
    # The convolution makes the Add's second input: the stage's a is the Add's b.
    assert image.records[i - 1].dest.tensor == add.b
    f = fusion.fields
    assert (f["za"], f["zb"], f["ma"], f["mb"]) == (add.zb, add.za, add.mb, add.ma)
    assert f["b_delta"] == image.tensors[add.a].offset - image.tensors[add.out].offset
    assert f["b_delta"] % fused_add_unit(SMALL_ENGINE) == 0
    table = SequencerProgram(image)
    assert table.fused[False] == table.fused[True] == [fusion]
    assert table.table_word(i, "op") == RECORD_SKIP
    assert table.predicted_cycles(i) == 0


def test_an_engine_without_the_stage_keeps_the_add_a_vector_record():
    assert not has_fused_add(PIN12)
    image = _image(random_cnn(0), PIN12)
    i = _add(image)
    assert image.records[i].fusable  # the program allows it, the engine has no stage
    assert fusions(image) == []
    assert SequencerProgram(image).table_word(i, "op") == RECORD_VECTOR


def test_a_convolution_output_read_twice_fuses_nothing():
    image = _image(shared_residual_cnn(0))
    adds = [r for r in image.records if isinstance(r, VectorRecord) and r.has_b]
    assert len(adds) == 2 and not any(r.fusable for r in adds)
    assert fusions(image) == []


def _moved(image, tensor, **change):
    image.tensors[tensor] = dataclasses.replace(image.tensors[tensor], **change)
    return image


@pytest.mark.parametrize("case", ["output on the input", "output on b", "another layout",
                                  "b off a unit"])
def test_each_check_keeps_the_add_unfused(case):
    image = _image(random_cnn(0))
    i = _add(image)
    add, run = image.records[i], image.records[i - 1]
    t = image.tensors
    if case == "output on the input":
        _moved(image, add.out, offset=t[run.source.tensor].offset)
    elif case == "output on b":
        _moved(image, add.out, offset=t[add.a].offset + 4)
    elif case == "another layout":
        _moved(image, add.a, cp=t[add.a].cp + 4)
    else:
        _moved(image, add.a, offset=t[add.a].offset + 1)
    assert fusions(image) == []


def test_an_add_after_a_fused_block_on_the_vector_lanes_is_not_fused():
    """Where a fused block's depthwise half requantizes on the vector unit's lanes
    (docs/engine.md, "Increment 6"), the fused Add, which computes on them too, is
    not fused into the block's runs: the Add stays a vector record."""
    from fpgacnn.core.fused_block import depthwise_on_vector_lanes
    cfg = EngineConfig(pin=4, pout=4, kmax=3, stream_width=64, max_width=16, max_channels=32,
                       max_out_channels=16, spare_bank=2, pixel_pairs=1, fused_blocks=2)
    assert depthwise_on_vector_lanes(cfg) and has_fused_add(cfg)
    image = _image(random_cnn(0), cfg)
    (fusion,) = fusions(image)  # a plain convolution's runs: the Add fuses
    for i in fusion.runs:  # the same runs as a fused block's
        image.records[i] = dataclasses.replace(
            image.records[i], descriptor=dict(image.records[i].descriptor, fused=1))
    assert fusions(image) == []  # (the run table's, SequencerProgram's, reads these)
    assert image.records[fusion.add].fusable  # the program allows it, the lanes are taken
