"""AXI4-Lite slave + register file in the Amaranth simulator.

A small manager model drives the five channels cycle by cycle, with AW and
W in either order or together and with B/R back-pressure.
"""

import gc
import random
import warnings

import pytest
from amaranth.hdl import Module, UnusedElaboratable
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from fpgacnn.hdl.bus.axi_lite import AXI4LiteSignature, AXI4LiteSlave, RegisterBusSignature
from fpgacnn.hdl.bus.axi_stream import AXI4StreamSignature
from fpgacnn.hdl.bus.csr_bank import CSRBank
from fpgacnn.core.regmap import RegisterMapBuilder


def small_map():
    b = RegisterMapBuilder(addr_width=8)
    b.begin_group("id")
    b.add("magic", "const", [("value", 32)], value=0x12345678)
    b.begin_group("ctrl", align=16)
    b.add("control", "pulse", [("start", 1), ("soft_reset", 1)])
    b.add("status", "ro", [("busy", 1), ("done", 1)])
    b.add("wide", "rw", [("value", 32)])
    b.add("packed", "rw", [("lo", 4, True), ("hi", 12)])
    return b.build()


class Top(wiring.Component):
    def __init__(self, regmap):
        self.regmap = regmap
        self.bank = CSRBank(regmap)
        super().__init__({
            "axi": In(AXI4LiteSignature(regmap.addr_width)),
            "control": Out(self.bank.signature.members["control"].shape),
            "status": In(self.bank.signature.members["status"].shape),
            "wide": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.slave = slave = AXI4LiteSlave(addr_width=self.regmap.addr_width)
        m.submodules.bank = self.bank
        wiring.connect(m, wiring.flipped(self.axi), slave.axi)
        wiring.connect(m, slave.bus, self.bank.bus)
        m.d.comb += [
            self.control.eq(self.bank.control),
            self.bank.status.eq(self.status),
            self.wide.eq(self.bank.wide.value),
        ]
        return m


class Manager:
    """AXI4-Lite manager for an Amaranth testbench context."""

    def __init__(self, ctx, axi):
        self.ctx, self.axi = ctx, axi

    async def write(self, addr, data, strb=0xF, *, aw_delay=0, w_delay=0, b_delay=0):
        ctx, axi = self.ctx, self.axi
        aw_done = w_done = False
        cycle = 0
        while not (aw_done and w_done):
            ctx.set(axi.awaddr, addr)
            ctx.set(axi.wdata, data)
            ctx.set(axi.wstrb, strb)
            ctx.set(axi.awvalid, not aw_done and cycle >= aw_delay)
            ctx.set(axi.wvalid, not w_done and cycle >= w_delay)
            aw_fire = ctx.get(axi.awvalid) and ctx.get(axi.awready)
            w_fire = ctx.get(axi.wvalid) and ctx.get(axi.wready)
            await ctx.tick()
            aw_done |= bool(aw_fire)
            w_done |= bool(w_fire)
            cycle += 1
        ctx.set(axi.awvalid, 0)
        ctx.set(axi.wvalid, 0)
        held = 0
        for _ in range(b_delay):
            held += ctx.get(axi.bvalid)
            await ctx.tick()
        ctx.set(axi.bready, 1)
        while not ctx.get(axi.bvalid):
            await ctx.tick()
        resp = ctx.get(axi.bresp)
        await ctx.tick()
        ctx.set(axi.bready, 0)
        return resp, held

    async def read(self, addr, *, r_delay=0):
        ctx, axi = self.ctx, self.axi
        ctx.set(axi.araddr, addr)
        ctx.set(axi.arvalid, 1)
        while not ctx.get(axi.arready):
            await ctx.tick()
        await ctx.tick()
        ctx.set(axi.arvalid, 0)
        seen = set()
        for _ in range(r_delay):
            if ctx.get(axi.rvalid):
                assert not ctx.get(axi.arready)  # one outstanding read
                seen.add(ctx.get(axi.rdata))
            await ctx.tick()
        ctx.set(axi.rready, 1)
        while not ctx.get(axi.rvalid):
            await ctx.tick()
        data, resp = ctx.get(axi.rdata), ctx.get(axi.rresp)
        await ctx.tick()
        ctx.set(axi.rready, 0)
        assert seen <= {data}, "rdata changed while rvalid was held"
        assert resp == 0
        return data


def run(top, bench):
    sim = Simulator(top)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


def test_rom_and_status_read():
    regs = small_map()
    top = Top(regs)

    async def bench(ctx):
        bus = Manager(ctx, top.axi)
        assert await bus.read(regs.address("magic")) == 0x12345678
        ctx.set(top.status.done, 1)
        assert await bus.read(regs.address("status")) == 0b10
        ctx.set(top.status.busy, 1)
        assert await bus.read(regs.address("status")) == 0b11
        assert await bus.read(0xF0) == 0  # unmapped

    run(top, bench)


@pytest.mark.parametrize("aw_delay,w_delay", [(0, 0), (0, 3), (3, 0), (1, 5), (5, 1)])
def test_write_address_and_data_in_any_order(aw_delay, w_delay):
    regs = small_map()
    top = Top(regs)

    async def bench(ctx):
        bus = Manager(ctx, top.axi)
        resp, _ = await bus.write(regs.address("wide"), 0xCAFEF00D, aw_delay=aw_delay, w_delay=w_delay)
        assert resp == 0
        assert ctx.get(top.wide) == 0xCAFEF00D
        assert await bus.read(regs.address("wide")) == 0xCAFEF00D

    run(top, bench)


def test_byte_strobes_keep_other_bytes():
    regs = small_map()
    top = Top(regs)

    async def bench(ctx):
        bus = Manager(ctx, top.axi)
        await bus.write(regs.address("wide"), 0x11223344)
        await bus.write(regs.address("wide"), 0xAABBCCDD, strb=0b0101)
        assert await bus.read(regs.address("wide")) == 0x11BB33DD
        # A register narrower than 32 bits reads back only its fields.
        await bus.write(regs.address("packed"), 0xFFFFFFFF)
        word = await bus.read(regs.address("packed"))
        assert word == 0xFFFF
        assert regs.decode("packed", word) == {"lo": -1, "hi": 0xFFF}

    run(top, bench)


def test_pulse_register_pulses_once_and_reads_zero():
    regs = small_map()
    top = Top(regs)
    pulses = []

    async def watch(ctx):
        async for _, _, start, soft in ctx.tick().sample(top.control.start, top.control.soft_reset):
            if start or soft:
                pulses.append((start, soft))

    async def bench(ctx):
        bus = Manager(ctx, top.axi)
        await bus.write(regs.address("control"), regs.encode("control", start=1))
        await bus.write(regs.address("control"), regs.encode("control", soft_reset=1), b_delay=4)
        await bus.write(regs.address("control"), regs.encode("control", start=1), strb=0)  # masked
        assert await bus.read(regs.address("control")) == 0
        for _ in range(3):
            await ctx.tick()
        assert pulses == [(1, 0), (0, 1)]

    sim = Simulator(top)
    sim.add_clock(1e-8)
    sim.add_process(watch)
    sim.add_testbench(bench)
    sim.run()


def test_write_response_back_pressure_holds_bvalid():
    regs = small_map()
    top = Top(regs)

    async def bench(ctx):
        bus = Manager(ctx, top.axi)
        resp, held = await bus.write(regs.address("wide"), 7, b_delay=6)
        assert held >= 5  # bvalid rose and stayed up while bready was low
        # While a response is pending, a second write is captured but not performed.
        ctx.set(top.axi.awaddr, regs.address("wide"))
        ctx.set(top.axi.wdata, 9)
        ctx.set(top.axi.wstrb, 0xF)
        ctx.set(top.axi.awvalid, 1)
        ctx.set(top.axi.wvalid, 1)
        await ctx.tick()
        ctx.set(top.axi.awvalid, 0)
        ctx.set(top.axi.wvalid, 0)
        await ctx.tick()
        await ctx.tick()  # write performed, bvalid up, bready still low
        assert ctx.get(top.axi.bvalid)
        ctx.set(top.axi.awvalid, 1)  # a third write must wait for the response
        await ctx.tick()
        assert not ctx.get(top.axi.awready)
        for _ in range(4):
            await ctx.tick()
            assert ctx.get(top.axi.bvalid) and not ctx.get(top.axi.awready)
        assert ctx.get(top.wide) == 9
        ctx.set(top.axi.awvalid, 0)
        ctx.set(top.axi.bready, 1)
        await ctx.tick()
        ctx.set(top.axi.bready, 0)
        assert not ctx.get(top.axi.bvalid)
        assert await bus.read(regs.address("wide")) == 9

    run(top, bench)


def test_read_back_pressure_and_random_traffic():
    regs = small_map()
    top = Top(regs)
    rng = random.Random(3)

    async def bench(ctx):
        bus = Manager(ctx, top.axi)
        model = 0
        for _ in range(40):
            if rng.random() < 0.5:
                value = rng.getrandbits(32)
                strb = rng.getrandbits(4)
                await bus.write(regs.address("wide"), value, strb, aw_delay=rng.randrange(4),
                                w_delay=rng.randrange(4), b_delay=rng.randrange(4))
                for i in range(4):
                    if strb >> i & 1:
                        model = (model & ~(0xFF << 8 * i)) | (value & (0xFF << 8 * i))
            else:
                assert await bus.read(regs.address("wide"), r_delay=rng.randrange(5)) == model

    run(top, bench)


def raises_quietly(exc, match, make):
    # A component whose constructor raised was still created (and never
    # elaborated); keep Amaranth's UnusedElaboratable warning out of the log.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        with pytest.raises(exc, match=match):
            make()
        gc.collect()


def test_bad_parameters():
    with pytest.raises(TypeError, match=r"^addr_width must be an integer of at least 3, not 2$"):
        AXI4LiteSignature(2)
    raises_quietly(ValueError, r"^data_width must be one of \(32, 64\), not 16$",
                   lambda: AXI4LiteSlave(addr_width=8, data_width=16))
    with pytest.raises(TypeError, match=r"^data_width must be a positive multiple of 8, not 12$"):
        AXI4StreamSignature(12)
    raises_quietly(TypeError, r"^regmap must be a RegisterMap, not 3$", lambda: CSRBank(3))


def test_port_names_match_cocotbext_axi():
    from amaranth.back import verilog
    top = Top(small_map())
    text = verilog.convert(top, name="t")
    for sig in ("awaddr", "awvalid", "awready", "wdata", "wstrb", "bresp", "bvalid", "bready",
                "araddr", "arready", "rdata", "rresp", "rvalid", "rready"):
        assert f"axi__{sig}" in text
    assert RegisterBusSignature(10) == RegisterBusSignature(10)
