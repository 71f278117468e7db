"""The naive cocotb loop of bench/sim_speed.py: one stream beat per Python await.

A cocotb test module (run by :func:`fpgacnn.sim.verilator.run_cocotb` on the
engine's cocotb build). It writes the descriptor over AXI4-Lite
(cocotbext-axi), starts the engine, then feeds ``s_axis`` and drains
``m_axis`` from a plain Python loop that awaits every rising edge, the way a
hand-written testbench does. Only that streaming loop is timed.

Its job comes in through ``FPGACNN_BENCH_JOB``: a JSON file with the
descriptor, the input stream (hex), the number of timed passes and where to
write the result (cycles, seconds and the output stream of every pass).
"""

import json
import os
import time

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge
from cocotbext.axi import AxiLiteBus, AxiLiteMaster

from fpgacnn.core.descriptor import DESCRIPTOR_FIELDS
from fpgacnn.core.regmap import build_regmap
from fpgacnn.sim.engine_tb import config_from_env


@cocotb.test()
async def naive_feed(dut):
    job = json.loads(open(os.environ["FPGACNN_BENCH_JOB"]).read())
    config = config_from_env()
    regs = build_regmap(config)
    nbytes = config.stream_bytes
    data = bytes.fromhex(job["data"])
    beats = [int.from_bytes(data[i:i + nbytes], "little") for i in range(0, len(data), nbytes)]
    Clock(dut.clk, 10, unit="ns").start()
    axil = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axil", bus_separator="__"), dut.clk, dut.rst)
    dut.s_axis__tvalid.value = 0
    dut.s_axis__tlast.value = 0
    dut.m_axis__tready.value = 0
    passes = []
    for _ in range(job["passes"]):
        dut.rst.value = 1
        await ClockCycles(dut.clk, 4)
        dut.rst.value = 0
        await RisingEdge(dut.clk)
        for f in DESCRIPTOR_FIELDS:
            name = f"desc_{f.name}"
            await axil.write_dword(regs.address(name), regs.encode(name, int(job["desc"][f.name])))
        await axil.write_dword(regs.address("control"), regs.encode("control", start=1))

        out = bytearray()
        i, cycles = 0, 0
        edge = RisingEdge(dut.clk)
        s_data, s_valid, s_last, s_ready = (dut.s_axis__tdata, dut.s_axis__tvalid,
                                            dut.s_axis__tlast, dut.s_axis__tready)
        m_data, m_valid, m_last = dut.m_axis__tdata, dut.m_axis__tvalid, dut.m_axis__tlast
        start, cpu_start = time.perf_counter(), time.process_time()
        dut.m_axis__tready.value = 1
        s_data.value = beats[0]
        s_valid.value = 1
        s_last.value = int(len(beats) == 1)
        while True:
            await edge
            cycles += 1
            # Sampled just after the edge: the handshake that edge completed
            # (cocotbext-axi samples the same way).
            if i < len(beats) and s_ready.value:
                i += 1
                if i < len(beats):
                    s_data.value = beats[i]
                    s_last.value = int(i == len(beats) - 1)
                else:
                    s_valid.value = 0
                    s_last.value = 0
            if m_valid.value:
                out += int(m_data.value).to_bytes(nbytes, "little")
                if m_last.value:
                    break
        seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
        dut.m_axis__tready.value = 0
        passes.append({"cycles": cycles, "seconds": seconds, "cpu_seconds": cpu_seconds,
                       "beats_in": i, "output": out.hex()})
    with open(job["result"], "w") as f:
        json.dump(passes, f)
