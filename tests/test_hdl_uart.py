"""UartRx / UartTx in the Amaranth simulator: exact line waveforms, round trips, glitches."""

import gc
import random
import warnings

import pytest
from amaranth.hdl import Module, UnusedElaboratable
from amaranth.sim import Simulator

from fpgacnn.hdl.link.uart import UartRx, UartTx

from uart_sim_helpers import SerialPort, frame_bits


def run(dut, bench):
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


@pytest.mark.parametrize("cls", [UartRx, UartTx])
@pytest.mark.parametrize("bad,error", [(3, ValueError), (0, ValueError), (-8, ValueError),
                                       (4.0, TypeError), (True, TypeError), ("8", TypeError)])
def test_clocks_per_bit_is_checked(cls, bad, error):
    # The component object exists (unelaborated) even though __init__ raised.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        with pytest.raises(error, match="clocks_per_bit"):
            cls(bad)
        gc.collect()


@pytest.mark.parametrize("cpb", [4, 7])
def test_tx_line_is_exact_8n1_back_to_back(cpb):
    """Bytes offered back to back leave as one unbroken train of 10*cpb-clock frames."""
    rng = random.Random(cpb)
    data = [rng.randrange(256) for _ in range(12)] + [0x00, 0xFF, 0x55]
    dut = UartTx(cpb)
    line = []

    async def bench(ctx):
        assert ctx.get(dut.tx) == 1 and ctx.get(dut.ready) == 1
        pending = list(data)
        # Offer the first byte after some idle time; then keep valid high.
        for _ in range(3):
            line.append(ctx.get(dut.tx))
            await ctx.tick()
        while pending or not ctx.get(dut.ready):
            ctx.set(dut.valid, bool(pending))
            ctx.set(dut.data, pending[0] if pending else 0)
            took = ctx.get(dut.valid) and ctx.get(dut.ready)
            line.append(ctx.get(dut.tx))
            await ctx.tick()
            if took:
                pending.pop(0)
        ctx.set(dut.valid, 0)
        for _ in range(2 * cpb):
            line.append(ctx.get(dut.tx))
            await ctx.tick()

    run(dut, bench)
    first = line.index(0)
    expected = [level for byte in data for level in frame_bits(byte) for _ in range(cpb)]
    assert line[:first] == [1] * first
    assert first == 4                  # accepted in cycle 3, start bit from cycle 4
    assert line[first:first + len(expected)] == expected
    assert set(line[first + len(expected):]) == {1}


@pytest.mark.parametrize("cpb", [4, 7])
def test_tx_holds_ready_low_while_sending(cpb):
    dut = UartTx(cpb)

    async def bench(ctx):
        ctx.set(dut.data, 0xA5)
        ctx.set(dut.valid, 1)
        await ctx.tick()
        ctx.set(dut.data, 0x00)        # must not matter any more
        busy = 0
        while not ctx.get(dut.ready):
            busy += 1
            await ctx.tick()
        assert busy == 10 * cpb - 1    # ready again in the stop bit's last clock
        ctx.set(dut.valid, 0)
        levels = []
        for _ in range(3 * cpb):
            levels.append(ctx.get(dut.tx))
            await ctx.tick()
        assert set(levels) == {1}

    run(dut, bench)


def _receive(cpb, feed, *, host_cpb=None, settle=None):
    """Run UartRx with ``feed(port)`` queuing line activity; return (bytes, valid lengths)."""
    dut = UartRx(cpb)
    got = bytearray()
    pulses = []

    async def bench(ctx):
        port = SerialPort(ctx, dut.rx, None, cpb, host_clocks_per_bit=host_cpb)
        feed(port)
        run_len = 0
        while port.sending:
            if ctx.get(dut.valid):
                got.append(ctx.get(dut.data))
                run_len += 1
            elif run_len:
                pulses.append(run_len)
                run_len = 0
            await port.tick()
        for _ in range(settle or 12 * cpb):
            if ctx.get(dut.valid):
                got.append(ctx.get(dut.data))
            await port.tick()

    run(dut, bench)
    return bytes(got), pulses


@pytest.mark.parametrize("cpb", [4, 7])
def test_rx_receives_random_bytes_with_and_without_gaps(cpb):
    rng = random.Random(100 + cpb)
    data = bytes(rng.randrange(256) for _ in range(40)) + b"\x00\xff"

    def feed(port):
        for byte in data:
            port.write([byte], gap_clocks=rng.choice([0, 0, 1, cpb // 2, 3 * cpb]))

    got, pulses = _receive(cpb, feed)
    assert got == data
    assert set(pulses) <= {1}          # one clock per byte


@pytest.mark.parametrize("host_cpb", [24, 26])
def test_rx_tolerates_4_percent_baud_error(host_cpb):
    data = bytes(range(0, 256, 9))
    got, _ = _receive(25, lambda port: port.write(data), host_cpb=host_cpb)
    assert got == data


@pytest.mark.parametrize("cpb", [4, 7, 16])
def test_rx_ignores_start_glitches(cpb):
    """Low pulses shorter than half a bit are not start bits; the byte after them is intact."""

    def feed(port):
        port.pulse(1, 3 * cpb)
        for width in range(1, (cpb + 1) // 2):
            port.pulse(0, width)
            port.pulse(1, 2 * cpb)
        # A noise burst: short low pulses close together, low again at the
        # middle of where a start bit would be (not a start bit: it went high).
        for _ in range(4):
            port.pulse(0, max(1, cpb // 4))
            port.pulse(1, max(1, cpb // 4))
        port.pulse(1, 2 * cpb)
        port.write(b"\x5a")
        port.pulse(0, 1)               # a glitch right after a stop bit
        port.pulse(1, cpb)
        port.write(b"\xc3")

    got, _ = _receive(cpb, feed)
    assert got == b"\x5a\xc3"


def test_rx_drops_a_byte_with_a_low_stop_bit_and_waits_for_idle():
    cpb = 8

    def feed(port):
        port.write(b"\x11")
        # A break: start bit, eight zero bits and a low "stop bit", low for a while.
        port.pulse(0, 14 * cpb)
        port.pulse(1, cpb)
        port.write(b"\x22")

    got, _ = _receive(cpb, feed)
    assert got == b"\x11\x22"


@pytest.mark.parametrize("cpb", [4, 7])
def test_tx_to_rx_round_trip(cpb):
    rng = random.Random(cpb * 31)
    data = bytes(rng.randrange(256) for _ in range(48))
    tx, rx = UartTx(cpb), UartRx(cpb)
    top = Module()
    top.submodules.tx = tx
    top.submodules.rx = rx
    top.d.comb += rx.rx.eq(tx.tx)
    got = bytearray()

    async def bench(ctx):
        pending = list(data)
        for _ in range(len(data) * 10 * cpb + 30 * cpb):
            # Random pauses between bytes on the sending side.
            offer = bool(pending) and rng.random() < 0.7
            ctx.set(tx.valid, offer)
            ctx.set(tx.data, pending[0] if pending else 0)
            took = offer and ctx.get(tx.ready)
            if ctx.get(rx.valid):
                got.append(ctx.get(rx.data))
            await ctx.tick()
            if took:
                pending.pop(0)
            if not pending and len(got) == len(data):
                break

    run(top, bench)
    assert bytes(got) == data
