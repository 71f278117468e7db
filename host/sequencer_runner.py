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

__all__ = ["SequencerDriver", "run_sequenced"]


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
        word = self.regs.encode(name, value, **fields)
        t0 = time.perf_counter()
        self.board.mmio_write(self.regs.address(name), word)
        self.bus_seconds += time.perf_counter() - t0

    def read(self, name):
        t0 = time.perf_counter()
        word = self.board.mmio_read(self.regs.address(name))
        self.bus_seconds += time.perf_counter() - t0
        return self.regs.decode(name, word)

    def attach(self, program):
        """Make ``program``'s buffer the board's memory (once per program).

        ``seq_memory`` is where the buffer is on the engine's bus, as the
        board says (the simulated board: 0, its addresses are offsets into
        the buffer; a Zynq board: the buffer's physical address).
        """
        if self.attached is not program:
            address = self.board.attach_memory(program.memory)
            if address % self.read_bytes:
                # The engine reads R-byte words at R-aligned addresses: a buffer
                # elsewhere would read the wrong bytes.
                raise BackendError(f"the program's buffer is at 0x{address:08x}, not on a "
                                   f"{self.read_bytes}-byte boundary (the engine's memory read)")
            self.write("seq_memory", address)
            self.attached = program

    def start(self, first, count):
        """Start the sequencer on ``count`` records from ``first``, the memory
        first made the device's (a board with a CPU cache writes it back)."""
        self.board.memory_to_device()
        self.write("seq_range", first=first, count=count)
        self.write("seq_control", start=1)

    def wait(self, timeout):
        """Wait until the sequencer stops; False if ``timeout`` board seconds pass first.

        A board that simulates the engine runs it until its ``irq``
        (``wait_irq``); a real one is polled over its registers (the status'
        ``busy``), a wall-clock timeout. Either way the memory is then the
        host's again (a board with a CPU cache drops its copy).
        """
        wait_irq = getattr(self.board, "wait_irq", None)
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

    def memory_fault(self):
        """The first failed memory access since the last call (then forgotten), or None.

        The engine's ``seq_fault`` (an AXI4 error response on a Zynq board)
        and the board's own memory model's (the simulated board's check of
        every address against its buffer), whichever there is.
        """
        faults = []
        fault = self.read("seq_fault")["kind"]
        if fault != FAULT_NONE:
            what = {FAULT_READ: "read", FAULT_WRITE: "write"}.get(fault, f"access (kind {fault})")
            address = self.read("seq_fault_addr")["value"]
            faults.append(f"a memory {what} at 0x{address:08x} was answered with an error")
            self.write("seq_control", clear_fault=1)
        memory_error = getattr(self.board, "memory_error", None)
        if memory_error is not None and (error := memory_error()) is not None:
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
                  progress=None):
    """Run ``program`` from its :class:`~fpgacnn.host.sequencer_table.SequencerProgram`.

    Parameters
    ----------
    sequenced : SequencerProgram
    program : fpgacnn.host.compiler.Program
    driver : fpgacnn.host.engine_driver.EngineDriver
        For the records the host runs on the engine run by run.
    seq_driver : SequencerDriver
    x8 : numpy.ndarray of int8
        ``(batch, *input shape)``.
    warm : bool
        The board holds the program's weights: the warm run table.
    timeout_of : callable
        ``timeout_of(predicted_cycles)``: seconds before a run counts as hung.
    progress : callable, optional

    Returns
    -------
    (numpy.ndarray, list of dict, dict)
        The int8 output, per step what the report says (as
        :func:`~fpgacnn.host.program_runner.run_program`), and the sequencer's
        totals: ``sequencer_cycles`` (its starts to its stops, all of them),
        ``sequencer_runs`` (records it ran), ``sequencer_starts``,
        ``sequenced_busy_cycles`` (the engine's busy cycles of those runs).

    Raises
    ------
    BackendError
        The engine refused a record (the layer named), the sequencer did not
        stop in time (aborted), or a memory access fell outside the program.
    """
    image = sequenced.image
    config = image.config
    data = image.data
    # The host's time is everything here but the waits for the board (the
    # sequencer's runs, the runs the host makes through the driver, and the
    # register accesses, as in those runs); the host records' and host-made
    # runs' own share is reported on their steps.
    t_start = time.perf_counter()
    waited = attributed = 0.0
    bus_start = seq_driver.bus_seconds
    x8 = np.asarray(x8, dtype=np.int8)
    seq_driver.attach(sequenced)
    image.write_input(x8)  # and the input's folds
    sequenced.clear_counters()
    seq_driver.write("seq_table", sequenced.table_words[warm])
    index = None  # tensor name -> table index, for the records the host runs
    records, flags = image.records, sequenced.on_engine[warm]
    peak = config.peak_macs_per_cycle
    totals, host_reports = {}, {}
    seq = dict(sequencer_cycles=0, sequencer_runs=0, sequencer_starts=0,
               sequenced_busy_cycles=0)

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
        predicted = sequenced.predicted_range(i, j, warm=warm)
        if progress:
            progress(f"records {i + 1}-{j} of {n} on the sequencer")
        seq_driver.start(i, j - i)
        # Per record: the fetch, 20 register writes and the counters, besides the run.
        timeout = timeout_of(predicted + 200 * (j - i))
        t_wait = time.perf_counter()
        stopped = seq_driver.wait(timeout)
        waited += time.perf_counter() - t_wait  # the board's time, not the host's work
        if not stopped:
            seq_driver.write("seq_control", abort=1)
            seq_driver.wait(timeout)
            at = seq_driver.read("seq_status")["index"]
            name = program.steps[records[min(at, n - 1)].step].name
            raise BackendError(f"layer {name!r}: the sequencer did not stop within {timeout:g} s "
                               f"(at record {at}); aborted")
        status = seq_driver.read("seq_status")
        seq["sequencer_cycles"] += seq_driver.read("seq_cycles")["value"]
        seq["sequencer_starts"] += 1
        fault = seq_driver.memory_fault()
        if fault is not None:
            first, last = (program.steps[records[k].step].name for k in (i, j - 1))
            raise BackendError(f"layers {first!r} to {last!r} (records {i}-{j - 1}): the "
                               f"sequencer's memory access failed: {fault}")
        at = status["index"]
        if status["error"]:
            bad = records[at]
            name = program.steps[bad.step].name
            desc = sequenced.descriptor(at, warm=warm)  # what the engine was given
            raise driver.refusal(desc, name)
        if not status["done"]:
            raise BackendError(f"the sequencer stopped at record {at} of {i}-{j - 1} without "
                               f"finishing (status {status})")
        # The range's counters, summed per step in one pass over the memory.
        for step_index, runs, (busy, stall_in, stall_out), model in \
                sequenced.step_counters(i, j, warm=warm):
            totals.setdefault(step_index, StepTotals()).add(busy, stall_in, stall_out, model,
                                                            runs=runs)
            seq["sequencer_runs"] += runs
            seq["sequenced_busy_cycles"] += busy
        i = j

    y8 = np.array(image.output.view(data), copy=True)

    reports = []
    for step_index, name, op, macs in _report_steps(sequenced, program):
        if step_index in totals:
            info = totals[step_index].as_report(macs, program.batch, peak)
        else:
            info = {"engine": False, "host_seconds": host_reports.get(step_index, 0.0)}
        reports.append({"name": name, "op": op, "macs": macs, **info})
    if reports:
        # What the host did around the sequencer (the input, starting it, its
        # counters, the output and these reports).
        bus = seq_driver.bus_seconds - bus_start
        reports[0]["host_seconds"] += time.perf_counter() - t_start - waited - attributed - bus
    return y8, reports, seq
