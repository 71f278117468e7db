"""The simulated board's memory model (sim/board_harness.cpp) on a copy machine top.

The top (tests/memory_port_top.py) reads ``count`` R-byte words and writes
them back as W-byte writes; the board's memory is a numpy array. Checked:
copies byte for byte at several widths, latencies and bandwidths; cycle
counts against what the bandwidth and latency allow; errors for accesses
outside the buffer or misaligned, with nothing outside the copy touched;
statistics; irq; reset; and a top without the memory port.
"""

import math

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from fpgacnn.core.errors import BackendError
from fpgacnn.sim.native_board import SimulatedBoard, TopPorts

from memory_port_top import copy_regmap, memory_copy_verilog

REGS = copy_regmap()
MEMORY = 16384  # bytes of the board's memory in every test
SRC, DST = 1024, 8192

#: (R, W) of the copy tops: R < W packs reads into a write, R > W cuts a read
#: into writes, and 16/64 bytes are VlWide ports in Verilator (over 64 bits).
WIDTHS = [(2, 4), (8, 4), (16, 16), (64, 64)]

_VERILOG = {}


def copy_board(r, w, **kw):
    if (r, w) not in _VERILOG:
        _VERILOG[r, w] = memory_copy_verilog(r, w)
    return SimulatedBoard(_VERILOG[r, w], **kw)


def random_memory(seed):
    return np.random.default_rng(seed).integers(0, 256, MEMORY, dtype=np.uint8)


def start_copy(board, src, dst, count, keep=0, stall=False):
    board.mmio_write(REGS.address("src"), src)
    board.mmio_write(REGS.address("dst"), dst)
    board.mmio_write(REGS.address("count"), count)
    board.mmio_write(REGS.address("keep"), keep)
    board.mmio_write(REGS.address("stall"), int(stall))
    board.mmio_write(REGS.address("control"), REGS.encode("control", start=1))


def copy(board, src, dst, count, keep=0, stall=False, timeout=1e-2):
    start_copy(board, src, dst, count, keep, stall)
    assert board.wait_irq(timeout), "the copy did not finish"


def copied(mem, src, dst, nbytes):
    """``mem`` as the copy leaves it: ``nbytes`` from ``src`` at ``dst``, all else as it was."""
    want = mem.copy()
    want[dst:dst + nbytes] = mem[src:src + nbytes]
    return want


@pytest.fixture(scope="module", params=WIDTHS, ids=lambda rw: f"R{rw[0]}W{rw[1]}")
def widths(request):
    return request.param


@pytest.mark.parametrize("latency", [1, 2, 40])
@pytest.mark.parametrize("bandwidth", [0.5, 4, 8, 64])
def test_copy_is_exact_and_takes_the_cycles_bandwidth_and_latency_allow(widths, latency, bandwidth):
    r, w = widths
    nbytes = 2048
    n = nbytes // r
    with copy_board(r, w) as board:
        assert board.has_memory and (board.read_bytes, board.write_bytes) == (r, w)
        mem = random_memory(latency + int(bandwidth * 2))
        want = copied(mem, SRC, DST, nbytes)
        board.attach_memory(mem)
        board.set_memory_timing(latency=latency, bytes_per_cycle=bandwidth)
        board.reset_memory_stats()
        copy(board, SRC, DST, n)
        assert board.memory_error() is None
        assert_array_equal(mem, want)
        s = board.memory_stats()
        assert (s["reads"], s["writes"]) == (n, nbytes // w)
        assert s["bytes_read"] == s["bytes_written"] == nbytes
        assert s["response_wait_cycles"] == 0  # this top always takes its responses
        # Every byte moved takes a token of its channel; a bucket holds at most
        # `cap` when the copy starts and gains `bandwidth` per cycle.
        cap = max(2 * bandwidth, r, w)
        span = s["last_write_cycle"] - s["first_read_cycle"] + 1
        assert span >= (nbytes - cap) / bandwidth
        # The first write needs the first response, `latency` cycles after its read.
        assert s["first_write_cycle"] - s["first_read_cycle"] >= latency + 1
        # And no slower than the slowest channel, each at its bandwidth or one
        # request a cycle, plus: the latency once; one request's wait for its
        # tokens; and the copy machine's pipeline (FIFO, packing register). (With
        # one bucket for both channels the FIFO's drain through the write
        # channel alone added to this; with a bucket each it does not.)
        bound = max(nbytes / bandwidth, n, nbytes // w) + latency + max(r, w) / bandwidth + 4
        assert span <= bound, (span, bound)
        # With tokens for a read and a write every cycle, each on its channel, no
        # request ever waits; with too few for the requests the top could make,
        # some do.
        if bandwidth >= max(r, w):
            assert s["wait_cycles"] == 0
        if nbytes / bandwidth > 2 * max(n, nbytes // w):
            assert s["wait_cycles"] > 0


@pytest.mark.parametrize("latency", [1, 2, 40])
def test_responses_wait_for_ready(widths, latency):
    """The top takes responses in about half the cycles: each is held until taken."""
    r, w = widths
    nbytes = 4096
    with copy_board(r, w) as board:
        mem = random_memory(latency)
        want = copied(mem, SRC, DST, nbytes)
        board.attach_memory(mem)
        board.set_memory_timing(latency=latency, bytes_per_cycle=64)
        board.reset_memory_stats()
        copy(board, SRC, DST, nbytes // r, stall=True)
        assert board.memory_error() is None
        assert_array_equal(mem, want)
        s = board.memory_stats()
        assert s["response_wait_cycles"] > nbytes // r // 4


def test_strobes_leave_the_kept_bytes(widths):
    r, w = widths
    nbytes = 64 * max(r, w)
    keep = 0b1010_0110_0000_0000_0000_0000_1001_0101
    with copy_board(r, w) as board:
        mem = random_memory(3)
        want = copied(mem, SRC, DST, nbytes)
        kept = np.array([(keep >> (k % w % 32)) & 1 for k in range(nbytes)], bool)
        want[DST:DST + nbytes][kept] = mem[DST:DST + nbytes][kept]
        board.attach_memory(mem)
        board.reset_memory_stats()
        copy(board, SRC, DST, nbytes // r, keep=keep)
        assert board.memory_error() is None
        assert_array_equal(mem, want)
        assert board.memory_stats()["bytes_written"] == nbytes - kept.sum()


@pytest.mark.parametrize("what", ["read", "write"])
def test_access_past_the_end_is_an_error_and_touches_nothing(widths, what):
    r, w = widths
    nbytes = 8 * max(r, w)
    with copy_board(r, w) as board:
        mem = random_memory(4)
        want = mem.copy()
        board.attach_memory(mem)
        if what == "read":
            # The last two words' reads fall off the end and answer zeros.
            src = MEMORY - nbytes + 2 * r
            want[DST:DST + nbytes] = np.concatenate([mem[src:], np.zeros(2 * r, np.uint8)])
            copy(board, src, DST, nbytes // r)
            first, size = MEMORY, r
        else:
            dst = MEMORY - nbytes + 2 * w  # the last two writes are dropped
            want[dst:] = mem[SRC:SRC + nbytes - 2 * w]
            copy(board, SRC, dst, nbytes // r)
            first, size = MEMORY, w
        assert board.memory_error() == (f"memory {what} of {size} bytes at 0x{first:08x} "
                                        f"is outside the {MEMORY}-byte memory")
        assert_array_equal(mem, want)
        # Sticky: a later error does not replace the first.
        copy(board, SRC, 0xFFFF_FF00 // 64 * 64, 4 * w // r)
        assert f"at 0x{first:08x}" in board.memory_error()
        board.clear_memory_error()
        assert board.memory_error() is None
        copy(board, SRC, 0xFFFF_FFC0, 64 // r)  # the top of the 32-bit space: no wrap-around
        assert board.memory_error() == (f"memory write of {w} bytes at 0xffffffc0 "
                                        f"is outside the {MEMORY}-byte memory")
        assert_array_equal(mem, want)


def test_misaligned_addresses_are_errors():
    r, w = 2, 4
    with copy_board(r, w) as board:
        mem = random_memory(5)
        want = mem.copy()
        board.attach_memory(mem)
        copy(board, SRC + 1, DST, 8)
        assert board.memory_error() == f"memory read of 2 bytes at 0x{SRC + 1:08x} is not at a multiple of 2"
        want[DST:DST + 16] = 0  # misaligned reads answer zeros
        assert_array_equal(mem, want)
        board.clear_memory_error()
        copy(board, SRC, DST + 2, 8)
        assert board.memory_error() == f"memory write of 4 bytes at 0x{DST + 2:08x} is not at a multiple of 4"
        assert_array_equal(mem, want)  # misaligned writes are dropped
    with copy_board(16, 16) as board:
        board.attach_memory(mem)
        copy(board, SRC + 8, DST, 2)
        assert board.memory_error() == f"memory read of 16 bytes at 0x{SRC + 8:08x} is not at a multiple of 16"


def test_no_memory_attached_is_an_error():
    with copy_board(2, 4) as board:
        copy(board, 0, 64, 4)
        assert board.memory_error() == "memory read of 2 bytes at 0x00000000 with no memory attached"
        mem = random_memory(6)
        board.attach_memory(mem)
        board.attach_memory(None)  # detached again
        board.clear_memory_error()
        copy(board, 0, 64, 4)
        assert board.memory_error().endswith("with no memory attached")
        assert_array_equal(mem, random_memory(6))


def test_stats_irq_and_reset():
    r, w = 8, 4
    with copy_board(r, w, clock_hz=100e6) as board:
        mem = random_memory(7)
        board.attach_memory(mem)
        board.set_memory_timing(latency=40, bytes_per_cycle=4.0)
        assert board.memory_stats() == {"reads": 0, "writes": 0, "bytes_read": 0, "bytes_written": 0,
                                        "wait_cycles": 0, "first_read_cycle": None, "last_read_cycle": None,
                                        "first_write_cycle": None, "last_write_cycle": None,
                                        "response_wait_cycles": 0}
        before = board.cycles
        assert not board.wait_irq(1e-6)  # nothing started: irq low for the whole timeout
        assert board.cycles - before == 100
        # A reset in the middle of a copy drops the reads in flight: a copy
        # started afterwards gets its own responses, not the stale ones.
        start_copy(board, SRC, DST, 512)
        board.step(30)
        assert board.memory_stats()["reads"] > 0 and board.memory_stats()["writes"] == 0
        board.reset()
        board.reset_memory_stats()
        mem[DST:DST + 4096] = 0
        want = copied(mem, 4096, DST, 4096)
        copy(board, 4096, DST, 512)
        assert_array_equal(mem, want)  # memory stayed attached through the reset
        s = board.memory_stats()
        assert (s["reads"], s["writes"], s["bytes_read"], s["bytes_written"]) == (512, 1024, 4096, 4096)
        assert s["wait_cycles"] > 0  # an 8-byte read on a channel of 4 bytes a cycle
        before = board.cycles
        assert board.wait_irq(1e-6) and board.cycles == before  # irq stays high until the next start
        board.reset_memory_stats()
        assert board.memory_stats()["reads"] == 0 and board.memory_stats()["first_read_cycle"] is None


def test_memory_timing_and_buffer_are_checked():
    with copy_board(2, 4) as board:
        for latency in (0, -1, 1.5, True, "40"):
            with pytest.raises(BackendError, match=r"^memory latency must be a whole number of cycles"):
                board.set_memory_timing(latency=latency)
        for bandwidth in (0, -2.0, math.nan, math.inf, None):
            with pytest.raises(BackendError, match=r"^memory bandwidth must be a positive number"):
                board.set_memory_timing(bytes_per_cycle=bandwidth)
        frozen = np.zeros(64, np.uint8)
        frozen.setflags(write=False)
        for buf in (np.zeros(64, np.int8), np.zeros(128, np.uint8)[::2], b"\0" * 64, frozen):
            with pytest.raises(BackendError, match=r"^the board's memory must be a C-contiguous"):
                board.attach_memory(buf)


def test_top_without_memory_port_refuses_the_memory_api(small_engine_board):
    board = small_engine_board
    assert not board.has_memory
    calls = [lambda: board.attach_memory(np.zeros(64, np.uint8)), lambda: board.set_memory_timing(),
             board.memory_error, board.clear_memory_error, board.memory_stats,
             board.reset_memory_stats, lambda: board.wait_irq(1e-6)]
    for call in calls:
        with pytest.raises(BackendError, match=r"^this engine top has no memory port$"):
            call()


def test_part_of_the_memory_port_is_refused():
    v = memory_copy_verilog(2, 4)
    with pytest.raises(BackendError, match=r"^engine top 'top' has memory ports but not 'mem_wr__strb'$"):
        TopPorts(v.replace("mem_wr__strb", "mem_wr__mask"), "top")
    with pytest.raises(BackendError, match=r"^engine top port 'mem_rd__addr' is 16 bits wide, expected 32$"):
        TopPorts(v.replace("[31:0] mem_rd__addr", "[15:0] mem_rd__addr"), "top")
    with pytest.raises(BackendError, match=r"^engine top port 'mem_rd__ready' is an output, expected an input$"):
        TopPorts(v.replace("input mem_rd__ready;", "output mem_rd__ready;"), "top")
    with pytest.raises(BackendError, match=r"^engine top port 'mem_wr__data' is 48 bits wide, expected 8\*W"):
        TopPorts(memory_copy_verilog(2, 6), "top")
    with pytest.raises(BackendError, match=r"^engine top port 'mem_rdata__data' is 520 bits wide"):
        TopPorts(memory_copy_verilog(65, 65), "top")
    for r, w in [(1, 4), (12, 4), (64, 64)]:  # R any whole number of bytes up to 64
        ports = TopPorts(memory_copy_verilog(r, w), "top")
        assert (ports.has_memory, ports.read_bytes, ports.write_bytes) == (True, r, w)
