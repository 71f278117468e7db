"""Streaming batches: batch ``n + 1``'s input is written while the engine runs batch ``n``.

:func:`run_stream` is :meth:`fpgacnn.host.accelerator.Accelerator.run_stream`
(issue 16 item 5, docs/program.md "Batches"). Where the board's engine runs
the whole program in one start of its sequencer, the program sits twice in
board memory (:class:`~fpgacnn.host.program_slots.ProgramSlots`) and the
batches alternate between the copies: while the engine runs one, the host
dequantizes the previous output, hands it to the caller, takes the next
batch, quantizes it and writes it into the other copy. Between two runs the
engine waits only for the host's checks of what its registers say at the
stop and the next start: the stopped copy's output and counters are taken
while the next batch runs.

Anywhere else (a program that stops the sequencer for the host, a board
without a sequencer, the reference backend) the batches run one after
another through :meth:`~fpgacnn.host.accelerator.Accelerator.run`, with the
same report.

The report (``Accelerator.report`` once the stream is done) models the
stream's time from what was measured: per batch, the engine's cycles at the
clock (``E``), the host's time while the engine ran (``O``: the previous
output's copy and dequantizing, the caller's own time until it asked for the
next, the next input) and the host's time while it did not (``S``: the
stop's checks and the next start; for the first batch its input too, for the
last its output); end to end is the sum over batches of ``S + max(E, O)``.
On the simulated board the engine runs only while the host waits, so ``E``
and ``O`` are measured apart and ``max`` is the board's overlap; on a Zynq
board it is what the wall clock shows.
"""

import time

from .engine_driver import set_weights_owner, warm_start
from .sequencer_runner import collect_sequenced, stage_input, start_sequenced, stop_sequenced

__all__ = ["StreamTimes", "run_stream"]


class StreamTimes:
    """What a stream's report is made of: per batch the engine's and the host's seconds."""

    def __init__(self):
        self.engine, self.overlapped, self.serial = [], [], []
        self.batch_images, self.batch_cycles = [], []
        self.images = 0
        self.cycles = 0

    def add(self, *, images, cycles, clock_hz, overlapped, serial):
        """One batch: ``cycles`` of the engine, the host's ``overlapped`` and ``serial``
        seconds (module docstring)."""
        self.images += images
        self.cycles += cycles
        self.batch_images.append(images)
        self.batch_cycles.append(cycles)
        self.engine.append(cycles / clock_hz)
        self.overlapped.append(overlapped)
        self.serial.append(serial)

    def report(self, acc, *, overlapped_runs, batch):
        """The stream's report (``Accelerator.report`` after :func:`run_stream`)."""
        end_to_end = sum(s + max(e, o) for e, o, s in
                         zip(self.engine, self.overlapped, self.serial))
        engine = sum(self.engine)
        host_overlapped, host_serial = sum(self.overlapped), sum(self.serial)
        return {
            "backend": acc.backend, "model": acc.model.name, "stream": True,
            "overlapped": overlapped_runs, "batch": batch, "batches": len(self.engine),
            "images": self.images, "macs_per_image": acc.model.macs,
            "clock_mhz": acc.clock_hz / 1e6, "total_cycles": self.cycles,
            "engine_seconds": engine,
            "host_seconds": host_overlapped + host_serial,
            "host_overlapped_seconds": host_overlapped,
            "host_serial_seconds": host_serial,
            "end_to_end_seconds": end_to_end,
            "end_to_end_seconds_per_image": end_to_end / self.images if self.images else None,
            "images_per_second": self.images / end_to_end if end_to_end else None,
            "engine_share_of_end_to_end": engine / end_to_end if end_to_end else None,
            "per_batch": [
                {"images": n, "cycles": c, "engine_seconds": e, "host_overlapped_seconds": o,
                 "host_serial_seconds": s}
                for n, c, e, o, s in zip(self.batch_images, self.batch_cycles, self.engine,
                                         self.overlapped, self.serial)],
        }


def run_stream(acc, batches, *, int8=False):
    """Run ``batches`` (an iterable of batches) one after another; yield each output.

    Parameters
    ----------
    acc : Accelerator
    batches : iterable of numpy.ndarray
        Batches of the model's input (``(N, *input shape)``); every batch of
        the first's size streams, a batch of another size ends the overlap
        (it and the rest run one after another).
    int8 : bool
        The batches are int8 graph inputs and the outputs int8 graph outputs
        (as :meth:`~fpgacnn.host.accelerator.Accelerator.run_int8`).

    Yields
    ------
    numpy.ndarray
        Each batch's output, in order, while the engine runs the next batch.
    """
    model = acc.model
    to_int8 = model.int8_input if int8 else model.quantize_input
    from_int8 = (lambda y: y) if int8 else model.dequantize_output
    times = StreamTimes()
    it = iter(batches)
    first = next(it, None)
    if first is None:
        acc.report = times.report(acc, overlapped_runs=False, batch=0)
        return
    n = len(first)
    # Compiled and laid out once (as run() does at its first batch): not the
    # stream's time.
    slots = acc.slots(n) if acc.sequencer is not None else None
    if slots is None or not all(slots[0].one_start.values()):
        yield from _one_by_one(acc, [first], it, times, int8=int8)
        acc.report = times.report(acc, overlapped_runs=False, batch=n)
        return

    program, board, seq = acc.program(n), acc.board, acc.sequencer
    # A span of host time: its wall time less the board's (register accesses,
    # waits) in it.
    clock = (lambda: time.perf_counter() - seq.board_seconds)
    t0 = clock()
    stage_input(slots[0], to_int8(first))
    flight, serial, k = _start(acc, program, slots[0]), clock() - t0, 0
    y_prev, rest = None, None  # the output to hand over while the engine runs
    carried = 0.0  # host time after a start that belongs to the run it started
    try:
        while flight is not None:
            # The engine runs batch k: the host's time until it waits overlaps it.
            t0 = clock()
            if y_prev is not None:
                yield from_int8(y_prev)  # the caller's time counts here too
                y_prev = None
            staged = None
            if rest is None:
                x = next(it, None)
                if x is not None:
                    x8 = to_int8(x)
                    if len(x8) == n:
                        staged = slots[(k + 1) % len(slots)]
                        # Its own buffer: the stop's cache drop is the running
                        # copy's, the next start writes this one back.
                        stage_input(staged, x8)
                    else:
                        rest = [x]  # another size: the overlap ends here
            overlapped = carried + clock() - t0
            # The engine waits for the host from its stop to the next start:
            # the checks of what its registers say, and the start.
            t0 = clock()
            done, flight = flight, None  # stopped, whatever the checks say
            stop_sequenced(done, program, acc.driver, seq)
            if program.resident:  # (a record the host ran may have loaded parameters)
                set_weights_owner(board, program)
            if staged is not None:
                flight = _start(acc, program, staged)
            serial += clock() - t0
            # The output and counters stay in the stopped copy: taken while the
            # next batch runs.
            t0 = clock()
            y8, run = collect_sequenced(done, program)
            carried = clock() - t0
            if flight is None:
                serial, carried = serial + carried, 0.0
            times.add(images=n, cycles=run.sequencer_cycles, clock_hz=acc.clock_hz,
                      overlapped=overlapped, serial=serial)
            y_prev, serial, k = y8, 0.0, k + 1
        t0 = clock()
        y = from_int8(y_prev)
        times.serial[-1] += clock() - t0  # the last output: nothing runs
        y_prev = None
    finally:
        if flight is not None:  # an error or the caller's break: leave the board idle
            stop_sequenced(flight, program, acc.driver, seq)
    acc.report = times.report(acc, overlapped_runs=True, batch=n)
    yield y
    if rest is not None:
        yield from _one_by_one(acc, rest, it, times, int8=int8)
        acc.report = times.report(acc, overlapped_runs=True, batch=n)


def _start(acc, program, slot):
    """Start ``slot`` (its input staged), warm where the board holds the weights."""
    warm = warm_start(acc.board, program)
    return start_sequenced(slot, acc.sequencer, warm=warm, timeout_of=acc._timeout)


def _one_by_one(acc, head, it, times, *, int8):
    """The batches ``head`` then the rest of ``it``, each a run of its own."""
    for batches in (head, it):
        for x in batches:
            y = acc.run_int8(x) if int8 else acc.run(x)
            r = acc.report
            if "total_cycles" in r:
                times.add(images=r["batch"], cycles=r["total_cycles"], clock_hz=acc.clock_hz,
                          overlapped=0.0, serial=r["host_seconds"])
            else:  # the reference backend: no engine, all host
                times.add(images=r["batch"], cycles=0, clock_hz=acc.clock_hz, overlapped=0.0,
                          serial=r["seconds"])
            yield y
