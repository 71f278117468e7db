"""The hard multiplier products of the program engine, beside the convolution engine's.

The program engine (:mod:`fpgacnn.hdl.program`), whose tops are the Zynq
boards', builds its convolution engine's requantizers with the whole
multiplier (:data:`PROGRAM_WHOLE_MULTIPLIER`: a DSP48 multiplies 25 x 18
signed, so each 17-bit part of ``acc + bias`` times the 24-bit multiplier is
one, two a lane where the ECP5's 18 x 18 blocks take four), and multiplies in
one place of its own: the vector unit's lanes, each a
:func:`~fpgacnn.hdl.program.scaled_sum.scaled_sum` (``a_term * ma + b_term *
mb``), which the fused Add and the fused block's depthwise half borrow. A
lane's ``a_term`` is 32 or 33 bits and its multiplier 25 (``MULT_BITS``
unsigned with a zero sign bit), wider than a DSP48's 25 x 18 signed
multiplier: as one ``*``, yosys's ``synth_xilinx`` tiles it over four DSP48s
(each signed part of a split loses a bit). So the lane multiplies the term in
:func:`~fpgacnn.core.technology.operand_parts` (17-bit parts, the top one
signed) by the whole multiplier, one DSP48 a part whichever tool maps it, and
sums the parts with ``b_term * mb`` (one more) in its sum stage.

Declared once here: the gateware builds its lanes from
:func:`vector_lane_term_bits` and :func:`scaled_sum_term_parts` and its
requantizers from :data:`PROGRAM_WHOLE_MULTIPLIER`, and the board sizing
(:func:`fpgacnn.boards.engine_sizing.multipliers_needed`) counts both on the
boards whose top has the program engine (docs/boards.md, "DSP blocks").
"""

from .config import require_config
from .fused_block import depthwise_lanes, depthwise_on_vector_lanes, depthwise_term_width
from .memory_port import read_bytes
from .technology import operand_parts
from .vector_fields import VECTOR_ACC_BITS
from .widths import MULT_BITS

__all__ = ["PROGRAM_WHOLE_MULTIPLIER", "VECTOR_B_TERM_BITS", "SCALED_SUM_MULT_BITS",
           "scaled_sum_term_parts", "scaled_sum_products", "vector_lane_term_bits",
           "program_engine_products"]

#: The program engine's requantizers multiply by the whole multiplier
#: (:func:`~fpgacnn.core.contract.requant_product_parts`): its tops are Zynq's.
PROGRAM_WHOLE_MULTIPLIER = True
#: Bits of a vector lane's ``b_term`` register (signed): ``b - zb`` or the fused
#: Add's ``b`` term, an int8 less an int8 zero point.
VECTOR_B_TERM_BITS = 10
#: Bits of a lane's multiplier operand: ``MULT_BITS`` unsigned with a zero sign bit.
SCALED_SUM_MULT_BITS = MULT_BITS + 1


def scaled_sum_term_parts(term_bits):
    """``(offset, width, signed)`` parts of a lane's ``a_term`` of ``term_bits``
    (signed), each multiplied by the whole multiplier in one hard multiplier."""
    return operand_parts(term_bits, signed=True)


def scaled_sum_products(a_bits, b_bits):
    """``(a operand bits, b operand bits)`` of the hard products of one scaled-sum
    lane with an ``a_bits`` and a ``b_bits`` term (signed operand widths, an
    unsigned part counted with its zero sign bit)."""
    parts = [(width + (0 if signed else 1), SCALED_SUM_MULT_BITS)
             for _, width, signed in scaled_sum_term_parts(a_bits)]
    return parts + [(b_bits, SCALED_SUM_MULT_BITS)]


def vector_lane_term_bits(config):
    """Bits of each vector-unit lane's ``a_term``, one entry a lane
    (``read_bytes(config)`` lanes): :data:`~fpgacnn.core.vector_fields.VECTOR_ACC_BITS`,
    the depthwise half's lanes as wide as its term where they are lent to it
    (:func:`~fpgacnn.core.fused_block.depthwise_on_vector_lanes`)."""
    require_config(config)
    lent = depthwise_lanes(config) if depthwise_on_vector_lanes(config) else 0
    wide = max(VECTOR_ACC_BITS, depthwise_term_width(config))
    return [wide if k < lent else VECTOR_ACC_BITS for k in range(read_bytes(config))]


def program_engine_products(config):
    """``(a bits, b bits)`` of every hard product the program engine adds to the
    convolution engine's: the vector unit's lanes' (:func:`scaled_sum_products`)."""
    return [product for bits in vector_lane_term_bits(config)
            for product in scaled_sum_products(bits, VECTOR_B_TERM_BITS)]
