"""MemoryPortAXI4Master (the program engine's memory port on an AXI4 master) in the
Amaranth simulator, against an AXI4 memory model written here.

The memory model (:class:`AXI4Memory`, a bytearray) takes AR and AW with
random ready, answers each read burst after a random latency with random
gaps between its R beats (the bytes of other lanes random), takes W beats
with random ready and answers B after a random delay. It checks the AXI
rules the bridge promises: ``len + 1 <= max_burst``, no burst across 4 KiB,
AxSIZE of the port's word, IDs 0, INCR, AxCACHE 0b0011, lock/prot/qos 0,
``wlast`` exactly on a burst's last beat, no W beat offered before its AW
is (AWVALID), strobes only in a beat's own lanes, and every valid, once
raised, held with its payload unchanged until its ready. Its AWREADY is
random and independent of WVALID, and it answers B only once both the AW
and the last W beat are taken, as AXI asks.

A client model (:class:`Client`) offers a seeded random sequence of reads
(runs of consecutive addresses of random lengths, jumps, runs across 4 KiB,
pauses) and writes (random, full and zero strobes, runs across 4 KiB) with
random back-pressure on the responses, then reads back what it wrote once
``writes_pending`` is low. Every response is compared with the memory
(``assert_array_equal``), the beats on the bus with the accesses taken, and
the final memory with a reference the client's writes were applied to.
``writes_pending`` is checked in every cycle against the writes taken and
the beats answered on B.
"""

from collections import deque
import gc
import random
import warnings

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from amaranth.back import verilog
from amaranth.hdl import UnusedElaboratable
from amaranth.lib.wiring import In, Out, SignatureMembers
from amaranth.sim import Simulator

from fpgacnn.core.memory_port import (ADDRESS_BITS, FAULT_KIND_BITS, FAULT_NONE, FAULT_READ,
                                     FAULT_WRITE)
from fpgacnn.hdl.bus.axi4_master import AXI_CACHE, MemoryPortAXI4Master
from fpgacnn.hdl.bus.memory_port import (AXI4Signature, memory_fault_signature,
                                         memory_read_signature, memory_response_signature,
                                         memory_write_signature)

#: Byte address of the model's memory (a Zynq DDR address) and its size.
BASE = 0x1F00_0000
SIZE = 0x6000
#: Reads of constant data: 8.5 KiB across the pages at 0x1000, 0x2000 and 0x3000.
READ_REGION = (0x0E00, 0x3200)
#: Writes, read back at the end: 512 bytes across the page at 0x5000.
WRITE_REGION = (0x4F00, 0x5100)
SLVERR = 2


class AXI4Memory:
    """An AXI4 subordinate on ``dut.m_axi``: a memory with random timing that checks the rules.

    ``ready`` is the probability of each of ARREADY, AWREADY and WREADY in a
    cycle; ``latency`` the range of cycles from an AR handshake to its first
    R beat; ``gap`` the probability of a cycle without an R beat while one is
    due; ``b_delay`` the range of cycles from a burst's last W beat to its B.
    A read beat covering an address of ``read_errors`` is answered SLVERR, a
    write burst with a beat covering one of ``write_errors`` too.
    """

    def __init__(self, dut, rng, mem, *, ready=0.7, latency=(1, 12), gap=0.2, b_delay=(0, 6),
                 read_errors=(), write_errors=(), aw_after_w=False):
        self.axi = dut.m_axi
        self.rng, self.mem = rng, mem
        self.lanes = dut.data_width // 8
        self.read_size, self.write_size = dut.read_bytes, dut.write_bytes
        self.max_burst = dut.max_burst
        self.p_ready, self.latency, self.gap, self.b_delay = ready, latency, gap, b_delay
        self.read_errors, self.write_errors = set(read_errors), set(write_errors)
        # AWREADY only once the burst's first W beat is offered: legal AXI (a
        # subordinate may wait for WVALID), a deadlock for a manager that waits for
        # AWREADY before WVALID.
        self.aw_after_w = aw_after_w
        self.cycle = 0
        self.held = {"ar": None, "aw": None, "w": None}  # offered and not taken last cycle
        self.reads = deque()     # [addr, len, first beat's cycle, next beat]
        self.r_offer = None      # (rdata, rresp, rlast) offered and not taken
        self.writes = deque()    # [addr, len, next beat, error, AW taken], AW offered
        self.aw_wait = deque()   # the same records, AW offered and not yet taken
        self.w_done = deque()    # records whose last W beat is in, AW not yet taken
        self.b_wait = deque()    # (cycle, bresp, beats)
        self.b_offer = None
        self.read_beats = []     # byte address of every read beat asked for, in order
        self.write_beats = []    # (byte address, strobes of the word) of every W beat
        self.bursts = {"ar": [], "aw": []}  # (addr, len) of every burst taken
        self.errors = []         # ("r" / "b", burst address) of every error answered
        self.b_beats = 0         # write beats answered on B

    def idle(self):
        return not (self.reads or self.r_offer or self.writes or self.w_done or self.b_wait
                    or self.b_offer)

    def drive(self, ctx):
        axi, rng = self.axi, self.rng
        self.ready = {ch: rng.random() < self.p_ready for ch in ("ar", "aw", "w")}
        if self.aw_after_w and not ctx.get(axi.wvalid):
            self.ready["aw"] = False
        # Each valid is sampled with its ready the other way round first: it must not
        # follow the ready (observe compares).
        for ready in (False, True):
            for ch in ("ar", "aw", "w"):
                ctx.set(getattr(axi, f"{ch}ready"), self.ready[ch] ^ (not ready))
            if not ready:
                self.flipped = {ch: ctx.get(getattr(axi, f"{ch}valid")) for ch in ("ar", "aw", "w")}
        if (self.r_offer is None and self.reads and self.reads[0][2] <= self.cycle
                and rng.random() >= self.gap):
            addr, length, _, beat = self.reads[0]
            at = addr + beat * self.read_size
            lane = at % self.lanes
            word = bytearray(rng.randbytes(self.lanes))  # other lanes: noise
            word[lane:lane + self.read_size] = self.mem[at - BASE:at - BASE + self.read_size]
            bad = any(at + k in self.read_errors for k in range(self.read_size))
            self.r_offer = (int.from_bytes(word, "little"), SLVERR if bad else 0, beat == length)
            if bad:
                self.errors.append(("r", addr))
        if self.r_offer is not None:
            ctx.set(axi.rdata, self.r_offer[0])
            ctx.set(axi.rresp, self.r_offer[1])
            ctx.set(axi.rlast, self.r_offer[2])
        ctx.set(axi.rvalid, self.r_offer is not None)
        if self.b_offer is None and self.b_wait and self.b_wait[0][0] <= self.cycle:
            self.b_offer = self.b_wait.popleft()
            ctx.set(axi.bresp, self.b_offer[1])
        ctx.set(axi.bvalid, self.b_offer is not None)

    def _valid(self, ctx, ch):
        valid = ctx.get(getattr(self.axi, f"{ch}valid"))
        assert valid == self.flipped[ch], f"{ch}valid follows {ch}ready"
        return valid

    def _address(self, ctx, ch, size):
        """Check and take (when ready) the AR or AW channel; the burst if taken."""
        axi = self.axi
        valid = self._valid(ctx, ch)
        held = self.held[ch]
        assert held is None or valid, f"{ch}valid fell before {ch}ready"
        if not valid:
            return None
        fields = tuple(ctx.get(getattr(axi, f"{ch}{f}"))
                       for f in ("addr", "len", "size", "burst", "id", "cache", "lock", "prot",
                                 "qos"))
        assert held is None or fields == held, f"{ch} payload changed while waiting: {fields}"
        addr, length, log_size, burst, id_, cache, lock, prot, qos = fields
        assert 1 << log_size == size, f"{ch}size {log_size} for a port word of {size} bytes"
        assert length + 1 <= self.max_burst, f"{ch}len {length} over max_burst"
        assert addr % size == 0, f"{ch}addr {addr:#x} not aligned"
        assert addr % 4096 + (length + 1) * size <= 4096, f"burst at {addr:#x} crosses 4 KiB"
        assert (burst, id_, cache, lock, prot, qos) == (1, 0, AXI_CACHE, 0, 0, 0)
        assert BASE <= addr and addr + (length + 1) * size <= BASE + SIZE
        if not self.ready[ch]:
            self.held[ch] = fields
            return None
        self.held[ch] = None
        self.bursts[ch].append((addr, length))
        return addr, length

    def _respond(self, burst):
        """Schedule the B of a burst whose AW and last W beat are both taken."""
        resp = SLVERR if burst[3] else 0
        if burst[3]:
            self.errors.append(("b", burst[0]))
        self.b_wait.append((self.cycle + 1 + self.rng.randint(*self.b_delay), resp,
                            burst[1] + 1))

    def observe(self, ctx):
        axi, rng = self.axi, self.rng
        taken = self._address(ctx, "ar", self.read_size)
        if taken:
            addr, length = taken
            self.reads.append([addr, length, self.cycle + rng.randint(*self.latency), 0])
            self.read_beats += [addr + i * self.read_size for i in range(length + 1)]
        if self.r_offer is not None and ctx.get(axi.rready):
            self.reads[0][3] += 1
            if self.r_offer[2]:
                self.reads.popleft()
            self.r_offer = None
        if self.held["aw"] is None and ctx.get(axi.awvalid):  # a burst's AW first offered
            burst = [ctx.get(axi.awaddr), ctx.get(axi.awlen), 0, False, False]
            self.writes.append(burst)
            self.aw_wait.append(burst)
        if self._address(ctx, "aw", self.write_size):
            self.aw_wait.popleft()[4] = True
            while self.w_done and self.w_done[0][4]:
                self._respond(self.w_done.popleft())
        valid = self._valid(ctx, "w")
        assert self.held["w"] is None or valid, "wvalid fell before wready"
        if valid:
            # A beat is offered only once its burst's AW is (here or before).
            assert self.writes, "a W beat offered ahead of its AWVALID"
            beat = (ctx.get(axi.wdata), ctx.get(axi.wstrb), ctx.get(axi.wlast))
            assert self.held["w"] is None or beat == self.held["w"], "W payload changed"
            burst = self.writes[0]
            assert beat[2] == (burst[2] == burst[1]), f"wlast {beat[2]} at beat {burst[2]}"
            at = burst[0] + burst[2] * self.write_size
            lane = at % self.lanes
            strb = beat[1] >> lane
            assert beat[1] == strb << lane and strb < 1 << self.write_size, \
                f"wstrb {beat[1]:#x} outside the lanes of {at:#x}"
            if self.ready["w"]:
                self.held["w"] = None
                data = beat[0].to_bytes(self.lanes, "little")
                for k in range(self.write_size):
                    if strb >> k & 1:
                        self.mem[at - BASE + k] = data[lane + k]
                self.write_beats.append((at, strb))
                burst[3] |= any(at + k in self.write_errors for k in range(self.write_size))
                burst[2] += 1
                if beat[2]:
                    self.writes.popleft()
                    if burst[4] and not self.w_done:
                        self._respond(burst)
                    else:  # B waits for the AW (AXI)
                        self.w_done.append(burst)
            else:
                self.held["w"] = beat
        if self.b_offer is not None and ctx.get(axi.bready):
            self.b_beats += self.b_offer[2]
            self.b_offer = None
        self.cycle += 1


class Client:
    """The engine's side: offers reads and writes (held until taken), takes responses.

    ``reads``: byte addresses, or ``("pause", n)`` for ``n`` cycles without a
    read; ``writes``: ``(addr, data bytes, strobes)`` or pauses; ``ready``:
    the probability of ``mem_rdata.ready`` in a cycle. ``ref`` gets every
    write taken.
    """

    def __init__(self, dut, rng, ref, reads=(), writes=(), *, ready=1.0):
        self.dut, self.rng, self.ref = dut, rng, ref
        self.reads, self.writes = deque(reads), deque(writes)
        self.p_ready = ready
        self.read_addrs = []    # reads taken, in order
        self.responses = []     # their data, as bytes
        self.write_beats = []   # (addr, strb) of the writes taken
        self.stalls = 0         # cycles a read was offered and not taken
        self.write_stalls = 0   # cycles a write was offered and not taken

    def idle(self):
        return not self.reads and not self.writes and len(self.responses) == len(self.read_addrs)

    def drive(self, ctx):
        dut = self.dut
        read = self.reads[0] if self.reads else None
        ctx.set(dut.mem_rd.valid, isinstance(read, int))
        if isinstance(read, int):
            ctx.set(dut.mem_rd.addr, read)
        write = self.writes[0] if self.writes else None
        offered = write is not None and write[0] != "pause"
        ctx.set(dut.mem_wr.valid, offered)
        if offered:
            addr, data, strb = write
            ctx.set(dut.mem_wr.addr, addr)
            ctx.set(dut.mem_wr.data, int.from_bytes(data, "little"))
            ctx.set(dut.mem_wr.strb, strb)
        self.rsp_ready = self.rng.random() < self.p_ready
        ctx.set(dut.mem_rdata.ready, self.rsp_ready)

    @staticmethod
    def _advance(queue, offered, taken):
        if offered:
            if taken:
                queue.popleft()
        elif queue:
            # A pause: one cycle of it has passed.
            n = queue[0][1] - 1
            if n:
                queue[0] = ("pause", n)
            else:
                queue.popleft()

    def observe(self, ctx):
        dut = self.dut
        read = self.reads[0] if self.reads else None
        offered = isinstance(read, int)
        taken = offered and ctx.get(dut.mem_rd.ready)
        if taken:
            self.read_addrs.append(read)
        self.stalls += offered and not taken
        self._advance(self.reads, offered, taken)
        if self.rsp_ready and ctx.get(dut.mem_rdata.valid):
            self.responses.append(ctx.get(dut.mem_rdata.data).to_bytes(dut.read_bytes, "little"))
        write = self.writes[0] if self.writes else None
        offered = write is not None and write[0] != "pause"
        taken = offered and ctx.get(dut.mem_wr.ready)
        if taken:
            addr, data, strb = write
            for k in range(dut.write_bytes):
                if strb >> k & 1:
                    self.ref[addr - BASE + k] = data[k]
            self.write_beats.append((addr, strb))
        self.write_stalls += offered and not taken
        self._advance(self.writes, offered, taken)


class Bench:
    """The bridge, the client and the memory, stepped together one cycle at a time."""

    def __init__(self, dut, seed, *, client=None, memory=None):
        self.dut = dut
        self.rng = random.Random(seed)
        self.mem = bytearray(random.Random(seed + 1000).randbytes(SIZE))
        self.ref = bytearray(self.mem)
        self.client = Client(dut, self.rng, self.ref, **(client or {}))
        self.memory = AXI4Memory(dut, self.rng, self.mem, **(memory or {}))
        self.cycle = 0
        self.pending_trace = []  # writes_pending in every cycle

    async def step(self, ctx):
        client, memory = self.client, self.memory
        client.drive(ctx)
        memory.drive(ctx)
        # Registered: high exactly while a write taken in an earlier cycle lacks its B.
        pending = ctx.get(self.dut.writes_pending)
        assert pending == (len(client.write_beats) > memory.b_beats), \
            f"writes_pending {pending} in cycle {self.cycle}"
        self.pending_trace.append(pending)
        client.observe(ctx)
        memory.observe(ctx)
        await ctx.tick()
        self.cycle += 1

    async def settle(self, ctx, limit=20000):
        """Step until every access is done, answered and acknowledged."""
        start = self.cycle
        while not (self.client.idle() and self.memory.idle()
                   and not ctx.get(self.dut.writes_pending)):
            assert self.cycle - start < limit, "the bridge hangs"
            await self.step(ctx)

    def check(self):
        client, memory, R = self.client, self.memory, self.dut.read_bytes
        assert memory.read_beats == client.read_addrs
        assert memory.write_beats == client.write_beats
        got = np.array([np.frombuffer(r, np.uint8) for r in client.responses]).reshape(-1, R)
        want = np.array([np.frombuffer(self.ref[a - BASE:a - BASE + R], np.uint8)
                         for a in client.read_addrs]).reshape(-1, R)
        assert_array_equal(got, want)
        assert_array_equal(np.frombuffer(self.mem, np.uint8), np.frombuffer(self.ref, np.uint8))


def simulate(dut, bench):
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


def runs(rng, size, region, count, *, page_runs=0.2, pause=0.3):
    """``count`` addresses of ``size``-byte words in ``region``: runs of consecutive words
    of random lengths at random places (some just before a 4 KiB boundary, so that they
    cross it), with pauses between some runs and inside some."""
    lo, hi = BASE + region[0], BASE + region[1]
    pages = [p for p in range(lo - lo % 4096 + 4096, hi, 4096)]
    ops, n = [], 0
    while n < count:
        if pages and rng.random() < page_runs:
            start = rng.choice(pages) - size * rng.randint(1, 12)
        else:
            start = lo + size * rng.randrange((hi - lo) // size)
        length = min(rng.choice([1, 1, 2, 3, 4, 7, 15, 16, 17, 24, 33, 40]),
                     (hi - start) // size, count - n)
        for i in range(length):
            ops.append(start + i * size)
            if rng.random() < 0.03:
                ops.append(("pause", rng.randint(1, 3)))
        n += length
        if rng.random() < pause:
            ops.append(("pause", rng.randint(1, 8)))
    return ops


def with_data(rng, size, ops):
    """Writes at the addresses of ``ops``: random data, strobes all, none or random."""
    def strobes():
        r = rng.random()
        return 0 if r < 0.1 else (1 << size) - 1 if r < 0.4 else rng.getrandbits(size)
    return [op if isinstance(op, tuple) else (op, rng.randbytes(size), strobes()) for op in ops]


def readback(size):
    """Every word of the write region, in runs, as the engine reads a tensor back."""
    lo, hi = BASE + WRITE_REGION[0], BASE + WRITE_REGION[1]
    return list(range(lo, hi, size))


#: (R, W, D, max_burst): the PYNQ-Z2 engine's port, wider words, a 128-bit port,
#: single bytes on a 32-bit port; bursts of 16 beats and of one.
PORTS = [(4, 4, 64, 16), (8, 8, 64, 16), (4, 8, 128, 16), (1, 4, 32, 16), (4, 4, 64, 1),
         (1, 4, 32, 1)]


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("back_pressure", [False, True], ids=["free", "pressed"])
@pytest.mark.parametrize("R,W,D,max_burst", PORTS,
                         ids=[f"r{r}w{w}d{d}b{b}" for r, w, d, b in PORTS])
def test_random_reads_and_writes(R, W, D, max_burst, back_pressure, seed):
    dut = MemoryPortAXI4Master(read_bytes=R, write_bytes=W, data_width=D, max_burst=max_burst)
    seed = 100 * seed + 2 * PORTS.index((R, W, D, max_burst)) + back_pressure
    rng = random.Random(seed)
    n = 400 if R > 1 else 600
    bench = Bench(dut, seed, client={
        "reads": runs(rng, R, READ_REGION, n),
        "writes": with_data(rng, W, runs(rng, W, WRITE_REGION, 300)),
        "ready": 0.6 if back_pressure else 1.0,
    }, memory={"ready": 0.6 if back_pressure else 0.9, "gap": 0.3 if back_pressure else 0.1})

    async def testbench(ctx):
        await bench.settle(ctx)
        # The engine reads back what it wrote only once writes_pending is low.
        bench.client.reads.extend(readback(R))
        await bench.settle(ctx)

    simulate(dut, testbench)
    bench.check()
    memory = bench.memory
    assert max(length for _, length in memory.bursts["ar"]) + 1 == max_burst
    assert max(length for _, length in memory.bursts["aw"]) + 1 == max_burst
    assert any(strb == 0 for _, strb in memory.write_beats)  # zero strobes are passed on
    assert not bench.pending_trace[-1]


def test_small_fifos_do_not_deadlock():
    # A response FIFO and a write FIFO shallower than a burst: bursts close early.
    dut = MemoryPortAXI4Master(read_bytes=4, write_bytes=4, max_burst=16, read_depth=5,
                               write_depth=3)
    rng = random.Random(7)
    bench = Bench(dut, 7, client={
        "reads": runs(rng, 4, READ_REGION, 100, pause=0),
        "writes": with_data(rng, 4, runs(rng, 4, WRITE_REGION, 80, pause=0)),
        "ready": 0.7,
    })

    async def testbench(ctx):
        await bench.settle(ctx)
        bench.client.reads.extend(readback(4))
        await bench.settle(ctx)

    simulate(dut, testbench)
    bench.check()
    assert max(length for _, length in bench.memory.bursts["ar"]) + 1 <= 5


#: The memory's latency in the timing tests: an AR taken in cycle u has its first R beat
#: in cycle u + LATENCY.
LATENCY = 6


@pytest.mark.parametrize("max_burst", [16, 4, 1])
def test_one_read_per_cycle(max_burst):
    """N consecutive reads are answered within N + max_burst + 1 + LATENCY cycles.

    With nothing stalling (ARREADY high, R beats back to back, ``mem_rdata.ready``
    high), read i is taken in cycle t0 + i. The last burst is closed in the cycle of
    its last read when it is full (else in the next cycle, with fewer beats), its AR
    offered and taken the cycle after, its first beat LATENCY cycles later and its
    last max_burst - 1 after that, and the response is offered the cycle after the
    beat: so the last response is taken in cycle t0 + N + LATENCY + max_burst, and
    the reads take N + LATENCY + max_burst + 1 cycles, counting both ends. For N a
    multiple of max_burst from a 4 KiB boundary, exactly that many.
    """
    n = 128
    start = BASE + 0x1000
    # The fewest reads in flight that keep the rate (read i is answered in cycle
    # i + max_burst + LATENCY + 1, and taken only while fewer are in flight).
    dut = MemoryPortAXI4Master(read_bytes=4, write_bytes=4, max_burst=max_burst,
                               read_depth=max_burst + LATENCY + 2)
    bench = Bench(dut, 1, client={"reads": [start + 4 * i for i in range(n)]},
                  memory={"ready": 1.0, "latency": (LATENCY, LATENCY), "gap": 0.0})
    taken = []

    async def testbench(ctx):
        while not bench.client.idle():
            before = len(bench.client.responses)
            await bench.step(ctx)
            if len(bench.client.responses) > before:
                taken.append(bench.cycle - 1)

    simulate(dut, testbench)
    bench.check()
    assert bench.client.stalls == 0  # one read taken in every cycle
    assert taken[-1] + 1 == n + LATENCY + max_burst + 1
    # One response per cycle once they flow: no gap between the first and the last.
    assert taken == list(range(taken[0], taken[0] + n))
    assert bench.memory.bursts["ar"] == [(start + 4 * max_burst * i, max_burst - 1)
                                         for i in range(n // max_burst)]


def test_fewer_reads_in_flight_stall():
    dut = MemoryPortAXI4Master(read_bytes=4, write_bytes=4, read_depth=16 + LATENCY + 1)
    bench = Bench(dut, 1, client={"reads": [BASE + 0x1000 + 4 * i for i in range(128)]},
                  memory={"ready": 1.0, "latency": (LATENCY, LATENCY), "gap": 0.0})

    async def testbench(ctx):
        await bench.settle(ctx)

    simulate(dut, testbench)
    bench.check()
    assert bench.client.stalls > 0


def test_isolated_read_latency():
    """A read on its own is answered in cycle t + 3 + LATENCY: its burst closes in the
    next cycle (no read continues it), the AR is offered the cycle after, and the
    response the cycle after its R beat."""
    dut = MemoryPortAXI4Master(read_bytes=4, write_bytes=4)
    bench = Bench(dut, 2, client={"reads": [BASE + 0x1234]},
                  memory={"ready": 1.0, "latency": (LATENCY, LATENCY), "gap": 0.0})
    answered = []

    async def testbench(ctx):
        while not bench.client.idle():
            await bench.step(ctx)
        answered.append(bench.cycle - 1)

    simulate(dut, testbench)
    bench.check()
    assert answered == [3 + LATENCY]


def test_a_subordinate_that_waits_for_wvalid_before_awready():
    """AXI lets a subordinate hold AWREADY until it sees WVALID: the bridge offers a
    burst's W beats with its AWVALID, not after the handshake, so the writes go."""
    dut = MemoryPortAXI4Master(read_bytes=4, write_bytes=4)
    rng = random.Random(5)
    writes = with_data(rng, 4, runs(rng, 4, WRITE_REGION, 60))
    bench = Bench(dut, 5, client={"writes": writes}, memory={"aw_after_w": True})

    async def testbench(ctx):
        await bench.settle(ctx, limit=5000)

    simulate(dut, testbench)
    bench.check()
    assert len(bench.memory.bursts["aw"]) > 1


@pytest.mark.parametrize("max_burst", [16, 1])
def test_one_write_per_cycle(max_burst):
    # With WREADY and AWREADY high, a write is taken in every cycle; writes_pending
    # rises the cycle after the first and falls the cycle after the last B.
    n = 96
    dut = MemoryPortAXI4Master(read_bytes=4, write_bytes=4, max_burst=max_burst)
    rng = random.Random(3)
    writes = with_data(rng, 4, [BASE + WRITE_REGION[0] + 4 * i for i in range(n)])
    bench = Bench(dut, 3, client={"writes": writes},
                  memory={"ready": 1.0, "b_delay": (2, 2)})

    async def testbench(ctx):
        await bench.settle(ctx)
        for _ in range(3):
            await bench.step(ctx)

    simulate(dut, testbench)
    bench.check()
    trace = bench.pending_trace
    assert trace[0] == 0 and all(trace[1:n + 1])
    assert trace.index(0, 1) == len(trace) - 3  # and stays low after the last B
    assert not any(trace[-3:])
    assert bench.memory.bursts["aw"][0] == (BASE + WRITE_REGION[0], max_burst - 1)
    assert bench.client.write_stalls == 0  # one write taken in every cycle
    assert bench.client.write_beats == [(a, s) for a, _, s in writes]


def test_error_responses_set_the_fault():
    dut = MemoryPortAXI4Master(read_bytes=4, write_bytes=4)
    bad_read, bad_write = BASE + 0x1108, BASE + 0x4F48
    bench = Bench(dut, 4, memory={"read_errors": {bad_read, bad_read + 0x100},
                                  "write_errors": {bad_write, bad_write + 0x40}})
    client, memory = bench.client, bench.memory
    rng = random.Random(4)

    async def testbench(ctx):
        assert ctx.get(dut.fault) == FAULT_NONE
        client.reads.extend(range(BASE + 0x1100, BASE + 0x1140, 4))
        await bench.settle(ctx)
        # The data of the failed read is still delivered; the fault names its burst.
        assert memory.errors[0][0] == "r"
        assert (ctx.get(dut.fault), ctx.get(dut.fault_addr)) == (FAULT_READ, memory.errors[0][1])
        assert memory.errors[0][1] <= bad_read
        # A later error (a read, then a write) leaves the first in place.
        client.reads.extend(range(BASE + 0x1200, BASE + 0x1210, 4))
        client.writes.extend(with_data(rng, 4, range(bad_write - 8, bad_write + 8, 4)))
        await bench.settle(ctx)
        assert len(memory.errors) == 3
        assert (ctx.get(dut.fault), ctx.get(dut.fault_addr)) == (FAULT_READ, memory.errors[0][1])
        ctx.set(dut.clear_fault, 1)
        await bench.step(ctx)
        ctx.set(dut.clear_fault, 0)
        assert (ctx.get(dut.fault), ctx.get(dut.fault_addr)) == (FAULT_NONE, 0)
        # A write answered SLVERR: the fault names the burst's AW address.
        client.writes.extend(with_data(rng, 4, range(bad_write + 0x38, bad_write + 0x48, 4)))
        await bench.settle(ctx)
        assert memory.errors[-1][0] == "b"
        assert (ctx.get(dut.fault), ctx.get(dut.fault_addr)) == (FAULT_WRITE, memory.errors[-1][1])
        assert memory.errors[-1][1] in [a for a, _ in memory.bursts["aw"]]

    simulate(dut, testbench)
    bench.check()


def wiring_members(**members):
    return SignatureMembers({name: (Out if flow == "out" else In)(width)
                             for name, (flow, width) in members.items()})


def test_signatures():
    assert memory_read_signature().members == wiring_members(
        addr=("out", ADDRESS_BITS), valid=("out", 1), ready=("in", 1))
    assert memory_response_signature(32).members == wiring_members(
        data=("out", 32), valid=("out", 1), ready=("in", 1))
    assert memory_write_signature(8).members == wiring_members(
        addr=("out", ADDRESS_BITS), data=("out", 64), strb=("out", 8), valid=("out", 1),
        ready=("in", 1), pending=("in", 1))
    assert memory_fault_signature().members == wiring_members(
        kind=("in", FAULT_KIND_BITS), addr=("in", ADDRESS_BITS), clear=("out", 1))
    sig = AXI4Signature(32, 128, 2)
    assert sig == AXI4Signature(32, 128, 2) and sig != AXI4Signature(32, 64, 2)
    assert repr(sig) == "AXI4Signature(32, 128, 2)"
    members = sig.members
    assert (members["arlen"], members["awcache"], members["awqos"]) == (Out(8), Out(4), Out(4))
    assert (members["rid"], members["bresp"], members["rlast"]) == (In(2), In(2), In(1))
    assert (members["wstrb"], members["rdata"]) == (Out(16), In(128))
    assert len(members) == 37


def test_port_names():
    text = verilog.convert(MemoryPortAXI4Master(read_bytes=4, write_bytes=4), name="t",
                           emit_src=False)
    for name in ("m_axi__araddr", "m_axi__arlen", "m_axi__awcache", "m_axi__wlast",
                 "m_axi__bresp", "m_axi__rid", "mem_rd__addr", "mem_rdata__data",
                 "mem_wr__strb", "writes_pending", "fault_addr", "clear_fault"):
        assert name in text


def refused(exc, match, **kwargs):
    # A component whose constructor raised was still created (and never elaborated);
    # keep Amaranth's UnusedElaboratable warning out of the log.
    params = {"read_bytes": 4, "write_bytes": 4, **kwargs}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        with pytest.raises(exc, match=match):
            MemoryPortAXI4Master(**params)
        gc.collect()


def test_parameter_refusals():
    refused(ValueError, r"^read_bytes 16 \(128 bits\) is wider than data_width 64$",
            read_bytes=16)
    refused(ValueError, r"^write_bytes 8 \(64 bits\) is wider than data_width 32$",
            write_bytes=8, data_width=32)
    refused(ValueError, r"^max_burst must be 1 to 16 beats \(AXI3 HP ports\), not 17$",
            max_burst=17)
    refused(ValueError, r"^max_burst must be 1 to 16 beats \(AXI3 HP ports\), not 0$",
            max_burst=0)
    refused(TypeError, r"^max_burst must be an integer, not '4'$", max_burst="4")
    refused(ValueError, r"^read_bytes must be a power of two, not 3$", read_bytes=3)
    refused(ValueError, r"^write_bytes must be a power of two, not 12$", write_bytes=12)
    refused(TypeError, r"^read_bytes must be a positive integer, not 4\.0$", read_bytes=4.0)
    refused(ValueError, r"^data_width must be one of \(32, 64, 128\), not 256$", data_width=256)
    refused(TypeError, r"^read_depth must be a positive integer, not 0$", read_depth=0)
    refused(TypeError, r"^write_depth must be a positive integer, not True$", write_depth=True)
    with pytest.raises(ValueError, match=r"^data_width must be one of \(8, 16, 32, 64, 128, "
                                         r"256, 512, 1024\), not 48$"):
        AXI4Signature(32, 48)
    with pytest.raises(TypeError, match=r"^addr_width must be an integer of at least 12, not 8$"):
        AXI4Signature(8)
    with pytest.raises(TypeError, match=r"^width_bits must be a positive integer, not 0$"):
        memory_response_signature(0)
