// The simulated board: a Verilator model of the engine top with an AXI4-Lite
// master and an AXI DMA model (MM2S into s_axis, S2MM out of m_axis), clocked
// entirely in C++ so that no stream beat waits on Python.
//
// Built by fpgacnn/sim/native_board.py, which generates "board_ports.h" (port
// accessors for the top's actual names and widths) and loads the result as a
// shared library through ctypes. The C ABI below is the narrow board
// interface of DESIGN.md section 4: MMIO read/write, DMA send/receive, wait.
//
// A top with the memory port of fpgacnn/core/memory_port.py (the program
// engine: it fetches its program and data itself) also gets a memory model
// (HAS_MEMORY_PORT, from board_ports.h): a host buffer as the board's memory
// behind a read channel with latency and a write channel, both paced by one
// token bucket of bytes per cycle. On a top without the port the memory
// functions exist and answer -1 ("no memory port"); nothing else changes.

#include <cstdint>
#include <cstring>

#include "verilator_model.h"

#include "board_ports.h"

#if HAS_MEMORY_PORT
#include <algorithm>
#include <cmath>
#include <deque>
#endif

namespace {

#if HAS_MEMORY_PORT
// A read taken and not yet answered: its bytes (read when it was taken, so
// memory order is the order the channels take requests) and the cycle from
// which the response may be presented.
struct MemRead {
    uint64_t due;
    uint8_t data[READ_BYTES];
};

// board_mem_stats' values, in this order.
enum {
    MEM_READS,          // read requests taken
    MEM_WRITES,         // write requests taken
    MEM_BYTES_READ,     // bytes read from the buffer (READ_BYTES per read in range)
    MEM_BYTES_WRITTEN,  // bytes stored in the buffer (strobe set, write in range)
    MEM_WAIT_CYCLES,    // cycles in which a request was valid and not offered ready
    MEM_FIRST_READ,     // board cycle of the first read taken (UINT64_MAX: none)
    MEM_LAST_READ,
    MEM_FIRST_WRITE,
    MEM_LAST_WRITE,
    MEM_RESPONSE_WAITS, // cycles in which a response was presented and not taken
    MEM_NSTATS
};

enum { MEM_OK = 0, MEM_OUTSIDE = 1, MEM_MISALIGNED = 2 };  // board_mem_error's reasons
enum { MEM_KIND_READ = 1, MEM_KIND_WRITE = 2 };
#endif

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

#if HAS_MEMORY_PORT
    // The board's memory: a buffer owned (and kept alive) by the Python side.
    uint8_t* mem = nullptr;
    uint64_t mem_len = 0;
    // Timing: responses `latency` cycles after their request; bandwidth in
    // bytes per cycle on each channel, through a token bucket of its own (an
    // AXI port's read and write channels are independent: a Zynq-7000 HP
    // port moves 64 bits a cycle each way).
    uint32_t latency = 40;
    double bytes_per_cycle = 8.0, rd_tokens = 0.0, wr_tokens = 0.0;
    double rd_cap = 16.0, wr_cap = 16.0;
    std::deque<MemRead> reads;
    // The first error (sticky until cleared).
    int err_reason = MEM_OK, err_kind = 0;
    uint32_t err_addr = 0;
    uint64_t stats[MEM_NSTATS];
#endif
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

#if HAS_MEMORY_PORT
void mem_reset_stats(Board* b) {
    std::memset(b->stats, 0, sizeof b->stats);
    b->stats[MEM_FIRST_READ] = b->stats[MEM_LAST_READ] = UINT64_MAX;
    b->stats[MEM_FIRST_WRITE] = b->stats[MEM_LAST_WRITE] = UINT64_MAX;
}

// The idle state of the channels (board_new, board_reset): nothing in flight,
// an empty bucket. The memory's contents, the error and the statistics stay.
void mem_idle(Board* b) {
    b->reads.clear();
    b->rd_tokens = b->wr_tokens = 0.0;
}

// Check an access of `size` bytes at `addr`; on the first error, remember it.
bool mem_check(Board* b, int kind, uint32_t addr, uint32_t size) {
    int reason = MEM_OK;
    if (addr % size) reason = MEM_MISALIGNED;
    else if (!b->mem || (uint64_t)addr + size > b->mem_len) reason = MEM_OUTSIDE;
    if (reason != MEM_OK && b->err_reason == MEM_OK) {
        b->err_reason = reason;
        b->err_kind = kind;
        b->err_addr = addr;
    }
    return reason == MEM_OK;
}

// Which channels may take a request this cycle, from state only (the top's
// valids are not looked at: its outputs are evaluated after the inputs are
// set). Each channel gains `bytes_per_cycle` tokens a cycle, up to its cap,
// and offers ready while it holds a request's bytes; tokens are spent only by
// a request taken, so a ready offered and not used costs nothing.
void mem_offer(Board* b, bool* rd, bool* wr) {
    b->rd_tokens = std::min(b->rd_cap, b->rd_tokens + b->bytes_per_cycle);
    b->wr_tokens = std::min(b->wr_cap, b->wr_tokens + b->bytes_per_cycle);
    // 1e-9: rates such as 0.1 byte/cycle add up inexactly
    *rd = b->rd_tokens + 1e-9 >= READ_BYTES;
    *wr = b->wr_tokens + 1e-9 >= WRITE_BYTES;
}

// The caps of the buckets: two cycles' tokens, or one request's bytes.
void mem_caps(Board* b) {
    b->rd_cap = std::max(2 * b->bytes_per_cycle, (double)READ_BYTES);
    b->wr_cap = std::max(2 * b->bytes_per_cycle, (double)WRITE_BYTES);
    b->rd_tokens = std::min(b->rd_tokens, b->rd_cap);
    b->wr_tokens = std::min(b->wr_tokens, b->wr_cap);
}

// The memory's inputs to the top for this cycle (before the low-phase eval).
// While the top is held in reset the memory is idle: no ready, no response.
void mem_drive(Board* b) {
    Vtop* t = b->top;
    bool rd = false, wr = false, rsp = false;
    if (!t->rst) {
        mem_offer(b, &rd, &wr);
        rsp = !b->reads.empty() && b->reads.front().due <= b->cycle;
    }
    MEM_RD_READY(t) = rd;
    MEM_WR_READY(t) = wr;
    MEM_RDATA_VALID(t) = rsp;
    MEM_WR_PENDING(t) = 0;  // a write taken is in the buffer at once: none is ever pending
    MEM_FAULT_KIND(t) = 0;  // the model's errors go to the host by board_mem_error
    MEM_FAULT_ADDR(t) = 0;
    if (rsp) set_mem_rdata(t, b->reads.front().data);  // held until taken: the front stays
}

// The handshakes of this cycle, sampled after the low-phase eval.
void mem_sample(Board* b) {
    Vtop* t = b->top;
    if (t->rst) return;
    bool rd_valid = MEM_RD_VALID(t), wr_valid = MEM_WR_VALID(t);
    bool rd_fire = rd_valid && MEM_RD_READY(t), wr_fire = wr_valid && MEM_WR_READY(t);
    if ((rd_valid && !rd_fire) || (wr_valid && !wr_fire)) b->stats[MEM_WAIT_CYCLES]++;
    if (MEM_RDATA_VALID(t)) {
        if (MEM_RDATA_READY(t)) b->reads.pop_front();
        else b->stats[MEM_RESPONSE_WAITS]++;
    }
    // The read goes first: a read and a write taken in one cycle, the read sees the old bytes.
    if (rd_fire) {
        uint32_t addr = MEM_RD_ADDR(t);
        MemRead r;
        r.due = b->cycle + b->latency;
        if (mem_check(b, MEM_KIND_READ, addr, READ_BYTES)) {
            std::memcpy(r.data, b->mem + addr, READ_BYTES);
            b->stats[MEM_BYTES_READ] += READ_BYTES;
        } else {
            std::memset(r.data, 0, READ_BYTES);
        }
        b->reads.push_back(r);
        b->rd_tokens -= READ_BYTES;
        b->stats[MEM_READS]++;
        if (b->stats[MEM_FIRST_READ] == UINT64_MAX) b->stats[MEM_FIRST_READ] = b->cycle;
        b->stats[MEM_LAST_READ] = b->cycle;
    }
    if (wr_fire) {
        uint32_t addr = MEM_WR_ADDR(t);
        if (mem_check(b, MEM_KIND_WRITE, addr, WRITE_BYTES)) {
            uint8_t data[WRITE_BYTES], lanes[WRITE_BYTES];
            get_mem_wr_data(t, data);
            get_mem_wr_strb(t, lanes);
            for (int i = 0; i < WRITE_BYTES; i++)
                if (lanes[i]) { b->mem[addr + i] = data[i]; b->stats[MEM_BYTES_WRITTEN]++; }
        }
        b->wr_tokens -= WRITE_BYTES;
        b->stats[MEM_WRITES]++;
        if (b->stats[MEM_FIRST_WRITE] == UINT64_MAX) b->stats[MEM_FIRST_WRITE] = b->cycle;
        b->stats[MEM_LAST_WRITE] = b->cycle;
    }
}
#endif

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
#if HAS_MEMORY_PORT
    mem_drive(b);
#endif

    t->clk = 0;
    t->eval();
    dump(b);
#if HAS_MEMORY_PORT
    mem_sample(b);
#endif

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
#if HAS_MEMORY_PORT
    mem_caps(b);
    mem_reset_stats(b);
#endif
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

// Synchronous reset of the whole top, and of the DMA model (it drops any
// transfer) and the memory channels (reads in flight dropped, bucket emptied;
// the memory's contents, its error and its statistics stay).
void board_reset(void* p, uint32_t cycles) {
    Board* b = static_cast<Board*>(p);
    b->tx_busy = b->tx_presenting = false;
    b->rx_busy = false;
    b->axil = Board::AXIL_IDLE;
#if HAS_MEMORY_PORT
    mem_idle(b);
#endif
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
// no AXI-Lite master, no waveform. The memory model is off too (no ready, no
// response, so no request is taken unseen). The DMA channels must be idle;
// reset the board afterwards (the engine is left mid-run).
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
#if HAS_MEMORY_PORT
    MEM_RD_READY(t) = 0; MEM_WR_READY(t) = 0; MEM_RDATA_VALID(t) = 0;
#endif
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

// ---- The memory model (a top with the memory port; -1 from each on any other top).

// 1 if the top has the memory port, 0 if not.
int board_mem_present(void* p) {
    (void)p;
    return HAS_MEMORY_PORT;
}

// Make `len` bytes at `buf` the board's memory (addresses are offsets into
// it); NULL detaches. The caller keeps the buffer alive while attached.
// Returns 0, or -1 without a memory port.
int board_mem_attach(void* p, uint8_t* buf, uint64_t len) {
#if HAS_MEMORY_PORT
    Board* b = static_cast<Board*>(p);
    b->mem = buf;
    b->mem_len = buf ? len : 0;
    return 0;
#else
    (void)p; (void)buf; (void)len;
    return -1;
#endif
}

// Latency (cycles from a read taken to its response, >= 1) and bandwidth
// (bytes per cycle on each of the read and write channels, > 0; a channel's
// bucket holds up to max(2 * bytes_per_cycle, its request's bytes)). Returns
// 0, -2 for a value out of range (nothing changed), -1 without a memory port.
int board_mem_timing(void* p, uint32_t latency, double bytes_per_cycle) {
#if HAS_MEMORY_PORT
    Board* b = static_cast<Board*>(p);
    if (latency < 1 || !(bytes_per_cycle > 0) || !std::isfinite(bytes_per_cycle)) return -2;
    b->latency = latency;
    b->bytes_per_cycle = bytes_per_cycle;
    mem_caps(b);
    return 0;
#else
    (void)p; (void)latency; (void)bytes_per_cycle;
    return -1;
#endif
}

// The first memory error since the last clear: returns 0 (none), 1 (bytes
// outside the attached buffer, or none attached) or 2 (address not a
// multiple of the access size), with *kind = 1 (read) or 2 (write) and
// *addr the request's address; -1 without a memory port. Such a read
// answers zeros, such a write is dropped.
int board_mem_error(void* p, int* kind, uint32_t* addr) {
#if HAS_MEMORY_PORT
    Board* b = static_cast<Board*>(p);
    *kind = b->err_kind;
    *addr = b->err_addr;
    return b->err_reason;
#else
    (void)p; *kind = 0; *addr = 0;
    return -1;
#endif
}

// Forget the memory error. Returns 0, or -1 without a memory port.
int board_mem_clear_error(void* p) {
#if HAS_MEMORY_PORT
    Board* b = static_cast<Board*>(p);
    b->err_reason = MEM_OK;
    b->err_kind = 0;
    b->err_addr = 0;
    return 0;
#else
    (void)p;
    return -1;
#endif
}

// Copy the first min(n, 10) statistics into out: reads, writes, bytes read,
// bytes written, wait cycles, first read cycle, last read cycle, first write
// cycle, last write cycle (UINT64_MAX for a cycle not yet seen), response
// wait cycles (see MEM_* above). Returns how many there are (10), or -1
// without a memory port.
int board_mem_stats(void* p, uint64_t* out, uint32_t n) {
#if HAS_MEMORY_PORT
    Board* b = static_cast<Board*>(p);
    for (uint32_t i = 0; i < n && i < MEM_NSTATS; i++) out[i] = b->stats[i];
    return MEM_NSTATS;
#else
    (void)p; (void)out; (void)n;
    return -1;
#endif
}

// Zero the statistics. Returns 0, or -1 without a memory port.
int board_mem_reset_stats(void* p) {
#if HAS_MEMORY_PORT
    mem_reset_stats(static_cast<Board*>(p));
    return 0;
#else
    (void)p;
    return -1;
#endif
}

// Clock until the top's irq is high (0) or `max_cycles` pass (1); -1 without
// a memory port (a top without one has no irq either).
int board_wait_irq(void* p, uint64_t max_cycles) {
#if HAS_MEMORY_PORT
    Board* b = static_cast<Board*>(p);
    for (uint64_t i = 0; i < max_cycles; i++) {
        if (MEM_IRQ(b->top)) return 0;
        tick(b);
    }
    return MEM_IRQ(b->top) ? 0 : 1;
#else
    (void)p; (void)max_cycles;
    return -1;
#endif
}

}  // extern "C"
