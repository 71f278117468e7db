"""HostBridge and UartEngineTop in the Amaranth simulator, driven bit by bit through uart_rx.

Two set-ups:

- the bare :class:`HostBridge` with a fake engine (a Python AXI4-Lite slave
  with delays and chosen responses, a stream sink with chosen back-pressure
  and a stream source), to control timing: credits, priorities, flush;
- :class:`UartEngineTop`, the real engine behind the bridge, for what the
  host will do on a board: identify, read the ID ROM, write and read back
  descriptor registers, resynchronise, and run one layer end to end.

Every reply is checked byte for byte against docs/host_link.md.
"""

from collections import deque
import dataclasses
import gc
import random
import warnings

import numpy as np
import pytest
from numpy.testing import assert_array_equal
from amaranth.hdl import UnusedElaboratable
from amaranth.sim import Simulator

from fpgacnn.core.config import EngineConfig
from fpgacnn.core.descriptor import DESCRIPTOR_FIELDS
from fpgacnn.hdl.link.host_bridge import DEFAULT_FIFO_DEPTH, TIMEOUT_BIT_TIMES, BeatFifo, HostBridge
from fpgacnn.core.regmap import ADDR_WIDTH, MAGIC
from fpgacnn.hdl.link.uart_top import UartEngineTop
from fpgacnn.host.packing import output_nbytes, pack_layer, unpack_output

from test_packing import random_layer, reference
from uart_sim_helpers import SerialPort

CPB = 4
#: The bare bridge only looks at stream_width.
CFG32 = EngineConfig(pin=4, pout=4, stream_width=32)
CFG64 = EngineConfig(pin=8, pout=8, stream_width=64)
#: The smallest useful real engine: quick to simulate.
TINY = EngineConfig(pin=4, pout=4, kmax=1, stream_width=32, max_width=4, max_channels=4,
                    max_out_channels=4)
TIMEOUT = TIMEOUT_BIT_TIMES * CPB


# -- the host side of the protocol --------------------------------------------------

def cmd_write(addr, value):
    return b"W" + addr.to_bytes(2, "little") + value.to_bytes(4, "little")


def cmd_read(addr):
    return b"R" + addr.to_bytes(2, "little")


def cmd_beat(data, last=False):
    return b"S" + bytes([int(last)]) + bytes(data)


def frames_of(data, beat_bytes):
    """Split bytes from the board into frames ``(opcode char, body)``; fail on anything else."""
    lengths = {"i": 5, "w": 2, "r": 6, "x": 1, "c": 1, "d": beat_bytes + 2}
    frames, i = [], 0
    while i < len(data):
        op = chr(data[i])
        assert op in lengths, f"unknown frame opcode {data[i]:#04x} at byte {i} of {data!r}"
        n = lengths[op]
        assert i + n <= len(data), f"truncated {op!r} frame at the end of {data!r}"
        frames.append((op, bytes(data[i + 1:i + n])))
        i += n
    return frames


def d_frame(data, last=False):
    return ("d", bytes([int(last)]) + bytes(data))


def run(dut, bench):
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


# -- a fake engine for the bare bridge -----------------------------------------------

class FakeEngine:
    """The engine's three ports, cycle by cycle, with AXI protocol checks.

    ``accept`` is the input side's ``tready``: a bool, or a probability.
    ``offer(data, last)`` queues an output beat. The AXI4-Lite slave holds
    ``regs`` (reads of other addresses return ``0xA5A5_0000 | addr``),
    takes requests after ``delay`` cycles and answers with ``bresp``/``rresp``
    ``resp_delay`` cycles later (default: ``delay``).
    """

    def __init__(self, bridge, *, accept=True, delay=0, resp_delay=None, seed=0):
        self.b = bridge
        self.accept = accept
        self.delay = delay
        self.resp_delay = delay if resp_delay is None else resp_delay
        self.rng = random.Random(seed)
        self.beats_in = []               # (bytes, last, cycle) taken from m_axis
        self.out_queue = deque()         # (bytes, last) to offer on s_axis
        self.taken_at = []               # cycles of s_axis handshakes
        self.regs = {}
        self.writes = []                 # (addr, data, strb)
        self.reads = []
        self.bresp = self.rresp = 0
        self._in_stall = None            # m_axis beat held without a handshake
        self._req = {"aw": None, "w": None, "ar": None}
        self._wait = {"aw": 0, "w": 0, "ar": 0, "b": 0, "r": 0}
        self._b = self._r = None         # pending responses
        self._held = {}
        self.nbytes = bridge.beat_bytes

    def offer(self, data, last=False):
        self.out_queue.append((bytes(data), bool(last)))

    def step(self, ctx, cycle):
        b = self.b
        # Input stream (bridge -> engine).
        ready = self.accept if isinstance(self.accept, bool) else self.rng.random() < self.accept
        ctx.set(b.m_axis.tready, ready)
        if ctx.get(b.m_axis.tvalid):
            beat = (ctx.get(b.m_axis.tdata).to_bytes(self.nbytes, "little"),
                    bool(ctx.get(b.m_axis.tlast)))
            if self._in_stall is not None:
                assert beat == self._in_stall, "m_axis beat changed while stalled"
            if ready:
                self.beats_in.append(beat + (cycle,))
                self._in_stall = None
            else:
                self._in_stall = beat
        else:
            self._in_stall = None        # only a flush may do this; the tests check what arrives

        # Output stream (engine -> bridge).
        if self.out_queue:
            data, last = self.out_queue[0]
            ctx.set(b.s_axis.tdata, int.from_bytes(data, "little"))
            ctx.set(b.s_axis.tlast, last)
        ctx.set(b.s_axis.tvalid, bool(self.out_queue))
        if ctx.get(b.s_axis.tready):
            assert self.out_queue, "tready without tvalid: a 'd' frame granted from nothing"
            self.out_queue.popleft()
            self.taken_at.append(cycle)

        self._axil(ctx)

    def _channel(self, ctx, name, valid, ready, payload):
        """A request channel: ready after ``delay`` cycles of valid, payload held till then."""
        if not ctx.get(valid):
            assert name not in self._held, f"{name}valid dropped before its handshake"
            ctx.set(ready, 0)
            self._wait[name] = 0
            return
        value = tuple(ctx.get(getattr(self.b.m_axil, p)) for p in payload)
        if name in self._held:
            assert self._held[name] == value, f"{name} channel changed before its handshake"
        go = self._req[name] is None and self._wait[name] >= self.delay
        ctx.set(ready, go)
        if go:
            self._req[name] = value
            self._wait[name] = 0
            self._held.pop(name, None)
        else:
            self._held[name] = value
            self._wait[name] += 1

    def _axil(self, ctx):
        axil = self.b.m_axil
        assert not (ctx.get(axil.awvalid) and ctx.get(axil.arvalid)), "two accesses at once"
        # Responses, decided in earlier cycles. The bridge raises bready/rready
        # only in the cycle it loads the reply frame, so only with a response.
        ctx.set(axil.bvalid, self._b is not None)
        ctx.set(axil.bresp, self._b or 0)
        if ctx.get(axil.bready):
            assert self._b is not None, "bready without bvalid"
            self._b = None
            self._req["aw"] = self._req["w"] = None
        ctx.set(axil.rvalid, self._r is not None)
        ctx.set(axil.rdata, self._r[0] if self._r else 0)
        ctx.set(axil.rresp, self._r[1] if self._r else 0)
        if ctx.get(axil.rready):
            assert self._r is not None, "rready without rvalid"
            self._r = None
            self._req["ar"] = None
        # Requests.
        self._channel(ctx, "aw", axil.awvalid, axil.awready, ("awaddr", "awprot"))
        self._channel(ctx, "w", axil.wvalid, axil.wready, ("wdata", "wstrb"))
        self._channel(ctx, "ar", axil.arvalid, axil.arready, ("araddr", "arprot"))
        # A captured request without a response yet (slots clear when it is taken).
        if self._req["aw"] is not None and self._req["w"] is not None and self._b is None:
            self._wait["b"] += 1
            if self._wait["b"] > self.resp_delay:
                (addr, prot), (data, strb) = self._req["aw"], self._req["w"]
                assert prot == 0
                self.writes.append((addr, data, strb))
                self.regs[addr] = data
                self._b = self.bresp
                self._wait["b"] = 0
        if self._req["ar"] is not None and self._r is None:
            self._wait["r"] += 1
            if self._wait["r"] > self.resp_delay:
                addr, prot = self._req["ar"]
                assert prot == 0
                self.reads.append(addr)
                self._r = (self.regs.get(addr, 0xA5A5_0000 | addr), self.rresp)
                self._wait["r"] = 0


class Link:
    """Commands and replies over a :class:`SerialPort`."""

    def __init__(self, port, beat_bytes):
        self.port, self.nbytes = port, beat_bytes

    async def command(self, data, reply_bytes):
        self.port.write(data)
        return await self.port.read(reply_bytes)

    async def write(self, addr, value):
        reply = await self.command(cmd_write(addr, value), 2)
        assert reply == b"w\x00", reply
        return reply

    async def read(self, addr):
        reply = await self.command(cmd_read(addr), 6)
        assert reply[0:1] == b"r" and reply[5] == 0, reply
        return int.from_bytes(reply[1:5], "little")

    async def frames(self, clocks):
        return frames_of(await self.port.quiet(clocks), self.nbytes)


def bridge_bench(test, *, config=CFG32, fifo_depth=DEFAULT_FIFO_DEPTH, **engine_kw):
    """Run ``test(link, engine, port)`` on a bare HostBridge with a FakeEngine."""
    dut = HostBridge(config, clocks_per_bit=CPB, fifo_depth=fifo_depth)
    engine = FakeEngine(dut, **engine_kw)

    async def bench(ctx):
        port = SerialPort(ctx, dut.uart_rx, dut.uart_tx, CPB, models=[engine])
        await port.idle(4)
        await test(Link(port, dut.beat_bytes), engine, port)
        # Nothing unexpected afterwards either.
        assert await port.quiet(30 * CPB) == b""

    run(dut, bench)
    return engine


def frame_clocks(nbytes):
    return 10 * CPB * nbytes


# -- parameters ----------------------------------------------------------------

def unused(check):
    """Run ``check()``, which builds components it does not elaborate, without
    Amaranth's UnusedElaboratable warnings in the log."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        check()
        gc.collect()


@pytest.mark.parametrize("kw,error,match", [
    (dict(clocks_per_bit=3), ValueError, "clocks_per_bit"),
    (dict(clocks_per_bit=8.0), TypeError, "clocks_per_bit"),
    (dict(clocks_per_bit=8, fifo_depth=0), ValueError, "fifo_depth"),
    (dict(clocks_per_bit=8, fifo_depth=1 << 16), ValueError, "fifo_depth"),
    (dict(clocks_per_bit=8, fifo_depth=True), TypeError, "fifo_depth"),
])
def test_parameters_are_checked(kw, error, match):
    def check():
        with pytest.raises(error, match=match):
            HostBridge(CFG32, **kw)
        with pytest.raises(error, match=match):
            UartEngineTop(TINY, **kw)
    unused(check)


def test_config_must_be_an_engine_config():
    def check():
        with pytest.raises(TypeError, match="EngineConfig"):
            HostBridge({"stream_width": 32}, clocks_per_bit=8)
        with pytest.raises(TypeError, match="EngineConfig"):
            UartEngineTop(None, clocks_per_bit=8)
    unused(check)


def test_bridge_ports():
    def check():
        dut = HostBridge(CFG64, clocks_per_bit=8, fifo_depth=7)
        assert dut.beat_bytes == 8 and dut.fifo_depth == 7 and dut.clocks_per_bit == 8
        members = dut.signature.members
        assert set(members) == {"uart_rx", "uart_tx", "m_axil", "m_axis", "s_axis"}
        assert members["m_axil"].signature.addr_width == ADDR_WIDTH
        assert members["m_axis"].signature.data_width == 64
        assert members["s_axis"].flow.name == "In" and members["m_axis"].flow.name == "Out"
        top = UartEngineTop(TINY, clocks_per_bit=8)
        assert set(top.signature.members) == {"uart_rx", "uart_tx"}
        assert top.bridge.fifo_depth == DEFAULT_FIFO_DEPTH and top.config == TINY
    unused(check)


# -- the input FIFO ---------------------------------------------------------------

@pytest.mark.parametrize("nb,depth", [(4, 3), (8, 2)])
def test_beat_fifo_bytes_in_beats_out_and_full(nb, depth):
    """Beats come out as written; bytes written to a full memory are dropped, not overwriting."""
    dut = BeatFifo(nb, depth)
    cap = dut.capacity
    assert cap >= depth * (nb + 1) and cap & (cap - 1) == 0
    rng = random.Random(nb)
    beats = [(bytes(rng.randrange(256) for _ in range(nb)), rng.random() < 0.5) for _ in range(40)]
    stream = [b for data, last in beats for b in bytes([int(last)]) + data]
    got = []

    async def bench(ctx):
        # Random pauses on both sides; the writer keeps to the credit rule
        # (at most ``depth`` beats written and not yet taken).
        pos = 0
        for _ in range(4000):
            room = pos < (len(got) + depth) * (nb + 1)
            offer = pos < len(stream) and room and rng.random() < 0.6
            ctx.set(dut.w_en, offer)
            ctx.set(dut.w_data, stream[pos] if offer else 0xEE)
            ready = rng.random() < 0.4
            ctx.set(dut.stream.tready, ready)
            if ctx.get(dut.stream.tvalid) and ready:
                got.append((ctx.get(dut.stream.tdata).to_bytes(nb, "little"),
                            bool(ctx.get(dut.stream.tlast))))
            await ctx.tick()
            pos += offer
            if len(got) == len(beats):
                break
        assert got == beats
        # Overflow: the output stalls, the memory fills; what fits comes out intact.
        ctx.set(dut.stream.tready, 0)
        extra = list(range(1, cap + 3 * (nb + 1) + 1))
        for byte in extra:
            ctx.set(dut.w_en, 1)
            ctx.set(dut.w_data, byte & 0xFF)
            await ctx.tick()
        ctx.set(dut.w_en, 0)
        out = bytearray()
        ctx.set(dut.stream.tready, 1)
        for _ in range(4 * cap + 40):
            if ctx.get(dut.stream.tvalid):
                out += bytes([ctx.get(dut.stream.tlast)]) + \
                    ctx.get(dut.stream.tdata).to_bytes(nb, "little")
            await ctx.tick()
        # One beat sits in the beat register; the memory then holds cap bytes.
        kept = (nb + 1) + cap
        kept -= kept % (nb + 1)
        assert bytes(out) == bytes(b & 1 if i % (nb + 1) == 0 else b
                                   for i, b in enumerate(x & 0xFF for x in extra[:kept]))

    run(dut, bench)
    assert got == beats


# -- the bare bridge ------------------------------------------------------------

@pytest.mark.parametrize("config,depth,reply", [
    (CFG32, DEFAULT_FIFO_DEPTH, b"i\x01\x04\x10\x00"),
    (CFG64, 300, b"i\x01\x08\x2c\x01"),
])
def test_identify(config, depth, reply):
    async def test(link, engine, port):
        assert await link.command(b"I", 5) == reply
        assert await link.command(b"I", 5) == reply

    bridge_bench(test, config=config, fifo_depth=depth)


@pytest.mark.parametrize("delay", [0, 3])
def test_register_write_and_read_are_one_transaction_each(delay):
    async def test(link, engine, port):
        assert await link.command(cmd_write(0x0048, 0xDEADBEEF), 2) == b"w\x00"
        assert engine.writes == [(0x048, 0xDEADBEEF, 0xF)]
        assert await link.command(cmd_read(0x0048), 6) == b"r\xef\xbe\xad\xde\x00"
        # Only the low ADDR_WIDTH bits of the u16 address reach the bus.
        assert await link.command(cmd_read(0xF123), 6) == b"r\x23\x01\xa5\xa5\x00"
        engine.bresp, engine.rresp = 2, 3
        assert await link.command(cmd_write(0xFFFC, 0x01020304), 2) == b"w\x02"
        assert await link.command(cmd_read(0x0FFC), 6) == b"r\x04\x03\x02\x01\x03"
        assert engine.writes[1:] == [(0xFFC, 0x01020304, 0xF)]
        assert engine.reads == [0x048, 0x123, 0xFFC]

    bridge_bench(test, delay=delay)


def test_a_register_command_during_another_is_ignored():
    """Rule 4 broken: an 'R' arrives while a slow 'W' waits for its response."""
    async def test(link, engine, port):
        port.write(cmd_write(0x20, 0x55AA55AA) + cmd_read(0x24))
        assert await port.read(2, timeout=400) == b"w\x00"
        assert await port.quiet(frame_clocks(8)) == b""
        assert engine.writes == [(0x20, 0x55AA55AA, 0xF)] and engine.reads == []
        port.write(cmd_read(0x20))
        assert await port.read(6, timeout=400 + frame_clocks(6)) == b"r\xaa\x55\xaa\x55\x00"

    bridge_bench(test, resp_delay=300)


def test_unknown_opcodes_are_ignored():
    async def test(link, engine, port):
        port.write(bytes([0x00, 0xFF, ord("i"), ord("d"), ord("c"), ord("s"), 0x0A]))
        assert await port.quiet(40 * CPB) == b""
        assert await link.command(b"I", 5) == b"i\x01\x04\x10\x00"
        assert engine.writes == [] and engine.reads == [] and engine.beats_in == []

    bridge_bench(test)


@pytest.mark.parametrize("config", [CFG32, CFG64], ids=["B4", "B8"])
def test_beats_are_credited_when_they_leave_the_fifo(config):
    depth = 4
    nb = config.stream_bytes
    rng = random.Random(nb)
    beats = [(bytes(rng.randrange(256) for _ in range(nb)), i % 3 == 2) for i in range(depth)]

    async def test(link, engine, port):
        # The engine stalls: the register slice in front of it takes two
        # beats (credited: they left the FIFO), the FIFO holds the rest.
        for data, last in beats:
            port.write(cmd_beat(data, last))
        assert await link.frames(frame_clocks(depth * (nb + 2) + 2) + 8 * CPB) == [("c", b"")] * 2
        assert await port.quiet(8 * CPB) == b""
        assert engine.beats_in == []
        # The engine takes them: one 'c' for each beat the FIFO still held,
        # and the beats arrive intact, in order.
        engine.accept = True
        assert await link.frames(frame_clocks(depth)) == [("c", b"")] * (depth - 2)
        assert [(d, l) for d, l, _ in engine.beats_in] == beats
        # Streaming with an engine that takes beats at random.
        engine.accept = 0.3
        more = [(bytes(rng.randrange(256) for _ in range(nb)), False) for _ in range(6)]
        for data, last in more:
            port.write(cmd_beat(data, last))
        frames = await link.frames(frame_clocks(6 * (nb + 2) + 6))
        assert frames == [("c", b"")] * 6
        assert [(d, l) for d, l, _ in engine.beats_in] == beats + more

    bridge_bench(test, config=config, fifo_depth=depth, accept=False)


def test_compact_bridge_credits_only_what_the_engine_takes():
    # Without deep_pipeline there is no register slice: a beat leaves the
    # FIFO only into the engine, so a stalled engine earns no credit.
    compact = dataclasses.replace(CFG32, deep_pipeline=0)

    async def test(link, engine, port):
        port.write(cmd_beat(b"\x01\x02\x03\x04"))
        assert await port.quiet(frame_clocks(8)) == b""
        engine.accept = True
        assert await link.frames(frame_clocks(2)) == [("c", b"")]
        assert [d for d, _, _ in engine.beats_in] == [b"\x01\x02\x03\x04"]

    bridge_bench(test, config=compact, accept=False)


def test_replies_then_credits_then_output_beats():
    """While one 'd' frame is on the wire, a reply, two credits and more output become due."""
    outs = [(bytes([0x10 + i, 0x20 + i, 0x30 + i, 0x40 + i]), i == 2) for i in range(3)]

    ins = [bytes([4 * i + 1, 4 * i + 2, 4 * i + 3, 4 * i + 4]) for i in range(4)]

    async def test(link, engine, port):
        # Four beats for a stalled engine: the register slice takes two
        # (credited at once), the FIFO holds two.
        port.write(b"".join(cmd_beat(d) for d in ins))
        await port.flush_out()
        await port.idle(12 * CPB)
        assert await port.quiet(0) == b"cc"
        for data, last in outs:
            engine.offer(data, last)
        await port.idle(3)
        assert len(engine.taken_at) == 1      # the first 'd' frame has started
        engine.accept = True                  # two beats leave the FIFO: two credits owed
        port.write(b"I")                      # and a reply, all within the first frame
        frames = await link.frames(frame_clocks(6 * 3 + 5 + 2) + 20 * CPB)
        assert frames == [d_frame(*outs[0]), ("i", b"\x01\x04\x10\x00"), ("c", b""), ("c", b""),
                          d_frame(*outs[1]), d_frame(*outs[2])]
        assert [d for d, _, _ in engine.beats_in] == ins

    bridge_bench(test, accept=False)


@pytest.mark.parametrize("commands,expected", [
    (b"XI", [("x", b""), ("i", b"\x01\x04\x10\x00")]),     # resynchronisation
    (b"IX", [("x", b"")]),                                  # the flush cancels the 'i'
    (cmd_write(0x30, 7) + b"X", [("w", b"\x00"), ("x", b"")]),
    (cmd_read(0x30) + b"XI", [("r", b"\x07\x00\x00\x00\x00"), ("x", b""),
                               ("i", b"\x01\x04\x10\x00")]),
])
def test_replies_due_together_go_out_in_command_order(commands, expected):
    async def test(link, engine, port):
        engine.regs[0x30] = 7
        # Keep the transmitter busy with output frames while the commands
        # arrive, so that their replies are due together.
        outs = [(bytes([i] * 4), i == 3) for i in range(4)]
        for data, last in outs:
            engine.offer(data, last)
        port.write(commands)
        frames = await link.frames(frame_clocks(6 * 4 + 14))
        assert frames[0] == d_frame(*outs[0])
        assert [f for f in frames if f[0] != "d"] == expected
        assert [f for f in frames if f[0] == "d"] == [d_frame(*o) for o in outs]
        assert frames[-1][0] == "d"     # the replies were all due before the last frame

    bridge_bench(test)


def test_output_beats_are_taken_only_when_their_frame_starts():
    rng = random.Random(7)
    outs = [(bytes(rng.randrange(256) for _ in range(4)), bool(rng.randrange(2))) for _ in range(5)]

    async def test(link, engine, port):
        for data, last in outs:
            engine.offer(data, last)
        data = await port.read(6 * len(outs), timeout=frame_clocks(6 * len(outs) + 3))
        assert frames_of(data, 4) == [d_frame(*o) for o in outs]
        at = [cycle for cycle, _ in port.log]
        # Beat k is taken once frame k-1's last byte went to the transmitter:
        # after the byte before it is complete at the host, before it is.
        for k in range(1, len(outs)):
            assert at[6 * k - 2] < engine.taken_at[k] < at[6 * k - 1], (k, engine.taken_at, at)
        # And the frames follow one another on the wire without idle time.
        assert all(b - a == 10 * CPB for a, b in zip(at, at[1:])), at

    bridge_bench(test)


def test_flush_drops_queued_beats_and_owed_credits():
    async def test(link, engine, port):
        for i in range(3):
            port.write(cmd_beat(bytes([i] * 4)))
        # Two go on into the register slice (credited), one waits in the FIFO.
        await port.flush_out()
        await port.idle(12 * CPB)
        assert await port.quiet(0) == b"cc"
        assert await link.command(b"X", 1) == b"x"
        engine.accept = True
        assert await port.quiet(30 * CPB) == b""
        assert engine.beats_in == []
        # The FIFO works as before after the flush.
        assert await link.command(cmd_beat(b"\xaa\xbb\xcc\xdd", last=True), 1) == b"c"
        assert [(d, l) for d, l, _ in engine.beats_in] == [(b"\xaa\xbb\xcc\xdd", True)]

        # Credits owed but not yet sent (the transmitter is busy) are dropped too:
        # after 'x' the host has nothing in flight.
        engine.accept = False
        ins = [bytes([i] * 4) for i in range(1, 5)]
        port.write(b"".join(cmd_beat(d) for d in ins))
        await port.flush_out()
        await port.idle(12 * CPB)
        assert await port.quiet(0) == b"cc"    # the two beats in the register slice
        engine.offer(b"\xd0\xd1\xd2\xd3")
        engine.offer(b"\xe0\xe1\xe2\xe3", last=True)
        await port.idle(3)
        engine.accept = True                   # two beats leave the FIFO: two credits owed
        port.write(b"X")
        frames = await link.frames(frame_clocks(6 * 2 + 1) + 20 * CPB)
        assert frames == [d_frame(b"\xd0\xd1\xd2\xd3"), ("x", b""), d_frame(b"\xe0\xe1\xe2\xe3", True)]
        assert [d for d, _, _ in engine.beats_in[1:]] == ins

    bridge_bench(test, accept=False)


def test_idle_timeout_drops_a_truncated_command():
    async def test(link, engine, port):
        # A gap well under the timeout: the command goes on; here the 'I'
        # and the next bytes are the beat's data.
        port.write(b"S\x00\x11")
        port.pulse(1, TIMEOUT // 2)
        port.write(b"I\x22\x33")
        assert await port.read(1, timeout=frame_clocks(6) + TIMEOUT) == b"c"
        assert [d for d, _, _ in engine.beats_in] == [b"\x11I\x22\x33"]
        # A gap over the timeout: the truncated command is dropped and the
        # next one is a command of its own.
        for truncated in (b"S\x00\x11\x22", b"W\x40\x00\x01\x02\x03", b"R\x40"):
            port.write(truncated)
            port.pulse(1, TIMEOUT + 2 * CPB)
            assert await link.command(b"I", 5) == b"i\x01\x04\x10\x00"
        assert len(engine.beats_in) == 1 and engine.writes == [] and engine.reads == []
        # The timer restarts with every byte: slow bytes, each under the timeout.
        for byte in cmd_write(0x10, 0x12345678):
            port.write([byte])
            port.pulse(1, TIMEOUT - 16 * CPB)
        assert await port.read(2, timeout=frame_clocks(3)) == b"w\x00"
        assert engine.writes == [(0x10, 0x12345678, 0xF)]

    bridge_bench(test)


# -- the real engine behind the bridge ------------------------------------------------

def top_bench(test, config=TINY, **kw):
    dut = UartEngineTop(config, clocks_per_bit=CPB, **kw)

    async def bench(ctx):
        port = SerialPort(ctx, dut.uart_rx, dut.uart_tx, CPB)
        await port.idle(4)
        await test(Link(port, config.stream_bytes), dut.regmap, port)

    run(dut, bench)


def test_engine_identify_and_id_rom():
    async def test(link, regs, port):
        assert await link.command(b"I", 5) == b"i\x01\x04\x08\x00"
        assert await link.command(cmd_read(regs.address("magic")), 6) == \
            b"r" + MAGIC.to_bytes(4, "little") + b"\x00"
        rom = {r.address: await link.read(r.address) for r in regs.id_rom()}
        assert regs.read_config(rom.__getitem__) == TINY

    top_bench(test, fifo_depth=8)


def test_engine_registers_write_and_read_back():
    async def test(link, regs, port):
        values = {"desc_in_h": 0xBEEF, "desc_x_zp": regs.encode("desc_x_zp", -3),
                  "desc_stride": 0x5, "desc_clamp_hi": 0x7F}
        for name, value in values.items():
            assert await link.command(cmd_write(regs.address(name), value), 2) == b"w\x00"
        for name, value in values.items():
            assert await link.command(cmd_read(regs.address(name)), 6) == \
                b"r" + value.to_bytes(4, "little") + b"\x00"
        # Bits beyond a field's width are not stored.
        await link.write(regs.address("desc_stride"), 0xFFFF_FFF3)
        assert await link.read(regs.address("desc_stride")) == 0x3
        assert await link.read(regs.address("status")) == 0

    top_bench(test)


def test_engine_resync_after_a_truncated_command():
    async def test(link, regs, port):
        addr = regs.address("desc_in_w")
        port.write(cmd_write(addr, 0x1234)[:4])
        port.pulse(1, TIMEOUT + 2 * CPB)
        assert await link.command(cmd_read(addr), 6) == b"r\x00\x00\x00\x00\x00"
        # An idle engine takes no input: the beat waits in the register slice
        # in front of it (credited: it left the FIFO) until a flush.
        port.write(cmd_beat(b"\x01\x02\x03\x04"))
        assert await port.quiet(frame_clocks(8)) == b"c"
        assert await link.command(b"X", 1) == b"x"
        assert await port.quiet(frame_clocks(2)) == b""
        assert await link.read(regs.address("magic")) == MAGIC

    top_bench(test)


def test_engine_runs_a_layer_through_the_uart():
    """Descriptor by 'W', start, input by 'S' within the credits, output from 'd' frames."""
    rng = np.random.default_rng(3)
    layer = random_layer(rng, TINY, k=1, stride=1, pool=False, batch=1)
    layer["x"] = rng.integers(-128, 128, (1, 3, 2, 3), dtype=np.int8)
    layer.update(w=rng.integers(-128, 128, (4, 3, 1, 1), dtype=np.int8),
                 bias=rng.integers(-3000, 3000, 4).astype(np.int32),
                 mult=rng.integers(1 << 23, 1 << 24, 4), shift=rng.integers(22, 25, 4))
    desc, data = pack_layer(TINY, **layer)
    depth = 3
    nb = TINY.stream_bytes
    out_beats = output_nbytes(TINY, desc) // nb

    async def test(link, regs, port):
        for f in DESCRIPTOR_FIELDS:
            await link.write(regs.address(f"desc_{f.name}"), regs.encode(f"desc_{f.name}", desc[f.name]))
        await link.write(regs.address("control"), regs.encode("control", start=1))
        beats = [bytes(data[i:i + nb]) for i in range(0, len(data), nb)]
        in_flight = credits = 0
        out = []
        pending = bytearray()
        limit = frame_clocks((len(beats) + out_beats) * (nb + 3)) + 2000
        for _ in range(limit):
            if beats and in_flight < depth and not port.sending:
                port.write(cmd_beat(beats.pop(0), last=not beats))
                in_flight += 1
            await port.tick()
            pending += port.received
            port.received.clear()
            port.received_at.clear()
            while pending:
                op = chr(pending[0])
                n = {"c": 1, "d": nb + 2}[op]
                if len(pending) < n:
                    break
                if op == "c":
                    in_flight -= 1
                    credits += 1
                else:
                    out.append((bytes(pending[2:n]), pending[1]))
                del pending[:n]
            if not beats and in_flight == 0 and len(out) == out_beats:
                break
        assert credits == len(data) // nb
        assert [last for _, last in out] == [0] * (out_beats - 1) + [1]
        raw = b"".join(d for d, _ in out)
        y = unpack_output(TINY, np.frombuffer(raw, np.uint8), desc, 4)
        assert_array_equal(y, reference(layer))
        status = regs.decode("status", await link.read(regs.address("status")))
        assert status == dict(dict.fromkeys(status, 0), done=1)

    top_bench(test, fifo_depth=depth)
