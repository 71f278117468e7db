"""``Accelerator``: load a model, open a backend, ``run(x)``, read the report.

>>> from fpgacnn import Accelerator                                  # doctest: +SKIP
>>> acc = Accelerator("examples/digits_int8.onnx", backend="sim")    # doctest: +SKIP
>>> y = acc.run(x)                                                   # doctest: +SKIP
>>> acc.report["layers"][0]["cycles"]                                # doctest: +SKIP

Backends:

- ``reference``: the numpy integer semantics (no engine, no cycles).
- ``sim`` (default): the generated engine in Verilator on a simulated board
  (:class:`fpgacnn.sim.native_board.SimulatedBoard`), exact cycle counts.
- ``pynq``: a PYNQ board running a bitstream built by ``fpgacnn build``.
- ``serial``: an open board (ECP5/iCE40) whose bitstream holds the engine
  behind the UART bridge (:class:`fpgacnn.host.serial_board.SerialBoard`);
  ``port="sim"`` simulates that bitstream (bridge and engine in Verilator).

``sim``, ``pynq`` and ``serial`` share everything above the board: the
compiler, the stream packing and the :class:`~fpgacnn.host.engine_driver.EngineDriver`.
"""

import time

from ..core.config import EngineConfig
from ..core.errors import InputError
from .compiler import compile_model, constants_residency
from .engine_driver import EngineDriver, set_weights_owner, warm_start
from .onnx_import import load_onnx
from .program_image import build_image
from .program_runner import run_program
from .program_slots import ProgramSlots
from .reference import ReferenceBackend
from .sequencer_runner import SequencerDriver, run_sequenced
from .sequencer_table import SequencerProgram
from .stream import run_stream

__all__ = ["Accelerator", "BACKENDS", "open_board"]

#: The backends ``Accelerator`` and ``fpgacnn run --backend`` accept.
BACKENDS = ("sim", "reference", "pynq", "serial")

#: Slack on top of the cycle model before a run counts as hung.
_TIMEOUT_FACTOR, _TIMEOUT_EXTRA_CYCLES = 4, 200_000


def open_board(backend, config, *, waves=None, bitfile=None, port=None, baud=None,
               clock_hz=100e6, sequencer=False, progress=None):
    """The board of an engine backend.

    Parameters
    ----------
    backend : {"sim", "pynq", "serial"}
    config : EngineConfig
        For ``sim`` and ``serial`` with ``port="sim"``: the engine to generate
        and simulate. ``sim`` keeps the generated Verilog on disk
        (:func:`fpgacnn.sim.verilator.cached_engine_verilog`) and its
        Verilator build (:mod:`fpgacnn.sim.native_board`), so a second run
        of a configuration starts at once.
    waves : path-like, optional
        ``sim`` (and simulated ``serial``): waveform file (``.vcd``, or
        ``.fst`` with lz4 headers).
    bitfile : path-like
        ``pynq`` only: the bitstream (its ``.hwh`` beside it).
    port : str or port object
        ``serial`` only: the board's serial device (``/dev/ttyUSB0``), ``"sim"``
        for the bridge bitstream simulated in Verilator, or an open
        pyserial-like port.
    baud : int, optional
        ``serial`` on a device: the bitstream's baud rate (default 3,000,000).
    sequencer : bool
        ``sim`` only: simulate the engine with its program sequencer and a
        memory model (:class:`~fpgacnn.hdl.program.program_engine.ProgramEngine`),
        which runs a network from board memory with no host work between
        the records it takes.
    """
    if sequencer and backend != "sim":
        raise InputError(f"the program sequencer is simulated on the sim backend only, not "
                         f"{backend!r}")
    if backend == "sim":
        from ..hdl.verilog import PROGRAM_TOP_NAME, TOP_NAME
        from ..sim.native_board import SimulatedBoard
        from ..sim.verilator import cached_engine_verilog
        name = PROGRAM_TOP_NAME if sequencer else TOP_NAME
        verilog = cached_engine_verilog(config, name=name, sequencer=sequencer,
                                        progress=progress)
        return SimulatedBoard(verilog, top=name, waves=waves, clock_hz=clock_hz,
                              progress=progress)
    if backend == "pynq":
        from .pynq_board import PynqBoard
        if bitfile is None:
            raise InputError("the pynq backend needs --bitfile NAME.bit (with NAME.hwh beside it)")
        return PynqBoard(bitfile, clock_hz=clock_hz)
    if backend == "serial":
        return _open_serial_board(config, port, baud=baud, waves=waves, clock_hz=clock_hz,
                                  progress=progress)
    raise InputError(f"unknown backend {backend!r} (choose from {', '.join(BACKENDS)})")


def _open_serial_board(config, port, *, baud, waves, clock_hz, progress):
    from .serial_board import DEFAULT_BAUD, SerialBoard, open_serial
    if port is None:
        raise InputError("the serial backend needs --port DEVICE (the board's USB-UART, e.g. "
                         "/dev/ttyUSB0) or --port sim")
    if waves is not None and port != "sim":
        raise InputError("waveforms (--waves) need a simulated board: --port sim")
    if isinstance(port, str) and port == "sim":
        from ..sim.uart_board import SimulatedSerialPort
        if baud is not None:
            raise InputError("--baud applies to a real serial device, not --port sim "
                             "(the simulated line runs at clock_hz / clocks_per_bit)")
        sim_port = SimulatedSerialPort(config, clock_hz=clock_hz, waves=waves, progress=progress)
        try:
            return SerialBoard(sim_port, clock_hz=clock_hz)
        except BaseException:
            sim_port.close()
            raise
    if isinstance(port, (str, bytes)) or hasattr(port, "__fspath__"):
        if progress:
            progress(f"opening {port} at {baud or DEFAULT_BAUD:,} baud")
        return open_serial(str(port), baud or DEFAULT_BAUD, clock_hz=clock_hz)
    return SerialBoard(port, clock_hz=clock_hz, owns_port=False)  # the caller's port stays open



class Accelerator:
    """A quantized model on a backend.

    Parameters
    ----------
    model : path-like or QuantizedModel
        An int8 ONNX file, or a model already loaded with
        :func:`~fpgacnn.host.onnx_import.load_onnx`.
    backend : {"sim", "reference", "pynq", "serial"}
    config : EngineConfig, optional
        The engine configuration (default :class:`EngineConfig` ``()``). For
        ``pynq`` it must equal the bitstream's, which the driver checks.
    board : object, optional
        An already open board (anything with the narrow board interface);
        overrides ``backend``'s own.
    clock_hz : float
        The engine clock: the engine time in the report (and sim timeouts).
    batch : int, optional
        The batch size :meth:`run` will be given, if known: the model is
        compiled for it in the constructor.
    sequencer : bool or None
        Run the network on the engine's own program sequencer (docs/program.md):
        the host writes the input, starts the sequencer and runs only the
        records it stops at. ``None``: when the board has one. ``True`` on
        ``sim`` opens the board with the sequencer.
    waves, bitfile, port, baud, progress
        See :func:`open_board`. ``progress`` receives one-line messages.

    Raises
    ------
    MappingError
        A layer the engine cannot run. The model is compiled (for ``batch``,
        or for one image) before the constructor opens a board of its own, so
        this comes in milliseconds, before any Verilog is generated, built or
        loaded. With a ``board`` given and no ``batch``, compiling waits for
        :meth:`run`.

    Attributes
    ----------
    report : dict
        After :meth:`run`: backend, per-layer ``cycles``, ``utilization``,
        host time, totals, the time per image end to end (engine cycles at
        the clock plus the host's measured work) and the engine alone's
        throughput.
    """

    def __init__(self, model, *, backend="sim", config=None, board=None, clock_hz=100e6,
                 batch=None, waves=None, bitfile=None, port=None, baud=None, sequencer=None,
                 progress=None):
        if backend not in BACKENDS:
            raise InputError(f"unknown backend {backend!r} (choose from {', '.join(BACKENDS)})")
        if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int)
                                  or batch < 1):
            raise InputError(f"batch must be a positive integer, not {batch!r}")
        self.model = model if hasattr(model, "layers") else load_onnx(model)
        self.backend = backend
        self.config = config if config is not None else EngineConfig()
        self.clock_hz = float(clock_hz)
        self.progress = progress
        self._report_value = None
        self._report_pending = None
        self._io_seconds = 0.0
        self._programs = {}
        self._images = {}
        self._sequenced = {}
        self._slots = {}
        self._ready = {}  # input shape -> (program, sequenced, input view), for run()
        self.board = board
        self.driver = None
        self.sequencer = None
        if backend != "reference":
            if board is None or batch is not None:
                # Fail early: a layer over the engine's limits is refused here,
                # not after minutes of generating and building the engine.
                self.image(1 if batch is None else batch)
            if board is None:
                self.board = open_board(backend, self.config, waves=waves, bitfile=bitfile,
                                        port=port, baud=baud, clock_hz=clock_hz,
                                        sequencer=bool(sequencer), progress=progress)
            try:
                self.driver = EngineDriver(self.board, expected=self.config)
                if sequencer or (sequencer is None and getattr(self.board, "has_memory", False)):
                    self.sequencer = SequencerDriver(self.board, self.config)
            except BaseException:
                if board is None:  # ours: do not leave a port or a model open
                    self.close()
                raise

    @property
    def report(self):
        """The last run's report (None before the first run); see the class' attributes.

        A sequenced run's report is made when it is first read, from the
        counters the run copied out of board memory: its host time is the
        inference's, not the report's.
        """
        if self._report_pending is not None:
            pending, self._report_pending = self._report_pending, None
            # A function, or a tuple of one and its arguments (no closure made
            # in the inference's time).
            self._report_value = (pending() if callable(pending)
                                  else pending[0](*pending[1:]))
        return self._report_value

    @report.setter
    def report(self, value):
        self._report_pending = None
        self._report_value = value

    def close(self):
        """Release the board (a simulated board frees its model and waveform)."""
        if self.board is not None and hasattr(self.board, "close"):
            self.board.close()
        self.board = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def program(self, batch):
        """The compiled program for batches of ``batch`` images (cached)."""
        if batch not in self._programs:
            self._programs[batch] = compile_model(self.model, self.config, batch=batch)
        return self._programs[batch]

    def image(self, batch):
        """The program for batches of ``batch`` images as one memory image
        (:func:`~fpgacnn.host.program_image.build_image`, cached): what
        :meth:`run_int8` runs, record by record."""
        if batch not in self._images:
            self._images[batch] = build_image(self.program(batch))
        return self._images[batch]

    def run(self, x):
        """Run a batch: ``x`` and the result in the model's own graph dtype and shape."""
        t0 = time.perf_counter()
        if self.sequencer is not None:
            # A batch of a shape seen before: its program, compiled and in board
            # memory, found in one lookup (the quantizing checks the rest of x).
            shape = getattr(x, "shape", None)
            ready = self._ready.get(shape) if type(shape) is tuple else None
            if ready is None:
                ready = self._ready_for(x)
            if ready is not None:
                return self._run_sequenced_float(ready, x, t0)
        x8 = self.model.quantize_input(x)  # checks x
        quantize = time.perf_counter() - t0
        y8 = self.run_int8(x8)
        t0 = time.perf_counter()
        y = self.model.dequantize_output(y8)
        # The report (made when read) counts these as the host's too.
        self._io_seconds = quantize + time.perf_counter() - t0
        return y

    def _ready_for(self, x):
        """``(program, sequenced, input view)`` a batch ``x`` runs on, kept by its shape,
        if ``x`` is an array of the input's shape (else None: :meth:`run`'s checks say
        what is wrong)."""
        shape = getattr(x, "shape", None)
        if shape is None or len(shape) < 1 or shape[0] < 1 \
                or tuple(shape[1:]) != tuple(self.model.input.shape):
            return None
        batch = shape[0]
        sequenced = self.sequenced(batch)
        ready = self._ready[tuple(shape)] = (self.program(batch), sequenced,
                                             sequenced.image.input_view)
        return ready

    def _run_sequenced_float(self, ready, x, t0):
        """:meth:`run` on the sequencer, with no copy of the input or the output: ``x``
        quantized straight into the arena, the output dequantized from it."""
        program, sequenced, input_view = ready
        self.model.quantize_input(x, out=input_view)  # checks x
        start = time.perf_counter()
        quantize = start - t0
        self._io_seconds = 0.0
        y8 = self._run_sequenced(program, None, start, sequenced=sequenced)
        t0 = time.perf_counter()
        y = self.model.dequantize_output(y8)
        if y is y8:  # an int8 graph output: the arena's view itself
            y = y.copy()
        self._io_seconds = quantize + time.perf_counter() - t0
        return y

    def run_int8(self, x8):
        """Run a batch of int8 graph inputs; returns the int8 graph output.

        Raises
        ------
        InputError
            ``x8`` is not int8 (another integer type's values would wrap).
        """
        start = time.perf_counter()
        self._io_seconds = 0.0
        x8 = self.model.int8_input(x8)
        if self.backend == "reference":
            y8 = ReferenceBackend().run_int8(self.model, x8)
            self.report = self._report([], len(x8), time.perf_counter() - start)
            return y8
        program = self.program(len(x8))
        image = self.image(len(x8))
        if self.sequencer is not None:
            return self._run_sequenced(program, x8, start)
        # A resident program whose weights this board holds (it ran last, to the
        # end) runs warm: no weights streamed. Anything else on the board in
        # between (a run that loads weights) makes the driver forget the owner.
        warm = warm_start(self.board, program)
        y8, layer_reports = run_program(
            image, program, self.driver, x8, warm=warm, timeout_of=self._timeout,
            link_seconds=getattr(self.board, "link_seconds", None), progress=self.progress)
        if program.resident:
            set_weights_owner(self.board, program)
        seconds, batch = time.perf_counter() - start, len(x8)

        def report():
            value = self._report(layer_reports, batch, seconds)
            value.update(constants_residency(program, warm))
            return value

        self.report = None
        self._report_pending = report
        return y8

    def sequenced(self, batch):
        """The program for ``batch`` images in board memory with its run tables
        (:class:`~fpgacnn.host.sequencer_table.SequencerProgram`, cached)."""
        if batch not in self._sequenced:
            allocate = getattr(self.board, "allocate", None)
            self._sequenced[batch] = SequencerProgram(self.image(batch), allocate=allocate)
        return self._sequenced[batch]

    def slots(self, batch):
        """The program for ``batch`` images twice in board memory
        (:class:`~fpgacnn.host.program_slots.ProgramSlots`, cached): what
        :meth:`run_stream` alternates between."""
        if batch not in self._slots:
            allocate = getattr(self.board, "allocate", None)
            self._slots[batch] = ProgramSlots(self.image(batch), allocate=allocate)
        return self._slots[batch]

    def run_stream(self, batches, *, int8=False):
        """Run a stream of batches, each batch's input written while the engine runs
        the one before; yields each output in order (a generator).

        Where the engine runs the whole network in one start of its sequencer,
        the program is twice in board memory and the batches alternate between
        the two copies: the host's quantizing, writing, dequantizing (and the
        caller's own work between two outputs) overlap the engine's runs.
        Elsewhere the batches run one after another. When the stream ends,
        :attr:`report` gives its throughput: ``end_to_end_seconds_per_image``,
        ``images_per_second``, the engine's and the host's time (overlapped and
        not); :meth:`run`'s report gives the latency of one batch.

        Parameters
        ----------
        batches : iterable of numpy.ndarray
            Batches as :meth:`run` takes them (or :meth:`run_int8`, with
            ``int8``). Batches of the first's size stream; one of another size
            (a smaller last batch) and those after it run one after another.
        int8 : bool

        Yields
        ------
        numpy.ndarray

        Raises
        ------
        InputError, BackendError
            As :meth:`run`; the outputs yielded before stand, and the board is
            left idle (a batch in flight is waited for).

        Examples
        --------
        >>> batches = (x[i:i + 8] for i in range(0, len(x), 8))   # doctest: +SKIP
        >>> outputs = list(acc.run_stream(batches))                 # doctest: +SKIP
        >>> acc.report["images_per_second"]                         # doctest: +SKIP
        """
        return run_stream(self, batches, int8=int8)

    def _run_sequenced(self, program, x8, start, sequenced=None):
        """Run on the sequencer; ``x8`` None: the input is in ``sequenced``'s arena
        already, and the output returned is its view there."""
        if sequenced is None:
            sequenced = self.sequenced(len(x8))
        warm = warm_start(self.board, program)
        y8, run = run_sequenced(
            sequenced, program, self.driver, self.sequencer, x8, warm=warm,
            timeout_of=self._timeout, progress=self.progress, copy=x8 is not None)
        # The program's weights are the board's now; a warm run in one start
        # loaded none, so the board's record already says so (a record the host
        # runs may load parameters: there it is written again).
        if program.resident and not (warm and sequenced.one_start[warm] is not None):
            set_weights_owner(self.board, program)
        seconds = time.perf_counter() - start
        host = seconds - run.board_seconds  # all of run_int8 but the board's time
        self._report_value = None
        self._report_pending = (self._sequenced_report, run, program, warm, host, seconds)
        return y8

    def _sequenced_report(self, run, program, warm, host, seconds):
        """The report of a sequenced run, made when it is read (:attr:`report`)."""
        layer_reports, totals = run.reports(host)
        value = self._report(layer_reports, program.batch, seconds, sequencer=totals)
        value.update(constants_residency(program, warm))
        return value

    def _timeout(self, predicted_cycles):
        """Seconds of board time before a run of ``predicted_cycles`` counts as hung."""
        return (predicted_cycles * _TIMEOUT_FACTOR + _TIMEOUT_EXTRA_CYCLES) / self.clock_hz

    def _report(self, layers, batch, seconds, *, sequencer=None):
        cycles = sum(l.get("cycles", 0) for l in layers)
        if sequencer is not None:
            # The sequencer's own cycles (record fetches, descriptor writes,
            # counters, memory waits between runs) are engine time too.
            cycles += sequencer["sequencer_cycles"] - sequencer["sequenced_busy_cycles"]
        report = {
            "backend": self.backend,
            "model": self.model.name,
            "batch": batch,
            "seconds": seconds,
            "layers": layers,
            "macs_per_image": self.model.macs,
        }
        if self.backend != "reference":
            # The layers' host work, and run()'s quantizing of the input and
            # dequantizing of the output.
            host = sum(l["host_seconds"] for l in layers) + self._io_seconds
            engine = cycles / self.clock_hz
            report.update({
                "engine": self.config.as_dict(),
                "peak_macs_per_cycle": self.config.peak_macs_per_cycle,
                "clock_mhz": self.clock_hz / 1e6,
                "total_cycles": cycles,
                # The engine's busy cycles (stalls included) at the clock, and the
                # host's measured work (gathers, packing, unpacking, host layers):
                # what a user of this host and a board at this clock would see,
                # less the link's transfer time.
                "engine_seconds": engine,
                "host_seconds": host,
                "quantize_seconds": self._io_seconds,
                "end_to_end_seconds_per_image": (engine + host) / batch,
                "images_per_second": batch / (engine + host) if engine + host else None,
                "host_share": host / engine if engine else None,
                # The engine alone (no host work).
                "projected_images_per_second": batch * self.clock_hz / cycles if cycles else None,
            })
            if sequencer is not None:
                report["sequencer"] = dict(sequencer)
        return report
