"""The simulated board's harness (C++ AXI-Lite master + DMA model) on a small AXI top."""

import gc
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from numpy.testing import assert_array_equal

from fpgacnn.core.errors import BackendError
from fpgacnn.sim.native_board import SimulatedBoard, TopPorts, build_board_library

from axi_loopback_top import loopback_verilog

CLOCK_HZ = 100e6


@pytest.fixture(scope="module", params=[64, 128])
def verilog(request):
    return request.param, loopback_verilog(request.param)


def expected_stream(data, key, beat_bytes):
    padded = np.zeros(-(-len(data) // beat_bytes) * beat_bytes, np.uint8)
    padded[:len(data)] = data
    return padded ^ np.frombuffer(np.uint32(key).tobytes() * (len(padded) // 4), np.uint8)


def test_mmio_write_then_read(verilog):
    with SimulatedBoard(verilog[1]) as board:
        board.mmio_write(0x0, 0xDEADBEEF)
        assert board.mmio_read(0x0) == 0xDEADBEEF


def test_mmio_error_response_is_reported(verilog):
    with SimulatedBoard(verilog[1]) as board:
        with pytest.raises(BackendError, match=r"^MMIO write to 0x0008 answered with error response 2$"):
            board.mmio_write(0x8, 1)


@pytest.mark.parametrize("pauses", [(0, 0), (500, 0), (0, 500), (300, 700)])
def test_dma_round_trip_under_backpressure(verilog, pauses):
    width, v = verilog
    beat = width // 8
    rng = np.random.default_rng(sum(pauses) + width)
    with SimulatedBoard(v) as board:
        board.mmio_write(0x0, 0x5A5AA5A5)
        board.set_backpressure(*pauses, seed=11)
        for n in (1, beat - 1, beat, 37 * beat + 3, 4096):
            data = rng.integers(0, 256, n, dtype=np.uint8)
            out = board.allocate(len(data) + 2 * beat)  # room to spare: TLAST must end it
            board.dma_recv(out)
            board.dma_send(data)
            assert board.dma_wait(timeout=1.0)
            want = expected_stream(data, 0x5A5AA5A5, beat)
            assert board.received == len(want)
            assert_array_equal(out[:len(want)], want)
        assert board.mmio_read(0x4) > 0


def test_streams_run_at_one_beat_per_cycle_without_pauses(verilog):
    width, v = verilog
    beats = 10_000
    with SimulatedBoard(v) as board:
        start = board.cycles
        out = board.allocate(beats * width // 8)
        board.dma_recv(out)
        board.dma_send(np.zeros(beats * width // 8, np.uint8))
        assert board.dma_wait(timeout=1.0)
        assert board.cycles - start <= beats + 3


def test_dma_timeout_then_next_transfer_works(verilog):
    width, v = verilog
    with SimulatedBoard(v, clock_hz=CLOCK_HZ) as board:
        out = board.allocate(64)
        board.dma_recv(out)  # nothing is sent: the receive cannot finish
        start = board.cycles
        assert not board.dma_wait(timeout=1e-5)
        assert board.cycles - start == int(1e-5 * CLOCK_HZ)
        with pytest.raises(BackendError, match=r"^DMA receive started while the previous one"):
            board.dma_recv(out)
        board.dma_abort()
        data = np.arange(64, dtype=np.uint8)
        board.dma_recv(out)
        board.dma_send(data)
        assert board.dma_wait(timeout=1e-3)
        assert_array_equal(out, expected_stream(data, 0, width // 8))


def test_vcd_waveform_written_on_request(tmp_path):
    waves = tmp_path / "loopback.vcd"
    with SimulatedBoard(loopback_verilog(64), waves=waves) as board:
        board.mmio_write(0x0, 0x1234)
        board.step(10)
    text = waves.read_text()
    assert "s_axil__wdata" in text and f"b{0x1234:032b}" in text  # 0x1234 on the write bus


def test_waveform_name_must_say_its_format(tmp_path):
    with pytest.raises(BackendError, match=r"^waveform file '.*waves\.txt' must end in \.fst or \.vcd$"):
        SimulatedBoard(loopback_verilog(64), waves=tmp_path / "waves.txt")


def test_second_build_comes_from_the_cache(tmp_path):
    # Two builders at once (as two pytest-xdist workers): the build lock lets one
    # build and the other wait and find it; a later call finds it too.
    v = loopback_verilog(64)
    messages = [[], []]
    with ThreadPoolExecutor(2) as pool:
        libs = list(pool.map(lambda log: build_board_library(v, cache_dir=tmp_path,
                                                             progress=log.append), messages))
    builds = [log for log in messages if log]
    assert libs[0] == libs[1] and len(builds) == 1, messages
    later = []
    assert build_board_library(v, cache_dir=tmp_path, progress=later.append) == libs[0]
    assert later == []


def test_missing_port_is_named():
    v = loopback_verilog(64).replace("m_axis__tlast", "m_axis__tuser")
    with pytest.raises(BackendError, match=r"^engine top 'top' has no port 'm_axis__tlast'"):
        TopPorts(v, "top")


def test_many_boards_do_not_leak_file_descriptors():
    v = loopback_verilog(64)
    fds = len(os.listdir("/proc/self/fd"))
    for _ in range(200):
        with SimulatedBoard(v) as board:
            out = board.allocate(8)
            board.dma_recv(out)
            board.dma_send(np.ones(8, np.uint8))
            assert board.dma_wait(timeout=1e-4)
    gc.collect()
    assert len(os.listdir("/proc/self/fd")) <= fds + 2
