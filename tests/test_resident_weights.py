"""Resident weights (docs/engine.md, "Resident weights"): a program whose
weights fit the engine's weight buffer together keeps them there.

Each channel group's weights get a base of their own (``weight_base``); the
first inference loads them, later ones stream only the parameters
(``load_params``) and the pixels. On the RTL: bit-exact on every inference,
the warm runs' cycles equal the cycle model's and are fewer, another program
on the board in between makes the next inference load again (never stale
weights), and the compact arrangement has no resident weights.
"""


import numpy as np
import pytest
from numpy.testing import assert_array_equal

from fpgacnn.core.config import EngineConfig
from fpgacnn.core.contract import engine_contract
from fpgacnn.core.errors import MappingError
from fpgacnn.host.accelerator import Accelerator
from fpgacnn.host.compiler import constants_residency
from fpgacnn.host.compiler import compile_model
from fpgacnn.host.cycle_model import layer_cycles
from fpgacnn.host.layers import Conv
from fpgacnn.host.model import QuantizedModel, TensorSpec
from fpgacnn.host.reference import ReferenceBackend

from conftest import DEEP_PARAMS_ENGINE, SMALL_ENGINE, pynq_z2_engine
from random_models import random_cnn


def conv_stack(seed, channels=(3, 8, 8, 4), hw=10):
    """3x3 convolutions with Relu: several channel groups on the small engine."""
    rng = np.random.default_rng(seed)
    layers, shape, name = [], (channels[0], hw, hw), "x"
    x_scale, x_zp = 0.05, 3
    spec = TensorSpec("x", shape, np.int8, x_scale, x_zp)
    for i, (cin, cout) in enumerate(zip(channels, channels[1:])):
        w = rng.integers(-127, 128, (cout, cin, 3, 3)).astype(np.int8)
        w_scale = rng.uniform(0.5, 1.5, cout) / 127
        y_scale = 70 * np.sqrt(9 * cin) * x_scale * w_scale.mean() / 8
        y_zp = int(rng.integers(-20, 20))
        layer = Conv(f"c{i}", [name], f"t{i}", shape, w, rng.integers(-300, 300, cout), x_scale,
                     x_zp, w_scale, y_scale, y_zp, pads=(1, 1, 1, 1), lo=y_zp)
        layers.append(layer)
        name, shape, x_scale, x_zp = layer.output, layer.output_shape, y_scale, y_zp
    return QuantizedModel(f"stack{seed}", layers, spec,
                          TensorSpec(name, shape, np.int8, x_scale, x_zp), "x", name)


def test_program_places_each_channel_group_once():
    program = compile_model(conv_stack(0), SMALL_ENGINE)
    assert program.resident
    spans, previous = [], None
    for step in program.steps:
        for run in step.runs:
            d, w = run.descriptor, run.warm_descriptor
            span = (d["weight_base"],
                    d["weight_base"] + engine_contract(SMALL_ENGINE).weight_words(d))
            if span not in spans:
                spans.append(span)
            assert w["load_weights"] == 0 and w["weight_base"] == d["weight_base"]
            assert w["load_params"] == int(id(run.weights) != previous)
            previous = id(run.weights)
            assert run.warm_predicted_cycles == layer_cycles(SMALL_ENGINE, dict(w)).cycles
            assert run.warm_predicted_cycles < run.predicted_cycles or not d["load_weights"]
    # disjoint, in order, within the buffer
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
    assert spans[-1][1] == program.weight_words <= engine_contract(SMALL_ENGINE).weights.words


def _param_spans(program):
    """``{group: (param_base, end)}`` of a resident program's runs, checking that each
    group's runs agree and that cold and warm descriptors have the same base."""
    spans = {}
    for step in program.steps:
        for run in step.runs:
            d, w = run.descriptor, run.warm_descriptor
            assert w["param_base"] == d["param_base"]
            span = (d["param_base"], d["param_base"] + d["co_tiles"])
            assert spans.setdefault(id(run.weights), span) == span
    return spans


def test_parameters_stay_where_they_fit_together():
    """With a parameter buffer deeper than one run's tiles, each channel group's
    records get words of their own (in the order the groups first run) and no warm
    run streams constants; its cycles are the cycle model's, fewer than with the
    parameters streamed."""
    program = compile_model(conv_stack(0), DEEP_PARAMS_ENGINE)
    streamed = compile_model(conv_stack(0), SMALL_ENGINE)
    spans = list(_param_spans(program).values())
    assert spans == sorted(spans) and all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
    assert spans[0][0] == 0 and spans[-1][1] == program.param_words == 5
    assert streamed.param_words == 0
    for run, before in zip((r for s in program.steps for r in s.runs),
                           (r for s in streamed.steps for r in s.runs)):
        w = run.warm_descriptor
        assert w["load_weights"] == w["load_params"] == 0
        assert run.warm_predicted_cycles == layer_cycles(DEEP_PARAMS_ENGINE, dict(w)).cycles
        assert run.warm_predicted_cycles < before.warm_predicted_cycles
        assert run.stream(np.zeros((1, *run.in_shape[1:]), np.int8), warm=True).size \
            == run.pack_pixels(np.zeros(run.in_shape, np.int8)).size


def test_parameters_that_do_not_all_fit_keep_those_that_do():
    """7 words of parameters for 6: the groups that fit keep words of their own, the
    others share the buffer's last words and stream theirs when the run before them
    there was another group's."""
    model = conv_stack(5, channels=(3, 8, 8, 8, 4))
    program = compile_model(model, DEEP_PARAMS_ENGINE)
    assert program.resident
    spans = _param_spans(program)
    runs = [r for s in program.steps for r in s.runs]
    resident = [r for r in runs if not r.warm_descriptor["load_params"]]
    assert program.param_words == sum(r.descriptor["co_tiles"] for r in resident) == 4
    shared = {spans[id(r.weights)] for r in runs if r.warm_descriptor["load_params"]}
    assert shared == {(4, 6)} or all(s[0] == 4 for s in shared)
    own = sorted(spans[id(r.weights)] for r in resident)
    assert all(a[1] <= b[0] for a, b in zip(own, own[1:])) and own[-1][1] <= 4


def test_the_report_says_where_the_constants_come_from():
    """The report's ``weights`` and ``parameters``: every parameter word resident, some
    of them (how many of how many), or none (an engine of one run's parameter words),
    cold and warm; a program whose weights stream streams both."""
    every = compile_model(conv_stack(0), DEEP_PARAMS_ENGINE)
    some = compile_model(conv_stack(5, channels=(3, 8, 8, 8, 4)), DEEP_PARAMS_ENGINE)
    none = compile_model(conv_stack(0), SMALL_ENGINE)
    assert constants_residency(every, False) == {"weights": "loaded, now resident",
                                                 "parameters": "loaded, now resident"}
    assert constants_residency(every, True) == {"weights": "resident", "parameters": "resident"}
    total = sum({id(r.weights): r.descriptor["co_tiles"] for s in some.steps
                 for r in s.runs}.values())
    assert (some.param_words, total) == (4, 7)
    assert constants_residency(some, True) == {
        "weights": "resident", "parameters": "4 of 7 words resident, the rest streamed"}
    assert constants_residency(some, False)["parameters"] == \
        "loaded, 4 of 7 words now resident, the rest streamed"
    assert constants_residency(none, True) == {"weights": "resident", "parameters": "streamed"}
    streamed = compile_model(conv_stack(0), SMALL_ENGINE, resident=False)
    assert constants_residency(streamed, False) == {"weights": "streamed",
                                                    "parameters": "streamed"}


def test_one_run_of_parameters_keeps_param_base_0():
    """A parameter buffer of one run's tiles: param_base is a constant 0, and warm runs
    stream their parameters as before."""
    program = compile_model(conv_stack(0), SMALL_ENGINE)
    assert not engine_contract(SMALL_ENGINE).resident_params
    assert {r.descriptor["param_base"] for s in program.steps for r in s.runs} == {0}


def test_weights_that_do_not_fit_stream_as_before():
    """More weight words than the buffer: not resident by default, refused when asked."""
    model = conv_stack(1, channels=(16, 16, 16, 16, 16, 16))
    words = engine_contract(SMALL_ENGINE).weights.words
    program = compile_model(model, SMALL_ENGINE)
    assert not program.resident and program.weight_words == 0
    assert all(run.warm_descriptor is None for s in program.steps for run in s.runs)
    with pytest.raises(MappingError, match=rf"^model 'stack1' cannot keep its weights resident: "
                                           rf"its weights take \d+ words of the weight buffer's "
                                           rf"{words}$"):
        compile_model(model, SMALL_ENGINE, resident=True)


def test_compact_arrangement_keeps_no_resident_weights():
    compact = EngineConfig(pin=4, pout=4, kmax=3, stream_width=32, max_width=16,
                           max_channels=16, max_out_channels=16, deep_pipeline=0)
    assert not compile_model(conv_stack(0), compact).resident
    with pytest.raises(MappingError, match=r"^model 'stack0' cannot keep its weights resident: "
                                           r"the compact arrangement keeps no resident weights$"):
        compile_model(conv_stack(0), compact, resident=True)


def _engine_cycles(acc):
    return sum(layer["cycles"] for layer in acc.report["layers"] if layer["engine"])


#: The PYNQ-Z2's sized engine: a weight buffer of 2,048 words, which the random
#: CNNs (and the model zoo, tests/test_zoo_on_rtl.py) fit. On the RTL its
#: program engine (tests/conftest.py's ``pynq_z2_board``, the zoo's board),
#: the layers streamed through the DMA.
PYNQ_Z2 = pynq_z2_engine()


@pytest.mark.parametrize("case", ["convs", "random_cnn_5", "random_cnn_7", "convs/params",
                                  "convs/some-params"])
def test_second_inference_runs_with_resident_weights_on_rtl(case, small_engine_board,
                                                            pynq_z2_board, program_boards):
    """``/params``: on DEEP_PARAMS_ENGINE, the parameters resident too (all of them,
    or ``some``); the PYNQ-Z2's engine keeps every random CNN's parameters."""
    if case == "convs":
        model, config, board = conv_stack(2), SMALL_ENGINE, small_engine_board
    elif case.startswith("convs/"):
        model = conv_stack(2) if case == "convs/params" else conv_stack(5, (3, 8, 8, 8, 4))
        config, board = DEEP_PARAMS_ENGINE, program_boards(DEEP_PARAMS_ENGINE)
    else:
        model, config, board = random_cnn(int(case[-1])), PYNQ_Z2, pynq_z2_board
    acc = Accelerator(model, config=config, board=board, sequencer=False)
    assert acc.sequencer is None
    assert acc.program(2).resident
    warm_loads = [r.warm_descriptor["load_params"] for s in acc.program(2).steps
                  for r in getattr(s, "runs", ())]
    if case in ("convs/params", "random_cnn_5", "random_cnn_7"):
        assert acc.program(2).param_words > 0 and not any(warm_loads)
    elif case == "convs/some-params":
        assert acc.program(2).param_words > 0 and any(warm_loads) and not all(warm_loads)
    rng = np.random.default_rng(7)
    cold_cycles = None
    for i in range(3):
        x = rng.integers(-128, 128, (2, *model.input.shape), dtype=np.int8)
        assert_array_equal(acc.run_int8(x), ReferenceBackend().run_int8(model, x))
        assert acc.report["weights"] == ("loaded, now resident" if i == 0 else "resident")
        # (every parameter word resident, some of them, or none: the compact engine's)
        parameters = {"convs": ("streamed", "streamed"),
                      "convs/some-params": ("loaded, 4 of 7 words now resident, the rest "
                                            "streamed", "4 of 7 words resident, the rest "
                                            "streamed")}.get(case, ("loaded, now resident",
                                                                    "resident"))
        assert acc.report["parameters"] == parameters[min(i, 1)], case
        for layer in acc.report["layers"]:
            if layer["engine"]:
                assert layer["cycles"] == layer["predicted_cycles"], layer["name"]
        if i == 0:
            cold_cycles = _engine_cycles(acc)
        else:
            assert _engine_cycles(acc) < cold_cycles


@pytest.mark.parametrize("engine", ["small", "deep-params"])
def test_another_program_in_between_makes_the_next_inference_load_again(
        engine, small_engine_board, program_boards):
    """Never stale weights or parameters: a second model's runs overwrite the
    buffers, and the first model's next inference loads them again, bit-exact
    (with resident parameters, through the program sequencer too)."""
    config, board = ((SMALL_ENGINE, small_engine_board) if engine == "small" else
                     (DEEP_PARAMS_ENGINE, program_boards(DEEP_PARAMS_ENGINE)))
    first, second = conv_stack(3), conv_stack(4, channels=(3, 16, 4))
    a = Accelerator(first, config=config, board=board)
    b = Accelerator(second, config=config, board=board)
    rng = np.random.default_rng(11)
    x1 = rng.integers(-128, 128, (1, *first.input.shape), dtype=np.int8)
    x2 = rng.integers(-128, 128, (1, *second.input.shape), dtype=np.int8)
    for acc, x, state in ((a, x1, "loaded, now resident"), (a, x1, "resident"),
                          (b, x2, "loaded, now resident"), (a, x1, "loaded, now resident"),
                          (a, x1, "resident")):
        assert_array_equal(acc.run_int8(x), ReferenceBackend().run_int8(acc.model, x))
        assert acc.report["weights"] == state


def test_a_parameter_load_in_between_makes_the_next_inference_load_again(program_boards):
    """Never stale parameters: a layer run that loads parameters alone (no weights)
    over a resident program's words makes that program's next inference load its
    weights and parameters again, bit-exact, through the DMA and the sequencer."""
    from fpgacnn.host import packing
    from fpgacnn.host.engine_driver import EngineDriver
    config, board = DEEP_PARAMS_ENGINE, program_boards(DEEP_PARAMS_ENGINE)
    model = conv_stack(6)
    rng = np.random.default_rng(17)
    x = rng.integers(-128, 128, (1, *model.input.shape), dtype=np.int8)
    want = ReferenceBackend().run_int8(model, x)
    # A 4-tile layer whose parameters go to words 0..3 without its weights.
    xs = rng.integers(-128, 128, (1, 4, 4, 4)).astype(np.int8)
    w = rng.integers(-127, 128, (16, 4, 3, 3)).astype(np.int8)
    desc, data = packing.pack_layer(config, xs, w, np.zeros(16, np.int32), 0,
                                    np.full(16, 1 << 14), np.full(16, 20), 0)
    c = engine_contract(config)
    params = desc["co_tiles"] * c.param_beats * config.stream_bytes
    stray = dict(desc, load_weights=0, load_params=1)
    stray_data = np.concatenate((data[:params], data[len(data) - c.input_nbytes(
        dict(stray, load_params=0)):]))
    for sequencer in (False, None):
        acc = Accelerator(model, config=config, board=board, sequencer=sequencer)
        for state in ("loaded, now resident", "resident", "stray", "loaded, now resident",
                      "resident"):
            if state == "stray":
                EngineDriver(board).run_layer(stray, stray_data, c.output_nbytes(stray),
                                              timeout=0.05)
                continue
            assert_array_equal(acc.run_int8(x), want)
            assert acc.report["weights"] == state
