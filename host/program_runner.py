"""Run a program image on a board, record by record (issue 16, docs/program.md).

The host's side of the network program: the network's input is written into
the image's arena in the engine's layout, then each record runs in order.
An engine record's input stream is made from the arena by its source pattern
and its constants, sent to the engine through the
:class:`~fpgacnn.host.engine_driver.EngineDriver`, and its output stream is
written back into the arena by its destination pattern; a host record runs
its layer (the reference semantics) on tensors of the arena. The output is
read from the arena at the end.

This is how every board runs a network today: the boards with no memory
master of their own (the UART bridge of the open boards, issue 16 item 6)
will keep running it so, and on the others it is the reference that the
engine's own sequencing (item 3) must match record for record.
"""

import time
import weakref

import numpy as np

from ..core.contract import engine_contract
from ..core.errors import InputError
from . import packing
from .program_image import (DEST_COLUMNS, EngineRecord, FoldRecord, dest_scatter, pixel_packing,
                            source_gather, tensor_names)

__all__ = ["StepTotals", "record_stream", "run_program", "run_record", "store_output"]


class _RecordPlan:
    """An engine record made ready to run: the views of its tensors in the arena and
    the functions its patterns stand for, built once per image (they do not change)."""

    def __init__(self, image, record, name):
        self.record, self.name = record, name
        self.source = image.tensors[record.source.tensor].view(image.data)
        self.gathers = {}
        self.dest = image.tensors[record.dest.tensor].view(image.data)
        self.scatter = dest_scatter(record.dest)
        self.channels = record.dest.c1 - record.dest.c0
        self.warm = record.warm_descriptor()
        # A column scatter writes the output stream's pixels straight into the
        # NHWC arena (the NCHW detour of unpack_output would copy them twice).
        desc = record.descriptor
        self.direct = None
        if record.dest.kind == DEST_COLUMNS:
            oh, ow = engine_contract(image.config).pooled_shape(desc)
            lanes = int(desc["co_tiles"]) * image.config.pout
            tensor = image.tensors[record.dest.tensor]
            rows = min(oh, tensor.height)
            self.direct = ((int(desc["batch"]), oh, ow, lanes), rows,
                           tensor.nhwc(image.data)[:, :rows, record.dest.a:record.dest.b,
                                                   record.dest.c0:record.dest.c1])
        self.constants = {warm: image.constants(record, warm=warm) for warm in (False, True)}

    def packer(self, image, x_zp):
        """The run's gather and pixel packing for a descriptor's ``x_zp``."""
        if x_zp not in self.gathers:
            gather = source_gather(self.record.source, x_zp)
            channels = gather(self.source).shape[1]
            self.gathers[x_zp] = gather, pixel_packing(image.config, self.record.layout, x_zp,
                                                       channels, self.name)
        return self.gathers[x_zp]


_plans = weakref.WeakKeyDictionary()


def _plan(image, record, name):
    plans = _plans.setdefault(image, {})
    if id(record) not in plans:
        plans[id(record)] = _RecordPlan(image, record, name)
    return plans[id(record)]


def record_stream(image, record, *, warm=False, name="layer"):
    """The input stream of an engine record, made from the image's arena and constants:
    the constants its descriptor loads (``warm``: the warm descriptor's), then its
    pixels as its source pattern reads them."""
    plan = _plan(image, record, name)
    desc = plan.warm if warm else record.descriptor
    gather, pack = plan.packer(image, desc["x_zp"])
    pixels = pack(gather(plan.source))
    if desc["load_weights"] or desc["load_params"]:
        return np.concatenate((plan.constants[not desc["load_weights"]], pixels))
    return pixels


def store_output(image, record, raw):
    """Write an engine record's output stream ``raw`` into the arena by its destination pattern."""
    plan = _plan(image, record, "layer")
    if plan.direct is None:
        out = packing.unpack_output(image.config, raw, record.descriptor, plan.channels)
        plan.scatter(plan.dest, out)
        return
    (batch, oh, ow, lanes), rows, dest = plan.direct
    raw = np.asarray(raw, np.uint8).reshape(-1)
    if raw.size != record.out_nbytes:
        raise InputError(f"output stream has {raw.size} bytes, expected {record.out_nbytes}")
    pixels = raw.reshape(batch, -1)[:, :oh * ow * lanes].view(np.int8)
    dest[...] = pixels.reshape(batch, oh, ow, lanes)[:, :rows, :, :plan.channels]


class StepTotals:
    """What the runs of one engine step added up to (for the report)."""

    def __init__(self):
        self.runs = self.cycles = self.stall_in = self.stall_out = self.predicted = 0
        self.host = self.board = 0.0

    def add(self, cycles, stall_in, stall_out, predicted, host=0.0, board=0.0, *, runs=1):
        """One more run (or ``runs`` more, summed): its counters, its prediction, the
        host's and the board's seconds."""
        self.runs += runs
        self.cycles += cycles
        self.stall_in += stall_in
        self.stall_out += stall_out
        self.predicted += predicted
        self.host += host
        self.board += board

    def copy(self):
        other = StepTotals()
        other.__dict__.update(self.__dict__)
        return other

    def as_report(self, macs, batch, peak):
        return {
            "engine": True, "runs": self.runs, "cycles": self.cycles,
            "predicted_cycles": self.predicted,
            "utilization": macs * batch / (self.cycles * peak) if self.cycles else 0.0,
            "stall_in_cycles": self.stall_in, "stall_out_cycles": self.stall_out,
            "host_seconds": self.host, "board_seconds": self.board,
        }


def run_record(image, program, record, driver, index, *, warm, timeout_of, link_seconds=None):
    """Run one record from the arena: a host record's layer (the reference semantics),
    or an engine record through ``driver`` (its stream made from the arena, its
    output stored back).

    Parameters
    ----------
    index : dict
        Tensor name -> its index in the image's tensor table.
    warm, timeout_of, link_seconds
        As for :func:`run_program`.

    Returns
    -------
    (LayerRun or None, float, float)
        The run's counters (None for a host record), the host's seconds and
        the board's.
    """
    data = image.data
    step = program.steps[record.step]
    t0 = time.perf_counter()
    if isinstance(record, FoldRecord):
        raise InputError(f"layer {step.name!r}: an input fold is written with the input "
                         f"(ProgramImage.write_input), not run as a record")
    if not isinstance(record, EngineRecord):
        y = step.layer.evaluate(*(image.tensors[index[t]].view(data) for t in step.inputs))
        image.tensors[index[step.output]].view(data)[...] = y
        return None, time.perf_counter() - t0, 0.0
    desc = _plan(image, record, step.name).warm if warm else record.descriptor
    predicted = record.warm_predicted_cycles if warm else record.predicted_cycles
    stream = record_stream(image, record, warm=warm, name=step.name)
    timeout = timeout_of(predicted)
    if link_seconds is not None:  # a slow link (serial) paces the run, not the engine
        timeout += link_seconds(len(stream), record.out_nbytes)
    t1 = time.perf_counter()
    result = driver.run_layer(desc, stream, record.out_nbytes, timeout=timeout, name=step.name)
    t2 = time.perf_counter()
    store_output(image, record, result.output)
    return result, (t1 - t0) + (time.perf_counter() - t2), t2 - t1


def run_program(image, program, driver, x8, *, warm=False, timeout_of, link_seconds=None,
                progress=None):
    """Run ``program``'s image on the board behind ``driver``.

    Parameters
    ----------
    image : fpgacnn.host.program_image.ProgramImage
        The program's image (:func:`~fpgacnn.host.program_image.build_image`);
        its arena is overwritten.
    program : fpgacnn.host.compiler.Program
        The compiled program the image was built from (its host layers).
    driver : fpgacnn.host.engine_driver.EngineDriver
    x8 : numpy.ndarray of int8
        The batch of network inputs, ``(batch, *input shape)``.
    warm : bool
        The board holds this program's weights: run each record's warm descriptor.
    timeout_of : callable
        ``timeout_of(predicted_cycles)``: seconds before a run counts as hung.
    link_seconds : callable, optional
        ``link_seconds(nbytes_in, nbytes_out)``: a slow link's transfer time,
        added to a run's timeout.
    progress : callable, optional
        Receives one line per step.

    Returns
    -------
    (numpy.ndarray, list of dict)
        The int8 network output and, per step, what the report says of it
        (``host_seconds``: the host's work on the step; engine steps add
        cycles, runs, stalls and the board's time).
    """
    config = image.config
    x8 = np.asarray(x8, dtype=np.int8)
    t0 = time.perf_counter()
    image.write_input(x8)  # and the input's folds
    write_input = time.perf_counter() - t0
    index = {t: i for i, t in enumerate(tensor_names(program))}
    totals, reports = {}, []
    peak = config.peak_macs_per_cycle

    def finish(index):
        step = program.steps[index]
        info = totals.pop(index).as_report(step.macs, program.batch, peak)
        reports.append({"name": step.name, "op": step.op, "macs": step.macs, **info})

    current = None
    for record in image.records:
        if isinstance(record, FoldRecord):
            continue  # written with the input
        if current is not None and record.step != current:
            if current in totals:
                finish(current)
        step = program.steps[record.step]
        if record.step != current and progress:
            progress(f"layer {record.step + 1}/{len(program.steps)} {step.name} ({step.op})")
        current = record.step
        result, host, board = run_record(image, program, record, driver, index, warm=warm,
                                         timeout_of=timeout_of, link_seconds=link_seconds)
        if result is None:
            reports.append({"name": step.name, "op": step.op, "macs": step.macs,
                            "engine": False, "host_seconds": host})
            continue
        totals.setdefault(record.step, StepTotals()).add(
            result.busy_cycles, result.stall_in_cycles, result.stall_out_cycles,
            record.warm_predicted_cycles if warm else record.predicted_cycles, host, board)
    if current in totals:
        finish(current)
    t0 = time.perf_counter()
    y8 = image.read_output()
    if reports:  # the input's and the output's copies are host work too
        reports[0]["host_seconds"] += write_input
        reports[-1]["host_seconds"] += time.perf_counter() - t0
    return y8, reports
