"""The MLPerf Tiny models and the ResNet-18 stem and block of the model zoo on
the RTL, at their full sizes, on the PYNQ-Z2's sized engine (issue 15): its
program engine (the top a Zynq build ships), tests/conftest.py's
``pynq_z2_board``, one build for these tests and tests/test_resident_weights.py.

Every convolution (dense, depthwise, the 10x4 and 7x7 first layers) and every
Gemm is an engine step; streamed through the DMA (``sequencer=False``), each
model is bit-exact with the reference backend,
with and without stream back-pressure, on its first inference (which loads
the weights) and on the next (the weights resident in the engine), and
without back-pressure every layer's RTL cycles equal the cycle model's
prediction. The MLPerf Tiny models also run from board memory on the
engine's own program sequencer (issue 16), bit-exact, cold and warm;
ResNet-8's three residual Adds fused into the convolutions before them.
"""

import importlib.util
import logging
from pathlib import Path

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from fpgacnn.core.contract import engine_contract
from fpgacnn.core.memory_port import read_bytes
from fpgacnn.core.sequencer import record_bytes
from fpgacnn.host.accelerator import Accelerator
from fpgacnn.host.compiler import EngineStep, compile_model
from fpgacnn.host.layers import Gemm, _Convolution
from fpgacnn.host.onnx_import import load_onnx
from fpgacnn.host.pixel_reader_setup import beat_a_cycle
from fpgacnn.host.cycle_model import (fused_run_cycles, layer_cycles, sequenced_run_cycles,
                                      vector_run_cycles)
from fpgacnn.host.program_image import EngineRecord, FoldRecord, VectorRecord
from fpgacnn.host.sequencer_table import vector_record_fields
from fpgacnn.host.reference import ReferenceBackend

from conftest import pynq_z2_engine

logging.getLogger().setLevel(logging.ERROR)

_spec = importlib.util.spec_from_file_location(
    "model_zoo", Path(__file__).resolve().parents[1] / "examples" / "model_zoo.py")
zoo = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(zoo)

CONFIG = pynq_z2_engine()
#: Images per model (a batch; ResNet-18's stem at 224x224 takes ~2.6M cycles each).
IMAGES = {"resnet8": 2, "mobilenet_v1_025": 2, "ds_cnn": 3, "autoencoder": 4,
          "resnet18_stem": 1}
#: The simulated board's memory latency (its default, a Zynq-7000 HP port's).
MEMORY_LATENCY = 40
#: Input beats withheld / output not ready, per model (0, 0: none).
PAUSES = {"resnet8": (0, 0), "mobilenet_v1_025": (3, 2), "ds_cnn": (2, 5), "autoencoder": (0, 0),
          "resnet18_stem": (0, 0)}


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    return zoo.write_zoo(tmp_path_factory.mktemp("zoo"), n_calibration=16)


@pytest.fixture(scope="module")
def board(pynq_z2_board):
    """The layers streamed through the DMA, the host running every step."""
    return pynq_z2_board


@pytest.mark.parametrize("name", list(zoo.ZOO))
def test_zoo_model_is_exact_on_rtl(written, board, name):
    qm = load_onnx(written[name]["int8"])
    x = zoo.calibration_data(zoo.build(name), IMAGES[name], seed=200)
    x8 = qm.quantize_input(x)
    program = compile_model(qm, CONFIG, batch=len(x8))
    # (a fused block's step runs its depthwise layer and the pointwise after it)
    on_engine = {layer.name for s in program.steps if isinstance(s, EngineStep)
                 for layer in (s.layer, getattr(s, "pointwise", None)) if layer is not None}
    for layer in qm.layers:
        if isinstance(layer, (_Convolution, Gemm)):
            assert layer.name in on_engine, f"{layer.name} ({layer.op}) is not on the engine"
    # Resident parameters (the engine's 512 parameter words): every model's stay, whose
    # warm runs then stream no constants (MobileNetV1's too since the PYNQ-Z2's engine
    # has the fused block, whose depthwise parameters are in its depthwise memory:
    # 685 words without the block).
    warm_loads = [r.warm_descriptor["load_params"] for s in program.steps
                  for r in getattr(s, "runs", ())]
    assert program.param_words > 0
    assert not any(warm_loads), name
    acc = Accelerator(qm, config=CONFIG, board=board, sequencer=False)
    assert acc.sequencer is None
    board.set_backpressure(*PAUSES[name], seed=len(name))
    try:
        y = acc.run_int8(x8)
    finally:
        board.set_backpressure(0, 0)
    want = ReferenceBackend().run_int8(qm, x8)
    assert_array_equal(y, want)
    assert acc.report["weights"] == "loaded, now resident"
    _cycles_as_predicted(acc.report, PAUSES[name])
    # The next inference finds the weights in the engine (resident weights).
    assert_array_equal(acc.run_int8(x8), want)
    assert acc.report["weights"] == "resident"
    _cycles_as_predicted(acc.report, (0, 0))


def _cycles_as_predicted(report, pauses):
    if pauses == (0, 0):
        for layer in report["layers"]:
            if layer["engine"]:
                assert layer["cycles"] == layer["predicted_cycles"], layer["name"]


#: Per model, the records the sequencer stops at for the host (issue 16): layers
#: whose patterns the pixel reader does not take yet (none today: DS-CNN's 10x4
#: first layer reads the input's folded taps, which the host writes with the input).
SEQUENCER_STOPS = {"resnet8": [], "mobilenet_v1_025": [], "ds_cnn": [], "autoencoder": []}


#: Per model, the engine runs from board memory the pixel reader does not give a beat
#: a cycle (a 1x1 remap of 3x3 blocks of one word a position: a block's line of three
#: words, so beats of two words from two reads, issued as two commands), whose input
#: rows the model takes at the reader's pace (``layer_cycles``' ``reader``), and the
#: runs among them that take more cycles for it than the DMA's run (ResNet-8's
#: /layer3/downsample 601 against 585; until 2026-12-07 these runs were left out of
#: the model; MobileNetV1's /features/3/pw and /features/4/pw were such runs until the
#: PYNQ-Z2's engine fused them with their depthwise layers).
NOT_A_BEAT_A_CYCLE = {"resnet8": ["/layer3/downsample/Conv"],
                      "mobilenet_v1_025": [],
                      "ds_cnn": [], "autoencoder": ["/decoder/0/linear/Gemm"]}
SLOWER_THAN_THE_DMA = {"resnet8": ["/layer3/downsample/Conv"],
                       "mobilenet_v1_025": [],
                       "ds_cnn": [], "autoencoder": []}


@pytest.fixture(scope="module")
def program_board(pynq_z2_board):
    """The PYNQ-Z2 engine with its program sequencer and the memory model (issue 16)."""
    pynq_z2_board.set_memory_timing(latency=MEMORY_LATENCY)
    return pynq_z2_board


# ResNet-18's stem (2.6M cycles an image) is left to the benchmark.
@pytest.mark.parametrize("name", [n for n in zoo.ZOO if n != "resnet18_stem"])
def test_zoo_model_is_exact_through_the_sequencer(written, program_board, name):
    """The model from board memory on the engine's own sequencer, the host running only
    the records it stops at: bit-exact on the first inference and the next (warm), and
    through ``run`` of the float input (quantized straight into board memory, the
    output dequantized from it into an array of its own)."""
    qm = load_onnx(written[name]["int8"])
    x = zoo.calibration_data(zoo.build(name), 1, seed=300)
    x8 = qm.quantize_input(x)
    want = ReferenceBackend().run_int8(qm, x8)
    acc = Accelerator(qm, config=CONFIG, board=program_board)
    assert acc.sequencer is not None
    assert_array_equal(acc.run_int8(x8), want)
    y = acc.run(x)
    assert_array_equal(y, qm.dequantize_output(want))
    assert not np.shares_memory(y, acc.sequenced(1).memory)
    assert_array_equal(acc.run_int8(x8), want)
    assert acc.report["weights"] == "resident"
    on_engine = acc.sequenced(1).on_engine[True]
    assert acc.report["sequencer"]["sequencer_runs"] == sum(on_engine)
    assert sum(on_engine) >= len(on_engine) // 2
    # The host stops the program only where SEQUENCER_STOPS says (none: one start).
    # (An input fold is written with the input: no stop.)
    records = acc.sequenced(1).image.records
    stops = [acc.program(1).steps[r.step].name
             for r, on in zip(records, on_engine) if not on and not isinstance(r, FoldRecord)]
    assert stops == SEQUENCER_STOPS[name]
    # One start per maximal run of records on the engine.
    taken = [on for r, on in zip(records, on_engine) if not isinstance(r, FoldRecord)]
    runs = sum(on and not before for on, before in zip(taken, [False] + taken))
    assert acc.report["sequencer"]["sequencer_starts"] == runs
    # The reader's wide sections (a beat a cycle: pin 4 in 8-byte beats), and narrow ones
    # it pairs into beats, take the cycles the DMA's runs would, the reader's latency
    # added; most runs are wide. The others (NOT_A_BEAT_A_CYCLE) take the reader's pace,
    # some of them longer than the DMA's run: every run takes the model's cycles.
    sequenced = acc.sequenced(1)
    engine_runs = [i for i, r in enumerate(records) if isinstance(r, EngineRecord)
                   and on_engine[i]]
    wide = [i for i in engine_runs
            if beat_a_cycle(CONFIG, sequenced.table_reader_fields(i, warm=True))]
    assert sum(sequenced.table_word(i, "reader_wide", warm=True) for i in wide) \
        >= len(engine_runs) // 2
    steps = acc.program(1).steps
    assert [steps[records[i].step].name for i in engine_runs if i not in wide] \
        == NOT_A_BEAT_A_CYCLE[name]
    # The writer takes a beat a cycle where the destination is whole beats (its wide
    # mode, on this engine of two output words a beat): a pixel-pair run that sends a
    # beat a cycle (beat entries) keeps the DMA's pace.
    beat_entries = 0
    slower = []
    fused = {i for f in sequenced.fused[True] for i in f.runs}
    for i in engine_runs:
        desc = sequenced.descriptor(i, warm=True)
        writer = sequenced.table_writer_fields(i, warm=True)
        reader = sequenced.table_reader_fields(i, warm=True)
        model = sequenced_run_cycles(CONFIG, desc, writer=writer, reader=reader)
        if i in fused:  # with its Add, at the run's own cycles (the port has room)
            assert model == fused_run_cycles(
                CONFIG, desc, reads=sequenced.run_reads(i, warm=True), writer=writer,
                reader=reader), (name, i)
        assert sequenced.counter_words(i)[0] == model, (name, i)
        assert sequenced.predicted_cycles(i, warm=True) == model  # the report's
        if model > layer_cycles(CONFIG, desc, writer=writer).cycles:  # the DMA's pace
            slower.append(steps[records[i].step].name)
        if engine_contract(CONFIG).output_entry_words(desc) == 2:
            assert writer["wide"], (name, i)
            beat_entries += 1
    assert slower == SLOWER_THAN_THE_DMA[name]
    if name in ("resnet8", "mobilenet_v1_025", "ds_cnn"):
        assert beat_entries > 0
    # The vector unit's runs (Adds, pools, copies) take their modelled cycles, R bytes a
    # read where their words pair up (every Add of ResNet-8 does).
    skipped = {f.add for f in sequenced.fused[True]}
    vector = [i for i, r in enumerate(records) if isinstance(r, VectorRecord) and on_engine[i]
              and i not in skipped]
    for i in vector:
        fields = vector_record_fields(sequenced.image, records[i])
        assert sequenced.table_word(i, "vector_wide", warm=True) == fields["wide"]
        assert sequenced.counter_words(i)[0] == vector_run_cycles(
            CONFIG, fields, MEMORY_LATENCY), (name, i)
    # The sequencer's own cycles are fewer than the records' fetches alone one after
    # another: each record after the first is fetched while the run before it ends.
    seq = acc.report["sequencer"]
    # (less the reader's latency before each engine run, which waits for its first beat)
    fetch = MEMORY_LATENCY + record_bytes(CONFIG) // read_bytes(CONFIG)
    own = seq["sequencer_cycles"] - seq["sequenced_busy_cycles"]
    assert own - len(engine_runs) * (MEMORY_LATENCY + 4) < seq["sequencer_runs"] * fetch
    if name == "resnet8":  # its three Adds, each fused into the convolution before it
        assert len(skipped) == 3 and all(records[i].has_b for i in skipped)
        assert sequenced.fused[False] == sequenced.fused[True]
        assert not [i for i in vector if records[i].has_b]


#: Per model, the engine runs the ZCU104's sized engine (8-byte words in 16-byte beats,
#: the memory 16 bytes a cycle) makes from board memory slower than the DMA's run,
#: their reader giving less than a beat a cycle (measured 2026-12-07, busy against the
#: DMA model: DS-CNN's pointwise 913 against 651 each and /conv1 739 against 651,
#: MobileNetV1's /features/5/pw 975 against 689, the AutoEncoder's /encoder/0 188
#: against 148).
ZCU104_SLOWER_THAN_THE_DMA = {
    "resnet8": [],
    "mobilenet_v1_025": ["/features/1/dw/Conv", "/features/5/pw/Conv", "/features/6/pw/Conv"],
    "ds_cnn": ["/conv1/Conv"] + [f"/blocks/{k}/pointwise/Conv" for k in range(4)],
    "autoencoder": ["/encoder/0/linear/Gemm"]}


@pytest.mark.slow
def test_zoo_runs_at_the_readers_pace_on_the_zcu104_engine(written, program_boards):
    """On the ZCU104's sized engine through its sequencer, warm: every engine run of
    the four MLPerf Tiny models takes the model's cycles (its input at the reader's
    pace), the report's prediction; among them the narrow runs that take longer than
    the DMA's run (marked slow: its own Verilator build)."""
    from fpgacnn.boards.board import load_board
    from fpgacnn.boards.engine_sizing import size_engine
    from fpgacnn.boards.zynq_design import DESIGN
    zcu104 = load_board("zcu104")
    config = size_engine(zcu104).config
    board = program_boards(config)
    board.set_memory_timing(latency=MEMORY_LATENCY,
                            bytes_per_cycle=DESIGN.memory_bytes_per_cycle(zcu104.family, config))
    try:
        for name in ZCU104_SLOWER_THAN_THE_DMA:
            qm = load_onnx(written[name]["int8"])
            x8 = qm.quantize_input(zoo.calibration_data(zoo.build(name), 1, seed=300))
            want = ReferenceBackend().run_int8(qm, x8)
            acc = Accelerator(qm, config=config, board=board)
            assert_array_equal(acc.run_int8(x8), want)
            assert_array_equal(acc.run_int8(x8), want)
            sequenced = acc.sequenced(1)
            steps, records = acc.program(1).steps, sequenced.image.records
            fused = {i for f in sequenced.fused[True] for i in f.runs}
            slower = []
            for i, record in enumerate(records):
                if not (isinstance(record, EngineRecord) and sequenced.on_engine[True][i]):
                    continue
                desc = sequenced.descriptor(i, warm=True)
                writer = sequenced.table_writer_fields(i, warm=True)
                reader = sequenced.table_reader_fields(i, warm=True)
                model = sequenced_run_cycles(config, desc, writer=writer, reader=reader)
                assert sequenced.predicted_cycles(i, warm=True) == model
                if i in fused and fused_run_cycles(
                        config, desc, reads=sequenced.run_reads(i, warm=True), writer=writer,
                        reader=reader) is None:
                    continue  # port-bound (ResNet-8's first block): not modelled
                assert sequenced.counter_words(i)[0] == model, (name, steps[record.step].name)
                if model > layer_cycles(config, desc, writer=writer).cycles:
                    slower.append(steps[record.step].name)
            assert slower == ZCU104_SLOWER_THAN_THE_DMA[name]
    finally:
        board.set_memory_timing()
