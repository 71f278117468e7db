"""ConvEngine: the generated top (AXI4-Lite CSRs + ConvCore + AXI4-Stream in/out).

This is the module ``fpgacnn generate`` turns into Verilog and the one the
cocotb testbenches and the board flows instantiate. See docs/engine.md for
the stream formats and :mod:`fpgacnn.core.regmap` for the registers.
"""

from amaranth.hdl import (ClockDomain, ClockSignal, DomainRenamer, Module, ResetInserter,
                          ResetSignal, Signal)
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .bus.axi_lite import AXI4LiteSignature, AXI4LiteSlave
from .bus.axi_stream import AXI4StreamSignature
from ..core.config import require_config
from .datapath.conv_core import ConvCore
from .bus.csr_bank import CSRBank
from ..core.descriptor import DESCRIPTOR_FIELDS, descriptor_layout
from .tech.dsp import is_ecp5
from .tech.global_net import global_buffer
from ..core.regmap import ADDR_WIDTH, build_regmap

__all__ = ["ConvEngine"]

_COUNTER_MAX = (1 << 32) - 1


class ConvEngine(wiring.Component):
    """The convolution engine with AXI interfaces, as a PYNQ AXI DMA expects.

    A layer run: the host writes the ``desc_*`` registers, writes
    ``control.start``, streams the layer's input on ``s_axis`` and receives
    its output on ``m_axis`` (``tlast`` on the final beat), then sees
    ``status.done``. The descriptor is latched at ``start``, so the host may
    write the next layer's descriptor while a run is in progress.

    Parameters
    ----------
    config : EngineConfig

    Members
    -------
    s_axil : In(AXI4LiteSignature(ADDR_WIDTH, 32))
        Control and status registers (:func:`fpgacnn.core.regmap.build_regmap`).
    s_axis : In(AXI4StreamSignature(config.stream_width))
        Layer input (parameters, weights, pixels); ``tlast`` is ignored, the
        descriptor says how much input a run takes.
    m_axis : Out(AXI4StreamSignature(config.stream_width))
        Layer output; ``tlast`` marks the final beat of a run.

    Notes
    -----
    ``control.soft_reset`` returns the core and the run state (``status``,
    counters) to idle in one cycle; the descriptor registers keep their
    values. The clock domain is ``sync`` with an active-high reset ``rst``
    (board wrappers invert ``aresetn``).

    Raises
    ------
    TypeError
        If ``config`` is not an EngineConfig.
    """

    def __init__(self, config):
        require_config(config)
        self._config = config
        self._regmap = build_regmap(config)
        super().__init__({
            "s_axil": In(AXI4LiteSignature(ADDR_WIDTH, 32)),
            "s_axis": In(AXI4StreamSignature(config.stream_width)),
            "m_axis": Out(AXI4StreamSignature(config.stream_width)),
        })

    @property
    def config(self):
        return self._config

    @property
    def regmap(self):
        """The :class:`~fpgacnn.core.regmap.RegisterMap` this engine decodes."""
        return self._regmap

    def elaborate(self, platform):
        m = Module()

        m.submodules.axil = axil = AXI4LiteSlave(addr_width=ADDR_WIDTH)
        m.submodules.csr = csr = CSRBank(self._regmap)
        wiring.connect(m, wiring.flipped(self.s_axil), axil.axi)
        wiring.connect(m, axil.bus, csr.bus)

        # The core's reset is a register: the domain's reset (its init value
        # holds through it, and a cycle after) or the soft reset a cycle
        # after its write (AXI4-Lite writes are further apart than that). It
        # resets most of the core's flip-flops: the register write decode in
        # front of a net that size would be among the longest paths. Run
        # control lives in its own module so that the soft reset clears it
        # together with the core (the CSR bank keeps the descriptor).
        core = ConvCore(self._config)
        run = Module()
        core_reset = Signal(init=1)
        m.d.sync += core_reset.eq(csr.control.soft_reset)
        if is_ecp5(platform):
            # On a global network (see hdl/tech/global_net.py), as the only reset
            # of the core: with the domain's too, the two would meet in a LUT
            # in front of each flip-flop's one LSR pin, back in the fabric. So
            # the core runs in a domain of its own on the same clock, in the
            # board's build only (a clock assigned from another races in an
            # event-driven simulator); `core_reset` covers the domain's reset.
            m.domains.conv_core = ClockDomain("conv_core", local=True)
            m.d.comb += [
                ClockSignal("conv_core").eq(ClockSignal("sync")),
                ResetSignal("conv_core").eq(
                    global_buffer(m, platform, core_reset, "core_reset_global")),
            ]
            in_core_reset = DomainRenamer("conv_core")
        else:
            in_core_reset = ResetInserter(core_reset)
        m.submodules.core = in_core_reset(core)
        m.submodules.run = in_core_reset(run)

        desc = Signal(descriptor_layout())
        start_q = Signal()
        # The descriptor is latched in the cycle start is accepted and the
        # core is started the cycle after, so it sees the new descriptor.
        accept = csr.control.start & ~core.busy & ~start_q
        run.d.sync += start_q.eq(accept)
        with run.If(accept):
            for f in DESCRIPTOR_FIELDS:
                run.d.sync += desc[f.name].eq(getattr(csr, f"desc_{f.name}").value)
        m.d.comb += [core.start.eq(start_q), core.desc.eq(desc)]

        done = Signal()
        with run.If(accept):
            run.d.sync += done.eq(0)
        with run.Elif(core.done):
            run.d.sync += done.eq(1)
        m.d.comb += [
            csr.status.busy.eq(core.busy | start_q),
            csr.status.done.eq(done),
        ]

        for name, event in (("perf_busy_cycles", core.busy),
                            ("perf_stall_in_cycles", core.stall_in),
                            ("perf_stall_out_cycles", core.stall_out)):
            count = Signal(32, name=name)
            # Saturating at _COUNTER_MAX: the increment's carry out says
            # count == _COUNTER_MAX, for free from the adder's carry chain (a
            # compare would take a 32-input AND).
            inc = Signal(33, name=f"{name}_inc")
            run.d.comb += inc.eq(count + 1)
            with run.If(accept):
                run.d.sync += count.eq(0)
            with run.Elif(event & ~inc[32]):
                run.d.sync += count.eq(inc[:32])
            m.d.comb += getattr(csr, name).value.eq(count)

        # Streams: the core's stream ports are AXI4-Stream with other names.
        m.d.comb += [
            core.i_stream.payload.eq(self.s_axis.tdata),
            core.i_stream.valid.eq(self.s_axis.tvalid),
            self.s_axis.tready.eq(core.i_stream.ready),
            self.m_axis.tdata.eq(core.o_stream.payload.data),
            self.m_axis.tlast.eq(core.o_stream.payload.last),
            self.m_axis.tvalid.eq(core.o_stream.valid),
            core.o_stream.ready.eq(self.m_axis.tready),
        ]
        return m
