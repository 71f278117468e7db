"""Fused depthwise + pointwise blocks through the network program and the sequencer.

An engine generated with ``fused_blocks`` (register map 2.6) carries the block
in the program image (format 9.0: ``fused_blocks`` in the header, the five
fused fields in a record's descriptor) and in the sequencer's run-table record
(a ``desc_<name>`` word for each of the engine's descriptor registers:
:func:`fpgacnn.core.sequencer.record_fields`), so the sequencer writes the
fused registers before a run. Chains of blocks (``fused_program_helpers``:
what the compiler's fused steps will be) run from board memory on the
:class:`~fpgacnn.hdl.program.program_engine.ProgramEngine` top in Verilator,
bit-exact against :func:`~fpgacnn.host.integer_ops.conv2d` of the depthwise
layer and then the pointwise one, cold and warm (resident depthwise words and
pointwise weights), with a quick memory and a narrow one (the program's
back-pressure); with the memory never short of bandwidth each record's stored
counters are :func:`~fpgacnn.host.cycle_model.sequenced_run_cycles` of its
table's descriptor, reader and writer fields, exactly.
"""

import dataclasses
from types import MappingProxyType, SimpleNamespace

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from fpgacnn.core.config import EngineConfig
from fpgacnn.core.contract import engine_contract
from fpgacnn.core.descriptor import DESCRIPTOR_FIELDS, FUSED_DESCRIPTOR_FIELDS
from fpgacnn.core.errors import BackendError, InputError, MappingError
from fpgacnn.core.memory_port import read_bytes
from fpgacnn.core.regmap import build_regmap
from fpgacnn.core.sequencer import (RECORD_ENGINE, RECORD_FIELDS, descriptor_words,
                                    engine_descriptor, record_bytes, record_fields,
                                    record_word)
from fpgacnn.host.accelerator import open_board
from fpgacnn.host.cycle_model import layer_cycles, sequenced_run_cycles
from fpgacnn.host.engine_driver import EngineDriver
from fpgacnn.host.packing import pack_fused_block
from fpgacnn.host.program_image import (FORMAT_VERSION, EngineRecord, ProgramImage,
                                        build_image)
from fpgacnn.host.program_runner import record_stream, run_program
from fpgacnn.host.sequencer_runner import SequencerDriver, run_sequenced
from fpgacnn.host.sequencer_table import SequencerProgram

from fused_program_helpers import Block, fused_program, random_chain

#: tests/test_fused_core.py's engine: pin 4, pout 4, kmax 3, 64-bit beats, pairs at
#: strides 1 and 2 (spare_bank 2), the pair buffer 8 tiles, two blocks' depthwise words.
FUSED = EngineConfig(pin=4, pout=4, kmax=3, stream_width=64, max_width=16, max_channels=32,
                     max_out_channels=16, spare_bank=2, pixel_pairs=1, fused_blocks=2)
#: The program tests' "pairs" engine (the PYNQ-Z2's shape: two output words a beat
#: stored both a cycle, writer_words 2, pairs at stride 1) with one block's words:
#: the pair buffer 4 tiles, the depthwise memory 4 words.
PAIRS_FUSED = EngineConfig(pin=4, pout=4, kmax=3, stream_width=64, max_width=16,
                           max_channels=16, max_out_channels=16, writer_words=2, spare_bank=1,
                           pixel_pairs=1, fused_blocks=1)
#: The same engines without the block.
PLAIN = {"fused": dataclasses.replace(FUSED, fused_blocks=0),
         "pairs": dataclasses.replace(PAIRS_FUSED, fused_blocks=0)}

#: Chains per engine: (input channels, height, width, blocks, batch). Channels over
#: whole tiles, part of a tile, the pair buffer's limit (32 on FUSED, 16 on
#: PAIRS_FUSED), strides 1 and 2 (FUSED only: PAIRS_FUSED pairs stride 1), 3x3 and
#: 2x2 kernels, symmetric, one-sided and bottom-right pads, odd widths.
CHAINS = {
    "fused": [
        (8, 5, 6, [Block(12, relu=True), Block(5, stride=2), Block(16, k=2, pads=(0, 1, 0, 0))],
         2),
        (32, 4, 5, [Block(16, pads=(0, 0, 1, 1)), Block(16, stride=2),
                    Block(7, relu=True)], 1),
        (3, 7, 7, [Block(4, stride=2, pads=(1, 1, 1, 1)), Block(8, k=2, pads=(1, 1, 0, 0))],
         3),
    ],
    "pairs": [
        (8, 5, 6, [Block(16, relu=True), Block(5, pads=(0, 0, 1, 1)), Block(12, k=2,
                                                                              pads=(0, 1, 0, 0))],
         2),
        (16, 4, 7, [Block(4)], 1),  # the pair buffer full: 4 tiles, one resident block
    ],
}
ENGINES = {"fused": FUSED, "pairs": PAIRS_FUSED}


# -- the record layout and the image, no simulation ---------------------------------------


@pytest.mark.parametrize("name", list(ENGINES))
def test_a_fused_engines_record_carries_every_descriptor_register(name):
    config = ENGINES[name]
    fields = record_fields(config)
    # Every word of an engine without the block where it was; the fused block's
    # five after them, in register order.
    assert fields[:len(RECORD_FIELDS)] == RECORD_FIELDS
    assert [f.name for f in fields[len(RECORD_FIELDS):]] == [
        f"desc_{f.name}" for f in FUSED_DESCRIPTOR_FIELDS]
    assert [f.offset for f in fields] == list(range(len(fields)))
    words = descriptor_words(config)
    assert [f for f, _ in words] == list(engine_contract(config).descriptor_fields)
    regs = build_regmap(config)
    # register order: the sequencer writes them in the order of their addresses
    assert [regs.address(f"desc_{f.name}") for f, _ in words] == sorted(
        regs.address(f"desc_{f.name}") for f, _ in words)
    assert record_bytes(config) >= 4 * len(fields)
    assert record_bytes(config) % read_bytes(config) == 0
    plain = PLAIN[name]
    assert record_fields(plain) == RECORD_FIELDS
    assert [f for f, _ in descriptor_words(plain)] == list(DESCRIPTOR_FIELDS)
    assert record_bytes(plain) < record_bytes(config)
    assert record_word("desc_fused", config) == len(RECORD_FIELDS)
    with pytest.raises(KeyError):
        record_word("desc_fused", plain)
    with pytest.raises(KeyError):
        record_word("desc_fused")


def test_a_fused_field_is_refused_not_dropped_on_an_engine_without_the_block():
    desc, _ = pack_fused_block(FUSED, np.zeros((1, 4, 3, 3), np.int8), 0,
                               dict(w=np.ones((4, 1, 3, 3), np.int8), mult=[1 << 23] * 4,
                                    shift=[30] * 4, y_zp=0),
                               dict(w=np.ones((4, 4, 1, 1), np.int8), mult=[1 << 23] * 4,
                                    shift=[30] * 4, y_zp=0))
    assert engine_descriptor(FUSED, desc, "b")["fused"] == 1
    with pytest.raises(MappingError, match=r"^b: the engine has no descriptor field fused, "
                                           r"dw_base"):
        engine_descriptor(PLAIN["fused"], dict(desc, dw_base=2), "b")
    unfused = {k: v for k, v in desc.items() if k not in {f.name for f in FUSED_DESCRIPTOR_FIELDS}}
    assert set(engine_descriptor(PLAIN["fused"], unfused, "b")) == {f.name for f in
                                                                    DESCRIPTOR_FIELDS}


def _image(name, index=0):
    c, h, w, blocks, batch = CHAINS[name][index]
    program, x8, want = fused_program(ENGINES[name], c, h, w, blocks, batch=batch, seed=index)
    return program, build_image(program), x8, want


def _rom_board(config):
    """A board whose engine's ID ROM is ``config``'s (nothing else answers)."""
    rom = {r.address: r.value for r in build_regmap(config) if r.access == "const"}
    return SimpleNamespace(mmio_read=lambda a: rom.get(a, 0))


@pytest.mark.parametrize("name", list(ENGINES))
def test_the_image_carries_fused_blocks_and_the_fused_fields(name):
    config = ENGINES[name]
    program, image, _, _ = _image(name)
    assert FORMAT_VERSION == (9, 0)
    assert (image.header.version_major, image.header.version_minor) == FORMAT_VERSION
    assert image.header.fused_blocks == config.fused_blocks and image.config == config
    again = ProgramImage(image.data)
    for record, step in zip(again.records, program.steps):
        assert isinstance(record, EngineRecord)
        assert record.descriptor == dict(step.runs[0].descriptor)  # the fused fields too
        assert record.descriptor["fused"] == 1
    # The driver's configuration compare: the image's engine passes, the same
    # engine without the block (and the other way round) is refused in one line.
    assert EngineDriver(_rom_board(config), expected=image.config).config == config
    with pytest.raises(BackendError, match=rf"^the engine on the board was generated with "
                       rf"another configuration than the compiled program: fused_blocks: "
                       rf"program {config.fused_blocks}, bitstream 0$"):
        EngineDriver(_rom_board(PLAIN[name]), expected=image.config)
    with pytest.raises(BackendError, match=rf"fused_blocks: program 0, bitstream "
                                           rf"{config.fused_blocks}$"):
        EngineDriver(_rom_board(config), expected=PLAIN[name])


def test_an_image_with_a_fused_record_for_an_engine_without_the_block_is_refused():
    _, image, _, _ = _image("fused")
    data = image.data.copy()
    # The header's fused_blocks (its word in the header) set to 0: record 0's
    # fused fields name registers that engine has not.
    words = data[:4 * 40].view("<i4")
    at = list(type(image.header).__dataclass_fields__).index("fused_blocks")
    assert words[at] == FUSED.fused_blocks
    words[at] = 0
    with pytest.raises(InputError, match=r"^program image: record 0 sets fused 1, .*, which its "
                                          r"engine has no registers for \(generated without "
                                          r"fused_blocks\)$"):
        ProgramImage(data)


def test_the_image_carries_the_depthwise_rate():
    """Format 9.0: a half-rate engine's image names its depthwise unit's rate, so the
    reader's configuration is the engine's and the sequencer table predicts a fused
    record at the half rate (not the full rate's cycles, which this chain's blocks
    lose at the half)."""
    from fpgacnn.host.cycle_model import layer_cycles
    half = dataclasses.replace(FUSED, depthwise_pixels=1)
    c, h, w, blocks, batch = CHAINS["fused"][1]
    program, _, _ = fused_program(half, c, h, w, blocks, batch=batch, seed=1)
    image = build_image(program)
    assert image.header.depthwise_pixels == 1
    assert ProgramImage(image.data).config == half == image.config
    full, _, _ = fused_program(FUSED, c, h, w, blocks, batch=batch, seed=1)
    sequenced = SequencerProgram(image)
    assert sequenced.config == half
    slower = 0
    for i, (record, step) in enumerate(zip(image.records, program.steps)):
        run = step.runs[0]
        assert record.predicted_cycles == run.predicted_cycles == \
            layer_cycles(half, run.descriptor).cycles
        slower += run.predicted_cycles - full.steps[i].runs[0].predicted_cycles
    # the half rate costs this chain cycles: a prediction read at the full rate would not
    assert slower > 0
    assert [sequenced.predicted_cycles(i) for i in range(len(image.records))] != \
        [SequencerProgram(build_image(full)).predicted_cycles(i)
         for i in range(len(image.records))]


@pytest.mark.parametrize("name", list(ENGINES))
def test_a_fused_records_stream_is_pack_fused_blocks(name):
    """The host's path (program_runner): a fused record's constants and pixels, made
    from the image, are the stream pack_fused_block packs, cold and warm."""
    config = ENGINES[name]
    program, image, x8, _ = _image(name)
    image.write_input(x8)
    for i, (record, step) in enumerate(zip(image.records, program.steps)):
        run = step.runs[0]
        x = image.tensors[record.source.tensor].view(image.data)
        data = run.stream(x)
        assert_array_equal(record_stream(image, record), data)
        assert len(data) == engine_contract(config).input_nbytes(run.descriptor)
        if program.resident:
            warm = record_stream(image, record, warm=True)
            assert_array_equal(warm, run.stream(x, warm=True))
            assert len(warm) == engine_contract(config).input_nbytes(record.warm_descriptor())
        # The next block's input: what this one makes.
        y = image.tensors[record.dest.tensor].view(image.data)
        y[...] = np.random.default_rng(i).integers(-128, 128, y.shape)


@pytest.mark.parametrize("name", list(ENGINES))
def test_the_run_table_holds_the_fused_descriptor(name):
    config = ENGINES[name]
    program, image, _, _ = _image(name)
    sequenced = SequencerProgram(image)
    assert sequenced.one_start == {False: (0, len(image.records)),
                                   True: (0, len(image.records))}
    for warm in (False, True) if program.resident else (False,):
        for i, record in enumerate(image.records):
            assert sequenced.table_word(i, "op", warm=warm) == RECORD_ENGINE
            want = record.warm_descriptor() if warm else record.descriptor
            assert sequenced.descriptor(i, warm=warm) == want
            assert sequenced.table_word(i, "desc_fused", warm=warm) == 1
            const = sequenced.table_word(i, "const_words", warm=warm) * config.pin
            assert const == (record.params_nbytes if warm else record.const_nbytes)


# -- on the RTL ------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=list(ENGINES))
def board(request):
    b = open_board("sim", ENGINES[request.param], sequencer=True)
    b.config_name = request.param
    yield b
    b.close()


#: (latency, bytes per cycle) of the memory: quick and wide (each record's cycles the
#: model's), a Zynq-7000 HP port's, and narrow (the reader and the writer stalled).
MEMORIES = [(1, 64.0), (40, 8.0), (7, 0.7)]


def _timeout(cycles):
    return (4 * cycles + 200_000) / 100e6


@pytest.mark.parametrize("memory", MEMORIES, ids=lambda m: f"L{m[0]}-B{m[1]}")
def test_fused_chains_run_on_the_sequencer_bit_exact(board, memory):
    config = ENGINES[board.config_name]
    latency, bandwidth = memory
    board.set_memory_timing(latency=latency, bytes_per_cycle=bandwidth)
    driver = EngineDriver(board, expected=config)
    seq_driver = SequencerDriver(board, config)
    modelled = 0
    try:
        for index in range(len(CHAINS[board.config_name])):
            program, image, x8, want = _image(board.config_name, index)
            sequenced = SequencerProgram(image)
            for warm in (False, True) if program.resident else (False,):
                y, _ = run_sequenced(sequenced, program, driver, seq_driver, x8, warm=warm,
                                     timeout_of=_timeout)
                assert_array_equal(y, want, err_msg=f"chain {index} warm={warm}")
                if bandwidth >= config.stream_bytes:
                    modelled += _cycles_as_modelled(sequenced, warm)
    finally:
        board.set_memory_timing()
    assert modelled > 0 or bandwidth < config.stream_bytes


@pytest.mark.parametrize("seed", range(4))
def test_random_fused_chains_on_the_sequencer(board, seed):
    """Random chains (random_chain: channels to the pair buffer's limit, strides to the
    pairs', kernels, pads, zero points, batches), at each memory of MEMORIES."""
    config = ENGINES[board.config_name]
    rng = np.random.default_rng(1000 + seed)
    c, h, w, blocks, batch = random_chain(config, rng)
    program, x8, want = fused_program(config, c, h, w, blocks, batch=batch, seed=seed)
    image = build_image(program)
    driver = EngineDriver(board, expected=config)
    seq_driver = SequencerDriver(board, config)
    try:
        for latency, bandwidth in MEMORIES:
            board.set_memory_timing(latency=latency, bytes_per_cycle=bandwidth)
            sequenced = SequencerProgram(image)
            for warm in (False, True) if program.resident else (False,):
                y, _ = run_sequenced(sequenced, program, driver, seq_driver, x8, warm=warm,
                                     timeout_of=_timeout)
                assert_array_equal(y, want, err_msg=f"{blocks} warm={warm} "
                                                    f"memory={latency, bandwidth}")
                if bandwidth >= config.stream_bytes:
                    _cycles_as_modelled(sequenced, warm)
    finally:
        board.set_memory_timing()


def test_fused_chains_run_record_by_record_through_the_dma(board):
    """The host's path (program_runner, EngineDriver.run_layer: the fused registers
    written by the driver), the same chains: bit-exact, each run's busy cycles its
    record's predicted cycles."""
    config = ENGINES[board.config_name]
    driver = EngineDriver(board, expected=config)
    for index in range(len(CHAINS[board.config_name])):
        program, image, x8, want = _image(board.config_name, index)
        y, reports = run_program(image, program, driver, x8, timeout_of=_timeout)
        assert_array_equal(y, want, err_msg=f"chain {index}")
        for report in reports:
            assert report["cycles"] == report["predicted_cycles"], report


def _with_dw_base(program, step, dw_base):
    """``program`` with step ``step``'s run at depthwise-memory word ``dw_base`` (not
    checked: the engine's descriptor check judges it)."""
    run = program.steps[step].runs[0]
    desc = MappingProxyType(dict(run.descriptor, dw_base=dw_base))
    program.steps[step].runs[0] = dataclasses.replace(run, descriptor=desc,
                                                      warm_descriptor=None)
    return dataclasses.replace(program, resident=False)


def test_a_fused_record_at_and_over_the_depthwise_memory(board):
    """At the limit (the block's words end on the memory's last word) the chain runs
    bit-exact; one word over, the engine refuses the record the sequencer wrote
    (its desc_dw_base), the error naming the layer and the field, and the board
    runs the next program as before."""
    config = ENGINES[board.config_name]
    words = engine_contract(config).fused.depthwise_memory.words
    driver = EngineDriver(board, expected=config)
    seq_driver = SequencerDriver(board, config)
    program, _, x8, want = _image(board.config_name, 0)
    tiles = program.steps[1].runs[0].descriptor["ci_tiles"]
    at_limit = _with_dw_base(program, 1, words - tiles)
    y, _ = run_sequenced(SequencerProgram(build_image(at_limit)), at_limit, driver, seq_driver,
                         x8, timeout_of=_timeout)
    assert_array_equal(y, want)
    over = _with_dw_base(program, 1, words - tiles + 1)
    with pytest.raises(BackendError, match=r"layer 'block1'.*dw_base = "
                                           rf"{words - tiles + 1}"):
        run_sequenced(SequencerProgram(build_image(over)), over, driver, seq_driver, x8,
                      timeout_of=_timeout)
    program, _, x8, want = _image(board.config_name, 1)
    y, _ = run_sequenced(SequencerProgram(build_image(program)), program, driver, seq_driver,
                         x8, timeout_of=_timeout)
    assert_array_equal(y, want)


def _cycles_as_modelled(sequenced, warm):
    """Each record's busy counter is sequenced_run_cycles of its table's fields;
    returns how many records were compared."""
    config = sequenced.config
    for i, record in enumerate(sequenced.image.records):
        desc = sequenced.descriptor(i, warm=warm)
        assert desc["fused"] == 1
        predicted = record.warm_predicted_cycles if warm else record.predicted_cycles
        assert predicted == layer_cycles(config, desc).cycles
        model = sequenced_run_cycles(config, desc,
                                     writer=sequenced.table_writer_fields(i, warm=warm),
                                     reader=sequenced.table_reader_fields(i, warm=warm))
        busy = sequenced.counter_words(i)[0]
        assert busy == model == sequenced.predicted_cycles(i, warm=warm), (i, warm, busy, model)
    return len(sequenced.image.records)
