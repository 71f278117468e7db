"""The stream's parameter record and the technology facts the engine's latencies follow from.

Below :mod:`fpgacnn.core.contract`, which re-exports the names here but the
memory-style rule at the end (the loader and the sizing read it from here): the
contract reads :mod:`fpgacnn.core.fused_block`'s sizes and latencies, and
those are built from these facts too, so they cannot live in the contract
itself (an import cycle).
"""

import math

from .widths import MULT_BITS

__all__ = ["PARAM_RECORD_FIELDS", "PARAM_RECORD_BYTES", "MEMORY_READ_LATENCY",
           "MULTIPLIER_LATENCY", "OPERAND_PART_BITS", "memory_part_depth", "memory_parts",
           "memory_latency", "operand_parts", "products_latency", "LUT_RAM_MAX_WORDS",
           "in_block_ram", "ram_style"]

# -- the stream's parameter record --------------------------------------------

#: One output channel's parameter record in the input stream, little endian:
#: ``(name, first byte, bytes, signed)``. The folded bias (int32), the
#: requantization multiplier (``MULT_BITS`` unsigned) and the shift.
PARAM_RECORD_FIELDS = (
    ("bias", 0, 4, True),
    ("mult", 4, MULT_BITS // 8, False),
    ("shift", 4 + MULT_BITS // 8, 1, False),
)
#: Bytes of one parameter record.
PARAM_RECORD_BYTES = sum(size for _, _, size, _ in PARAM_RECORD_FIELDS)


# -- technology facts the latencies follow from --------------------------------

#: Read latency of a pipelined block-RAM memory: the block's read and a register behind it.
MEMORY_READ_LATENCY = 2
#: Cycles of a pipelined multiplier (DSP block): operand registers, product register.
MULTIPLIER_LATENCY = 2
#: Operand bits of one partial product of a wide multiplication: 17 unsigned
#: bits fit the ECP5 MULT18X18D's signed 18-bit operands (and the DSP48's).
OPERAND_PART_BITS = 17


def memory_part_depth(width):
    """Words of one block-RAM part at ``width`` bits: 1024 up to 18 bits, else 512 (ECP5 DP16KD)."""
    return 1024 if width <= 18 else 512


def memory_parts(width, depth):
    """Parts (in depth) a pipelined memory of ``depth`` words of ``width`` bits is split into."""
    return math.ceil(depth / memory_part_depth(width))


def memory_latency(width, depth, *, register_output=False):
    """Read latency of a pipelined memory: one cycle more for a registered part select."""
    return MEMORY_READ_LATENCY + (register_output and memory_parts(width, depth) > 1)


def operand_parts(width, *, signed):
    """``(offset, width, signed)`` parts of a wide multiplier operand, :data:`OPERAND_PART_BITS` each.

    The low parts are unsigned; the top part keeps the operand's sign (one
    bit less then, so that it still fits a signed 18-bit operand).
    """
    parts, offset = [], 0
    while offset < width:
        left = width - offset
        if left <= OPERAND_PART_BITS - (1 if signed else 0):
            parts.append((offset, left, signed))
            break
        parts.append((offset, OPERAND_PART_BITS, False))
        offset += OPERAND_PART_BITS
    return parts


def products_latency(registered_operands):
    """Cycles of the int8 products of the MAC array: 2 with registered operands, else 1."""
    return 2 if registered_operands else 1


# -- where a small memory is built ---------------------------------------------

#: The deepest memory built of LUT RAM (the Vivado and yosys attribute
#: ``ram_style: distributed``): 64 words is the deepest LUT RAM of one LUT a
#: bit on Xilinx parts (RAM64M, 64 x 3 bits a slice's four LUTs). A deeper
#: memory takes a LUT a bit every 64 words and a multiplexer behind them: the
#: PYNQ-Z2's depthwise memory of 13 fused blocks (416 words of 576 bits) took
#: ~7,300 LUTs so, where 8 RAMB36 of the ~25 the buffers leave hold it
#: (docs/engine.md, "The depthwise memory"). The read is synchronous either way
#: (address to data a cycle later), so the cycles do not depend on it.
LUT_RAM_MAX_WORDS = 64


def in_block_ram(words):
    """Whether a memory of ``words`` words is built in block RAM: deeper than
    :data:`LUT_RAM_MAX_WORDS`. The gateware's ``ram_style`` (:func:`ram_style`) and
    the sizing's block RAM count (:func:`fpgacnn.boards.engine_sizing.bram_blocks_needed`)
    both read it."""
    return words > LUT_RAM_MAX_WORDS


def ram_style(words):
    """The ``ram_style`` attribute of a memory of ``words`` words: ``"block"`` where
    :func:`in_block_ram`, else ``"distributed"`` (LUT RAM)."""
    return "block" if in_block_ram(words) else "distributed"
