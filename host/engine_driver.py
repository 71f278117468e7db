"""The engine driver: one layer run on any board, through the register map.

The same code drives the simulated board (:class:`fpgacnn.sim.native_board.SimulatedBoard`)
and a PYNQ board. A board is anything with the narrow interface of DESIGN.md
section 4::

    board.mmio_read(addr) -> int          board.mmio_write(addr, value)
    board.allocate(nbytes) -> uint8 array board.dma_send(buf)   board.dma_recv(buf)
    board.dma_wait(timeout_s) -> bool     board.dma_abort()     board.received

Register addresses come from :func:`fpgacnn.core.regmap.build_regmap`, the
declaration the gateware is generated from; nothing here types an address.
"""

from dataclasses import dataclass, fields
import weakref

import numpy as np

from ..core.config import EngineConfig
from ..core.contract import descriptor_violations, engine_contract
from ..core.descriptor import ALL_DESCRIPTOR_FIELDS, DESCRIPTOR_FIELDS, complete_descriptor
from ..core.regmap import RegisterMapError, build_regmap
from ..core.errors import BackendError, MappingError
from ..core.sequencer import engine_descriptor

__all__ = ["EngineDriver", "LayerRun", "config_differences", "set_weights_owner", "warm_start",
           "weights_owner"]


@dataclass(frozen=True)
class LayerRun:
    """What one layer run on the engine returned.

    Attributes
    ----------
    output : numpy.ndarray of uint8
        The bytes the engine streamed out (see docs/engine.md).
    busy_cycles, stall_in_cycles, stall_out_cycles : int
        The engine's performance counters for this run (exact clock cycles).
    """

    output: np.ndarray
    busy_cycles: int
    stall_in_cycles: int
    stall_out_cycles: int


def config_differences(expected, actual):
    """``["pin: program 8, bitstream 4", ...]`` for every parameter that differs."""
    return [f"{f.name}: program {getattr(expected, f.name)}, bitstream {getattr(actual, f.name)}"
            for f in fields(EngineConfig) if getattr(expected, f.name) != getattr(actual, f.name)]


#: Which compiled program's weights each board's engine holds (resident
#: weights, docs/engine.md): weak, so a closed board takes its entry along.
#: A board that cannot be weakly referenced is not tracked: its programs
#: always load their weights (never stale ones, and no entry kept forever).
_WEIGHTS_OWNER = weakref.WeakKeyDictionary()


def weights_owner(board):
    """The program whose resident weights ``board``'s engine holds, or None."""
    try:
        return _WEIGHTS_OWNER.get(board)
    except TypeError:
        return None


def set_weights_owner(board, program):
    """Record that ``board``'s engine holds ``program``'s weights (None: nobody's)."""
    try:
        _WEIGHTS_OWNER[board] = program
    except TypeError:
        pass


def warm_start(board, program):
    """Whether ``program`` runs warm on ``board`` (its weights resident there), and
    the board's record of resident weights made right for the run to come.

    A run that is not warm loads weights (a cold or a streaming program's),
    which overwrite whatever the engine held: the board is then nobody's until
    the caller marks its own program after the run
    (:func:`set_weights_owner`). The engine's own sequencer loads weights
    without the driver, so the caller says it here, before every start.
    """
    warm = bool(program.resident) and weights_owner(board) is program
    if not warm:
        set_weights_owner(board, None)
    return warm


class EngineDriver:
    """Drives one ConvEngine on a board.

    Parameters
    ----------
    board : object
        A board with the narrow interface (module docstring).
    expected : EngineConfig, optional
        The configuration the program was compiled for. The engine's ID ROM is
        read on open; a different configuration is refused before anything runs.

    Attributes
    ----------
    config : EngineConfig
        The configuration read from the engine's ID ROM.

    Raises
    ------
    BackendError
        If no engine answers, its register-map version is unsupported, or its
        configuration differs from ``expected`` (the message lists what differs).
    """

    def __init__(self, board, expected=None):
        self.board = board
        self.regs = build_regmap(expected if expected is not None else EngineConfig())
        self.config = self.regs.read_config(board.mmio_read)
        if expected is not None and self.config != expected:
            raise BackendError("the engine on the board was generated with another configuration "
                               "than the compiled program: " + "; ".join(config_differences(expected, self.config)))
        self.regs = build_regmap(self.config)

    def _write(self, name, value=None, **fields):
        self.board.mmio_write(self.regs.address(name), self.regs.encode(name, value, **fields))

    def _read(self, name):
        return self.regs.decode(name, self.board.mmio_read(self.regs.address(name)))

    def soft_reset(self):
        """Abort whatever the engine is doing and return it to idle."""
        self._write("control", soft_reset=1)

    def run_layer(self, descriptor, stream_in, out_nbytes, *, timeout, name="layer", check=True):
        """Run one layer: descriptor, start, stream in, stream out, wait.

        Parameters
        ----------
        descriptor : dict
            A value for every field of :data:`fpgacnn.core.descriptor.DESCRIPTOR_FIELDS`.
        stream_in : numpy.ndarray of uint8
            The input stream (parameters, weights, pixels), already packed.
        out_nbytes : int
            Bytes the engine will stream out.
        timeout : float
            Seconds (board time) after which the run is abandoned.
        name : str
            The layer's name, for error messages.
        check : bool
            Check the descriptor against the engine contract before writing
            it (:func:`~fpgacnn.core.contract.descriptor_violations`). With
            ``False`` the engine's own check decides: the driver reads
            ``status`` right after ``start`` and reports a refusal before
            streaming anything (for testing the hardware).

        Returns
        -------
        LayerRun

        Raises
        ------
        MappingError
            If ``check`` and the descriptor breaks the engine contract (the
            message names the layer and every field, with the reason).
        BackendError
            If the engine refused the descriptor (``status.error``; the
            message names each field ``status.error_fields`` reports and its range),
            or the transfer does not complete within ``timeout``; the DMA and
            the engine are reset first, so the next run on this board works.
        """
        missing = [f.name for f in DESCRIPTOR_FIELDS
                   if f.name not in descriptor and f.default is None]
        if missing:
            raise BackendError(f"layer {name!r}: descriptor lacks {', '.join(missing)}")
        fields = engine_contract(self.config).descriptor_fields
        try:
            # (with check=False too: the engine has no register to refuse it by)
            descriptor = engine_descriptor(self.config, descriptor, f"layer {name!r}")
        except MappingError as e:
            raise BackendError(str(e)) from None
        if check:
            violations = descriptor_violations(self.config, descriptor)
            if violations:
                raise MappingError(f"layer {name!r} does not fit the engine: "
                                   + "; ".join(_naming(field, why) for field, why in violations))
        if descriptor["load_weights"] or descriptor["load_params"]:
            # The weight or the parameter buffer changes: no program's weights (and
            # parameters, param_base) are resident any more (an Accelerator marks
            # its own after its program has run, its own parameter loads included).
            set_weights_owner(self.board, None)
        for f in fields:
            value = int(descriptor[f.name])
            if self.regs[f"desc_{f.name}"].access == "const":
                continue  # the compact arrangement's constant fields (checked above)
            try:
                word = self.regs.encode(f"desc_{f.name}", value)
            except RegisterMapError:
                raise BackendError(f"layer {name!r}: descriptor field {f.name} = {value} does not "
                                   f"fit its {f.width}-bit register") from None
            self.board.mmio_write(self.regs.address(f"desc_{f.name}"), word)
        out = self.board.allocate(out_nbytes)
        buf = self.board.allocate(len(stream_in))
        buf[:] = stream_in
        self._write("control", start=1)
        if not check:
            # Checked descriptors are accepted (same contract, same
            # configuration), and nothing waits for the answer then.
            status = self._decision(name)
            if status["error"]:
                raise self._refusal(descriptor, name, status)
        self.board.dma_recv(out)
        self.board.dma_send(buf)
        if not self.board.dma_wait(timeout):
            received = self.board.received
            self.board.dma_abort()
            # A refused start never takes its input (a checked descriptor is
            # refused only by an engine that disagrees with the contract).
            status = self._read("status")
            refusal = self._refusal(descriptor, name, status) if status["error"] else None
            self.soft_reset()
            if refusal is not None:
                raise refusal
            raise BackendError(f"layer {name!r}: DMA did not complete within {timeout:g} s "
                               f"(received {received} of {out_nbytes} bytes); engine and DMA reset")
        status = self._read("status")
        if not status["done"]:
            # The last beat is out, but the engine may still be computing windows
            # whose results are dropped (a pooled layer's odd last row): poll for
            # done for the rest of the time budget.
            for _ in range(self._polls(timeout)):
                status = self._read("status")
                if status["done"]:
                    break
            else:
                self.soft_reset()
                raise BackendError(f"layer {name!r}: the engine streamed all output but did not "
                                   f"report done (status {status}); engine reset")
        return LayerRun(
            output=np.array(out[:out_nbytes], copy=True),
            busy_cycles=self._read("perf_busy_cycles")["value"],
            stall_in_cycles=self._read("perf_stall_in_cycles")["value"],
            stall_out_cycles=self._read("perf_stall_out_cycles")["value"],
        )

    def _polls(self, seconds):
        """Register reads that take about ``seconds`` of board time (at least 64).

        An AXI register read takes >= 4 cycles; a board on a slower link says
        how long its reads take.
        """
        read_seconds = getattr(self.board, "mmio_read_seconds",
                               4 / getattr(self.board, "clock_hz", 100e6))
        return max(64, int(seconds / read_seconds))

    def _decision(self, name):
        """``status`` once the engine has accepted or refused the start just written."""
        status = self._read("status")
        # The check takes at most line_buffer.words + 2 cycles after a write of
        # ci_tiles; a read takes at least one cycle.
        for _ in range(engine_contract(self.config).line_buffer.words + 2):
            if not status["pending"]:
                return status
            status = self._read("status")
        if status["pending"]:
            self.soft_reset()
            raise BackendError(f"layer {name!r}: the engine's descriptor check did not finish "
                               f"(status {status}); engine reset")
        return status

    def refusal(self, descriptor, name):
        """The BackendError for the engine's last refused start (its ``status``),
        naming layer ``name`` and the fields of ``descriptor`` the engine named:
        for a start made by another initiator (the program sequencer)."""
        return self._refusal(descriptor, name, self._read("status"))

    def _refusal(self, descriptor, name, status):
        """The BackendError for a start the engine refused (``status.error``)."""
        ranges = engine_contract(self.config).ranges
        descriptor = complete_descriptor(descriptor, ALL_DESCRIPTOR_FIELDS)
        reasons = dict(reversed(descriptor_violations(self.config, descriptor)))
        parts = []
        for i, f in enumerate(engine_contract(self.config).descriptor_fields):
            if status["error_fields"] >> i & 1:
                value = int(descriptor[f.name])
                lo, hi = ranges[f.name]
                part = f"{f.name} = {value} (range {lo}..{hi})"
                if lo <= value <= hi and f.name in reasons:
                    part += f": {reasons[f.name]}"
                parts.append(part)
        if not parts:
            parts = ["descriptor registers were written while the engine was busy (those "
                     "writes were ignored): write the descriptor again"]
        return BackendError(f"layer {name!r}: the engine refused the descriptor (status.error): "
                            + "; ".join(parts))


def _naming(field, reason):
    """``reason``, led by the descriptor field it is about unless it already names it."""
    return reason if reason.startswith(f"{field} = ") else f"{field}: {reason}"
