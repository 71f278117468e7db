"""The program sequencer's registers and its run table, declared once (issue 16).

The sequencer (:class:`fpgacnn.hdl.program.sequencer.Sequencer`, inside the
:class:`~fpgacnn.hdl.program.program_engine.ProgramEngine` top) runs a network
program's engine runs one after another from board memory: for each record of
its **run table** it writes the run's descriptor into the engine's registers,
starts it, streams its constants and pixels from memory (the pixel reader),
writes its output into memory (the pixel writer) and stores its performance
counters; at a record the engine cannot run by itself it stops, and the host
runs that record and starts the sequencer again at the next one
(docs/program.md, "How a program runs").

Both sides read this module: the gateware decodes the registers of
:func:`build_sequencer_regmap` and the record words of :func:`record_fields`;
the host (:mod:`fpgacnn.host.sequencer_table`) writes the records and drives
the registers.

Registers (byte addresses from :data:`SEQUENCER_BASE`, beside the engine's own
below it, on the same AXI4-Lite port)::

    seq_magic     b"FCSQ"                                          (const)
    seq_layout    record_bytes: bytes of one run-table record       (const)
    seq_memory    byte address of the program image in the memory  (rw)
                  space, added to every address the sequencer, the
                  reader and the writer use (the image is relocatable)
    seq_table     word address (pin-byte words) of the run table's record 0   (rw)
    seq_range     first (16): the record to start at, count (16)    (rw)
    seq_control   start, abort (write 1 to pulse)
    seq_status    busy, done, host, error, index (16)               (ro)
    seq_cycles    cycles from the last start to its stop            (ro)

On an engine whose descriptor has registers past
:data:`~fpgacnn.core.descriptor.DESCRIPTOR_FIELDS` (register map 2.6, an
engine generated with ``fused_blocks``: the fused block's five fields), a
record carries a ``desc_<name>`` word for each of them too, after
``counters`` (:func:`record_fields`): every word of :data:`RECORD_FIELDS`
keeps its offset on every engine, and an engine without the block keeps its
record and its sequencer's Verilog byte for byte. The sequencer writes the
engine's descriptor registers in register order
(:func:`descriptor_words`), whatever their words' places.

A record of op ``RECORD_VECTOR`` is a layer between the convolutions (a
residual Add, a max or average pool, a copy) that the vector unit runs from
memory to memory: its words after ``op`` are :data:`VECTOR_RECORD_FIELDS`
(the unit's fields, :mod:`fpgacnn.core.vector_fields`), and its
``counters`` word is where an engine record's is.

An engine record's words ``add_<name>`` are the fused Add's
(:mod:`fpgacnn.core.fused_add_fields`: with ``add_enable`` the run writes a
residual Add's output); the Add's own record is then ``RECORD_SKIP``, which
the sequencer passes, its counters untouched.

``done``: every record of the range ran. ``host``: the sequencer stopped
before record ``index``, which the host runs (a host layer, or a run whose
patterns the reader or writer does not take). ``error``: the engine refused
record ``index``'s descriptor (the engine's own ``status.error_fields`` say
why; the engine's registers are the host's again once the sequencer stops),
or the sequencer refused the record itself: a fused block whose depthwise
half computes on the vector unit's lanes with a fused Add, which computes on
the same lanes (:func:`lanes_conflict`; the engine is not started).
While ``busy``, the engine's registers belong to the sequencer: the host's
writes below :data:`SEQUENCER_BASE` are dropped and its reads return 0.
"""

from dataclasses import dataclass
import functools
import math

from .config import require_config
from .contract import engine_contract
from .descriptor import ALL_DESCRIPTOR_FIELDS, DESCRIPTOR_FIELDS, complete_descriptor
from .errors import MappingError
from .fused_add_fields import FUSED_ADD_FIELDS
from .fused_block import depthwise_on_vector_lanes
from .memory_port import read_bytes
from .pixel_reader_fields import READER_FIELDS
from .pixel_writer_fields import WRITER_FIELDS
from .regmap import RegisterMapBuilder
from .vector_fields import VECTOR_FIELDS

__all__ = ["SEQUENCER_BASE", "SEQUENCER_MAGIC", "RECORD_FIELDS", "VECTOR_RECORD_FIELDS",
           "RECORD_ENGINE", "RECORD_HOST", "RECORD_VECTOR", "RECORD_SKIP", "RECORD_INDEX_BITS",
           "MAX_RECORDS", "COUNTER_WORDS", "RecordField", "descriptor_words",
           "engine_descriptor", "record_fields", "record_bytes", "record_word",
           "lanes_conflict", "build_sequencer_regmap"]

#: Byte address of the sequencer's first register: the upper half of the 4 KiB window.
SEQUENCER_BASE = 0x800
#: ``b"FCSQ"`` as a little-endian word: a top with a sequencer answers it at SEQUENCER_BASE.
SEQUENCER_MAGIC = int.from_bytes(b"FCSQ", "little")

#: A run-table record's operation (its first word): an engine run, a stop for the
#: host, a vector unit run, nothing (an Add the engine record before it did:
#: :mod:`fpgacnn.core.fused_add_fields`; its counters are left as they are).
RECORD_ENGINE, RECORD_HOST, RECORD_VECTOR, RECORD_SKIP = 1, 2, 3, 4

#: Bits of a record index (``seq_range``'s first and count, ``seq_status.index``):
#: a program the sequencer runs has at most MAX_RECORDS records.
RECORD_INDEX_BITS = 16
MAX_RECORDS = (1 << RECORD_INDEX_BITS) - 1

#: Words the sequencer stores per engine run at its record's ``counters``
#: address: the engine's busy, stall-on-input and stall-on-output cycles.
COUNTER_WORDS = 3


@dataclass(frozen=True)
class RecordField:
    """A field of a run-table record: ``count`` 32-bit words from word ``offset``."""

    name: str
    offset: int
    count: int
    doc: str


def _fields():
    spec = [("op", 1, "RECORD_ENGINE; RECORD_HOST: stop, the host runs this record; "
                      "RECORD_VECTOR: the vector unit runs it (VECTOR_RECORD_FIELDS); "
                      "RECORD_SKIP: nothing to run (an Add fused into the record before)")]
    spec += [(f"desc_{f.name}", 1, f"the desc_{f.name} register's word") for f in DESCRIPTOR_FIELDS]
    spec += [("const_base", 1, "word address (pin-byte words) of the constants the run "
                               "streams first"),
             ("const_words", 1, "pin-byte words of constants (0: none)")]
    spec += [(f"reader_{f.name}", 1, f"the pixel reader's {f.name}") for f in READER_FIELDS]
    spec += [(f"writer_{f.name}", 1, f"the pixel writer's {f.name}") for f in WRITER_FIELDS]
    spec += [(f"add_{f.name}", 1, f"the fused Add's {f.name}") for f in FUSED_ADD_FIELDS]
    spec += [("counters", 1, f"byte address of the run's {COUNTER_WORDS} counter words")]
    out, offset = [], 0
    for name, count, doc in spec:
        out.append(RecordField(name, offset, count, doc))
        offset += count
    return tuple(out)


#: The words of a run-table record, in order (every field one little-endian
#: 32-bit word; a signed value in two's complement).
RECORD_FIELDS = _fields()


def _vector_fields():
    counters = next(f for f in RECORD_FIELDS if f.name == "counters")
    out = [RecordField("vector_" + f.name, 1 + i, 1, f.doc) for i, f in enumerate(VECTOR_FIELDS)]
    assert out[-1].offset < counters.offset
    return tuple(out) + (counters,)


#: The words of a RECORD_VECTOR record after ``op``: the vector unit's fields, then
#: ``counters`` at the offset of an engine record's.
VECTOR_RECORD_FIELDS = _vector_fields()


def _extra_descriptor_fields(config):
    """The engine's descriptor fields past :data:`DESCRIPTOR_FIELDS` (its contract's
    list, in register order: the fused block's on a 2.6 engine, else none)."""
    fields = engine_contract(config).descriptor_fields
    # The 2.5 fields lead every engine's list: their words are RECORD_FIELDS'.
    assert fields[:len(DESCRIPTOR_FIELDS)] == DESCRIPTOR_FIELDS
    return fields[len(DESCRIPTOR_FIELDS):]


@functools.lru_cache(maxsize=256)  # per configuration: the host asks per record
def record_fields(config):
    """The words of a run-table record of an engine of ``config``: :data:`RECORD_FIELDS`,
    then a ``desc_<name>`` word for each of the engine's descriptor fields past
    :data:`~fpgacnn.core.descriptor.DESCRIPTOR_FIELDS`
    (:attr:`~fpgacnn.core.contract.EngineContract.descriptor_fields`: the fused
    block's, register map 2.6). Added after ``counters`` so that every other word
    keeps its offset (:func:`record_word`) on every engine.

    Returns
    -------
    tuple of RecordField
    """
    require_config(config)
    out = list(RECORD_FIELDS)
    offset = len(RECORD_FIELDS)
    for i, f in enumerate(_extra_descriptor_fields(config)):
        out.append(RecordField(f"desc_{f.name}", offset + i, 1,
                               f"the desc_{f.name} register's word"))
    return tuple(out)


@functools.lru_cache(maxsize=256)
def descriptor_words(config):
    """``(field, record word)`` for each descriptor register of an engine of
    ``config``, in register order: the registers the sequencer writes before a
    run and the record words it writes them from (:func:`record_fields`)."""
    fields = engine_contract(config).descriptor_fields
    return tuple((f, record_word(f"desc_{f.name}", config)) for f in fields)


def lanes_conflict(config, fused, add_enable):
    """Whether an engine record of ``config``'s run table asks for two users of the
    vector unit's lanes at once: a fused block (its ``desc_fused`` word, ``fused``)
    whose depthwise half is requantized on the lanes
    (:func:`~fpgacnn.core.fused_block.depthwise_on_vector_lanes`) and a fused Add
    (``add_enable``), which computes on them too. Such a record would run with one
    of the two computing on the other's operands, a silently wrong output: the host
    never writes one (:func:`fpgacnn.host.fused_add.fusions`, and
    :func:`fpgacnn.host.sequencer_table.hardware_record` refuses it), and the
    sequencer stops on one with ``error`` before it starts the engine."""
    return depthwise_on_vector_lanes(config) and bool(fused) and bool(add_enable)


def engine_descriptor(config, desc, name):
    """``desc`` completed to the fields of an engine of ``config`` (its contract's
    :attr:`~fpgacnn.core.contract.EngineContract.descriptor_fields`: the registers
    the sequencer writes).

    Raises
    ------
    MappingError
        ``desc`` sets a field the engine has no register for (a fused block's on an
        engine generated without ``fused_blocks``): dropping it would run another
        layer.
    """
    desc = complete_descriptor(desc, ALL_DESCRIPTOR_FIELDS)
    fields = engine_contract(config).descriptor_fields
    absent = [f.name for f in ALL_DESCRIPTOR_FIELDS
              if f not in fields and int(desc[f.name]) != f.default]
    if absent:
        raise MappingError(f"{name}: the engine has no descriptor field {', '.join(absent)} "
                           f"(generated without fused_blocks)")
    return {f.name: desc[f.name] for f in fields}


_BY_NAME = {f.name: f for f in RECORD_FIELDS + VECTOR_RECORD_FIELDS}


def record_word(name, config=None):
    """The word offset of record field ``name`` (a word past :data:`RECORD_FIELDS`,
    such as ``desc_fused``, of the record of an engine of ``config``:
    :func:`record_fields`; ``KeyError`` where that engine's record has none)."""
    if name in _BY_NAME:
        return _BY_NAME[name].offset
    if config is None:
        raise KeyError(f"{name}: not a word of every engine's record (give the config)")
    for f in record_fields(config):
        if f.name == name:
            return f.offset
    raise KeyError(f"{name}: not a word of this engine's run-table record")


def record_bytes(config):
    """Bytes of one record for ``config``: the fields (:func:`record_fields`), padded
    to whole memory reads (R bytes, :func:`~fpgacnn.core.memory_port.read_bytes`: the
    sequencer fetches a record R bytes a read where its table is R-aligned) of whole
    32-bit words."""
    require_config(config)
    unit = math.lcm(4, read_bytes(config))
    return -(-4 * len(record_fields(config)) // unit) * unit


def build_sequencer_regmap(config):
    """The sequencer's registers for an engine of ``config`` (module docstring).

    Returns
    -------
    RegisterMap
    """
    b = RegisterMapBuilder(origin=SEQUENCER_BASE)
    b.begin_group("seq")
    b.add("seq_magic", "const", [("value", 32)], value=SEQUENCER_MAGIC, doc='b"FCSQ"')
    b.add("seq_layout", "const", [("record_bytes", 16)], value=record_bytes(config),
          doc="bytes of one run-table record")
    b.add("seq_memory", "rw", [("value", 32)],
          doc="byte address of the program image, added to every memory address")
    b.add("seq_table", "rw", [("value", 32)],
          doc="word address (pin-byte words) of the run table's record 0")
    b.add("seq_range", "rw", [("first", RECORD_INDEX_BITS, False, "the record to start at"),
                              ("count", RECORD_INDEX_BITS, False, "records to run from first")],
          doc="the records a start runs")
    b.add("seq_control", "pulse", [
        ("start", 1, False, "run the range (ignored while busy)"),
        ("abort", 1, False, "stop at once: the engine is soft-reset, reads in flight drained"),
        ("clear_fault", 1, False, "forget the memory fault (seq_fault)"),
    ], doc="write 1 to pulse")
    b.add("seq_status", "ro", [
        ("busy", 1, False, "a start was taken and the sequencer has not stopped"),
        ("done", 1, False, "every record of the range ran"),
        ("host", 1, False, "stopped before record index: the host runs it"),
        ("error", 1, False, "the engine refused record index's descriptor"),
        ("index", RECORD_INDEX_BITS, False, "the record the sequencer is at, or stopped at"),
    ], doc="sequencer status")
    b.add("seq_cycles", "ro", [("value", 32)], doc="cycles from the last start to its stop")
    b.add("seq_fault", "ro", [
        ("kind", 2, False, "the first memory access answered with an error since clear_fault: "
                           "0 none, 1 a read, 2 a write (an AXI4 port's SLVERR or DECERR)"),
    ], doc="memory fault (a memory that answers every access holds it 0)")
    b.add("seq_fault_addr", "ro", [("value", 32)],
          doc="byte address of the burst that failed (seq_fault)")
    return b.build(config=config)

