"""ConvEngine: the generated top (AXI4-Lite CSRs + ConvCore + AXI4-Stream in/out).

This is the module ``fpgacnn generate`` turns into Verilog and the one the
cocotb testbenches and the board flows instantiate. See docs/engine.md for
the stream formats and :mod:`fpgacnn.core.regmap` for the registers.
"""

from amaranth.hdl import (ClockDomain, ClockSignal, Const, DomainRenamer, Module, ResetInserter,
                          ResetSignal, Signal)
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .bus.axi_lite import AXI4LiteSignature, AXI4LiteSlave, RegisterBusSignature
from .bus.axi_stream import AXI4StreamSignature
from ..core.config import require_config
from ..core.contract import engine_contract
from .datapath.conv_core import ConvCore, check_lent_lanes
from .datapath.requantizer import check_whole_multiplier
from .datapath.depthwise_unit import depthwise_lanes_signature
from .datapath.descriptor_check import DescriptorCheck
from .bus.csr_bank import CSRBank
from ..core.descriptor import descriptor_layout
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
    ``status.done``. A descriptor that breaks the engine contract
    (:func:`fpgacnn.core.contract.descriptor_violations`) is refused: the
    start sets ``status.error`` instead, ``status.error_fields`` names the fields,
    and nothing runs (:class:`~fpgacnn.hdl.datapath.descriptor_check.DescriptorCheck`).
    The descriptor registers hold still while ``status.busy``: a write to
    one then is ignored and refuses the next start.

    Parameters
    ----------
    config : EngineConfig
    register_bus : bool
        Take the registers on a register bus (``bus``) instead of AXI4-Lite.
    lent_lanes : bool
        The core's ``lent_lanes`` (:class:`~fpgacnn.hdl.datapath.conv_core.ConvCore`):
        the fused block's depthwise half requantizes on lanes outside the engine
        (``dw_lanes``), the program engine's vector unit's.
    whole_multiplier : bool
        The core's ``whole_multiplier``
        (:class:`~fpgacnn.hdl.datapath.conv_core.ConvCore`): its requantizers'
        products as 25 x 18 ones, two DSP48s a lane in place of four.

    Members
    -------
    s_axil : In(AXI4LiteSignature(ADDR_WIDTH, 32))
        Control and status registers (:func:`fpgacnn.core.regmap.build_regmap`).
    bus : In(RegisterBusSignature(ADDR_WIDTH - 2, 32))
        With ``register_bus``, in place of ``s_axil``: the same registers on
        the one-cycle register bus, for a top that holds the engine beside
        its own initiator (the program sequencer,
        :class:`~fpgacnn.hdl.program.program_engine.ProgramEngine`).
    s_axis : In(AXI4StreamSignature(config.stream_width))
        Layer input (parameters, weights, pixels); ``tlast`` is ignored, the
        descriptor says how much input a run takes.
    m_axis : Out(AXI4StreamSignature(config.stream_width))
        Layer output; ``tlast`` marks the final beat of a run.
    dw_lanes : Out(depthwise_lanes_signature(config))
        With ``lent_lanes`` only: the core's.

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

    def __init__(self, config, *, register_bus=False, lent_lanes=False, whole_multiplier=False):
        require_config(config)
        if not isinstance(register_bus, bool):
            raise TypeError(f"register_bus must be True or False, not {register_bus!r}")
        check_lent_lanes(config, lent_lanes)
        check_whole_multiplier(whole_multiplier)
        self._config = config
        self._lent_lanes = lent_lanes
        self._whole_multiplier = whole_multiplier
        self._regmap = build_regmap(config)
        self._register_bus = register_bus
        control = (RegisterBusSignature(ADDR_WIDTH - 2, 32) if register_bus
                   else AXI4LiteSignature(ADDR_WIDTH, 32))
        super().__init__({
            "bus" if register_bus else "s_axil": In(control),
            "s_axis": In(AXI4StreamSignature(config.stream_width)),
            "m_axis": Out(AXI4StreamSignature(config.stream_width)),
            **({"dw_lanes": Out(depthwise_lanes_signature(config))} if lent_lanes else {}),
        })

    @property
    def config(self):
        return self._config

    @property
    def regmap(self):
        """The :class:`~fpgacnn.core.regmap.RegisterMap` this engine decodes."""
        return self._regmap

    def _in_desc_block(self, addr):
        """``addr`` (a word address) is a descriptor register's: a compare of its top bits.

        The register map starts each group on a 64-byte boundary, so the
        aligned block of words around the descriptor holds nothing else.
        """
        words = [r.address >> 2 for r in self._regmap.group("desc")]
        bits = (min(words) ^ max(words)).bit_length()
        block = min(words) >> bits
        others = [r.name for r in self._regmap
                  if r.group != "desc" and r.address >> 2 >> bits == block]
        if others:
            raise ValueError(f"registers {others} share the descriptor's address block")
        return addr[bits:] == block

    def _desc_register(self, csr, field):
        """The value of descriptor register ``field``: its flip-flops, or its constant
        (the compact arrangement's resident-weights fields, register map 2.0)."""
        reg = self._regmap[f"desc_{field.name}"]
        if reg.access == "const":
            return Const(field.default, field.width)
        return getattr(csr, f"desc_{field.name}").value

    def elaborate(self, platform):
        m = Module()

        if self._register_bus:
            host = self.bus
        else:
            m.submodules.axil = axil = AXI4LiteSlave(addr_width=ADDR_WIDTH)
            wiring.connect(m, wiring.flipped(self.s_axil), axil.axi)
            host = axil.bus
        m.submodules.csr = csr = CSRBank(self._regmap)
        # The register bus, but for its write strobe: descriptor writes are
        # ignored while busy (below).
        for name, member in RegisterBusSignature(ADDR_WIDTH - 2, 32).members.items():
            if name != "w_stb":
                ours, theirs = getattr(host, name), getattr(csr.bus, name)
                m.d.comb += (theirs.eq(ours) if member.flow == Out else ours.eq(theirs))

        # The core's reset is a register: the domain's reset (its init value
        # holds through it, and a cycle after) or the soft reset a cycle
        # after its write (AXI4-Lite writes are further apart than that). It
        # resets most of the core's flip-flops: the register write decode in
        # front of a net that size would be among the longest paths. Run
        # control lives in its own module so that the soft reset clears it
        # together with the core (the CSR bank keeps the descriptor).
        core = ConvCore(self._config, lent_lanes=self._lent_lanes,
                        whole_multiplier=self._whole_multiplier)
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

        # The descriptor check reads the registers continuously, full width
        # (before the core narrows them). A start waits while the check is
        # not ready (`pending`: after each descriptor write until its result
        # has passed the check's stages and loops, longer after one of
        # ci_tiles) and is refused if the descriptor breaks the contract: the
        # core never sees that descriptor.
        m.submodules.check = check = DescriptorCheck(self._config)
        # (the engine's fields: with fused_blocks the fused block's registers too)
        fields = engine_contract(self._config).descriptor_fields
        for f in fields:
            m.d.comb += check.desc[f.name].eq(self._desc_register(csr, f))
        desc_write = Signal()
        m.d.comb += [
            desc_write.eq(host.w_stb & self._in_desc_block(host.w_addr)),
            check.written.eq(desc_write & csr.bus.w_stb),
            check.ci_tiles_written.eq(
                csr.bus.w_stb & (host.w_addr == self._regmap["desc_ci_tiles"].address >> 2)),
        ]

        start_q = Signal()
        pending = Signal()
        busy = Signal()
        stale = Signal()
        m.d.comb += busy.eq(core.busy | start_q | pending)
        # The descriptor registers do not change while busy: a write is
        # ignored, and refuses the next start (`stale`) rather than let it
        # run a descriptor the host did not mean.
        m.d.comb += csr.bus.w_stb.eq(host.w_stb & ~(desc_write & busy))

        want = (csr.control.start & ~core.busy & ~start_q) | pending
        # `check.ready`: the check's result describes the registers as they
        # are (its settle counter, restarted by every descriptor write). A
        # start is decided only then; until then it is held in `pending`.
        ready = check.ready
        decide = want & ready
        refuse = check.error | stale
        accept = decide & ~refuse
        run.d.sync += [start_q.eq(accept), pending.eq(want & ~ready)]
        if self._config.deep_pipeline:
            # A copy of the descriptor beside the core, for the clock: the core
            # starts the cycle after `accept`, so it sees the new descriptor.
            desc = Signal(descriptor_layout(fields))
            with run.If(accept):
                for f in fields:
                    run.d.sync += desc[f.name].eq(self._desc_register(csr, f))
        else:
            # The compact arrangement reads the registers in place (a copy
            # takes ~160 logic cells, what the iCE40 UP5K lacks): they hold
            # still while busy.
            desc = check.desc
        m.d.comb += [core.start.eq(start_q), core.desc.eq(desc)]

        done = Signal()
        error = Signal()
        with run.If(want):
            run.d.sync += [done.eq(0), error.eq(decide & refuse)]
            with run.If(decide):
                run.d.sync += stale.eq(0)
        with run.Elif(core.done):
            run.d.sync += done.eq(1)
        with run.If(desc_write & busy):
            run.d.sync += stale.eq(1)
        m.d.comb += [
            csr.status.busy.eq(busy),
            csr.status.done.eq(done),
            csr.status.error.eq(error),
            csr.status.pending.eq(pending),
            csr.status.error_fields.eq(check.fields & error.replicate(len(check.fields))),
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
        if self._lent_lanes:
            wiring.connect(m, core.dw_lanes, wiring.flipped(self.dw_lanes))
        return m
