// The simulated open board: a Verilator model of the UART bridge top
// (fpgacnn_uart_top: clk, rst, uart_rx, uart_tx) with a C++ model of the
// host's side of the serial line, clocked entirely in C++.
//
// Built by fpgacnn/sim/uart_board.py and loaded as a shared library through
// ctypes. The host model is a plain 8N1 UART at `clocks_per_bit` engine
// clocks per bit, like the board's USB-UART chip: bytes the host queues are
// shifted into uart_rx back to back (start bit, 8 data bits LSB first, stop
// bit), and uart_tx is watched for start bits and sampled in the middle of
// each bit into a receive queue. Python only queues bytes and asks for
// received ones; no bit waits on Python.

#include <cstdint>
#include <cstring>
#include <deque>

#include "verilator_model.h"

namespace {

struct Board : VerilatorModel {
    uint64_t cycle = 0;
    uint64_t time = 0;
    uint32_t cpb = 4;  // clocks per bit, on both sides of the line

    // Host -> board: the line into uart_rx.
    std::deque<uint8_t> txq;  // bytes not started yet
    bool tx_active = false;   // a byte is on the line
    uint32_t tx_frame = 0;    // start, 8 data bits, stop; bit 0 first
    uint32_t tx_bit = 0, tx_count = 0;

    // Board -> host: uart_tx into a receive queue.
    // WAIT_IDLE: the line must be seen high (idle) before a falling edge
    // counts, so the undefined or low line before reset is not a start bit.
    enum { RX_WAIT_IDLE, RX_IDLE, RX_START, RX_DATA, RX_STOP } rx = RX_WAIT_IDLE;
    uint32_t rx_count = 0, rx_bit = 0;
    uint8_t rx_byte = 0;
    std::deque<uint8_t> rxq;
    uint64_t framing_errors = 0;
};

void dump(Board* b) {
    b->dump(b->time);
    b->time += 5;
}

// The host's receiver, once per cycle, on the value uart_tx holds this cycle.
void receive(Board* b, int line) {
    switch (b->rx) {
    case Board::RX_WAIT_IDLE:
        if (line) b->rx = Board::RX_IDLE;
        break;
    case Board::RX_IDLE:
        if (!line) { b->rx = Board::RX_START; b->rx_count = 0; }
        break;
    case Board::RX_START:
        // Middle of the start bit: still low, or it was a glitch.
        if (++b->rx_count >= b->cpb / 2) {
            if (line) { b->rx = Board::RX_IDLE; break; }
            b->rx = Board::RX_DATA; b->rx_count = 0; b->rx_bit = 0; b->rx_byte = 0;
        }
        break;
    case Board::RX_DATA:
        if (++b->rx_count >= b->cpb) {
            b->rx_count = 0;
            b->rx_byte |= (uint8_t)((line & 1) << b->rx_bit);
            if (++b->rx_bit == 8) b->rx = Board::RX_STOP;
        }
        break;
    case Board::RX_STOP:
        if (++b->rx_count >= b->cpb) {
            // A low stop bit is a framing error: a real UART would hand the
            // byte up flagged; the count lets tests insist there are none.
            b->rxq.push_back(b->rx_byte);
            if (line) {
                b->rx = Board::RX_IDLE;
            } else {
                b->framing_errors++;
                b->rx = Board::RX_WAIT_IDLE;
            }
        }
        break;
    }
}

void tick(Board* b) {
    Vtop* t = b->top;
    if (!b->tx_active && !b->txq.empty()) {
        b->tx_frame = (1u << 9) | ((uint32_t)b->txq.front() << 1);  // stop=1, data, start=0
        b->txq.pop_front();
        b->tx_active = true;
        b->tx_bit = b->tx_count = 0;
    }
    t->uart_rx = b->tx_active ? (b->tx_frame >> b->tx_bit) & 1 : 1;

    t->clk = 0;
    t->eval();
    dump(b);
    t->clk = 1;
    t->eval();
    dump(b);
    b->cycle++;

    if (t->rst) b->rx = Board::RX_WAIT_IDLE;
    else receive(b, t->uart_tx & 1);

    if (b->tx_active && ++b->tx_count >= b->cpb) {
        b->tx_count = 0;
        if (++b->tx_bit == 10) b->tx_active = false;
    }
}

}  // namespace

extern "C" {

void* uart_new(const char* wave_path, uint32_t clocks_per_bit) {
    Board* b = new Board;
    b->cpb = clocks_per_bit < 2 ? 2 : clocks_per_bit;
    b->open_model(wave_path);
    b->top->uart_rx = 1;
    b->top->eval();
    return b;
}

void uart_free(void* p) {
    Board* b = static_cast<Board*>(p);
    b->close_model();
    delete b;
}

uint64_t uart_cycles(void* p) { return static_cast<Board*>(p)->cycle; }
uint64_t uart_framing_errors(void* p) { return static_cast<Board*>(p)->framing_errors; }

// Hold the top in reset (the board's PLL-lock reset); the line model starts
// over too: nothing queued, nothing received.
void uart_reset(void* p, uint32_t cycles) {
    Board* b = static_cast<Board*>(p);
    b->txq.clear();
    b->tx_active = false;
    b->rxq.clear();
    b->top->rst = 1;
    for (uint32_t i = 0; i < cycles; i++) tick(b);
    b->top->rst = 0;
    tick(b);
}

void uart_step(void* p, uint64_t cycles) {
    Board* b = static_cast<Board*>(p);
    for (uint64_t i = 0; i < cycles; i++) tick(b);
}

void uart_write(void* p, const uint8_t* data, uint64_t n) {
    Board* b = static_cast<Board*>(p);
    b->txq.insert(b->txq.end(), data, data + n);
}

// Bytes written and not yet completely on the line (queued + the one shifting).
uint64_t uart_out_waiting(void* p) {
    Board* b = static_cast<Board*>(p);
    return b->txq.size() + (b->tx_active ? 1 : 0);
}

// Drop the queued bytes that have not started (the one on the line finishes).
void uart_clear_output(void* p) { static_cast<Board*>(p)->txq.clear(); }

uint64_t uart_in_waiting(void* p) { return static_cast<Board*>(p)->rxq.size(); }

void uart_clear_input(void* p) { static_cast<Board*>(p)->rxq.clear(); }

// Clock until `n` bytes have been received or `max_cycles` cycles passed;
// take up to `n` of them into `out`. Returns how many were taken.
uint64_t uart_read(void* p, uint8_t* out, uint64_t n, uint64_t max_cycles) {
    Board* b = static_cast<Board*>(p);
    for (uint64_t i = 0; i < max_cycles && b->rxq.size() < n; i++) tick(b);
    uint64_t got = b->rxq.size() < n ? b->rxq.size() : n;
    for (uint64_t i = 0; i < got; i++) {
        out[i] = b->rxq.front();
        b->rxq.pop_front();
    }
    return got;
}

// Clock until every written byte is on the line (or `max_cycles` passed);
// 0 when drained, 1 on timeout.
int uart_drain(void* p, uint64_t max_cycles) {
    Board* b = static_cast<Board*>(p);
    for (uint64_t i = 0; i < max_cycles && (b->tx_active || !b->txq.empty()); i++) tick(b);
    return (b->tx_active || !b->txq.empty()) ? 1 : 0;
}

}  // extern "C"
