"""High-fanout control nets (resets) on the FPGA's global clock network.

A reset reaches most flip-flops of the engine. Routed through the fabric
from one flip-flop to thousands of ``LSR`` pins across an ECP5-85F, its far
ends arrive 5-8 ns after the clock edge (nextpnr's estimate after
placement), and yosys merges it with the counters' own synchronous clears
in front of ``LSR``: the longest paths of the 100 MHz default engine. On the
ECP5 a ``DCCA`` buffer puts the net on a primary clock network, which
reaches every slice with the clock's own skew (nextpnr promotes a ``DCCA``
output to a global and routes its ``LSR`` and LUT loads from it).
"""

from amaranth.hdl import Const, Instance, Signal

from .dsp import is_ecp5


def global_buffer(m, platform, value, name):
    """``value`` (1 bit) on a global network where ``platform`` has one, else ``value``.

    Parameters
    ----------
    m : amaranth.hdl.Module
        Module the buffer is added to (as submodule ``name``).
    platform : amaranth.build.Platform or None
        ``None`` (simulation, Verilog for Verilator) and non-ECP5 platforms
        get the net unchanged.
    value : amaranth value
        A 1-bit signal, driven by a flip-flop (a global adds no logic).
    name : str
        Name of the buffer and its output net.

    Returns
    -------
    amaranth value
        The buffered net: the same value, no cycle later.
    """
    if not is_ecp5(platform):
        return value
    out = Signal(name=name)
    m.submodules[name] = Instance("DCCA", i_CLKI=value, i_CE=Const(1), o_CLKO=out)
    return out
