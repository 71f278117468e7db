"""cocotb testbench for the generated ConvEngine: clock, reset, bus models, layer runs.

The bus models are cocotbext-axi's, bound to Amaranth's ``__``-joined port
names. Registers are reached by name through
:func:`fpgacnn.core.regmap.build_regmap`, never by address.

Used from a cocotb test module::

    @cocotb.test()
    async def one_layer(dut):
        tb = EngineTB(dut, config)
        await tb.reset()
        result = await tb.run_layer(descriptor, input_bytes)
        result.output, result.cycles, result.perf
"""

from dataclasses import dataclass
import json
import logging
import os
import random

import cocotb
from cocotb.clock import Clock
from cocotb.simtime import get_sim_time
from cocotb.triggers import ClockCycles, RisingEdge, SimTimeoutError, with_timeout
from cocotbext.axi import (AxiLiteBus, AxiLiteMaster, AxiStreamBus, AxiStreamFrame,
                           AxiStreamSink, AxiStreamSource)

from ..core.config import EngineConfig
from ..core.contract import engine_contract
from ..core.descriptor import DESCRIPTOR_FIELDS
from ..core.sequencer import engine_descriptor
from ..core.regmap import build_regmap
from ..core.errors import BackendError

__all__ = ["CONFIG_ENV", "config_from_env", "LayerResult", "EngineTB", "random_pauses"]

#: Environment variable carrying the engine configuration (JSON) into the simulation.
CONFIG_ENV = "FPGACNN_ENGINE_CONFIG"


def config_from_env():
    """The :class:`EngineConfig` the simulation was built for (from :data:`CONFIG_ENV`)."""
    text = os.environ.get(CONFIG_ENV)
    if not text:
        raise BackendError(f"{CONFIG_ENV} is not set: run the simulation through "
                           f"fpgacnn.sim.verilator.run_cocotb with the engine's configuration")
    return EngineConfig.from_dict(json.loads(text), source=CONFIG_ENV)


def random_pauses(seed, probability=0.3, burst=4):
    """An endless pause pattern for cocotbext-axi: random bursts of 1..``burst`` pause cycles."""
    rng = random.Random(seed)
    while True:
        if rng.random() < probability:
            for _ in range(rng.randint(1, burst)):
                yield True
        else:
            yield False


@dataclass
class LayerResult:
    """What one layer run returned.

    Attributes
    ----------
    output : bytes
        The whole output stream (up to and including the ``tlast`` beat).
    cycles : int
        ``perf_busy_cycles``: cycles the engine was busy.
    perf : dict
        All performance counters by register name (without ``perf_``).
    sim_cycles : int
        Clock cycles from the ``start`` write to ``done`` seen by the testbench.
    """

    output: bytes
    cycles: int
    perf: dict
    sim_cycles: int


class EngineTB:
    """Drives a :class:`~fpgacnn.hdl.engine.ConvEngine` in cocotb.

    Parameters
    ----------
    dut : cocotb handle
        The generated top (``fpgacnn_engine``).
    config : EngineConfig, optional
        Default: :func:`config_from_env`.
    period_ns : int
        Clock period.
    quiet : bool
        Keep the bus models' per-frame log lines out of the log.
    """

    def __init__(self, dut, config=None, *, period_ns=10, quiet=True):
        self.dut = dut
        self.config = config if config is not None else config_from_env()
        self.regs = build_regmap(self.config)
        self.beat_bytes = self.config.stream_bytes
        self.period_ns = period_ns
        self.clock = Clock(dut.clk, period_ns, unit="ns")
        self.clock.start()
        self.axil = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axil", bus_separator="__"),
                                  dut.clk, dut.rst)
        self.source = AxiStreamSource(AxiStreamBus.from_prefix(dut, "s_axis", bus_separator="__"),
                                      dut.clk, dut.rst)
        self.sink = AxiStreamSink(AxiStreamBus.from_prefix(dut, "m_axis", bus_separator="__"),
                                  dut.clk, dut.rst)
        self.beats_in = self.beats_out = 0
        self.paused = False
        cocotb.start_soon(self._count_beats())
        if quiet:
            for model in (self.axil.write_if, self.axil.read_if, self.source, self.sink):
                model.log.setLevel(logging.WARNING)
            for channel in (self.axil.write_if.aw_channel, self.axil.write_if.w_channel,
                            self.axil.write_if.b_channel, self.axil.read_if.ar_channel,
                            self.axil.read_if.r_channel):
                channel.log.setLevel(logging.WARNING)

    # -- clock and reset ---------------------------------------------------------

    async def cycles(self, n):
        await ClockCycles(self.dut.clk, n)

    async def reset(self, cycles=4):
        """Hold the global reset ``rst`` for ``cycles`` cycles (bus models reset with it)."""
        self.dut.rst.value = 1
        await self.cycles(cycles)
        self.dut.rst.value = 0
        await self.cycles(2)

    async def soft_reset(self):
        """Pulse ``control.soft_reset`` and flush both stream models, as a driver
        resets its DMA together with the engine."""
        await self.write("control", soft_reset=1)
        self.flush_streams()
        await self.cycles(2)

    def flush_streams(self):
        """Drop what the stream models still hold (unsent input, partial output)."""
        for model in (self.source, self.sink):
            model.clear()
            model.assert_reset()
        while not self.sink.empty():
            self.sink.recv_nowait()

    async def _count_beats(self):
        # Handshake counters for diagnostics (a hang names how far each stream got).
        dut = self.dut
        edge = RisingEdge(dut.clk)
        while True:
            await edge
            if dut.s_axis__tvalid.value and dut.s_axis__tready.value:
                self.beats_in += 1
            if dut.m_axis__tvalid.value and dut.m_axis__tready.value:
                self.beats_out += 1

    # -- registers by name ---------------------------------------------------------

    async def read_word(self, name):
        return await self.axil.read_dword(self.regs.address(name))

    async def read(self, name):
        """Field values of a register, as a dict."""
        return self.regs.decode(name, await self.read_word(name))

    async def read_value(self, name):
        """The value of a single-field register."""
        (value,) = (await self.read(name)).values()
        return value

    async def write(self, name, value=None, **fields):
        await self.axil.write_dword(self.regs.address(name), self.regs.encode(name, value, **fields))

    async def read_config(self):
        """Read and check the ID ROM: the :class:`EngineConfig` the hardware reports."""
        rom = {}
        for reg in self.regs.id_rom():
            rom[reg.address] = await self.axil.read_dword(reg.address)
        return self.regs.read_config(rom.__getitem__)

    async def read_perf(self):
        return {reg.name[len("perf_"):]: await self.read_value(reg.name)
                for reg in self.regs.group("perf")}

    # -- streams ------------------------------------------------------------------------

    def set_pauses(self, *, input_seed=None, output_seed=None, probability=0.3):
        """Random valid (input) / ready (output) pauses; ``None`` turns a side off."""
        self.paused = input_seed is not None or output_seed is not None
        for model, seed in ((self.source, input_seed), (self.sink, output_seed)):
            if seed is None:
                model.clear_pause_generator()
            else:
                model.set_pause_generator(random_pauses(seed, probability))

    def send(self, data):
        """Queue input bytes on ``s_axis`` (one frame; ``tlast`` on its final beat)."""
        if len(data) % self.beat_bytes:
            raise ValueError(f"input of {len(data)} bytes is not a whole number of "
                             f"{self.beat_bytes}-byte beats")
        self.source.send_nowait(AxiStreamFrame(bytes(data)))

    # -- layer runs -----------------------------------------------------------------------

    async def write_descriptor(self, desc):
        """Write every ``desc_*`` register of the engine (its contract's
        ``descriptor_fields``: with ``fused_blocks`` the fused block's too) from a
        mapping of descriptor field values; a fused field set on an engine without
        the registers is refused (``MappingError``), not dropped."""
        missing = [f.name for f in DESCRIPTOR_FIELDS if f.name not in desc and f.default is None]
        if missing:
            raise ValueError(f"descriptor lacks {', '.join(missing)}")
        desc = engine_descriptor(self.config, desc, "the descriptor")
        for f in engine_contract(self.config).descriptor_fields:
            if self.regs[f"desc_{f.name}"].access != "const":
                await self.write(f"desc_{f.name}", int(desc[f.name]))

    async def start(self, desc, data):
        await self.write_descriptor(desc)
        self.send(data)
        await self.write("control", start=1)

    def timeout_cycles(self, desc, data, slowdown=1):
        """A generous cycle budget for one run (a hang fails instead of stalling the suite)."""
        compute = (int(desc["out_h"]) * int(desc["out_w"]) * int(desc["co_tiles"])
                   * int(desc["ci_tiles"]) * int(desc["batch"]))
        beats = len(data) // self.beat_bytes
        return int((4 * (compute + beats) + 5000) * slowdown)

    async def run_layer(self, desc, data, *, timeout_cycles=None):
        """Run one layer: descriptor, start, input stream, output stream, done.

        Parameters
        ----------
        desc : mapping
            Descriptor field values (the engine's ``descriptor_fields``).
        data : bytes
            The input stream (docs/engine.md), a whole number of beats.
        timeout_cycles : int, optional
            Default: :meth:`timeout_cycles`, stretched when pauses are on.

        Returns
        -------
        LayerResult

        Raises
        ------
        BackendError
            If the output or ``done`` does not come within the budget.
        """
        if timeout_cycles is None:
            timeout_cycles = self.timeout_cycles(desc, data, 4 if self.paused else 1)
        t_start = get_sim_time("ns")
        in0, out0 = self.beats_in, self.beats_out
        await self.start(desc, data)
        try:
            frame = await with_timeout(self.sink.recv(), timeout_cycles * self.period_ns, "ns")
        except SimTimeoutError:
            raise BackendError(
                f"no output with tlast within {timeout_cycles} cycles: {self.beats_in - in0} of "
                f"{len(data) // self.beat_bytes} input beats taken, {self.beats_out - out0} output "
                f"beats, status {await self.read('status')}, perf {await self.read_perf()}") from None
        status = await self.read("status")
        polls = 0
        while not status["done"]:
            polls += 1
            if polls > 1000:
                raise BackendError(f"output received but status.done never rose ({status})")
            await self.cycles(4)
            status = await self.read("status")
        sim_cycles = round((get_sim_time("ns") - t_start) / self.period_ns)
        perf = await self.read_perf()
        return LayerResult(bytes(frame.tdata), perf["busy_cycles"], perf, int(sim_cycles))
