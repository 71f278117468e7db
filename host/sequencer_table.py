"""A program image laid out for the engine's own sequencer (issue 16, docs/program.md).

:class:`SequencerProgram` puts a :class:`~fpgacnn.host.program_image.ProgramImage`
into one board-memory buffer and adds what the sequencer
(:mod:`fpgacnn.core.sequencer`) reads and writes there::

    | program image (header, tensors, records, constants, arena) | run table, cold |
    | run table, warm | counters: COUNTER_WORDS words per record |

Each run table has one record per image record, in the same order: an
engine record whose source the pixel reader takes
(:func:`~fpgacnn.host.pixel_reader_setup.reader_fields`) and whose
destination the pixel writer takes
(:func:`~fpgacnn.host.pixel_writer_setup.writer_fields`) becomes a record the
sequencer runs (op RECORD_ENGINE): its descriptor's register words, its
constants and both halves' fields. A vector record (a residual Add, a global
average pool, a copy) becomes RECORD_VECTOR, the vector unit's fields for its
tensors' places (:func:`~fpgacnn.host.vector_mapping.vector_fields`). Every
other record (a host layer, or a pattern neither half takes) becomes
RECORD_HOST: the sequencer stops there and the host runs it from the same arena
(:mod:`fpgacnn.host.sequencer_runner`). An Add the engine records before it
can do on their writes (:func:`~fpgacnn.host.fused_add.fusions`) is fused
where all of them are sequenced with the fused Add's fields: they write the
Add's output, and its own record is RECORD_SKIP (:attr:`SequencerProgram.fused`).
The warm table is the same program
with the weights resident (each run's warm descriptor, the parameters alone
as constants).

Every address in the tables is an offset from the buffer's start: the
sequencer adds ``seq_memory``, the buffer's address on the board.
"""

import numpy as np

from ..core.errors import MappingError
from ..core.fused_add_fields import FUSED_ADD_FIELDS
from ..core.fused_block import depthwise_on_vector_lanes
from ..core.memory_port import words_per_read
from ..core.pixel_reader_fields import READER_FIELDS
from ..core.pixel_writer_fields import WRITER_FIELDS
from ..core.regmap import build_regmap
from ..core.sequencer import (COUNTER_WORDS, MAX_RECORDS, RECORD_ENGINE, RECORD_HOST,
                              RECORD_SKIP, RECORD_VECTOR, descriptor_words, engine_descriptor,
                              lanes_conflict, record_bytes, record_fields, record_word)
from .cycle_model import sequenced_run_cycles, vector_run_cycles
from .fused_add import fused_record, fusions, run_reads
from .pixel_reader_setup import reader_fields, wide_fields
from .pixel_writer_setup import wide_writer_fields, writer_fields
from .program_image import EngineRecord, FoldRecord, ProgramImage, VectorRecord, alignment
from .vector_mapping import vector_fields, wide_vector_fields

__all__ = ["KeptCounters", "SequencerProgram", "check_record_count", "hardware_record",
           "vector_record_fields"]


def check_record_count(records):
    """Refuse a program of more records than the sequencer counts.

    Raises
    ------
    MappingError
        ``records`` is over :data:`~fpgacnn.core.sequencer.MAX_RECORDS` (the
        16-bit record index of ``seq_range`` and ``seq_status``).
    """
    if records > MAX_RECORDS:
        raise MappingError(f"the program has {records:,} records, over the {MAX_RECORDS:,} "
                           f"the sequencer's 16-bit record index counts (a smaller batch or "
                           f"wider runs make fewer)")


def _vector_places(image, record):
    """The places of a vector record's operands ``a``, ``b`` (None without ``has_b``)
    and output."""
    t = image.tensors
    return t[record.a], t[record.b] if record.has_b else None, t[record.out]


def vector_record_fields(image, record):
    """The vector unit's fields for a vector ``record`` of ``image``, in R-byte words
    where they can be (:func:`~fpgacnn.host.vector_mapping.wide_vector_fields`: twice
    the bytes a read on an engine whose pin is half its beat), or None (the host's)."""
    config = image.config
    fields = vector_fields(config, record, *_vector_places(image, record))
    return wide_vector_fields(config, fields) or fields

#: The most constant words one reader section streams (its ``words`` field).
_MAX_CONST_WORDS = (1 << 16) - 1


def _align(n, to):
    return -(-n // to) * to


def hardware_record(image, record, *, warm, counters, regs=None, fusion=None):
    """The run-table words of one image ``record`` (module docstring).

    Parameters
    ----------
    image : ProgramImage
    record : EngineRecord, VectorRecord or HostRecord
    warm : bool
        The record of the warm table (the program's weights resident).
    counters : int
        Byte offset of the record's counter words.
    regs : RegisterMap, optional
        The engine's (:func:`~fpgacnn.core.regmap.build_regmap`), built once by a caller
        that makes many records.
    fusion : fpgacnn.host.fused_add.Fusion, optional
        An Add fused into ``record`` (one of its runs: the run writes the Add's
        output with the fused Add's fields) or that is ``record`` (RECORD_SKIP).

    Returns
    -------
    (list of int, bool)
        The record's 32-bit words (as unsigned values) and whether the
        sequencer runs it (else: RECORD_HOST).
    """
    config = image.config
    words = [0] * len(record_fields(config))
    words[record_word("op")] = RECORD_HOST
    if fusion is not None and record is image.records[fusion.add]:
        words[record_word("op")] = RECORD_SKIP
        words[record_word("counters")] = counters
        return words, True
    fields = vector_record_fields(image, record) if isinstance(record, VectorRecord) else None
    if fields is not None:
        words[record_word("op")] = RECORD_VECTOR
        for name, value in fields.items():
            words[record_word(f"vector_{name}")] = int(value) & 0xFFFF_FFFF
        words[record_word("counters")] = counters
        return words, True
    if not isinstance(record, EngineRecord):
        return words, False
    if fusion is not None and lanes_conflict(config, record.descriptor.get("fused", 0), 1):
        raise MappingError(f"the engine record of step {record.step}: a fused Add cannot be "
                           f"fused into a fused block's run on this engine (both would compute "
                           f"on the vector unit's lanes)")
    written = record if fusion is None else fused_record(record, fusion)
    reader, writer = reader_fields(image, record), writer_fields(image, written)
    # A beat a cycle where the read port is wider than pin and the section allows it.
    reader = wide_fields(config, reader) or reader
    # A beat a cycle where the writer has the mode and the destination allows it.
    writer = wide_writer_fields(config, writer) or writer
    desc = engine_descriptor(config, record.warm_descriptor() if warm else record.descriptor,
                             f"the engine record of step {record.step}")
    if desc["load_weights"]:
        const_nbytes = record.const_nbytes
    elif desc["load_params"]:
        const_nbytes = record.params_nbytes
    else:
        const_nbytes = 0
    pin = config.pin
    if (reader is None or writer is None or const_nbytes % pin or record.const_offset % pin
            or const_nbytes // pin > _MAX_CONST_WORDS):
        return words, False
    regs = build_regmap(config) if regs is None else regs
    words[record_word("op")] = RECORD_ENGINE
    for f, at in descriptor_words(config):  # the engine's registers, fused block's too
        words[at] = regs.encode(f"desc_{f.name}", int(desc[f.name]))
    words[record_word("const_base")] = record.const_offset // pin
    words[record_word("const_words")] = const_nbytes // pin
    for f in READER_FIELDS:
        words[record_word(f"reader_{f.name}")] = int(reader[f.name]) & 0xFFFF_FFFF
    for f in WRITER_FIELDS:
        words[record_word(f"writer_{f.name}")] = int(writer[f.name])
    if fusion is not None:
        for f in FUSED_ADD_FIELDS:
            words[record_word(f"add_{f.name}")] = int(fusion.fields[f.name]) & 0xFFFF_FFFF
    words[record_word("counters")] = counters
    return words, True


def _one_start_span(records, on_engine):
    """``(first, end)``: the records after the leading input folds, where the
    sequencer runs every one of them (``on_engine``); else None."""
    first = 0
    while first < len(records) and isinstance(records[first], FoldRecord):
        first += 1
    if first == len(records) or not all(on_engine[first:]):
        return None
    return first, len(records)


class SequencerProgram:
    """A program image and its run tables in one board-memory buffer.

    Parameters
    ----------
    image : ProgramImage
        The program (its bytes are copied into the buffer; the
        :attr:`image` here is a new ProgramImage over the buffer's bytes, so
        the host and the engine work on the same arena).
    allocate : callable, optional
        ``allocate(nbytes)``: the board's memory buffer (a contiguous uint8
        array; ``board.allocate``). Default: a numpy array.

    Attributes
    ----------
    memory : numpy.ndarray of uint8
        The whole buffer.
    image : ProgramImage
        The program, its ``data`` a view of ``memory``.
    table_words : dict
        ``{False: cold, True: warm}``: the word address (``pin``-byte words)
        of each run table's record 0.
    on_engine : dict
        ``{warm: list of bool}``: per record, whether the sequencer runs it.
    counters : int
        Byte offset of the counters region (record ``i`` at ``counters +
        4 * COUNTER_WORDS * i``).
    one_start : dict
        ``{warm: (first, end) or None}``: the records of a program the sequencer
        runs in one start (every record but the input folds before them, which
        the host writes with the input), or None where it stops for the host.
    fused : dict
        ``{warm: list of Fusion}``: the Adds each run table does on the writes
        of the engine runs before them (:mod:`fpgacnn.host.fused_add`).
    """

    def __init__(self, image, *, allocate=None):
        check_record_count(len(image.records))
        config = image.config
        self.config = config
        n = image.nbytes
        align = alignment(config)
        rbytes = record_bytes(config)
        nrec = len(image.records)
        tables = {False: _align(n, align)}
        tables[True] = tables[False] + _align(nrec * rbytes, align)
        self.counters = tables[True] + _align(nrec * rbytes, align)
        total = self.counters + _align(4 * COUNTER_WORDS * max(nrec, 1), align)
        memory = (allocate or (lambda k: np.zeros(k, np.uint8)))(total)
        memory[:n] = image.data
        self._over(memory, n)
        self._regs = build_regmap(config)
        self.table_words = {w: off // config.pin for w, off in tables.items()}
        self.on_engine = {}
        self.one_start = {}
        self._vector_predicted = {}
        for i, r in enumerate(self.image.records):
            fields = vector_record_fields(self.image, r) if isinstance(r, VectorRecord) else None
            if fields is not None:
                self._vector_predicted[i] = vector_run_cycles(config, fields)
        self._steps = [r.step for r in self.image.records]
        self.fused = {}
        for warm, off in tables.items():
            flags, rows, fused = [], [], []

            def record_words(i, fusion=None):
                return hardware_record(self.image, self.image.records[i], warm=warm,
                                       counters=self.counters + 4 * COUNTER_WORDS * i,
                                       regs=self._regs, fusion=fusion)

            for i in range(nrec):
                words, hw = record_words(i)
                flags.append(hw)
                rows.append(words)
            for fusion in fusions(self.image):
                # All of the Add's runs on the engine with its fields, or none.
                done = [record_words(i, fusion) for i in fusion.runs + (fusion.add,)]
                if all(hw for _, hw in done):
                    for i, (words, hw) in zip(fusion.runs + (fusion.add,), done):
                        rows[i], flags[i] = words, hw
                    fused.append(fusion)
            self.fused[warm] = fused
            self.on_engine[warm] = flags
            self.one_start[warm] = _one_start_span(self.image.records, flags)
            if rows:
                block = np.zeros((nrec, rbytes), np.uint8)
                block[:, :4 * len(record_fields(config))] = np.stack(
                    [np.array(words, "<u4").view(np.uint8) for words in rows])
                self.memory[off:off + nrec * rbytes] = block.reshape(-1)
        self._skipped = {warm: {f.add for f in fused} for warm, fused in self.fused.items()}
        self._predicted = {warm: [self.predicted_cycles(i, warm=warm) for i in range(nrec)]
                           for warm in (False, True)}

    def copy(self, allocate=None):
        """The same program in a buffer of its own (``allocate`` as the constructor's):
        its bytes copied, the tables and predictions shared, the image, arena and
        counters the new buffer's (:class:`~fpgacnn.host.program_slots.ProgramSlots`)."""
        memory = (allocate or (lambda k: np.zeros(k, np.uint8)))(self.memory.size)
        memory[:] = self.memory
        other = type(self).__new__(type(self))
        other.__dict__.update(self.__dict__)
        other._over(memory, self.image.nbytes)
        return other

    def _over(self, memory, nbytes):
        """``memory`` this program's buffer (its image the first ``nbytes``)."""
        self.memory = memory
        self.image = ProgramImage.over(memory[:nbytes])
        # The counter words as (record, word), a view of the memory made once:
        # the host copies a range of it after every start.
        nrec = len(self.image.records)
        self._counter_words = memory[self.counters:self.counters + 4 * COUNTER_WORDS
                                     * nrec].view("<u4").reshape(nrec, COUNTER_WORDS)
        self._counter_region = memory[self.counters:]  # what clear_counters zeroes
        self._kept = []  # the KeptCounters still reading this buffer's counters
        self._predicted_ranges = {}

    @property
    def nbytes(self):
        return int(self.memory.size)

    def predicted_cycles(self, index, *, warm=False):
        """The cycle model's count of record ``index`` as the sequencer runs it, its
        memory's latency left out (an engine run the sequencer makes:
        :func:`~fpgacnn.host.cycle_model.sequenced_run_cycles` of its table's
        fields, its input at the pixel reader's pace and its output at the
        writer's; with a fused Add the same where the port has room and the least
        it takes where not, :func:`~fpgacnn.host.cycle_model.fused_run_cycles`; an
        engine run the host makes, through the DMA: the record's
        :func:`~fpgacnn.host.cycle_model.layer_cycles`; a vector run's
        :func:`~fpgacnn.host.cycle_model.vector_run_cycles`; 0 for a record the host
        runs by itself, and for an Add fused into the engine runs before it: their
        prediction is the convolution's)."""
        if index in self._skipped[warm]:
            return 0
        if index in self._vector_predicted:
            return self._vector_predicted[index]
        record = self.image.records[index]
        if not isinstance(record, EngineRecord):
            return 0  # a host layer or an input fold: no engine time
        if not self.on_engine[warm][index]:
            return record.warm_predicted_cycles if warm else record.predicted_cycles
        desc = self.descriptor(index, warm=warm)
        reader = self.table_reader_fields(index, warm=warm)
        writer = self.table_writer_fields(index, warm=warm)
        return sequenced_run_cycles(self.config, desc, writer=writer, reader=reader)

    def predicted_range(self, first, end, *, warm=False):
        """The sum of :meth:`predicted_cycles` over records ``first`` to ``end - 1``
        (summed once per range)."""
        key = (first, end, warm)
        if key not in self._predicted_ranges:
            self._predicted_ranges[key] = sum(self._predicted[warm][first:end])
        return self._predicted_ranges[key]

    def counter_snapshot(self, first, end):
        """A copy of the counters of records ``first`` to ``end - 1``, ``(end - first,
        COUNTER_WORDS)`` words, for :meth:`step_counters`."""
        return self._counter_words[first:end].copy()

    def keep_counters(self, first, end):
        """The counters of records ``first`` to ``end - 1`` once the sequencer stopped,
        kept for a report that may be read later (:class:`KeptCounters`): read in
        board memory until :meth:`clear_counters` (before the program's next
        start), copied then if nobody read them. An inference whose report is
        read before the next one copies nothing."""
        kept = KeptCounters(self, first, end)
        self._kept.append(kept)
        return kept

    def copy_kept_counters(self):
        """Copy the counters every :class:`KeptCounters` of this buffer still reads
        (before anything may overwrite them: a clear, a start)."""
        if not self._kept:
            return
        kept, self._kept = self._kept, []
        for k in kept:
            k._save()

    def step_counters(self, first, end, *, warm=False, words=None):
        """The counters of records ``first`` to ``end - 1`` summed per program step, in
        record order: ``(step, runs, (busy, stall_in, stall_out), predicted)`` for each
        step with a record there that the sequencer ran (from ``words``, a
        :meth:`counter_snapshot` of the range, or else board memory as it is)."""
        if words is None:
            words = self.counter_snapshot(first, end)
        flags, steps = self.on_engine[warm], self._steps
        predicted = self._predicted[warm]
        sums = {}
        for k, row in zip(range(first, end), words.tolist()):
            if flags[k]:
                entry = sums.setdefault(steps[k], [0, 0, 0, 0, 0])
                entry[0] += 1
                entry[1] += row[0]
                entry[2] += row[1]
                entry[3] += row[2]
                entry[4] += predicted[k]
        return [(step, e[0], (e[1], e[2], e[3]), e[4]) for step, e in sums.items()]

    def counter_words(self, index):
        """The counters the sequencer stored for record ``index``: busy, stall-in, stall-out."""
        off = self.counters + 4 * COUNTER_WORDS * index
        return [int(v) for v in self.memory[off:off + 4 * COUNTER_WORDS].view("<u4")]

    def table_word(self, index, name, *, warm=False):
        """Word ``name`` (:func:`~fpgacnn.core.sequencer.record_fields`: ``reader_wide``,
        ``const_words``, ``desc_fused``, ...) of record ``index`` in a run table, read
        from board memory."""
        config = self.config
        at = self.table_words[warm] * config.pin + index * record_bytes(config)
        return int(self.memory[at + 4 * record_word(name, config):][:4].view("<u4")[0])

    def lanes_conflict(self, index, *, warm=False):
        """Whether engine record ``index`` of a run table, as board memory holds it, asks
        for the vector unit's lanes twice (:func:`~fpgacnn.core.sequencer.lanes_conflict`:
        the sequencer refuses it; a table this class writes never holds one)."""
        if not depthwise_on_vector_lanes(self.config):
            return False  # no desc_fused word, or a block with lanes of its own
        return lanes_conflict(self.config, self.table_word(index, "desc_fused", warm=warm),
                              self.table_word(index, "add_enable", warm=warm))

    def _table_fields(self, index, prefix, spec, warm):
        return {f.name: self.table_word(index, f"{prefix}_{f.name}", warm=warm) for f in spec}

    def table_reader_fields(self, index, *, warm=False):
        """The pixel reader's fields of engine record ``index`` as its run table has
        them (:data:`~fpgacnn.core.pixel_reader_fields.READER_FIELDS`, as unsigned
        32-bit words), read from board memory."""
        return self._table_fields(index, "reader", READER_FIELDS, warm)

    def table_writer_fields(self, index, *, warm=False):
        """The pixel writer's fields of engine record ``index`` as its run table has
        them (:data:`~fpgacnn.core.pixel_writer_fields.WRITER_FIELDS`, as unsigned
        32-bit words), read from board memory."""
        return self._table_fields(index, "writer", WRITER_FIELDS, warm)

    def run_reads(self, index, *, warm=False):
        """The memory reads of engine record ``index`` as its run table has it, at most
        (:func:`~fpgacnn.host.fused_add.run_reads`: its input's, its constants', and
        with a fused Add b's), read from board memory."""
        reader = self.table_reader_fields(index, warm=warm)
        writer = self.table_writer_fields(index, warm=warm)
        const = self.table_word(index, "const_words", warm=warm)
        k = words_per_read(self.config)
        b = writer if self.table_word(index, "add_enable", warm=warm) else None
        return run_reads(reader, b, const // k if const % k == 0 else const)

    def descriptor(self, index, *, warm=False):
        """The descriptor record ``index`` of a run table holds, as the sequencer
        writes it (decoded from board memory)."""
        config, regs = self.config, self._regs
        at = self.table_words[warm] * config.pin + index * record_bytes(config)
        words = self.memory[at:at + 4 * len(record_fields(config))].view("<u4")
        return {f.name: regs.decode(f"desc_{f.name}", int(words[i]))["value"]
                for f, i in descriptor_words(config)}

    def clear_counters(self):
        """Zero the counters region (so a record the sequencer skipped reads 0), those
        a :class:`KeptCounters` still reads copied first (every start of the
        program comes after this)."""
        if self._kept:
            self.copy_kept_counters()
        self._counter_region.fill(0)


class KeptCounters:
    """A stopped range's counters for a later report (:meth:`SequencerProgram.
    keep_counters`): board memory's until the program clears them, a copy after."""

    def __init__(self, sequenced, first, end):
        self._sequenced, self.first, self.end = sequenced, first, end
        self._copy = None

    def _save(self):
        if self._copy is None:
            self._copy = self._sequenced.counter_snapshot(self.first, self.end)

    def words(self):
        """The ``(end - first, COUNTER_WORDS)`` counter words, read once: after
        this the program need not copy them (a second call reads the copy)."""
        if self._copy is None:
            self._save()
            kept = self._sequenced._kept
            if self in kept:
                kept.remove(self)
        return self._copy
