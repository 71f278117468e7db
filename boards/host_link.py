"""What connects a host to the engine in an open-board bitstream.

Open boards (ECP5, iCE40) have no CPU beside the FPGA, so their bitstream holds
the engine behind a bridge from the board's host link
(:class:`fpgacnn.hdl.link.uart_top.UartEngineTop` for ``host_link = "uart"``,
protocol in docs/host_link.md). :func:`host_link_top` picks that top for a
board and :func:`uart_clocks_per_bit` the UART divisor for the engine clock.
"""

from dataclasses import dataclass

from .board import BoardError, require_board

__all__ = ["HostLinkTop", "MAX_BAUD_ERROR", "uart_clocks_per_bit", "host_link_top"]

#: Largest relative baud-rate error accepted. A UART receiver samples mid-bit, so
#: both ends together may drift by under half a bit over the 10 bits of a
#: frame (5%); the host's converter has its own error, hence half of that.
MAX_BAUD_ERROR = 0.02

#: The bridge samples a bit in its middle and rejects glitches shorter than half
#: a bit: it needs a few clocks per bit.
MIN_CLOCKS_PER_BIT = 4


def uart_clocks_per_bit(clock_hz, baud):
    """The integer UART divisor for ``baud`` at ``clock_hz``.

    Raises
    ------
    BoardError
        If the nearest divisor is below :data:`MIN_CLOCKS_PER_BIT` or gives a
        rate more than :data:`MAX_BAUD_ERROR` off ``baud`` (the message gives
        the rate it would make).
    """
    if not clock_hz > 0 or not baud > 0:
        raise BoardError(f"UART divisor: clock ({clock_hz!r} Hz) and baud ({baud!r}) must be "
                         f"positive")
    divisor = max(1, round(clock_hz / baud))
    actual = clock_hz / divisor
    if divisor < MIN_CLOCKS_PER_BIT:
        raise BoardError(f"UART at {baud:,} baud from a {clock_hz / 1e6:g} MHz clock: "
                         f"{divisor} clocks per bit, the bridge needs at least "
                         f"{MIN_CLOCKS_PER_BIT}; lower uart_baud")
    error = abs(actual - baud) / baud
    if error > MAX_BAUD_ERROR:
        raise BoardError(f"UART at {baud:,} baud from a {clock_hz / 1e6:g} MHz clock: the "
                         f"nearest divisor {divisor} makes {actual:,.0f} baud, "
                         f"{error:.1%} off (limit {MAX_BAUD_ERROR:.0%}); choose a baud rate "
                         f"that divides the engine clock")
    return divisor


@dataclass(frozen=True)
class HostLinkTop:
    """The top a board's bitstream is built from.

    Attributes
    ----------
    component : amaranth.lib.wiring.Component
        ``UartEngineTop`` (ports ``uart_rx``, ``uart_tx``) for UART boards.
    report : dict
        What ``report.json`` records about the link (kind, baud, divisor).
    """

    component: object
    report: dict


def host_link_top(board, config, clock_mhz):
    """The engine behind the board's host link, clocked at ``clock_mhz``.

    Raises
    ------
    BoardError
        If the board's host link has no bridge in gateware yet (``spi``,
        ``usb-acm``) or the UART rate cannot be made from the clock.
    """
    require_board(board)
    if board.host_link != "uart":
        raise BoardError(f"{board.name}: host link {board.host_link!r} has no bridge in "
                         f"gateware yet (only 'uart' does; docs/host_link.md)")
    from ..hdl.link.uart_top import UartEngineTop
    divisor = uart_clocks_per_bit(clock_mhz * 1e6, board.uart_baud)
    top = UartEngineTop(config, clocks_per_bit=divisor)
    return HostLinkTop(top, {"kind": "uart", "baud": board.uart_baud,
                             "clocks_per_bit": divisor,
                             "actual_baud": round(clock_mhz * 1e6 / divisor)})
