"""Run a network program on the engine's own sequencer (issue 16, docs/program.md).

The host's side of a board whose engine sequences the program itself
(:class:`~fpgacnn.hdl.program.program_engine.ProgramEngine`): it writes the
network's input into the arena in board memory, starts the sequencer on the
longest range of records it runs by itself, waits for its interrupt, runs
the one record the sequencer stopped before (a host layer the vector unit
does not take, or a run whose
patterns the pixel reader or writer does not take: the per-run path of
:mod:`fpgacnn.host.program_runner`, from the same arena) and starts it again
at the next one. Per-run counters come back from memory, so the report keeps
its per-layer cycles; the sequencer's own cycle count (fetches, descriptor
writes, memory stalls) is the engine time the report adds up.
"""

import time
import weakref

import numpy as np

from ..core.errors import BackendError
from ..core.memory_port import FAULT_NONE, FAULT_READ, FAULT_WRITE, read_bytes
from ..core.sequencer import SEQUENCER_MAGIC, build_sequencer_regmap, record_bytes
from .program_image import FoldRecord, tensor_names
from .program_runner import StepTotals, run_record

__all__ = ["InFlight", "SequencedRun", "SequencerDriver", "collect_sequenced", "run_sequenced",
           "stage_input", "start_sequenced", "stop_sequenced"]


#: board -> (the buffer attached as its memory, its address on the engine's bus).
_ATTACHED = weakref.WeakKeyDictionary()


def _attached_buffer(board):
    try:
        return _ATTACHED.get(board)
    except TypeError:  # a board that cannot be weakly referenced: attach every time
        return None


def _set_attached_buffer(board, held):
    try:
        _ATTACHED[board] = held
    except TypeError:
        pass


class SequencerDriver:
    """The sequencer's registers on a board (``mmio_read`` / ``mmio_write``, ``wait_irq``).

    Parameters
    ----------
    board
        A board with a memory port whose top answers the sequencer's magic:
        ``has_memory``, ``attach_memory(buf)`` (returns the buffer's address
        on the engine's bus), ``memory_to_device()`` / ``memory_from_device()``
        (a CPU cache's write-back and invalidate; no-ops without one), and
        either ``wait_irq(timeout)`` or nothing (the status is polled).
    config : EngineConfig

    Raises
    ------
    BackendError
        The board has no memory, or its top no sequencer, or a run table of
        another layout.
    """

    def __init__(self, board, config):
        self.board = board
        self.regs = build_sequencer_regmap(config)
        self.read_bytes = read_bytes(config)
        #: Seconds the register accesses took (the board's bus, not the host's work:
        #: on the simulated board, simulated cycles).
        self.bus_seconds = 0.0
        #: Seconds spent in :meth:`wait` (the board's time: on the simulated board,
        #: the simulation of the engine's run).
        self.wait_seconds = 0.0
        # What every inference writes and reads, made once: the register
        # addresses, each register's fields as (name, offset, mask, signed),
        # the words of the starts (by run table and range).
        self._address = {r.name: r.address for r in self.regs}
        self._fields = {r.name: tuple((f.name, f.offset, (1 << f.width) - 1, f.signed)
                                      for f in r.fields) for r in self.regs}
        self._start_word = self.regs.encode("seq_control", start=1)
        self._range_words, self._value_words = {}, {}
        # What every stop reads, in one block, and how a good stop looks: done,
        # no error, no memory fault (anything else is decoded field by field,
        # :func:`_stopped`).
        self._stop_addresses = tuple(self._address[n] for n in
                                     ("seq_status", "seq_cycles", "seq_fault"))
        status = {f.name: f for f in self.regs["seq_status"].fields}
        self._stop_mask = sum(((1 << status[n].width) - 1) << status[n].offset
                              for n in ("busy", "done", "error"))
        self._stop_good = 1 << status["done"].offset
        kind = self.regs["seq_fault"].fields[0]
        self._fault_kind = (kind.offset, (1 << kind.width) - 1)
        # The board's methods, looked up once (every inference calls them).
        self._wait_irq = getattr(board, "wait_irq", None)
        self._memory_error = getattr(board, "memory_error", None)
        self._one_starts = {}  # (SequencerProgram, warm) -> its OneStart on this board
        if not getattr(board, "has_memory", False):
            raise BackendError("this board has no memory port: its engine cannot sequence a "
                               "program (the host runs it record by record)")
        magic = board.mmio_read(self.regs.address("seq_magic"))
        if magic != SEQUENCER_MAGIC:
            raise BackendError(f"the engine top has no program sequencer (0x{magic:08x} at "
                               f"0x{self.regs.address('seq_magic'):03x})")
        layout = self.read("seq_layout")["record_bytes"]
        if layout != record_bytes(config):
            raise BackendError(f"the sequencer's run-table records are {layout} bytes, this "
                               f"host's {record_bytes(config)}")
        self.attached = None

    def write(self, name, value=None, **fields):
        self.write_word(name, self.regs.encode(name, value, **fields))

    def value_word(self, name, value):
        """The word of single-field register ``name`` holding ``value``, encoded (and
        checked against the field) once per value."""
        word = self._value_words.get((name, value))
        if word is None:
            word = self._value_words[name, value] = self.regs.encode(name, value)
        return word

    def write_words(self, writes):
        """Write ``(address, word)`` pairs in order, timed as one block of bus time."""
        write = self.board.mmio_write
        t0 = time.perf_counter()
        for address, word in writes:
            write(address, word)
        self.bus_seconds += time.perf_counter() - t0

    def one_start(self, sequenced, *, warm, timeout_of):
        """The :class:`OneStart` of ``sequenced`` (a program the sequencer runs in one
        start) on this board, made on its first run and kept.

        Raises
        ------
        ValueError
            ``sequenced`` needs the host between its records.
        """
        key = (sequenced, warm)
        prepared = self._one_starts.get(key)
        if prepared is None:
            prepared = self._one_starts[key] = OneStart(sequenced, self, warm=warm,
                                                        timeout_of=timeout_of)
        return prepared

    def write_word(self, name, word):
        """Write a register word (already encoded) to register ``name``."""
        address = self._address[name]
        t0 = time.perf_counter()
        self.board.mmio_write(address, word)
        self.bus_seconds += time.perf_counter() - t0

    def read(self, name):
        """Register ``name``'s fields, as a dict."""
        address = self._address[name]
        t0 = time.perf_counter()
        word = self.board.mmio_read(address)
        self.bus_seconds += time.perf_counter() - t0
        values = {}
        for field, offset, mask, signed in self._fields[name]:
            value = (word >> offset) & mask
            if signed and value > mask >> 1:
                value -= mask + 1
            values[field] = value
        return values

    def attach(self, program):
        """Make ``program``'s buffer the board's memory and point the sequencer at it
        (before every inference).

        ``seq_memory`` is where the buffer is on the engine's bus, as the board
        says (the simulated board: 0, its addresses are offsets into the
        buffer; a Zynq board: the buffer's physical address). The buffer is
        attached when the board holds another (every driver of the board sees
        what the board holds: each Accelerator has its own driver); the
        register is written every time, one bus write, so no other driver's
        program and no reset leaves it pointing elsewhere.
        """
        self.write_word("seq_memory", self.memory_word(program))

    def memory_word(self, program):
        """The ``seq_memory`` word of ``program``'s buffer, the buffer attached as the
        board's memory first where the board holds another (:meth:`attach`, which
        writes the word)."""
        held = _attached_buffer(self.board)
        if held is None or held[0] is not program.memory:
            address = self.board.attach_memory(program.memory)
            if address % self.read_bytes:
                # The engine reads R-byte words at R-aligned addresses: a buffer
                # elsewhere would read the wrong bytes.
                raise BackendError(f"the program's buffer is at 0x{address:08x}, not on a "
                                   f"{self.read_bytes}-byte boundary (the engine's memory read)")
            held = (program.memory, address)
            _set_attached_buffer(self.board, held)
        self.attached = program
        return self.value_word("seq_memory", held[1])

    def start(self, first, count):
        """Start the sequencer on ``count`` records from ``first``, the memory
        first made the device's (a board with a CPU cache writes it back)."""
        word = self._range_words.get((first, count))
        if word is None:
            word = self._range_words[first, count] = self.regs.encode(
                "seq_range", first=first, count=count)
        self.board.memory_to_device()
        self.write_word("seq_range", word)
        self.write_word("seq_control", self._start_word)

    def wait(self, timeout):
        """Wait until the sequencer stops; False if ``timeout`` board seconds pass first.

        A board that simulates the engine runs it until its ``irq``
        (``wait_irq``); a real one is polled over its registers (the status'
        ``busy``), a wall-clock timeout. Either way the memory is then the
        host's again (a board with a CPU cache drops its copy).
        """
        t0 = time.perf_counter()
        try:
            return self._wait(timeout)
        finally:
            self.wait_seconds += time.perf_counter() - t0

    @property
    def board_seconds(self):
        """:attr:`bus_seconds` plus :attr:`wait_seconds`: the board's share of the
        wall clock so far (a span of host time is its wall time less this one's
        growth)."""
        return self.bus_seconds + self.wait_seconds

    def read_stop(self):
        """The registers a stop leaves, read in one block: ``(status word, cycles,
        fault kind)``, and whether they say the range finished well (done, not busy,
        no error, no memory fault, none in the board's own memory check), so that a good
        stop is checked without decoding (else :meth:`memory_fault` and the status'
        fields say what went wrong)."""
        read, memory_error = self.board.mmio_read, self._memory_error
        status_at, cycles_at, fault_at = self._stop_addresses
        t0 = time.perf_counter()
        status, cycles, fault = read(status_at), read(cycles_at), read(fault_at)
        # The board's own check of the memory (the simulated board's), with them.
        error = memory_error() if memory_error is not None else None
        self.bus_seconds += time.perf_counter() - t0
        fault = (fault >> self._fault_kind[0]) & self._fault_kind[1]
        good = (status & self._stop_mask == self._stop_good and fault == FAULT_NONE
                and error is None)
        return status, cycles, fault, good

    def _wait(self, timeout):
        wait_irq = self._wait_irq
        if wait_irq is not None:
            stopped = wait_irq(timeout)
        else:
            # The polls are waiting, not bus time the host spends (the caller
            # counts the whole wait as the board's).
            # A board that is simulated behind the PYNQ API (cocotbpynq) runs far
            # slower than real time: there the simulator's own limit bounds the run.
            status = self.regs.address("seq_status")
            deadline = (time.monotonic() + timeout if getattr(self.board, "realtime", True)
                        else float("inf"))
            while not (stopped := not self.regs.decode("seq_status",
                                                       self.board.mmio_read(status))["busy"]):
                if time.monotonic() > deadline:
                    break
        self.board.memory_from_device()
        return stopped

    def memory_fault(self, kind=None):
        """The first failed memory access since the last call (then forgotten), or None.

        The engine's ``seq_fault`` (an AXI4 error response on a Zynq board;
        ``kind``, its field as :meth:`read_stop` read it, else read here)
        and the board's own memory model's (the simulated board's check of
        every address against its buffer), whichever there is.
        """
        faults = []
        fault = self.read("seq_fault")["kind"] if kind is None else kind
        if fault != FAULT_NONE:
            what = {FAULT_READ: "read", FAULT_WRITE: "write"}.get(fault, f"access (kind {fault})")
            address = self.read("seq_fault_addr")["value"]
            faults.append(f"a memory {what} at 0x{address:08x} was answered with an error")
            self.write("seq_control", clear_fault=1)
        memory_error = self._memory_error
        t0 = time.perf_counter()
        error = memory_error() if memory_error is not None else None
        self.bus_seconds += time.perf_counter() - t0  # the board's own check, not the host's
        if error is not None:
            self.board.clear_memory_error()
            faults.append(error)
        return "; ".join(faults) or None


_report_steps_cache = weakref.WeakKeyDictionary()


def _report_steps(sequenced, program):
    """``(step index, name, op, macs)`` of each step with records, in record order:
    what the report says of a step besides its counters (made once per program)."""
    cached = _report_steps_cache.get(sequenced)
    if cached is None or cached[0] is not program:
        seen, rows = set(), []
        for record in sequenced.image.records:
            if record.step not in seen:
                seen.add(record.step)
                step = program.steps[record.step]
                rows.append((record.step, step.name, step.op, step.macs))
        cached = _report_steps_cache[sequenced] = (program, rows)
    return cached[1]


def run_sequenced(sequenced, program, driver, seq_driver, x8, *, warm=False, timeout_of,
                  progress=None, copy=True):
    """Run ``program`` from its :class:`~fpgacnn.host.sequencer_table.SequencerProgram`.

    Parameters
    ----------
    sequenced : SequencerProgram
    program : fpgacnn.host.compiler.Program
    driver : fpgacnn.host.engine_driver.EngineDriver
        For the records the host runs on the engine run by run.
    seq_driver : SequencerDriver
    x8 : numpy.ndarray of int8 or None
        ``(batch, *input shape)``; None: the input is in the arena already
        (quantized into ``sequenced.image.input_view``).
    warm : bool
        The board holds the program's weights: the warm run table.
    timeout_of : callable
        ``timeout_of(predicted_cycles)``: seconds before a run counts as hung.
    progress : callable, optional
    copy : bool
        Return a copy of the output; False: its view in the arena
        (``sequenced.image.output_view``), valid until the program's next run.

    Returns
    -------
    (numpy.ndarray, SequencedRun)
        The int8 output, and what the report is made of (its counters left
        in board memory until the program's next run, copied then if the
        report was not read; :meth:`SequencedRun.reports` sums them when the
        report is asked for, not in the inference's time).

    Raises
    ------
    BackendError
        The engine refused a record (the layer named), the sequencer did not
        stop in time (aborted), or a memory access fell outside the program.
    """
    if sequenced.one_start[warm] is not None:
        # The whole network in one start (every zoo model): no loop over the
        # records, the stream's start and stop.
        stage_input(sequenced, x8)
        flight = start_sequenced(sequenced, seq_driver, warm=warm, timeout_of=timeout_of,
                                 progress=progress)
        stop_sequenced(flight, program, driver, seq_driver)
        return collect_sequenced(flight, program, copy=copy)
    image = sequenced.image
    # The board's time: the waits (the sequencer's runs, the runs the host
    # makes through the driver) and the register accesses, as in those runs;
    # the caller's wall-clock time less it is the host's. The host records'
    # and host-made runs' own share is reported on their steps.
    waited = attributed = 0.0
    bus_start = seq_driver.bus_seconds
    _begin(sequenced, seq_driver, x8, warm=warm)
    index = None  # tensor name -> table index, for the records the host runs
    records, flags = image.records, sequenced.on_engine[warm]
    totals, host_reports, ranges = {}, {}, []
    seq = dict(sequencer_cycles=0, sequencer_starts=0)

    i, n = 0, len(records)
    while i < n:
        record = records[i]
        if isinstance(record, FoldRecord):  # written with the input
            i += 1
            continue
        if not flags[i]:
            if index is None:
                index = {t: k for k, t in enumerate(tensor_names(program))}
            result, host, on_board = run_record(image, program, record, driver, index,
                                                warm=warm, timeout_of=timeout_of)
            attributed += host
            waited += on_board
            if result is None:
                host_reports.setdefault(record.step, 0.0)
                host_reports[record.step] += host
            else:
                totals.setdefault(record.step, StepTotals()).add(
                    result.busy_cycles, result.stall_in_cycles, result.stall_out_cycles,
                    sequenced.predicted_cycles(i, warm=warm), host, on_board)
            i += 1
            continue
        j = i
        while j < n and flags[j]:
            j += 1
        timeout = _start_range(sequenced, seq_driver, i, j, warm=warm, timeout_of=timeout_of,
                               progress=progress)
        wait, counters = _finish_range(sequenced, program, driver, seq_driver, i, j,
                                       warm=warm, timeout=timeout, seq=seq)
        waited += wait
        ranges.append(counters)
        i = j

    y8 = image.read_output() if copy else image.output_view
    board = waited + seq_driver.bus_seconds - bus_start
    return y8, SequencedRun(sequenced, program, warm, ranges, totals, host_reports, seq,
                            attributed, board)


def stage_input(sequenced, x8=None):
    """Write a batch's input (and its folds) into ``sequenced``'s arena and clear its
    counters: memory the engine does not touch while it runs another copy of the
    program (:class:`~fpgacnn.host.program_slots.ProgramSlots`). ``x8`` None: the
    input is in the arena already (``sequenced.image.input_view``), its folds
    are written."""
    if x8 is None:
        sequenced.image.write_folds()
    else:
        sequenced.image.write_input(np.asarray(x8, dtype=np.int8))
    sequenced.clear_counters()


def _point(sequenced, seq_driver, *, warm):
    """Point the sequencer at ``sequenced`` in board memory and at its run table."""
    seq_driver.attach(sequenced)
    seq_driver.write_word("seq_table", seq_driver.value_word("seq_table",
                                                             sequenced.table_words[warm]))


def _begin(sequenced, seq_driver, x8, *, warm):
    """The host's part before the first start: the input (and its folds) in the
    arena, the counters cleared, the program's buffer the board's memory, the
    run table chosen."""
    stage_input(sequenced, x8)
    _point(sequenced, seq_driver, warm=warm)


def _start_range(sequenced, seq_driver, first, end, *, warm, timeout_of, progress=None):
    """Start the sequencer on records ``first`` to ``end - 1``; returns the timeout
    (board seconds) to wait for it with."""
    if progress:
        progress(f"records {first + 1}-{end} of {len(sequenced.image.records)} on the "
                 "sequencer")
    seq_driver.start(first, end - first)
    return _range_timeout(sequenced, first, end, warm=warm, timeout_of=timeout_of)


def _range_timeout(sequenced, first, end, *, warm, timeout_of):
    """The timeout (board seconds) of a start on records ``first`` to ``end - 1``."""
    predicted = sequenced.predicted_range(first, end, warm=warm)
    # Per record: the fetch, 20 register writes and the counters, besides the run.
    return timeout_of(predicted + 200 * (end - first))


def _finish_range(sequenced, program, driver, seq_driver, first, end, *, warm, timeout, seq):
    """Wait for the sequencer's stop after :func:`_start_range` and check it.

    Adds the range's cycles and start to ``seq``; returns the seconds waited
    (the board's time) and the range's counters
    (:meth:`~fpgacnn.host.sequencer_table.SequencerProgram.keep_counters`),
    summed per step when the report is asked for.

    Raises
    ------
    BackendError
        As :func:`run_sequenced`.
    """
    waited = _stopped(sequenced, program, driver, seq_driver, first, end, warm=warm,
                      timeout=timeout, seq=seq)
    return waited, sequenced.keep_counters(first, end)


def _stopped(sequenced, program, driver, seq_driver, first, end, *, warm, timeout, seq):
    """Wait for the sequencer's stop after :func:`_start_range` and check what its
    registers say (the next start overwrites them), adding its cycles and start to
    ``seq``; returns the seconds waited. The range's counters and output stay
    in board memory.

    Raises
    ------
    BackendError
        As :func:`run_sequenced`.
    """
    records, n = sequenced.image.records, len(sequenced.image.records)
    before = seq_driver.wait_seconds
    stopped = seq_driver.wait(timeout)
    waited = seq_driver.wait_seconds - before  # the board's time, not the host's work
    if not stopped:
        seq_driver.write("seq_control", abort=1)
        seq_driver.wait(timeout)
        at = seq_driver.read("seq_status")["index"]
        name = program.steps[records[min(at, n - 1)].step].name
        raise BackendError(f"layer {name!r}: the sequencer did not stop within {timeout:g} s "
                           f"(at record {at}); aborted")
    word, cycles, kind, good = seq_driver.read_stop()
    seq["sequencer_cycles"] += cycles
    seq["sequencer_starts"] += 1
    if good:
        return waited
    fault = seq_driver.memory_fault(kind)
    if fault is not None:
        first_name, last_name = (program.steps[records[k].step].name for k in (first, end - 1))
        raise BackendError(f"layers {first_name!r} to {last_name!r} (records {first}-{end - 1}): "
                           f"the sequencer's memory access failed: {fault}")
    status = seq_driver.regs.decode("seq_status", word)
    at = status["index"]
    if status["error"]:
        name = program.steps[records[at].step].name
        if sequenced.lanes_conflict(at, warm=warm):
            raise BackendError(f"layer {name!r}: the sequencer refused record {at}: a fused "
                               f"Add on a fused block's run, both on the vector unit's lanes")
        desc = sequenced.descriptor(at, warm=warm)  # what the engine was given
        raise driver.refusal(desc, name)
    if not status["done"]:
        raise BackendError(f"the sequencer stopped at record {at} of {first}-{end - 1} without "
                           f"finishing (status {status})")
    return waited


class InFlight:
    """A batch the sequencer is running from one start (:func:`start_sequenced`)."""

    def __init__(self, sequenced, warm, first, end, timeout, bus_start):
        self.sequenced, self.warm = sequenced, warm
        self.first, self.end, self.timeout = first, end, timeout
        self.bus_start = bus_start
        self.seq = dict(sequencer_cycles=0, sequencer_starts=0)
        self.board_seconds = None  # once stopped: the waits and register accesses


def start_sequenced(sequenced, seq_driver, *, warm=False, timeout_of, progress=None):
    """Start the whole program on the sequencer, its input staged
    (:func:`stage_input`), without waiting: the host is free until
    :func:`stop_sequenced` (streaming, docs/program.md "Batches").

    Parameters
    ----------
    sequenced : SequencerProgram
        A program that runs in one start (its ``one_start``).
    seq_driver : SequencerDriver
    warm : bool
    timeout_of : callable
    progress : callable, optional

    Returns
    -------
    InFlight

    Raises
    ------
    ValueError
        ``sequenced`` needs the host between its records.
    """
    return seq_driver.one_start(sequenced, warm=warm, timeout_of=timeout_of).start(progress)


class OneStart:
    """A program the sequencer runs in one start, on one board: what its every start
    writes, made once (:meth:`SequencerDriver.one_start`).

    The range, the run table's address and the start are register words that
    do not change between inferences, and the timeout is the program's; only
    the buffer's attach (:meth:`SequencerDriver.attach`: another driver may
    have attached another) is looked at each time.

    Parameters
    ----------
    sequenced : SequencerProgram
    seq_driver : SequencerDriver
    warm : bool
    timeout_of : callable
        ``timeout_of(predicted_cycles)``: seconds before the run counts as hung.

    Raises
    ------
    ValueError
        ``sequenced`` needs the host between its records.
    """

    def __init__(self, sequenced, seq_driver, *, warm, timeout_of):
        span = sequenced.one_start[warm]
        if span is None:
            raise ValueError("the program stops the sequencer for the host: it cannot run in "
                             "one start")
        self.sequenced, self.seq_driver, self.warm = sequenced, seq_driver, warm
        self.first, self.end = first, end = span
        address, regs = seq_driver._address, seq_driver.regs
        self._memory_address = address["seq_memory"]
        self._writes = (
            (address["seq_table"], seq_driver.value_word("seq_table",
                                                         sequenced.table_words[warm])),
            (address["seq_range"], regs.encode("seq_range", first=first, count=end - first)),
            (address["seq_control"], seq_driver._start_word))
        self.timeout = _range_timeout(sequenced, first, end, warm=warm, timeout_of=timeout_of)

    def start(self, progress=None):
        """Start the program (its input staged, :func:`stage_input`); the memory is
        made the device's first (a board with a CPU cache writes it back).

        Returns
        -------
        InFlight
        """
        sequenced, seq_driver = self.sequenced, self.seq_driver
        bus_start = seq_driver.bus_seconds
        sequenced.copy_kept_counters()  # none after stage_input: the start overwrites them
        memory = (self._memory_address, seq_driver.memory_word(sequenced))  # (attach)
        if progress:
            progress(f"records {self.first + 1}-{self.end} of {len(sequenced.image.records)} "
                     "on the sequencer")
        seq_driver.board.memory_to_device()
        seq_driver.write_words((memory, *self._writes))
        return InFlight(sequenced, self.warm, self.first, self.end, self.timeout, bus_start)


def stop_sequenced(flight, program, driver, seq_driver):
    """Wait for a batch :func:`start_sequenced` started and check its stop: after it
    the sequencer may start again (another copy of the program), while the host
    takes this one's output with :func:`collect_sequenced`.

    Raises
    ------
    BackendError
        As :func:`run_sequenced`.
    """
    waited = _stopped(flight.sequenced, program, driver, seq_driver, flight.first, flight.end,
                      warm=flight.warm, timeout=flight.timeout, seq=flight.seq)
    flight.board_seconds = waited + seq_driver.bus_seconds - flight.bus_start


def collect_sequenced(flight, program, *, copy=True):
    """A stopped batch's output and report's makings, from its copy of the program.

    Parameters
    ----------
    flight : InFlight
    program : fpgacnn.host.compiler.Program
    copy : bool
        As :func:`run_sequenced`.

    Returns
    -------
    (numpy.ndarray, SequencedRun)
        As :func:`run_sequenced`.
    """
    sequenced = flight.sequenced
    counters = sequenced.keep_counters(flight.first, flight.end)
    image = sequenced.image
    y8 = image.read_output() if copy else image.output_view
    return y8, SequencedRun(sequenced, program, flight.warm, [counters], {}, {}, flight.seq,
                            0.0, flight.board_seconds)


class SequencedRun:
    """What one sequenced inference leaves for its report.

    The host's work in an inference is the input, the starts, the status and
    a copy of the counters; the per-step sums and the report's dicts are made
    by :meth:`reports`, when the report is read (an inference whose report
    nobody reads does not pay for it, as a DPU's profiler dumps counters and
    formats them later).

    Parameters
    ----------
    sequenced : SequencerProgram
    program : fpgacnn.host.compiler.Program
    warm : bool
    ranges : list of KeptCounters
        Each start's records and their counters
        (:meth:`~fpgacnn.host.sequencer_table.SequencerProgram.keep_counters`).
    totals : dict
        Step index -> :class:`~fpgacnn.host.program_runner.StepTotals` of the
        records the host ran on the engine run by run.
    host_reports : dict
        Step index -> host seconds of the records the host ran by itself.
    seq : dict
        ``sequencer_cycles`` and ``sequencer_starts``.
    attributed : float
        The host's seconds in ``totals`` and ``host_reports`` (its work on those steps).
    board_seconds : float
        The board's time in the inference: the waits for the sequencer and for
        the runs the host made, and the register accesses (on the simulated
        board, simulated cycles). The caller's wall-clock time less this is
        the host's.
    """

    def __init__(self, sequenced, program, warm, ranges, totals, host_reports, seq,
                 attributed, board_seconds):
        self._args = (sequenced, program, warm, ranges, totals, host_reports, seq)
        #: The sequencer's cycles, its starts to its stops (the engine's time).
        self.sequencer_cycles = seq["sequencer_cycles"]
        self.attributed = attributed
        self.board_seconds = board_seconds

    def reports(self, host_seconds):
        """Per step what the report says (as :func:`~fpgacnn.host.program_runner.
        run_program`), and the sequencer's totals: ``sequencer_cycles`` (its starts
        to its stops, all of them), ``sequencer_runs`` (records it ran),
        ``sequencer_starts``, ``sequenced_busy_cycles`` (the engine's busy cycles of
        those runs).

        Parameters
        ----------
        host_seconds : float
            The host's time in the whole inference, as the caller measured it:
            what :attr:`attributed` leaves of it (the input, the starts, the
            status, the counters' copy, the output) is counted on the first step.

        Returns
        -------
        (list of dict, dict)
        """
        sequenced, program, warm, ranges, totals, host_reports, seq = self._args
        totals = {k: v.copy() for k, v in totals.items()}
        seq = dict(seq, sequencer_runs=0, sequenced_busy_cycles=0)
        for kept in ranges:
            for step_index, runs, (busy, stall_in, stall_out), model in \
                    sequenced.step_counters(kept.first, kept.end, warm=warm,
                                            words=kept.words()):
                totals.setdefault(step_index, StepTotals()).add(busy, stall_in, stall_out,
                                                                model, runs=runs)
                seq["sequencer_runs"] += runs
                seq["sequenced_busy_cycles"] += busy
        peak = sequenced.config.peak_macs_per_cycle
        reports = []
        for step_index, name, op, macs in _report_steps(sequenced, program):
            if step_index in totals:
                info = totals[step_index].as_report(macs, program.batch, peak)
            else:
                info = {"engine": False, "host_seconds": host_reports.get(step_index, 0.0)}
            reports.append({"name": name, "op": op, "macs": macs, **info})
        if reports:
            reports[0]["host_seconds"] += max(0.0, host_seconds - self.attributed)
        return reports, seq
