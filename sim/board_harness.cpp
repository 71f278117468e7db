// The simulated board: a Verilator model of the engine top with an AXI4-Lite
// master and an AXI DMA model (MM2S into s_axis, S2MM out of m_axis), clocked
// entirely in C++ so that no stream beat waits on Python.
//
// Built by fpgacnn/sim/native_board.py, which generates "board_ports.h" (port
// accessors for the top's actual names and widths) and loads the result as a
// shared library through ctypes. The C ABI below is the narrow board
// interface of DESIGN.md section 4: MMIO read/write, DMA send/receive, wait.

#include <cstdint>
#include <cstring>

#include "verilator_model.h"

#include "board_ports.h"

namespace {

struct Board : VerilatorModel {
    uint64_t cycle = 0;
    uint64_t time = 0;

    // MM2S: memory -> s_axis.
    const uint8_t* tx_buf = nullptr;
    uint64_t tx_len = 0, tx_pos = 0;
    bool tx_busy = false, tx_presenting = false;

    // S2MM: m_axis -> memory.
    uint8_t* rx_buf = nullptr;
    uint64_t rx_cap = 0, rx_pos = 0;
    bool rx_busy = false, rx_got_last = false;

    // AXI4-Lite master: at most one transaction in flight.
    enum { AXIL_IDLE, AXIL_WRITE, AXIL_READ } axil = AXIL_IDLE;
    bool aw_done = false, w_done = false, ar_done = false, axil_finished = false;
    uint32_t axil_rdata = 0;
    int axil_resp = 0;

    // Random back-pressure (input pauses, output not-ready), seeded.
    uint32_t rng = 1;
    uint32_t tx_pause_permille = 0, rx_pause_permille = 0;
};

uint32_t next_random(Board* b) {
    // xorshift32: fast, seeded, reproducible.
    uint32_t x = b->rng;
    x ^= x << 13; x ^= x >> 17; x ^= x << 5;
    return b->rng = x;
}

bool pause(Board* b, uint32_t permille) {
    return permille && (next_random(b) % 1000u) < permille;
}

void dump(Board* b) {
    b->dump(b->time);
    b->time += 5;
}

// One clock cycle. Inputs are set while the clock is low; handshakes are
// sampled after the low-phase evaluation, exactly as the rising edge sees them.
void tick(Board* b) {
    Vtop* t = b->top;

    // MM2S: once valid is raised it stays up until the beat is taken (AXIS rule).
    if (b->tx_busy && !b->tx_presenting && !pause(b, b->tx_pause_permille))
        b->tx_presenting = true;
    if (b->tx_presenting) {
        uint8_t beat[BEAT_BYTES] = {0};
        uint64_t n = b->tx_len - b->tx_pos;
        if (n > BEAT_BYTES) n = BEAT_BYTES;
        std::memcpy(beat, b->tx_buf + b->tx_pos, n);
        set_s_tdata(t, beat);
        S_TVALID(t) = 1;
        S_TLAST(t) = (b->tx_pos + BEAT_BYTES >= b->tx_len) ? 1 : 0;
    } else {
        S_TVALID(t) = 0;
        S_TLAST(t) = 0;
    }
    M_TREADY(t) = (b->rx_busy && !pause(b, b->rx_pause_permille)) ? 1 : 0;
    AXIL_AWVALID(t) = b->axil == Board::AXIL_WRITE && !b->aw_done;
    AXIL_WVALID(t) = b->axil == Board::AXIL_WRITE && !b->w_done;
    AXIL_BREADY(t) = b->axil == Board::AXIL_WRITE && b->aw_done && b->w_done;
    AXIL_ARVALID(t) = b->axil == Board::AXIL_READ && !b->ar_done;
    AXIL_RREADY(t) = b->axil == Board::AXIL_READ && b->ar_done;

    t->clk = 0;
    t->eval();
    dump(b);

    if (b->axil == Board::AXIL_WRITE) {
        bool aw_fire = AXIL_AWVALID(t) && AXIL_AWREADY(t);
        bool w_fire = AXIL_WVALID(t) && AXIL_WREADY(t);
        if (AXIL_BVALID(t) && AXIL_BREADY(t)) {
            b->axil_resp = AXIL_BRESP(t);
            b->axil = Board::AXIL_IDLE;
            b->axil_finished = true;
        }
        b->aw_done |= aw_fire;
        b->w_done |= w_fire;
    } else if (b->axil == Board::AXIL_READ) {
        bool ar_fire = AXIL_ARVALID(t) && AXIL_ARREADY(t);
        if (AXIL_RVALID(t) && AXIL_RREADY(t)) {
            b->axil_rdata = AXIL_RDATA(t);
            b->axil_resp = AXIL_RRESP(t);
            b->axil = Board::AXIL_IDLE;
            b->axil_finished = true;
        }
        b->ar_done |= ar_fire;
    }

    bool tx_fire = S_TVALID(t) && S_TREADY(t);
    bool rx_fire = M_TVALID(t) && M_TREADY(t);
    if (rx_fire) {
        uint8_t beat[BEAT_BYTES];
        get_m_tdata(t, beat);
        uint64_t n = b->rx_cap - b->rx_pos;
        if (n > BEAT_BYTES) n = BEAT_BYTES;
        std::memcpy(b->rx_buf + b->rx_pos, beat, n);
        b->rx_pos += n;
        if (M_TLAST(t)) b->rx_got_last = true;
        if (b->rx_got_last || b->rx_pos >= b->rx_cap) b->rx_busy = false;
    }

    t->clk = 1;
    t->eval();
    dump(b);
    b->cycle++;

    if (tx_fire) {
        b->tx_pos += BEAT_BYTES;
        b->tx_presenting = false;
        if (b->tx_pos >= b->tx_len) b->tx_busy = false;
    }
}

}  // namespace

extern "C" {

void* board_new(const char* wave_path) {
    Board* b = new Board;
    b->open_model(wave_path);
    b->top->eval();
    return b;
}

void board_free(void* p) {
    Board* b = static_cast<Board*>(p);
    b->close_model();
    delete b;
}

uint64_t board_cycles(void* p) { return static_cast<Board*>(p)->cycle; }

void board_set_pauses(void* p, uint32_t tx_permille, uint32_t rx_permille, uint32_t seed) {
    Board* b = static_cast<Board*>(p);
    b->tx_pause_permille = tx_permille;
    b->rx_pause_permille = rx_permille;
    b->rng = seed ? seed : 1;
}

// Synchronous reset of the whole top, and of the DMA model (it drops any transfer).
void board_reset(void* p, uint32_t cycles) {
    Board* b = static_cast<Board*>(p);
    b->tx_busy = b->tx_presenting = false;
    b->rx_busy = false;
    b->axil = Board::AXIL_IDLE;
    b->top->rst = 1;
    for (uint32_t i = 0; i < cycles; i++) tick(b);
    b->top->rst = 0;
    tick(b);
}

void board_step(void* p, uint64_t cycles) {
    Board* b = static_cast<Board*>(p);
    for (uint64_t i = 0; i < cycles; i++) tick(b);
}

// Run one AXI4-Lite transaction to its end (the DMA model keeps running).
static int run_axil(Board* b, uint64_t timeout) {
    b->axil_finished = false;
    for (uint64_t i = 0; i < timeout && !b->axil_finished; i++) tick(b);
    if (b->axil_finished) return b->axil_resp;
    b->axil = Board::AXIL_IDLE;  // give up: the master drops the request
    return -1;
}

// AXI4-Lite write; returns BRESP, or -1 when `timeout` cycles pass without an answer.
int board_mmio_write(void* p, uint32_t addr, uint32_t data, uint64_t timeout) {
    Board* b = static_cast<Board*>(p);
    Vtop* t = b->top;
    AXIL_AWADDR(t) = addr;
    AXIL_WDATA(t) = data;
    AXIL_SET_WSTRB(t, 0xF);
    AXIL_SET_AWPROT(t, 0);
    b->aw_done = b->w_done = false;
    b->axil = Board::AXIL_WRITE;
    return run_axil(b, timeout);
}

// AXI4-Lite read; returns RRESP (data in *data), or -1 on timeout.
int board_mmio_read(void* p, uint32_t addr, uint32_t* data, uint64_t timeout) {
    Board* b = static_cast<Board*>(p);
    Vtop* t = b->top;
    AXIL_ARADDR(t) = addr;
    AXIL_SET_ARPROT(t, 0);
    b->ar_done = false;
    b->axil = Board::AXIL_READ;
    int resp = run_axil(b, timeout);
    *data = b->axil_rdata;
    return resp;
}

// Start an MM2S transfer of `len` bytes (the last beat carries TLAST, zero-padded).
// The buffer must stay alive until the transfer is done.
int board_dma_send(void* p, const uint8_t* buf, uint64_t len) {
    Board* b = static_cast<Board*>(p);
    if (b->tx_busy || len == 0) return -1;
    b->tx_buf = buf; b->tx_len = len; b->tx_pos = 0;
    b->tx_busy = true; b->tx_presenting = false;
    return 0;
}

// Start an S2MM transfer into `buf` (up to `cap` bytes, ends at TLAST).
int board_dma_recv(void* p, uint8_t* buf, uint64_t cap) {
    Board* b = static_cast<Board*>(p);
    if (b->rx_busy || cap == 0) return -1;
    b->rx_buf = buf; b->rx_cap = cap; b->rx_pos = 0;
    b->rx_busy = true; b->rx_got_last = false;
    return 0;
}

uint64_t board_dma_received(void* p) { return static_cast<Board*>(p)->rx_pos; }
int board_dma_send_busy(void* p) { return static_cast<Board*>(p)->tx_busy; }
int board_dma_recv_busy(void* p) { return static_cast<Board*>(p)->rx_busy; }

// Clock until both DMA channels are idle; 0 when they are, 1 on timeout.
int board_dma_wait(void* p, uint64_t max_cycles) {
    Board* b = static_cast<Board*>(p);
    for (uint64_t i = 0; i < max_cycles; i++) {
        if (!b->tx_busy && !b->rx_busy) return 0;
        tick(b);
    }
    return (!b->tx_busy && !b->rx_busy) ? 0 : 1;
}

// Cancel both DMA channels (what a DMA reset does); the engine is not touched.
void board_dma_abort(void* p) {
    Board* b = static_cast<Board*>(p);
    b->tx_busy = b->tx_presenting = false;
    b->rx_busy = false;
}

// Benchmark ceiling: clock the model with no host work at all. s_axis holds
// valid with one constant beat and m_axis is always ready, so an engine
// started beforehand (descriptor + start by MMIO) stays busy; no DMA model,
// no AXI-Lite master, no waveform. The DMA channels must be idle; reset the
// board afterwards (the engine is left mid-run).
void board_free_run(void* p, uint64_t cycles) {
    Board* b = static_cast<Board*>(p);
    Vtop* t = b->top;
    uint8_t beat[BEAT_BYTES];
    std::memset(beat, 0x5a, sizeof beat);
    set_s_tdata(t, beat);
    S_TVALID(t) = 1;
    S_TLAST(t) = 0;
    M_TREADY(t) = 1;
    AXIL_AWVALID(t) = 0; AXIL_WVALID(t) = 0; AXIL_BREADY(t) = 0;
    AXIL_ARVALID(t) = 0; AXIL_RREADY(t) = 0;
    for (uint64_t i = 0; i < cycles; i++) {
        t->clk = 0;
        t->eval();
        t->clk = 1;
        t->eval();
    }
    b->cycle += cycles;
    b->time += 10 * cycles;
    S_TVALID(t) = 0;
    M_TREADY(t) = 0;
}

}  // extern "C"
