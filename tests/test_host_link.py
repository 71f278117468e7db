"""The open boards' host link: UART divisor and the top a bitstream is built from."""

import pytest

from fpgacnn.boards.board import BoardError, load_board
from fpgacnn.boards.host_link import host_link_top, uart_clocks_per_bit
from fpgacnn.core.config import EngineConfig


@pytest.mark.parametrize("clock_hz, baud, divisor", [
    (24e6, 3_000_000, 8),        # iCEBreaker: exact
    (100e6, 3_000_000, 33),      # ULX3S at 100 MHz: 3.03 Mbaud, 1.0% off
    (25e6, 115_200, 217),
    (12e6, 3_000_000, 4),        # the fewest clocks per bit the bridge takes
])
def test_divisor(clock_hz, baud, divisor):
    assert uart_clocks_per_bit(clock_hz, baud) == divisor


def test_divisor_too_far_off_names_rates():
    # 50 MHz / 3 Mbaud = 16.67: 17 makes 2.94 Mbaud (2.0% off) -- accepted;
    # 60 MHz / 7 Mbaud = 8.57: 9 makes 6.67 Mbaud, 4.8% off.
    assert uart_clocks_per_bit(50e6, 3_000_000) == 17
    with pytest.raises(BoardError, match=r"^UART at 7,000,000 baud from a 60 MHz clock: the "
                                         r"nearest divisor 9 makes 6,666,667 baud, 4\.8% off "
                                         r"\(limit 2%\)"):
        uart_clocks_per_bit(60e6, 7_000_000)


def test_divisor_too_small():
    with pytest.raises(BoardError, match=r"3 clocks per bit, the bridge needs at least 4"):
        uart_clocks_per_bit(9e6, 3_000_000)


def test_uart_board_gets_the_bridge_top():
    config = EngineConfig(pin=1, pout=1, kmax=3, max_width=16, max_channels=8,
                          max_out_channels=8, stream_width=32)
    link = host_link_top(load_board("icebreaker"), config, 24.0)
    assert type(link.component).__name__ == "UartEngineTop"
    assert set(link.component.signature.members) == {"uart_rx", "uart_tx"}
    assert link.report == {"kind": "uart", "baud": 3_000_000, "clocks_per_bit": 8,
                           "actual_baud": 3_000_000}


def test_board_without_bridge_is_refused():
    with pytest.raises(BoardError, match=r"^orangecrab-25f: host link 'usb-acm' has no bridge "
                                         r"in gateware yet"):
        host_link_top(load_board("orangecrab-25f"), EngineConfig(), 48.0)
