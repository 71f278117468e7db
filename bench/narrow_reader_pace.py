"""Sequenced runs whose pixel reader gives less than a beat a cycle: RTL against the model.

On an engine whose word is narrower than its beat, the program engine's pixel
reader gives a beat of narrow words in a cycle a word (a wide word or a pair
of one beat in one: :func:`fpgacnn.core.pixel_reader_fields.reader_beat_commands`),
and the cycle model takes such a run's input at the reader's pace
(:func:`fpgacnn.host.cycle_model.sequenced_run_cycles`, docs/program.md "The
sequencer as built"). This runs networks from board memory on a program
engine in Verilator, with a memory that never holds a read back, and prints,
for every engine run the reader does not give a beat a cycle
(:func:`~fpgacnn.host.pixel_reader_setup.beat_a_cycle`), its busy cycles, the
model's and the DMA's; a fused run the read port bounds is left out (not
modelled, ``fused_run_cycles``). Engines: the zoo's MLPerf Tiny models on
the PYNQ-Z2's and the ZCU104's sized engines (memory latency 40, the HP
port's bytes a cycle: ``DESIGN.memory_bytes_per_cycle``), and
tests/random_models.py's networks on the sequencer tests' k2 and pairs
engines (batches 1 and 3, latencies 40 and 1, cold and warm), and on two
engines of a word-a-cycle line-buffer writer (``writer_words`` 1: 4-byte
words in 8- and 16-byte beats, ``w1-8`` and ``w1-16``), whose loader takes a
beat's words a cycle each.

Usage::

    python bench/narrow_reader_pace.py [pynq-z2] [zcu104] [k2] [pairs] [w1-8] [w1-16]
"""

import argparse
import logging
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from bench_report import load_zoo  # noqa: E402


def _runs(acc, batch):
    """(step name, busy, model, DMA model, narrow) of each modelled engine run of the
    last inference."""
    from fpgacnn.host.cycle_model import fused_run_cycles, layer_cycles, sequenced_run_cycles
    from fpgacnn.host.pixel_reader_setup import beat_a_cycle
    from fpgacnn.host.program_image import EngineRecord
    seq = acc.sequenced(batch)
    warm = acc.report["weights"] == "resident"
    fused = {i for f in seq.fused[warm] for i in f.runs}
    steps = acc.program(batch).steps
    for i, (record, on) in enumerate(zip(seq.image.records, seq.on_engine[warm])):
        if not (on and isinstance(record, EngineRecord)):
            continue
        desc = seq.descriptor(i, warm=warm)
        reader = seq.table_reader_fields(i, warm=warm)
        writer = seq.table_writer_fields(i, warm=warm)
        model = sequenced_run_cycles(seq.config, desc, writer=writer, reader=reader)
        if i in fused and fused_run_cycles(seq.config, desc, reads=seq.run_reads(i, warm=warm),
                                           writer=writer, reader=reader) is None:
            continue
        yield (steps[record.step].name, seq.counter_words(i)[0], model,
               layer_cycles(seq.config, desc, writer=writer).cycles,
               not beat_a_cycle(seq.config, reader))


def _zoo_engine(name):
    from fpgacnn.boards.board import load_board
    from fpgacnn.boards.engine_sizing import size_engine
    from fpgacnn.boards.zynq_design import DESIGN
    from fpgacnn.host.accelerator import Accelerator, open_board
    from fpgacnn.host.onnx_import import load_onnx
    zoo = load_zoo()
    spec = load_board(name)
    config = size_engine(spec).config
    board = open_board("sim", config, sequencer=True)
    board.set_memory_timing(latency=40,
                            bytes_per_cycle=DESIGN.memory_bytes_per_cycle(spec.family, config))
    out = Path(tempfile.mkdtemp())
    try:
        for model_name in ("resnet8", "mobilenet_v1_025", "ds_cnn", "autoencoder"):
            written = zoo.write_zoo(out, [model_name], n_calibration=4)
            qm = load_onnx(written[model_name]["int8"])
            x8 = qm.quantize_input(zoo.calibration_data(zoo.build(model_name), 1, seed=300))
            acc = Accelerator(qm, config=config, board=board)
            acc.run_int8(x8)
            acc.run_int8(x8)  # warm: the weights resident
            for run in _runs(acc, 1):
                yield (f"{name} {model_name}", *run)
    finally:
        board.close()


def _test_engine(name):
    sys.path.insert(0, str(ROOT / "tests"))
    import test_sequencer_rtl as cases
    from fpgacnn.boards.zynq_design import DESIGN
    from fpgacnn.core.config import EngineConfig
    from fpgacnn.host.accelerator import Accelerator, open_board
    word_a_cycle = {f"w1-{beat}": EngineConfig(pin=4, pout=4, kmax=3, stream_width=8 * beat,
                                               max_width=16, max_channels=16,
                                               max_out_channels=16) for beat in (8, 16)}
    config = word_a_cycle[name] if name in word_a_cycle else cases.ENGINES[name]
    board = open_board("sim", config, sequencer=True)
    try:
        for latency, bandwidth in ((40, DESIGN.memory_bytes_per_cycle("zynqmp", config)),
                                   (1, 64.0)):
            board.set_memory_timing(latency=latency, bytes_per_cycle=bandwidth)
            for batch in (1, 3):
                for k, (model_name, model) in enumerate(cases._models()):
                    acc = Accelerator(model, config=config, board=board)
                    x8 = cases._input(model, batch, seed=100 * batch + k)
                    for state in ("cold", "warm"):
                        acc.run_int8(x8)
                        for run in _runs(acc, batch):
                            yield (f"{name} {model_name} b{batch} L{latency} {state}", *run)
                        if acc.report["weights"] == "streamed":
                            break
    finally:
        board.close()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    engines = ["pynq-z2", "zcu104", "k2", "pairs", "w1-8", "w1-16"]
    parser.add_argument("engines", nargs="*", default=engines, choices=engines)
    args = parser.parse_args(argv)
    logging.getLogger().setLevel(logging.ERROR)
    narrow = exact = 0
    for engine in args.engines:
        runs = _zoo_engine(engine) if engine in ("pynq-z2", "zcu104") else _test_engine(engine)
        for where, step, busy, model, dma, is_narrow in runs:
            if not is_narrow:
                continue
            narrow += 1
            exact += busy == model
            print(f"{'ok ' if busy == model else 'OFF'} {where} {step}: busy {busy}, "
                  f"model {model}, DMA model {dma}")
    print(f"{exact} of {narrow} narrow runs exact")
    return 0 if exact == narrow else 1


if __name__ == "__main__":
    sys.exit(main())
