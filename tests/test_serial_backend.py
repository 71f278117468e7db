"""The serial backend: SerialBoard over the UART bridge gateware in Verilator.

Everything here runs the real bridge (hdl/link/uart_top.py) and engine RTL behind a
C++ UART model (sim/uart_harness.cpp), except the error tests, which use a
scripted port so that each misbehaviour is exact and costs no simulation.
"""

import json
import os
import re

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from fpgacnn.core.regmap import build_regmap
from fpgacnn.host import packing
from fpgacnn.host.accelerator import Accelerator
from fpgacnn.host.commands.sim import random_layer_model
from fpgacnn.host.engine_driver import EngineDriver
from fpgacnn.core.errors import BackendError
from fpgacnn.host.examples import load_example
from fpgacnn.host.onnx_import import load_onnx
from fpgacnn.host.reference import ReferenceBackend
from fpgacnn.host.serial_board import SerialBoard

from conftest import SMALL_ENGINE

CLOCK_HZ = 100e6


@pytest.fixture(scope="module")
def sim_port():
    """The small engine behind the bridge, 4 clocks per bit (built once, cached on disk)."""
    from fpgacnn.sim.uart_board import SimulatedSerialPort
    port = SimulatedSerialPort(SMALL_ENGINE, clocks_per_bit=4, clock_hz=CLOCK_HZ)
    yield port
    port.close()


@pytest.fixture
def board(sim_port):
    """A SerialBoard on the shared simulated port; the engine starts idle."""
    b = SerialBoard(sim_port, clock_hz=CLOCK_HZ, owns_port=False)
    EngineDriver(b, expected=SMALL_ENGINE).soft_reset()
    yield b
    assert sim_port.framing_errors == 0


def _layer(shape, cout, seed=0):
    model = random_layer_model(shape, cout, seed=seed)
    x = np.random.default_rng(seed).integers(-128, 128, (1, *shape), dtype=np.int8)
    conv = model.layers[0]
    desc, data = packing.pack_layer(SMALL_ENGINE, x, conv.weight, conv.bias, conv.x_zero_point,
                                    conv.mult, conv.shift, conv.y_zero_point, pads=conv.pads)
    return model, x, desc, data, packing.output_nbytes(SMALL_ENGINE, desc)


def _check(model, x, desc, result, cout):
    y = packing.unpack_output(SMALL_ENGINE, result.output, desc, cout)
    assert_array_equal(y, ReferenceBackend().run_int8(model, x))


# ------------------------------------------------------------------ whole models

def test_example_model_bit_exact_through_the_serial_backend():
    digits = load_example("digits")
    model = load_onnx(digits.model)
    x = digits.x[:4]
    with Accelerator(model, backend="serial", port="sim", config=SMALL_ENGINE,
                     clock_hz=CLOCK_HZ) as acc:
        assert isinstance(acc.board, SerialBoard)
        assert (acc.board.beat_bytes, acc.board.version) == (SMALL_ENGINE.stream_bytes, 1)
        y = acc.run(x)
        board = acc.board
        assert board.port.framing_errors == 0
        assert board.stray_credits == 0 and board.dropped_beats == 0
    assert_array_equal(y, ReferenceBackend().run(model, x))
    report = acc.report
    assert report["backend"] == "serial"
    for layer in report["layers"]:
        if layer["engine"]:
            # The engine's own counters: it runs as on any board, but waits for the link.
            assert layer["cycles"] >= layer["predicted_cycles"] > 0, layer["name"]
            assert layer["stall_in_cycles"] > 0, layer["name"]
    assert report["total_cycles"] == sum(l.get("cycles", 0) for l in report["layers"])


def test_cli_runs_on_the_simulated_serial_board(tmp_path, capsys):
    from fpgacnn.host.cli import main
    digits = load_example("digits")
    np.save(tmp_path / "x.npy", digits.x[:2])
    config = tmp_path / "small.toml"
    config.write_text("".join(f"{k} = {v}\n" for k, v in SMALL_ENGINE.as_dict().items()))
    assert main(["run", str(digits.model), "--input", str(tmp_path / "x.npy"), "--backend", "serial",
                 "--port", "sim", "--config", str(config), "--report", str(tmp_path / "r.json")]) == 0
    assert "backend serial: 2 images" in capsys.readouterr().out
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["backend"] == "serial" and report["total_cycles"] > 0


@pytest.mark.parametrize("argv, message", [
    (["--backend", "serial"], r"the serial backend needs --port DEVICE"),
    (["--backend", "reference", "--port", "sim"], r"--port needs the serial backend, not reference"),
    (["--backend", "serial", "--port", "sim", "--baud", "115200"],
     r"--baud applies to a real serial device, not --port sim"),
    (["--backend", "serial", "--port", "/dev/ttyUSB0", "--waves", "w.vcd"],
     r"--waves needs the sim backend, not serial on a device \(--port sim simulates it\)"),
    (["--backend", "serial", "--port", "/nonexistent/ttyUSB9"],
     r"cannot open serial device /nonexistent/ttyUSB9: "),
])
def test_cli_serial_options_are_checked(tmp_path, capsys, argv, message):
    from fpgacnn.host.cli import main
    digits = load_example("digits")
    np.save(tmp_path / "x.npy", digits.x[:1])
    code = main(["run", str(digits.model), "--input", str(tmp_path / "x.npy"), *argv])
    assert code != 0
    assert re.search("^fpgacnn: error: " + message, capsys.readouterr().err)


# ------------------------------------------------------------------ the link

def test_register_round_trip(board, sim_port):
    regs = build_regmap(SMALL_ENGINE)
    assert board.mmio_read(regs.address("magic")) == int.from_bytes(b"FCNN", "little")
    addr = regs.address("desc_out_w")
    for value in (0, 1, 0x5AA5, 0xFFFF):  # a 16-bit field
        board.mmio_write(addr, value)
        assert board.mmio_read(addr) == value
    # A register access is a few bytes each way: hundreds of cycles, not thousands.
    start = sim_port.cycles
    board.mmio_read(addr)
    assert sim_port.cycles - start < (3 + 6 + 4) * 10 * sim_port.clocks_per_bit


def test_layer_runs_at_close_to_line_rate(board, sim_port):
    """Credits come back while beats are still going out: the input direction
    stays busy (no stop-and-wait on the FIFO depth)."""
    driver = EngineDriver(board, expected=SMALL_ENGINE)
    model, x, desc, data, nout = _layer((16, 8, 16), 4, seed=1)
    start = sim_port.cycles
    result = driver.run_layer(desc, data, nout, timeout=0.01)
    _check(model, x, desc, result, 4)
    b = board.beat_bytes
    line = len(data) // b * (b + 2) * 10 * sim_port.clocks_per_bit  # input frames alone
    assert sim_port.cycles - start < 1.25 * line


class _CreditAudit:
    """A port in front of another that checks rule 1 on the wire: it parses
    the host's 'S' frames and the board's 'c' frames and records the most
    beats ever sent and not yet credited."""

    def __init__(self, port, beat_bytes):
        self.port, self.b = port, beat_bytes
        self.outstanding = self.most = 0
        self._rx = bytearray()

    def __getattr__(self, name):
        return getattr(self.port, name)

    def __setattr__(self, name, value):
        if name == "timeout":
            self.port.timeout = value
        else:
            super().__setattr__(name, value)

    def write(self, data):
        data = bytes(data)
        f = self.b + 2
        if data[:1] == b"S":  # SerialBoard writes beats in whole frames, and nothing else with them
            assert len(data) % f == 0 and data[::f] == b"S" * (len(data) // f)
            self.outstanding += len(data) // f
            self.most = max(self.most, self.outstanding)
        return self.port.write(data)

    def read(self, n=1):
        data = self.port.read(n)
        self._rx += data
        lengths = {ord("c"): 1, ord("d"): self.b + 2, ord("w"): 2, ord("r"): 6, ord("x"): 1, ord("i"): 5}
        while self._rx and len(self._rx) >= lengths[self._rx[0]]:
            if self._rx[0] == ord("c"):
                self.outstanding -= 1
            del self._rx[:lengths[self._rx[0]]]
        return data


def test_output_much_larger_than_input_keeps_the_fifo_safe(sim_port):
    """1 input channel to 16 output channels: the engine produces beats far
    faster than the line carries them and stalls on its output, so input
    backs up; credits must keep the host within the FIFO."""
    audit = _CreditAudit(sim_port, SMALL_ENGINE.stream_bytes)
    board = SerialBoard(audit, clock_hz=CLOCK_HZ, owns_port=False)
    driver = EngineDriver(board, expected=SMALL_ENGINE)
    driver.soft_reset()
    model, x, desc, data, nout = _layer((1, 8, 16), 16, seed=2)
    assert nout > len(data)
    result = driver.run_layer(desc, data, nout, timeout=0.01)
    _check(model, x, desc, result, 16)
    assert result.stall_out_cycles > result.busy_cycles // 2  # the link held the engine back
    assert audit.most == board.fifo_depth                     # the FIFO was used to the full...
    assert audit.outstanding == 0                              # ...and every beat was credited
    assert sim_port.framing_errors == 0


@pytest.mark.parametrize("how", ["input ends early", "timeout mid-stream"])
def test_dma_timeout_then_resync_and_a_correct_run(board, how):
    driver = EngineDriver(board, expected=SMALL_ENGINE)
    model, x, desc, data, nout = _layer((4, 6, 6), 4)
    if how == "input ends early":
        short, timeout = data[:-board.beat_bytes * 8], 2e-3  # the engine waits for input forever
    else:
        short, timeout = data, 2e-5  # beats are still in the FIFO and on the line when it fires
    with pytest.raises(BackendError, match=r"^layer 'conv_a': DMA did not complete within "
                                           r"[0-9.e-]+ s \(received \d+ of \d+ bytes\); "
                                           r"engine and DMA reset$"):
        driver.run_layer(desc, short, nout, timeout=timeout, name="conv_a")
    result = driver.run_layer(desc, data, nout, timeout=0.01)
    _check(model, x, desc, result, 4)


def test_send_must_be_whole_beats(board):
    with pytest.raises(BackendError, match=r"^DMA send of 6 bytes: the UART bridge takes whole "
                                           r"4-byte beats$"):
        board.dma_send(np.zeros(6, np.uint8))


# ------------------------------------------------------------------ a real serial.Serial

def test_pyserial_on_a_pseudo_terminal_drives_the_simulated_board(sim_port):
    """open_serial, as for a board's /dev/ttyUSB0: a real serial.Serial on a
    pseudo-terminal served by the simulated bridge."""
    from fpgacnn.host.serial_board import open_serial
    from fpgacnn.sim.uart_board import serve_pty
    with serve_pty(sim_port) as server:
        assert os.path.exists(server.path)
        # Board time is wall time here and the simulation is slower than a
        # real board: generous timeouts.
        with open_serial(server.path, 3_000_000, clock_hz=CLOCK_HZ, timeout=5.0) as board:
            assert type(board.port).__module__.startswith("serial")
            driver = EngineDriver(board, expected=SMALL_ENGINE)
            assert driver.config == SMALL_ENGINE
            model, x, desc, data, nout = _layer((4, 4, 4), 4, seed=3)
            _check(model, x, desc, driver.run_layer(desc, data, nout, timeout=30.0), 4)
        assert board.port is None  # closed with the board


# ------------------------------------------------------------------ errors

class ScriptedPort:
    """A pyserial-like port whose 'board' answers each whole command through
    ``answer(command) -> bytes``. Board time moves only when a read has to
    wait (then by the whole timeout), so nothing here sleeps."""

    baudrate = 3_000_000
    port = "scripted"

    def __init__(self, answer, beat_bytes=4):
        self.answer, self.b = answer, beat_bytes
        self.timeout = None
        self.now = 0.0
        self.closed = False
        self.commands = []
        self._in, self._out = bytearray(), bytearray()

    def monotonic(self):
        return self.now

    def write(self, data):
        self._out += data
        lengths = {ord("I"): 1, ord("X"): 1, ord("W"): 7, ord("R"): 3, ord("S"): self.b + 2}
        while self._out and len(self._out) >= lengths[self._out[0]]:
            n = lengths[self._out[0]]
            command = bytes(self._out[:n])
            del self._out[:n]
            self.commands.append(command)
            self._in += self.answer(command)
        return len(data)

    def read(self, n=1):
        if len(self._in) < n:
            self.now += self.timeout
        data = bytes(self._in[:n])
        del self._in[:n]
        return data

    @property
    def in_waiting(self):
        return len(self._in)

    def reset_input_buffer(self):
        self._in.clear()

    def flush(self):
        pass

    def close(self):
        self.closed = True


def bridge(**overrides):
    """A scripted bridge: correct replies, except those given by opcode."""
    def answer(command):
        op = chr(command[0])
        if op in overrides:
            reply = overrides[op]
            return reply(command) if callable(reply) else reply
        return {"X": b"x", "I": b"i\x01\x04\x10\x00", "W": b"w\x00", "R": b"r\x78\x56\x34\x12\x00",
                "S": b"c"}[op]
    return answer


def test_a_port_that_answers_nothing_is_a_clear_error():
    port = ScriptedPort(lambda command: b"")
    with pytest.raises(BackendError, match=r"^no answer from a fpgacnn UART bridge on scripted at "
                                           r"3,000,000 baud: sent flush 'X' and identify 'I', "
                                           r"received nothing within 0\.5 s\. Is the bitstream "
                                           r"loaded, the device the board's UART and the baud "
                                           r"rate the bitstream's\?$"):
        SerialBoard(port)
    assert port.commands == [b"X", b"I"]


def test_a_port_that_answers_garbage_shows_what_came():
    port = ScriptedPort(lambda command: b"\xff\x00hello")
    with pytest.raises(BackendError, match=r"received 14 bytes: ff 00 68 65 6c 6c 6f ff 00 68 65 6c "
                                           r"6c 6f within 0\.5 s"):
        SerialBoard(port)


def test_another_protocol_version_is_refused():
    with pytest.raises(BackendError, match=r"^the UART bridge on scripted speaks protocol version 2; "
                                           r"this host speaks version 1"):
        SerialBoard(ScriptedPort(bridge(I=b"i\x02\x04\x10\x00")))


def test_register_errors_name_the_address_and_what_arrived():
    replies = {"W": b"w\x02"}
    board = SerialBoard(ScriptedPort(bridge(W=lambda c: replies["W"], R=lambda c: replies["R"])))
    assert (board.beat_bytes, board.fifo_depth) == (4, 16)
    with pytest.raises(BackendError, match=r"^MMIO write to 0x0044 answered with error response 2 "
                                           r"\(SLVERR\)$"):
        board.mmio_write(0x44, 1)
    replies["R"] = b""
    with pytest.raises(BackendError, match=r"^MMIO read from 0x0004: no reply 'r' from the board on "
                                           r"scripted within 0\.5 s \(received nothing\)$"):
        board.mmio_read(0x4)
    replies["R"] = b"w\x00"
    with pytest.raises(BackendError, match=r"^serial board scripted: expected reply 'r', the board "
                                           r"sent 'w' 00 \(received 2 bytes: 77 00\)$"):
        board.mmio_read(0x8)
    replies["R"] = b"\x99"
    with pytest.raises(BackendError, match=r"^serial board scripted: the board sent byte 0x99, which "
                                           r"starts no frame \(received 1 byte: 99\); the link has "
                                           r"lost its framing"):
        board.mmio_read(0x8)
    # After each of these the link is resynchronised ('X' ... 'x') before the next command.
    replies["R"] = b"r\x78\x56\x34\x12\x00"
    board.port.commands.clear()
    assert board.mmio_read(0x8) == 0x12345678
    assert board.port.commands == [b"X", b"R\x08\x00"]


def test_closing_the_board_closes_the_port_it_owns():
    port = ScriptedPort(bridge())
    with SerialBoard(port):
        pass
    assert port.closed
