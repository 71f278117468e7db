"""``Accelerator.run`` on the sequencer, the host's path kept per input shape (issue 16's
host share), on the ProgramEngine RTL in Verilator.

A float model (the digits example, its softmax head included) whose program
runs in one start: batches of 1 and 3, each output what the reference
backend gives bit for bit, inputs past the int8 range at both ends and
halfway between codes, a float64 batch as its float32 cast, the report's
counters each run's own; after a shape has run, an input of another dtype
or shape, an empty batch and a NaN are each refused with their one line,
and the next good batch runs as before.
"""

import re

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from fpgacnn.core.errors import InputError
from fpgacnn.host.accelerator import Accelerator, open_board
from fpgacnn.host.examples import load_example
from fpgacnn.host.onnx_import import load_onnx
from fpgacnn.host.reference import ReferenceBackend

from conftest import SMALL_ENGINE


@pytest.fixture(scope="module")
def digits_on_board():
    board = open_board("sim", SMALL_ENGINE, sequencer=True)
    digits = load_example("digits")
    acc = Accelerator(digits.model, config=SMALL_ENGINE, board=board)
    yield digits, acc
    board.close()


def _batches(digits):
    x = digits.x
    spec = load_onnx(digits.model).input
    scale, zp = np.float32(spec.scale), spec.zero_point
    ties = ((np.arange(x[:1].size) % 300 - 150 - zp + 0.5) * scale).astype(np.float32)
    return [x[:1], x[1:4], (x[4:5] * 40).astype(np.float32), -x[5:8] * 9,
            ties.reshape(x[:1].shape), x[8:9].astype(np.float64), x[9:10]]


def test_run_is_bit_exact_batch_after_batch(digits_on_board):
    digits, acc = digits_on_board
    assert all(acc.sequenced(1).one_start.values())
    for k, x in enumerate(_batches(digits)):
        y = acc.run(x)
        assert y.dtype == np.float32
        assert_array_equal(y, ReferenceBackend().run(acc.model, x), err_msg=f"batch {k}")
        report = acc.report
        assert report["batch"] == len(x) and report["sequencer"]["sequencer_starts"] == 1
        assert report["host_seconds"] > 0 and report["total_cycles"] > 0


def test_a_changed_input_is_refused_with_its_line(digits_on_board):
    digits, acc = digits_on_board
    x = digits.x[:1]
    acc.run(x)  # the shape's path kept
    name, shape = acc.model.name, digits.x.shape[1:]
    with pytest.raises(InputError, match=rf"^input has dtype int8, model '{name}' input "
                                         r"'.*' takes float32$"):
        acc.run(x.astype(np.int8))
    with pytest.raises(InputError, match=re.escape(f"input has shape (1, {shape[0] + 1}")):
        acc.run(np.zeros((1, shape[0] + 1, *shape[1:]), np.float32))
    with pytest.raises(InputError, match=r"^input has an empty batch$"):
        acc.run(x[:0])
    bad = x.copy()
    bad.reshape(-1)[7] = np.nan
    with pytest.raises(InputError, match=r"^input '.*' holds 1 NaN or infinite value\(s\)"):
        acc.run(bad)
    assert_array_equal(acc.run(x), ReferenceBackend().run(acc.model, x))
