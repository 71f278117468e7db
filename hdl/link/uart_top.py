"""UartEngineTop: the engine behind the UART bridge, with two serial pins.

The top of the open boards' bitstreams (ECP5, iCE40) and of the Verilator
simulation of the serial link: :class:`~fpgacnn.hdl.engine.ConvEngine`
reached only through :class:`~fpgacnn.hdl.link.host_bridge.HostBridge`. As
Verilog (:func:`fpgacnn.hdl.verilog.uart_top_verilog`) its ports are
``clk``, ``rst``, ``uart_rx`` and ``uart_tx``.
"""

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ...core.config import require_config
from ..engine import ConvEngine
from .host_bridge import DEFAULT_FIFO_DEPTH, HostBridge

__all__ = ["UartEngineTop"]


class UartEngineTop(wiring.Component):
    """:class:`~fpgacnn.hdl.engine.ConvEngine` behind a :class:`~fpgacnn.hdl.link.host_bridge.HostBridge`.

    Parameters
    ----------
    config : EngineConfig
    clocks_per_bit : int
        UART bit time in engine clocks (at least 4).
    fifo_depth : int
        The bridge's input FIFO depth in beats.

    Members
    -------
    uart_rx : In(1)
        From the host (the USB-UART's TXD), idle high.
    uart_tx : Out(1)
        To the host (the USB-UART's RXD), idle high.

    Notes
    -----
    One clock domain, ``sync``, with an active-high reset ``rst`` that
    resets bridge and engine together (the board holds it until the PLL
    locks). The host resets the engine alone with ``control.soft_reset``.

    Raises
    ------
    TypeError, ValueError
        As :class:`~fpgacnn.hdl.link.host_bridge.HostBridge`.
    """

    def __init__(self, config, *, clocks_per_bit, fifo_depth=DEFAULT_FIFO_DEPTH):
        require_config(config)
        # Built here, not in elaborate(), so that bad parameters fail at once.
        self._bridge = HostBridge(config, clocks_per_bit=clocks_per_bit, fifo_depth=fifo_depth)
        self._engine = ConvEngine(config)
        super().__init__({
            "uart_rx": In(1, init=1),
            "uart_tx": Out(1, init=1),
        })

    @property
    def bridge(self):
        return self._bridge

    @property
    def engine(self):
        return self._engine

    @property
    def config(self):
        return self._engine.config

    @property
    def regmap(self):
        return self._engine.regmap

    def elaborate(self, platform):
        m = Module()
        m.submodules.bridge = bridge = self._bridge
        m.submodules.engine = engine = self._engine
        wiring.connect(m, bridge.m_axil, engine.s_axil)
        wiring.connect(m, bridge.m_axis, engine.s_axis)
        wiring.connect(m, engine.m_axis, bridge.s_axis)
        m.d.comb += [bridge.uart_rx.eq(self.uart_rx), self.uart_tx.eq(bridge.uart_tx)]
        return m
