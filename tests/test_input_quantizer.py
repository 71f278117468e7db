"""The host's quantizing and dequantizing in few numpy calls (issue 16's host share).

:class:`~fpgacnn.host.input_quantizer.InputQuantizer` (the rounding by a
float32 addition, the clip only where a code could leave int8, the codes
copied a channel at a time into a strided arena view) and the tables of
:meth:`~fpgacnn.host.model.QuantizedModel.dequantize_output` (the float head
folded in) give the formulas' values bit for bit: float32 ``clip(rint(x /
scale) + zp, -128, 127)`` and ``head((y - zp) * scale)``, on seeded random
inputs of many shapes, exact ties (a power-of-two scale, odd and even zero
points), the clamps at both ends and the float32 neighbours of every
bound; anything else (a NaN, a wrong shape or dtype) is left to the checked
path, which refuses it with its one line.
"""

import re

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from fpgacnn.core.errors import InputError
from fpgacnn.host.input_quantizer import InputQuantizer
from fpgacnn.host.model import FloatHead, QuantizedModel, TensorSpec

from quantize_edges import quantize_edges

SHAPES = [(3, 32, 32), (1, 49, 10), (640,), (5, 4, 3), (9, 2, 2)]
SCALES = [2.0 ** -4, 0.0330853, 3.0]
ZERO_POINTS = [-128, -7, 0, 6, 127]


def _formula(x, scale, zp):
    scale = np.float32(scale)
    with np.errstate(over="ignore"):
        q = np.rint(x.astype(np.float32) / scale)
    return np.clip(q + np.float32(zp), -128, 127).astype(np.int8)


def _inputs(shape, scale, zp, seed):
    """Batches of 1 to 3 images: in range, past both ends, exact ties, the edges."""
    rng = np.random.default_rng(seed)
    per = int(np.prod(shape))
    s = float(np.float32(scale))
    inside = rng.uniform((-127 - zp) * s, (126 - zp) * s, (2, *shape))
    wide = rng.normal(0, 200 * s, (3, *shape))
    ties = (rng.integers(-140, 140, (1, *shape)) + 0.5) * s  # exact ties where s is 2**-k
    edges = np.resize(np.array(quantize_edges(s, zp), np.float32), per).reshape(1, *shape)
    huge = np.full((1, *shape), 3e38, np.float32)
    huge.reshape(-1)[::2] = -3e38
    return [a.astype(np.float32) for a in (inside[:1], inside, wide, ties, edges, huge,
                                           np.zeros((1, *shape)))]


def _arena(x, cp):
    """A program arena's ``(N, H, W, cp)`` pixels (flat: ``(N, cp)``) full of 99, and
    the input's ``(N, C, H, W)`` view of it."""
    n, c = x.shape[:2]
    if x.ndim == 2:
        arena = np.full((n, cp), 99, np.int8)
        return arena, arena[:, :c]
    arena = np.full((n, *x.shape[2:], cp), 99, np.int8)
    return arena, arena[..., :c].transpose(0, 3, 1, 2)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("zp", ZERO_POINTS)
def test_quantizing_is_the_formula_into_new_arrays_and_arena_views(shape, scale, zp):
    quantizer = InputQuantizer(shape, scale, zp)
    for k, x in enumerate(_inputs(shape, scale, zp, seed=len(shape) + zp + 128)):
        want = _formula(x, scale, zp)
        bound = quantizer.no_overflow
        fast = bool(np.abs(x).max() <= bound)
        got = quantizer(x)
        if not fast:  # past the overflow bound: the checked path's, with its guard
            assert got is None
            with quantizer.overflow_guard(float(x.min()), float(x.max())):
                got = quantizer.codes(x, float(x.min()), float(x.max()))
        assert got.dtype == np.int8
        assert_array_equal(got, want, err_msg=f"input {k}")
        for cp in sorted({shape[0], shape[0] + 1, -(-shape[0] // 4) * 4 + 4}):
            arena, view = _arena(x, cp)
            # Twice into the same view: the second through the buffers kept for it.
            for again in range(2):
                view[...] = -1 if again else 0
                assert (quantizer(x, out=view) if fast
                        else quantizer.codes(x, float(x.min()), float(x.max()), view)) is view
                assert_array_equal(view, want, err_msg=f"input {k} cp {cp} pass {again}")
            assert (arena[..., shape[0]:] == 99).all()  # the padding channels untouched


def test_the_next_input_into_the_same_view_is_its_own():
    """The buffers kept for a view hold nothing of the input before."""
    quantizer = InputQuantizer((3, 8, 8), 0.05, -3)
    arena, view = _arena(np.zeros((2, 3, 8, 8), np.float32), 4)
    rng = np.random.default_rng(5)
    for _ in range(5):
        x = rng.normal(0, 3, (2, 3, 8, 8)).astype(np.float32)
        quantizer(x, out=view)
        assert_array_equal(view, _formula(x, 0.05, -3))


def test_what_the_quantizer_does_not_take_is_left_to_the_checked_path():
    quantizer = InputQuantizer((3, 4, 4), 0.1, 2)
    x = np.ones((2, 3, 4, 4), np.float32)
    for bad in (x.astype(np.float64), x.astype(np.int8), x[:, :2], x[:0], x[0], list(x),
                x.astype(">f4")):
        assert quantizer(bad) is None
    assert quantizer(x, out=np.zeros((3, 3, 4, 4), np.int8)) is None
    for value in (np.nan, np.inf, -np.inf):
        y = x.copy()
        y[1, 2, 3, 0] = value
        assert quantizer(y) is None


@pytest.fixture
def model():
    spec_in = TensorSpec("x", (3, 4, 4), np.dtype(np.float32), 0.1, 2)
    spec_out = TensorSpec("y", (10,), np.dtype(np.float32), 0.05, -19)
    return QuantizedModel("m", [], spec_in, spec_out, "x", "x")


def test_the_model_refuses_what_it_always_did(model):
    x = np.ones((2, 3, 4, 4), np.float32)
    model.quantize_input(x)  # the quantizer made
    with pytest.raises(InputError, match=r"^input has dtype int8, model 'm' input 'x' takes "
                                         r"float32$"):
        model.quantize_input(x.astype(np.int8))
    with pytest.raises(InputError, match=re.escape("input has shape (2, 3, 4, 3), model 'm' "
                                                   "input 'x' takes (N, 3, 4, 4)")):
        model.quantize_input(x[..., :3])
    with pytest.raises(InputError, match=r"^input has an empty batch$"):
        model.quantize_input(x[:0])
    with pytest.raises(InputError, match=r"^cannot quantize an input of shape \(2, 3, 4, 4\) "
                                         r"into one of \(1, 3, 4, 4\)$"):
        model.quantize_input(x, out=np.zeros((1, 3, 4, 4), np.int8))
    y = x.copy()
    y[1, 0, 0, 2] = np.nan
    with pytest.raises(InputError, match=r"^input 'x' holds 1 NaN or infinite value\(s\), the "
                                         r"first at index \(1, 0, 0, 2\)"):
        model.quantize_input(y)
    # float64 and other layouts: the checked path, the same codes.
    rng = np.random.default_rng(2)
    x = rng.normal(0, 9, (3, 3, 4, 4))
    want = _formula(x, 0.1, 2)
    assert_array_equal(model.quantize_input(x), want)
    assert_array_equal(model.quantize_input(np.asfortranarray(x.astype(np.float32))), want)
    assert_array_equal(model.quantize_input(x.astype(">f4")), want)


def _dequantized(model, y):
    """The formula, as written: float32 ``(y - zp) * scale``, then the head."""
    d = ((y.astype(np.int32) - model.output.zero_point).astype(np.float32)
         * np.float32(model.output.scale)).astype(np.float32)
    with np.errstate(over="ignore"):  # a Sigmoid of the least codes (0, as the head has it)
        return d if model.head is None else model.head.apply(d)


def _codes(width, seed):
    """int8 outputs of ``width`` codes a row: every pair of codes (a row's greatest and
    another), random rows, rows of one code, every code."""
    rng = np.random.default_rng(seed)
    codes = np.arange(-128, 128, dtype=np.int8)
    pairs = np.stack(np.meshgrid(codes, codes), -1).reshape(-1, 2)
    return [np.resize(pairs, (len(pairs), width)),
            rng.integers(-128, 128, (2000, width)).astype(np.int8),
            np.repeat(codes[:, None], width, 1),
            np.resize(codes, (-(-256 // width), width))]


@pytest.mark.parametrize("head", [None, ("Softmax", (1,)), ("Sigmoid", (1,)),
                                  ("Softmax", (1, 2))], ids=str)
@pytest.mark.parametrize("scale,zp", [(0.0331611, -19), (2.0 ** -3, 0), (0.7, 127),
                                      (-0.05, 3)])
def test_dequantizing_tables_are_the_formula_bit_for_bit(head, scale, zp):
    """Softmax over one axis of a positive scale through its (256, 256) table, Sigmoid
    through its 256 values, the others as written after the gather."""
    shape = (10, 3) if head and head[1] == (1, 2) else (10,)
    model = QuantizedModel(
        "m", [], TensorSpec("x", (4,), np.dtype(np.float32), 0.1, 0),
        TensorSpec("y", shape, np.dtype(np.float32), scale, zp), "x", "x",
        head=None if head is None else FloatHead(head[0], "h", head[1]))
    for y in _codes(int(np.prod(shape)), seed=len(shape)):
        y = y.reshape(len(y), *shape)
        got = model.dequantize_output(y)
        assert got.dtype == np.float32
        assert_array_equal(got, _dequantized(model, y))
        # A strided view of the codes, as the arena's output is.
        arena = np.zeros((len(y), *shape[:-1], shape[-1] + 2), np.int8)
        arena[..., :shape[-1]] = y
        assert_array_equal(model.dequantize_output(arena[..., :shape[-1]]), got)
        # Row by row (batch 1: one row's own path).
        for k in range(0, len(y), 97):
            assert_array_equal(model.dequantize_output(y[k:k + 1]), got[k:k + 1])
    zeros = np.zeros((2, *shape), np.int8)
    assert_array_equal(model.dequantize_output(zeros.tolist()), _dequantized(model, zeros))


def test_a_changed_output_spec_or_head_makes_new_tables(model):
    y = np.arange(-5, 5, dtype=np.int8)[None, :]
    first = model.dequantize_output(y)
    model.head = FloatHead("Softmax", "h")
    assert_array_equal(model.dequantize_output(y), model.head.apply(first))
    model.output = TensorSpec("y", (10,), np.dtype(np.float32), 0.5, 0)
    assert_array_equal(model.dequantize_output(y), _dequantized(model, y))
