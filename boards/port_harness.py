"""Put any Amaranth component on a board with two pins, for place and route.

The engine has hundreds of port bits (AXI4-Lite, two AXI4-Streams); a board
has a few free pins, and an unconnected port lets synthesis delete the logic
behind it. :class:`PortHarness` keeps every port bit live and registered:

- all input bits of the component are the stages of one shift register fed
  from a single input pin;
- all output bits are loaded, every ``2**capture_log2`` cycles, into a second
  shift register that shifts out through a single output pin.

Every port is then a register-to-register path inside the engine clock domain,
so the Fmax and the resource use that nextpnr reports are those of the
component itself (plus one flip-flop per port bit).

This is a measurement harness, not a host link: a bitstream built with it
loads and runs, but nothing useful can be said to the engine through it. On
the open boards the host link is a UART bridge to the engine's registers and
streams (issue 5, a later step); it replaces this harness and uses the same
two pins (the board's UART ``rx`` and ``tx``).
"""

from amaranth.hdl import Cat, Elaboratable, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import Flow

__all__ = ["PortHarness", "port_bits"]


def port_bits(component):
    """Input and output port values of ``component``, in signature order.

    Returns
    -------
    (list of (str, Value), list of (str, Value))
        ``(inputs, outputs)`` as ``(dotted path, value)`` pairs.
    """
    if not isinstance(component, wiring.Component):
        raise TypeError(f"Component must be an amaranth.lib.wiring.Component, "
                        f"not {component!r}")
    inputs, outputs = [], []
    for path, member, value in component.signature.flatten(component):
        name = ".".join(str(p) for p in path)
        (inputs if member.flow == Flow.In else outputs).append((name, value))
    return inputs, outputs


class PortHarness(Elaboratable):
    """Drive a component's inputs from one pin and observe its outputs on another.

    Parameters
    ----------
    component : wiring.Component
        The design to place and route (clocked by the ``sync`` domain).
    capture_log2 : int
        Outputs are sampled every ``2**capture_log2`` cycles.

    Members
    -------
    serial_in : Signal(1)
        Connect to an input pin.
    serial_out : Signal(1)
        Connect to an output pin.

    Raises
    ------
    TypeError
        If ``component`` is not a wiring.Component or has no output port.
    """

    def __init__(self, component, *, capture_log2=8):
        inputs, outputs = port_bits(component)
        if not outputs:
            raise TypeError(f"Component {component!r} has no output port; nothing of it "
                            f"would survive synthesis")
        if isinstance(capture_log2, bool) or not isinstance(capture_log2, int) \
                or not 1 <= capture_log2 <= 24:
            raise TypeError(f"Capture interval must be an integer between 1 and 24, "
                            f"not {capture_log2!r}")
        self.component = component
        self.capture_log2 = capture_log2
        self.inputs, self.outputs = inputs, outputs
        self.serial_in = Signal()
        self.serial_out = Signal()

    @property
    def input_bits(self):
        return sum(len(v) for _, v in self.inputs)

    @property
    def output_bits(self):
        return sum(len(v) for _, v in self.outputs)

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = self.component

        if self.inputs:
            chain = Signal(self.input_bits)
            m.d.sync += chain.eq(Cat(self.serial_in, chain[:-1]))
            offset = 0
            for _, value in self.inputs:
                m.d.comb += value.eq(chain[offset:offset + len(value)])
                offset += len(value)

        observed = Cat(*(value for _, value in self.outputs))
        capture = Signal(self.capture_log2)
        m.d.sync += capture.eq(capture + 1)
        shift = Signal(len(observed))
        with m.If(capture == 0):
            m.d.sync += shift.eq(observed)
        with m.Else():
            m.d.sync += shift.eq(shift >> 1)
        m.d.comb += self.serial_out.eq(shift[0])
        return m
