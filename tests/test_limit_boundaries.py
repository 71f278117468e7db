"""Limit-boundary sweeps (DESIGN.md section 6, tier 4): bit-exact or refused, never wrong.

Layers from tests/limit_layers.py sit just under, at and just over every
capacity and range of the engine contract. On the RTL (the simulated board,
one Verilator build and one board per configuration) each must either equal
the reference backend bit for bit or be refused by the compiler with a
``MappingError`` naming the layer and the limit, before anything reaches the
board; which of the two is predicted per layer (both are right for left
padding over ``kmax - 1``: ``LimitCase.may_run``). Stream back-pressure on
the simulated board (input beats withheld, output not ready) varies per
layer. A compile-only test checks many more layers, on more configurations,
without a simulator: every run's descriptor against the contract, and the
whole tiled program through the numpy engine model.

Grouped and depthwise layers (``GROUPED_TARGETS``) go through the same
checks, plus how they are mapped: block-diagonal views, or depthwise runs
only where the contract has them, their taps folded into channels where
the views cannot run as they are, and only there (``views_must_fold``,
``views_fold``); and a resident
program's warm inference (weights kept at their ``weight_base``) is bit-exact
too.

Environment:

- ``FPGACNN_LIMIT_SEED`` (default 0): the base seed of every generated layer;
  a failure prints the seed and index that rebuild its layer.
- ``FPGACNN_LIMIT_LAYERS`` (default 2000): layers per configuration of the
  ``slow`` sweep (``pytest -m slow tests/test_limit_boundaries.py``).
"""

from dataclasses import replace
import os
import re

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from fpgacnn.core.contract import descriptor_violations, engine_contract
from fpgacnn.core.errors import MappingError
from fpgacnn.host.accelerator import Accelerator, open_board
from fpgacnn.host.compiler import EngineStep, compile_model
from fpgacnn.host.reference import ReferenceBackend

from conftest import DEEP_PARAMS_ENGINE
from engine_model_helpers import emulate_engine
from limit_layers import (COMPILE_CONFIGS, CONFIGS, CONV_TARGETS, GROUPED_TARGETS,
                          REFUSAL_PATTERNS, SIDES, build_model, case_input,
                          depthwise_run_channels, expected_refusal, layer_case, limit_case,
                          limit_cases, mapping_kinds, regression_96_case, resident_possible,
                          single_run_fits, single_run_fits_as, fold_limit_layers, views_fold,
                          views_must_fold)

SEED = int(os.environ.get("FPGACNN_LIMIT_SEED", "0"))
#: Layers per configuration on the RTL in the default run (every target on
#: every side about three times, with different free parameters).
DEFAULT_LAYERS = 135
#: Layers per configuration of the slow sweep.
SWEEP_LAYERS = int(os.environ.get("FPGACNN_LIMIT_LAYERS", "2000"))
#: Layers per configuration of the compile-only check.
COMPILE_LAYERS = 150
#: Grouped and depthwise layers per configuration: on the RTL in the default
#: run (every target on every side once), and in the compile-only check.
GROUPED_LAYERS = len(GROUPED_TARGETS) * len(SIDES)
GROUPED_COMPILE_LAYERS = 2 * GROUPED_LAYERS

#: ``(config, seed, index) -> reason`` of default-run layers known to come out
#: wrong or to raise: xfail(strict), the smallest reproducer in the reason.
#: (Empty: the two failures these tests found are fixed: strips of
#: padding-only columns that raised InputError('empty tensor') (compiler;
#: test_strip_of_padding_only keeps its reproducers), and output rows of
#: bottom padding only, after which the RTL lost a row of the next image
#: (packing streams rows of x_zp; reproducers from seeds 11 and 3 in
#: test_rows_of_bottom_padding_then_the_next_image).)
KNOWN_WRONG = {}


@pytest.fixture(scope="module")
def boards():
    """``boards(key)``: one simulated board per configuration, opened on first use."""
    opened = {}

    def board(key):
        if key not in opened:
            opened[key] = open_board("sim", COMPILE_CONFIGS[key])
        return opened[key]

    yield board
    for b in opened.values():
        b.close()


def _check_refusal(case, message, where):
    assert case.expect is not None, \
        f"{case.repro()}: refused {where}, but it fits the contract: {message}"
    name = "fc" if case.op == "Gemm" else "conv"
    assert re.match(rf"^layer '{name}': ", message), \
        f"{case.repro()}: the refusal does not name the layer: {message}"
    assert any(re.search(REFUSAL_PATTERNS[limit], message) for limit in case.expect), \
        f"{case.repro()}: the refusal names none of the limits {case.expect}: {message}"


def check_program(case, program):
    """What the contract says of ``case``'s compiled ``program``, without running it.

    The mapping is one the contract allows (:func:`mapping_kinds`); every run's
    descriptor (and warm descriptor) has no :func:`descriptor_violations`; a
    layer that no single run fits has two runs or more; and the program keeps
    its weights resident exactly when the engine can and their words fit the
    weight buffer together -- never when the layer's output tiles alone do not.
    """
    config = COMPILE_CONFIGS[case.config]
    contract = engine_contract(config)
    steps = program.steps
    step = steps[0]
    assert isinstance(step, EngineStep), f"{case.repro()}: not an engine step: {steps}"
    # One step, the MaxPool fused; a Conv whose taps are folded into channels
    # and a grouped layer leave their MaxPool to the host.
    assert len(steps) == 1 or (len(steps) == 2 and (step.mapping == "im2col" or case.group > 1
                                                    or step.mapping.startswith("s2d"))), \
        f"{case.repro()}: {[s.name for s in steps]} ({step.mapping})"
    kinds = mapping_kinds(config, case)
    assert step.mapping.split("/")[0] in kinds, \
        f"{case.repro()}: mapped as {step.mapping}, the contract allows {sorted(kinds)}"
    if case.group > 1:  # its views fold their taps only where they cannot run as they are
        folded = step.mapping.endswith("/im2col")
        assert (views_fold(config, case) or not folded) and \
            (folded or not views_must_fold(config, case)), \
            f"{case.repro()}: mapped as {step.mapping}"
    for run in step.runs:
        for desc in (run.descriptor, run.warm_descriptor):
            violations = [] if desc is None else descriptor_violations(config, desc)
            assert violations == [], f"{case.repro()}: run {run}: {violations}"
    if not single_run_fits_as(config, case, step.mapping):
        assert len(step.runs) >= 2, f"{case.repro()}: one run past a limit"
    groups = {id(run.weights): run.descriptor for run in step.runs}
    words = sum(contract.weight_words(desc) for desc in groups.values())
    fits = contract.resident_weights and words <= contract.weights.words
    assert program.resident == fits, \
        f"{case.repro()}: resident {program.resident}, its weights take {words} words of " \
        f"{contract.weights.words}"
    assert resident_possible(config, case) or not program.resident, \
        f"{case.repro()}: resident, but its output tiles alone exceed the weight buffer"


def run_on_rtl(case, board):
    """Run ``case`` on ``board``; assert it is bit-exact or refused as predicted
    (and a resident grouped program's second, warm inference too)."""
    config = COMPILE_CONFIGS[case.config]
    model, x = build_model(case), case_input(case)
    acc = Accelerator(model, config=config, board=board)
    before = board.cycles
    board.set_backpressure(*case.pauses, seed=case.index + 1)
    try:
        y = acc.run_int8(x)
    except MappingError as e:
        _check_refusal(case, str(e), "by the compiler")
        assert board.cycles == before, f"{case.repro()}: refused only after it reached the board"
        return acc
    except Exception as e:
        raise AssertionError(f"{case.repro()}: {type(e).__name__}: {e}") from e
    finally:
        board.set_backpressure(0, 0)
    assert case.expect is None or case.may_run, \
        f"{case.repro()}: ran, but no tiling fits the {case.expect} limit of the contract"
    want = ReferenceBackend().run_int8(model, x)
    assert_array_equal(y, want, err_msg=f"WRONG ANSWER: {case.repro()}")
    program = acc.program(case.batch)
    if not single_run_fits_as(config, case, program.steps[0].mapping):  # then it was tiled
        assert acc.report["layers"][0]["runs"] >= 2, f"{case.repro()}: one run past a limit"
    check_program(case, program)
    if program.resident and case.target in WARM_TARGETS:
        board.set_backpressure(*case.pauses, seed=case.index + 2)
        try:
            y = acc.run_int8(x)
        finally:
            board.set_backpressure(0, 0)
        assert acc.report["weights"] == "resident", f"{case.repro()}: {acc.report['weights']}"
        assert_array_equal(y, want, err_msg=f"WRONG ANSWER (warm): {case.repro()}")
    return acc


def _params(cases):
    out = []
    for case in cases:
        reason = KNOWN_WRONG.get((case.config, case.seed, case.index))
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        out.append(pytest.param(case, id=f"s{case.seed}-{case.id}", marks=marks))
    return out


#: Gemm batches past the row range take 20,000 to 65,000 images (seconds each on
#: the simulator): one per configuration below; all of them in the slow sweep.
SLOW_TARGETS = ("gemm_chunks",)
#: Targets whose resident programs run a second, warm inference on the RTL.
WARM_TARGETS = ("dw_resident",)
RTL_CASES = [case for key in CONFIGS
             for case in (limit_cases(key, DEFAULT_LAYERS, SEED, skip=SLOW_TARGETS,
                                      targets=CONV_TARGETS)
                          + limit_cases(key, GROUPED_LAYERS, SEED, targets=GROUPED_TARGETS))]


@pytest.mark.parametrize("case", _params(RTL_CASES))
def test_layer_at_a_limit_is_exact_or_refused(case, boards):
    run_on_rtl(case, boards(case.config))


@pytest.mark.parametrize("side", ["exact", "under", "at", "over"])
def test_pooled_96_px_layer_on_the_default_engine(side, boards):
    """The regression of the 96x96 bug: Conv 3->64 + Relu + MaxPool on the default engine.

    Its pooled row (96 columns x 8 output tiles) is 1.5 times the max-pool
    row memory while the line buffer holds the whole row: the compiler must
    cut strips by the row memory. ``under``/``at``/``over`` put 62/64/66
    conv columns against the memory's 64.
    """
    case = regression_96_case(side)
    c = engine_contract(COMPILE_CONFIGS["default"])
    assert c.widest_pooled_row(8) == 64 and c.widest_row(1) >= 98  # the relation the bug needs
    acc = run_on_rtl(case, boards("default"))
    strips = acc.report["layers"][0]["runs"]
    assert strips == (1 if side in ("under", "at") else 2), strips


@pytest.mark.parametrize("key", list(CONFIGS))
def test_gemm_batch_past_the_row_range_runs_in_chunks(key, boards):
    """A Gemm batch one image over a grid of 65535 rows: bit-exact, in two chunks or more."""
    case = limit_case(key, SEED, 0, target="gemm_chunks", side="over")
    assert not single_run_fits(CONFIGS[key], case), case.repro()
    acc = run_on_rtl(case, boards(key))
    assert acc.report["layers"][0]["runs"] >= 2, case.repro()


@pytest.mark.parametrize("w, stride, pads", [
    (1, 2, (0, 1, 0, 0)),   # the only output column reads the left pad
    (71, 1, (0, 0, 0, 2)),  # 73 columns: the second strip, [72, 73), reads the right pad
], ids=["all-padding", "strip-past-the-row"])
def test_strip_of_padding_only(w, stride, pads, boards):
    """Output columns whose windows hold only padding (a 1x1 kernel with pads), alone in
    a strip: bit-exact (the first layers these tests found raised InputError('empty
    tensor'): the compiler gave such a strip an input of no columns)."""
    case = layer_case("k3", w=w, stride=(stride, stride), pads=pads)
    assert case.expect is None
    run_on_rtl(case, boards("k3"))


@pytest.mark.parametrize("key, layer", [
    ("k3", dict(cout=2, h=4, pads=(0, 0, 2, 0), batch=4)),
    ("k2", dict(cout=1, h=3, pads=(0, 0, 3, 0), batch=3)),
], ids=["k3", "k2"])
def test_rows_of_bottom_padding_then_the_next_image(key, layer, boards):
    """Output rows that read bottom padding only, at the end of each image of a batch:
    bit-exact (these sweeps found the next image's first row wrong when the engine
    ran such rows from the padding; the packing now streams rows of x_zp for them,
    and the contract refuses a descriptor with a window below the image)."""
    case = layer_case(key, **layer)
    assert case.expect is None
    run_on_rtl(case, boards(key))


# -- compile only: many more layers, more configurations, no simulator ---------

def check_compiled(case):
    """The compiler refuses ``case`` as predicted, or its program is right without the RTL.

    The program must pass :func:`check_program`, and, its runs' streams going
    through the numpy engine model of tests/engine_model_helpers.py instead of
    the board, must equal the reference bit for bit: strips, halos, channel
    groups, views and Gemm chunks cover the output exactly. A resident
    grouped program runs a second time, warm (no weights streamed).
    """
    config = COMPILE_CONFIGS[case.config]
    model = build_model(case)
    try:
        program = compile_model(model, config, batch=case.batch)
    except MappingError as e:
        _check_refusal(case, str(e), "at compile time")
        return
    except Exception as e:
        raise AssertionError(f"{case.repro()}: {type(e).__name__}: {e}") from e
    assert case.expect is None or case.may_run, \
        f"{case.repro()}: compiled, but no tiling fits the {case.expect} limit of the contract"
    check_program(case, program)
    if case.batch > 16 or case.batch * case.h * case.w * max(case.cin, case.cout) > 200_000:
        return  # the numpy engine model steps through images one by one
    steps = program.steps
    step = steps[0]
    x = case_input(case)
    want = ReferenceBackend().run_int8(model, x)
    state = {}  # the engine's weight buffer and parameters, kept between inferences
    for warm in (False, True) if program.resident and case.group > 1 else (False,):
        y = np.empty((case.batch, *step.output_shape), np.int8)
        for run in step.runs:
            desc = run.warm_descriptor if warm else run.descriptor
            run.store(y, emulate_engine(config, desc, run.stream(x, warm=warm), state))
        for host in steps[1:]:
            y = host.layer.evaluate(y)
        assert_array_equal(y, want, err_msg=f"WRONG ANSWER (engine model"
                                            f"{', warm' if warm else ''}): {case.repro()}")


def _failures(cases, check, *args):
    """``check`` on every case: the messages of those that fail."""
    failures = []
    for case in cases:
        try:
            check(case, *args)
        except AssertionError as e:
            failures.append(str(e) if "WRONG" in str(e) else str(e).splitlines()[0])
    return failures


def _report(failures, count):
    assert not failures, f"{len(failures)} of {count} layers failed:\n" + "\n".join(failures[:30])


@pytest.mark.parametrize("key", list(COMPILE_CONFIGS))
def test_compiler_refuses_or_every_run_fits_the_contract(key):
    cases = limit_cases(key, COMPILE_LAYERS, SEED + 1, targets=CONV_TARGETS) \
        + limit_cases(key, GROUPED_COMPILE_LAYERS, SEED + 1, targets=GROUPED_TARGETS)
    _report(_failures(cases, check_compiled), len(cases))


@pytest.mark.parametrize("key", list(COMPILE_CONFIGS))
def test_generator_covers_every_limit_on_every_side(key):
    """Each target on each side exists (or cannot exist on this engine), as predicted."""
    cases = limit_cases(key, 3 * len(CONV_TARGETS) * len(SIDES), SEED, targets=CONV_TARGETS)
    seen = {(c.target, c.side) for c in cases}
    for case in cases:
        assert expected_refusal(COMPILE_CONFIGS[key], case) == case.expect
        if case.expect is not None:
            assert case.side == "over", case.repro()
    # What no tiling can map is refused over the limit; what tiling absorbs is not.
    for target in ("channels", "rows", "batch"):
        assert (target, "over") in seen, target
        assert all(c.expect == (target,) for c in cases
                   if (c.target, c.side) == (target, "over")), target
    # Kernels over kmax, strides out of range or not square, left and top pads
    # over kmax - 1: the taps folded into channels.
    for target in ("width", "pool_row", "weights", "params", "out_channels", "gemm_rows",
                   "kernel", "stride", "pad"):
        assert all(c.expect is None for c in cases if c.target == target), target
        assert {(target, s) for s in SIDES} <= seen, target
    # Over the weight and parameter buffers, only channel groups fit.
    for case in cases:
        if case.side == "over" and case.target in ("weights", "params"):
            assert not single_run_fits(COMPILE_CONFIGS[key], case), case.repro()


@pytest.mark.parametrize("key", list(COMPILE_CONFIGS))
def test_generator_covers_every_grouped_limit_on_every_side(key):
    """Each grouped / depthwise target on each side exists (or cannot on this engine)."""
    config = COMPILE_CONFIGS[key]
    contract = engine_contract(config)
    cases = limit_cases(key, 3 * len(GROUPED_TARGETS) * len(SIDES), SEED, targets=GROUPED_TARGETS)
    seen = {(c.target, c.side) for c in cases}
    # Only a group under a kernel of kmax needs kmax > 1.
    absent = {("group_window", "under")} if config.kmax == 1 else set()
    assert {(t, s) for t in GROUPED_TARGETS for s in SIDES} - absent <= seen, key
    for case in cases:
        assert case.group > 1 and case.cin % case.group == 0 == case.cout % case.group, \
            case.repro()
        assert expected_refusal(config, case) == case.expect
        # Only one group's input tiles past max_ci_tiles are refused (a group of
        # pin + 1 channels is that, where max_ci_tiles is 1).
        if case.expect is not None:
            assert case.side == "over" and case.target in ("group_tiles", "group_in"), \
                case.repro()
            assert case.expect == ("channels",), case.repro()
    # Over max_ci_tiles, a group is refused unless its folded taps take fewer tiles.
    assert all(c.expect == ("channels",) or (c.expect is None and views_fold(config, c))
               for c in cases if (c.target, c.side) == ("group_tiles", "over"))
    for case in cases:
        fits = single_run_fits(config, case)
        if case.target in ("dw_channels", "dw_row", "group_view"):
            assert fits == (case.side != "over"), case.repro()
        if case.target.startswith("dw_"):
            assert case.cin == case.group == case.cout, case.repro()
            assert ("depthwise" in mapping_kinds(config, case)) == contract.depthwise_runs
        if case.target == "dw_channels":
            most = depthwise_run_channels(config)
            assert (case.cin <= most) == (case.side != "over"), case.repro()
        if case.target == "dw_resident":
            assert resident_possible(config, case) == (case.side != "over"), case.repro()
        if case.target == "group_window" and case.side == "over":
            assert mapping_kinds(config, case) == {"grouped"}, case.repro()
            assert views_fold(config, case), case.repro()


@pytest.mark.parametrize("layer", [
    dict(cin=8, cout=8, group=8, h=9, w=9, kernel=(3, 3), stride=(4, 4)),
    dict(cin=8, cout=8, group=2, h=6, w=6, kernel=(3, 3), pads=(3, 1, 1, 1)),
    dict(cin=8, cout=8, group=8, h=6, w=6, kernel=(2, 2), pads=(0, 3, 0, 0)),
    dict(cin=130, cout=2, group=2, h=3, w=4, kernel=(1, 2)),
], ids=["depthwise-stride-over-kmax", "grouped-pad-top-over", "depthwise-pad-left-over",
        "group-tiles-that-fold"])
def test_grouped_layer_past_the_window_folds_its_taps(layer):
    """A grouped layer is bit-exact wherever one group as a dense Conv is: a stride
    over kmax, a top or left pad over kmax - 1, a group of 65 channels with a 1x2
    kernel (17 input tiles as it is, 4 folded) on the k3 engine."""
    case = layer_case("k3", target="group_window", side="over", **layer)
    assert case.expect is None, case.repro()
    check_compiled(case)


@pytest.mark.parametrize("name", list(fold_limit_layers("k3")))
@pytest.mark.parametrize("key", list(CONFIGS))
def test_grouped_views_fold_past_the_window_on_rtl(key, name, boards):
    """Grouped and depthwise layers at a stride of kmax and kmax + 1, a top / left pad
    of kmax - 1 and kmax, one group's input tiles at max_ci_tiles and over it (its
    taps folded into fewer tiles, or, a full window, as many): on the RTL with and
    without back-pressure, bit-exact as they are, or with every view's taps folded
    into channels (``grouped/<k>/im2col``), or refused naming the layer and the
    input tiles; without back-pressure every run's cycles are the cycle model's."""
    layer, outcome = fold_limit_layers(key)[name]
    case = layer_case(key, target="group_window", side=name.split("-")[1], batch=2, **layer)
    config = COMPILE_CONFIGS[key]
    assert case.expect == (("channels",) if outcome == "refused" else None), case.repro()
    assert views_fold(config, case) == (outcome != "as is"), case.repro()
    for pauses in ((0, 0), (250, 600)):
        acc = run_on_rtl(replace(case, pauses=pauses), boards(key))
        if outcome == "refused":
            return
        mapping = acc.program(case.batch).steps[0].mapping
        assert mapping.endswith("/im2col") == (outcome == "folded"), f"{case.repro()}: {mapping}"
        if pauses == (0, 0):
            for run in acc.report["layers"]:
                assert run["cycles"] == run["predicted_cycles"], (case.repro(), run)


# -- on demand: thousands of layers --------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("key", list(CONFIGS))
def test_limit_sweep_on_rtl(key, boards):
    cases = limit_cases(key, SWEEP_LAYERS, SEED, start=10_000, skip=SLOW_TARGETS)
    # Gemm batches past the row range: one in a hundred (seconds each).
    cases += limit_cases(key, max(1, SWEEP_LAYERS // 100), SEED, start=10_000,
                         targets=SLOW_TARGETS)
    _report(_failures(cases, run_on_rtl, boards(key)), len(cases))


@pytest.mark.slow
@pytest.mark.parametrize("key", list(COMPILE_CONFIGS))
def test_compile_sweep(key):
    cases = limit_cases(key, 2 * SWEEP_LAYERS, SEED + 2)
    _report(_failures(cases, check_compiled), len(cases))


# -- the program's parameter words against the parameter buffer ---------------

def _param_words_layer(cout, seed):
    """A 3x3 Conv 4 -> ``cout`` channels with a Relu, 5x5: ``ceil(cout / pout)`` output
    tiles in channel groups of at most ``max_co_tiles``."""
    from fpgacnn.host.layers import Conv
    from fpgacnn.host.model import QuantizedModel, TensorSpec
    rng = np.random.default_rng(seed)
    cin, hw = 4, 5
    w = rng.integers(-127, 128, (cout, cin, 3, 3)).astype(np.int8)
    w_scale = rng.uniform(0.5, 1.5, cout) / 127
    x_scale, x_zp, y_zp = 0.05, 3, int(rng.integers(-20, 20))
    y_scale = 70 * np.sqrt(9 * cin) * x_scale * w_scale.mean() / 8
    conv = Conv("conv", ["x"], "y", (cin, hw, hw), w, rng.integers(-300, 300, cout), x_scale,
                x_zp, w_scale, y_scale, y_zp, pads=(1, 1, 1, 1), lo=y_zp)
    return QuantizedModel(f"params{cout}", [conv],
                          TensorSpec("x", (cin, hw, hw), np.int8, x_scale, x_zp),
                          TensorSpec("y", conv.output_shape, np.int8, y_scale, y_zp), "x", "y")


@pytest.mark.parametrize("side", SIDES)
def test_program_parameter_words_at_the_parameter_buffer(side, program_boards):
    """Resident parameters (DEEP_PARAMS_ENGINE: 6 words, 4 output tiles a run): a
    program whose channel groups' parameter words are one under, at and one over the
    buffer. Under and at, every group keeps its words and no warm run streams
    constants; over, the groups share the buffer's last words and stream their
    parameters (none fits beside the words the larger group needs): every
    descriptor within the contract, and on the RTL bit-exact on the first inference
    and two warm ones, through the DMA and the program sequencer, every run's
    cycles the model's."""
    config = DEEP_PARAMS_ENGINE
    c = engine_contract(config)
    tiles = c.params.words + {"under": -1, "at": 0, "over": 1}[side]
    model = _param_words_layer(tiles * config.pout, seed=tiles)
    program = compile_model(model, config)
    assert program.resident
    runs = program.steps[0].runs
    assert sum(r.descriptor["co_tiles"] for r in runs) == tiles and len(runs) == 2
    for run in runs:
        for desc in (run.descriptor, run.warm_descriptor):
            assert descriptor_violations(config, desc) == []
    loads = [r.warm_descriptor["load_params"] for r in runs]
    if side == "over":
        assert program.param_words == 0 and all(loads)
        assert {r.descriptor["param_base"] for r in runs} == {c.params.words - c.max_co_tiles}
    else:
        assert program.param_words == tiles and not any(loads)
    board = program_boards(config)
    x = np.random.default_rng(tiles).integers(-128, 128, (1, *model.input.shape), dtype=np.int8)
    want = ReferenceBackend().run_int8(model, x)
    for sequencer in (False, None):
        acc = Accelerator(model, config=config, board=board, sequencer=sequencer)
        for state in ("loaded, now resident", "resident", "resident"):
            assert_array_equal(acc.run_int8(x), want)
            assert acc.report["weights"] == state
            if sequencer is False:
                for layer in acc.report["layers"]:
                    assert layer["cycles"] == layer["predicted_cycles"], (side, state)
