// The Verilator model every simulated board drives: Vtop in a context of its
// own, with an optional waveform file. Shared by board_harness.cpp (AXI board)
// and uart_harness.cpp (UART board); build_harness_library in
// fpgacnn/sim/native_board.py puts it beside every harness it builds.
#pragma once

#include <cstdint>

#include "verilated.h"
#include "Vtop.h"
#if VM_TRACE_FST
#include "verilated_fst_c.h"
typedef VerilatedFstC TraceFile;
#elif VM_TRACE_VCD
#include "verilated_vcd_c.h"
typedef VerilatedVcdC TraceFile;
#endif

struct VerilatorModel {
    VerilatedContext* ctx = nullptr;
    Vtop* top = nullptr;
#if VM_TRACE
    TraceFile* trace = nullptr;
#endif

    // Make the model; waveforms go to wave_path when it is non-empty and the
    // library was built with tracing. Inputs start at 0: set the others after.
    void open_model(const char* wave_path) {
        ctx = new VerilatedContext;
        ctx->randReset(0);
#if VM_TRACE
        if (wave_path && wave_path[0]) ctx->traceEverOn(true);
#endif
        top = new Vtop(ctx);
#if VM_TRACE
        if (wave_path && wave_path[0]) {
            trace = new TraceFile;
            top->trace(trace, 99);
            trace->open(wave_path);
        }
#else
        (void)wave_path;
#endif
        top->clk = 0;
        top->rst = 0;
    }

    void close_model() {
#if VM_TRACE
        if (trace) { trace->close(); delete trace; trace = nullptr; }
#endif
        top->final();
        delete top;
        delete ctx;
        top = nullptr;
        ctx = nullptr;
    }

    void dump(uint64_t time) {
#if VM_TRACE
        if (trace) trace->dump(time);
#else
        (void)time;
#endif
    }
};
