"""The fused depthwise + pointwise block's limits and sizes, as functions of the configuration.

docs/engine.md, "The fused depthwise + pointwise block": a depthwise
convolution's output goes from the :class:`~fpgacnn.hdl.datapath.depthwise_unit.DepthwiseUnit`
into the slots of a :class:`~fpgacnn.hdl.datapath.pair_buffer.PairBuffer`,
which the main array reads as the 1x1 remap's window. Its sizes follow from
the configuration here, once; the gateware, its tests and (steps 3 to 5 of
the design) the contract, the descriptor check and the compiler read them
from here. Nothing of the engine is built from them yet: no engine
generated today has the block.
"""

import dataclasses
import math

from .config import ConfigError, require_config
from .technology import PARAM_RECORD_BYTES, PARAM_RECORD_FIELDS, products_latency
from .errors import MappingError
from .memory_port import read_bytes

__all__ = ["PAIR_BUFFER_SLOTS", "LUT_RAM_WORDS",
           "PairBufferShape", "pair_buffer_shape", "pair_buffer_run", "depthwise_sum_width",
           "depthwise_unit_latency", "depthwise_issue_cycles", "BIAS_BITS", "check_depthwise_sums",
           "depthwise_word_bytes", "depthwise_memory_words", "pointwise_tiles",
           "depthwise_lanes", "depthwise_on_vector_lanes", "depthwise_term_width"]

#: Bits of a folded bias (the parameter record's ``bias`` field): the requantizing
#: stage adds it to the depthwise unit's sums, as the array's requantizer does.
BIAS_BITS = 8 * next(size for name, _, size, _ in PARAM_RECORD_FIELDS if name == "bias")


#: The most slots of the pair buffer, each a pixel pair's depthwise output.
#: Two would do if the depthwise side could fill a slot while the pointwise
#: side reads the other, but it cannot start a pair before its slot is free,
#: and a pair takes the line buffer's latency twice, ``ci_tiles`` windows
#: and the depthwise unit's and requantizer's latencies to fill (about 43
#: cycles at 64 channels on the PYNQ-Z2's engine) against the pointwise's
#: ``co_tiles * group`` to read (32 there, 8 for MobileNet's 32-channel
#: block): the depthwise side must run that many pairs ahead for the
#: pointwise to read back to back. Eight cover the zoo's blocks on the
#: PYNQ-Z2 (sixteen gain no cycle; docs/engine.md, "The pair buffer's
#: slots"). A power of two: the slot is the address's top bits.
PAIR_BUFFER_SLOTS = 8

#: Words of the LUT RAM a pair buffer position is built of (Xilinx RAM32M,
#: 32 x 6 bits a slice's four LUTs): a memory up to this deep costs what one
#: of 8 words does, one deeper twice as much (RAM64M, 64 x 3). The slots stop
#: short of it (at least two), so a buffer of large groups keeps fewer.
LUT_RAM_WORDS = 32


@dataclasses.dataclass(frozen=True)
class PairBufferShape:
    """The pair buffer of an engine: ``slots`` slots, each two output pixels of ``channels`` int8.

    Attributes
    ----------
    pin : int
        Channels of a word (the configuration's): the unit writes one of each
        pixel a cycle, the array reads ``positions`` of each a cycle.
    channels : int
        Channels a pixel holds: ``max_channels``, the deepest input the line
        buffer takes, so every depthwise layer the engine runs fits.
    tiles : int
        Words of ``pin`` channels a pixel holds: ``ceil(channels / pin)``.
    positions : int
        The 1x1 remap's positions, ``kmax * kmax``: a memory each, so that a
        read gives a whole window.
    group : int
        Words a position holds in a slot: ``ceil(tiles / positions)``, the
        most windows the main array reads a slot in for an output tile.
    slots : int
        Pixel pairs the buffer holds, a power of two: :data:`PAIR_BUFFER_SLOTS`,
        fewer where their memory would be deeper than :data:`LUT_RAM_WORDS`
        (groups over 4), at least 2.
    depth : int
        Words of each position's memory: ``slots`` slots of ``group`` words,
        each slot on a power of two (the slot is the address's top bits, no adder).
    """

    pin: int
    channels: int
    tiles: int
    positions: int
    group: int
    slots: int
    depth: int

    @property
    def bytes(self):
        """Bytes the buffer holds: ``slots`` slots of two pixels, ``positions * group`` words
        of ``pin`` each."""
        return self.slots * 2 * self.positions * self.group * self.pin


def pair_buffer_shape(config):
    """The :class:`PairBufferShape` of ``config``'s engine."""
    require_config(config)
    tiles = math.ceil(config.max_channels / config.pin)
    positions = config.kmax * config.kmax
    group = math.ceil(tiles / positions)
    most = PAIR_BUFFER_SLOTS
    if most < 2 or most & (most - 1):
        raise ConfigError(f"the pair buffer's slots are a power of two of at least 2 (the writer "
                          f"fills one while the reader reads another), not {most}")
    group_bits = (group - 1).bit_length()
    slots = max(2, min(most, LUT_RAM_WORDS >> group_bits))
    return PairBufferShape(pin=config.pin, channels=config.max_channels, tiles=tiles, positions=positions,
                           group=group, slots=slots, depth=slots << group_bits)


def pair_buffer_run(config, channels, *, name="layer"):
    """The pair buffer's setting for a block of ``channels`` depthwise channels.

    Returns
    -------
    tiles : int
        Words a pixel of the block takes: ``ceil(channels / pin)`` (the
        depthwise's input tiles, the words the unit writes a pixel pair).
    group : int
        Words of each remap position: ``ceil(tiles / kmax^2)``, the pointwise's
        input tiles (:func:`fpgacnn.host.packing.remap_group` of the ``kmax``
        block, in words).

    Raises
    ------
    MappingError
        ``channels`` is not between 1 and the pair buffer's ``max_channels``.
    """
    shape = pair_buffer_shape(config)
    if isinstance(channels, bool) or not isinstance(channels, int) or channels < 1:
        raise MappingError(f"{name}: a fused block needs a positive channel count, "
                           f"not {channels!r}")
    if channels > shape.channels:
        raise MappingError(
            f"{name}: {channels} depthwise channels exceed the pair buffer's {shape.channels} "
            f"(max_channels) a pixel")
    tiles = math.ceil(channels / config.pin)
    return tiles, pointwise_tiles(config, tiles)


def pointwise_tiles(config, tiles):
    """The pointwise half's input tiles (words of each remap position) for a block of
    ``tiles`` depthwise input tiles: ``ceil(tiles / kmax^2)``. A fused run's
    descriptor gives ``tiles`` (its ``ci_tiles``); the pair buffer, the weight
    reads and the contract derive this from it."""
    return math.ceil(tiles / pair_buffer_shape(config).positions)


def depthwise_sum_width(config):
    """Bits of one depthwise sum, exact: ``kmax^2`` int8 x int8 products (each within
    16 bits, ``-128 * -128 = 2**14``), a bit for each level of their adder tree."""
    require_config(config)
    return 16 + (config.kmax * config.kmax - 1).bit_length()


def depthwise_unit_latency(config):
    """Cycles of the :class:`~fpgacnn.hdl.datapath.depthwise_unit.DepthwiseUnit` from a window
    taken to its sums out, when not held up: the products (operand and product
    registers, as the array's with ``deep_pipeline``, which ``pixel_pairs`` implies:
    :func:`~fpgacnn.core.contract.products_latency`), one per level of the
    ``kmax^2``-term adder tree, and the output register; with ``depthwise_pixels``
    1 a cycle more, the second window's (its products follow the first's by a
    cycle, and both pixels' sums leave together)."""
    require_config(config)
    levels = (config.kmax * config.kmax - 1).bit_length()
    return products_latency(True) + levels + 1 + depthwise_issue_cycles(config) - 1


def depthwise_issue_cycles(config):
    """Cycles between two window pairs of a fused run: 1, or 2 with ``depthwise_pixels``
    1 (the half-rate unit works a pair's two windows in two cycles and takes no
    pair in the second: docs/engine.md, "The half-rate depthwise unit"), but 1
    after a pair of one pixel (an odd row's last), which has no second window.
    The line buffer issues a fused run's window pairs at most this often; the
    cycle model counts a pair's ``ci_tiles`` windows at this pace."""
    require_config(config)
    return 2 // config.depthwise_pixels


def check_depthwise_sums(config):
    """Raise :class:`~fpgacnn.core.config.ConfigError` unless ``config``'s ``acc_width``
    holds a depthwise sum (:func:`depthwise_sum_width`): the unit's sums are
    ``acc_width`` wide, as the array's. Read by the unit and by the contract of an
    engine with ``fused_blocks``."""
    need = depthwise_sum_width(config)
    if config.acc_width < need:
        raise ConfigError(f"the depthwise unit's sums of {config.kmax}x{config.kmax} "
                          f"products need acc_width >= {need}, not {config.acc_width}")


def depthwise_word_bytes(config):
    """Bytes of a word of the depthwise memory, one input tile of a block: the
    unit's weights, ``pin`` channels of ``kmax^2`` int8 (``[p][ky*kmax + kx]``,
    :func:`~fpgacnn.hdl.datapath.depthwise_unit.depthwise_unit_input`'s
    ``weights``), then the ``pin`` channels' parameter records (channel 0 first,
    :data:`~fpgacnn.core.technology.PARAM_RECORD_FIELDS`): the requantizing
    lanes take a channel's multiplier and shift with its sums, every word, so
    they come with the weights rather than from the parameter buffer, whose one
    read port the pointwise half's requantizer has."""
    require_config(config)
    return config.pin * (config.kmax * config.kmax + PARAM_RECORD_BYTES)


def depthwise_memory_words(config):
    """Words of the depthwise memory: ``fused_blocks`` blocks of the pair buffer's
    ``ceil(max_channels / pin)`` input tiles (0 without the block)."""
    require_config(config)
    return config.fused_blocks * pair_buffer_shape(config).tiles


def depthwise_lanes(config):
    """Requantizing lanes of the depthwise half: ``2 * pin``, a word of ``pin`` channels
    of both pixels of a pair a cycle (the unit's sums of one window pair)."""
    require_config(config)
    return 2 * config.pin


def depthwise_term_width(config):
    """Bits of a requantizing lane's term ``acc + bias``, exact: a depthwise sum
    (:func:`depthwise_sum_width`) plus a folded bias (:data:`BIAS_BITS`), one bit
    for the sum: 33 with int32 biases."""
    return max(depthwise_sum_width(config), BIAS_BITS) + 1


def depthwise_on_vector_lanes(config):
    """Whether the program engine requantizes the depthwise half's sums on the vector
    unit's lanes (docs/engine.md, "The requantizing lanes of the depthwise half").

    A convolution leaves the vector unit idle, and its ``read_bytes(config)``
    lanes (:func:`~fpgacnn.core.memory_port.read_bytes`) have the requantizer's
    arithmetic (``scaled_sum`` with ``mb = 0``): lent to the block, they take the
    place of a requantizer of :func:`depthwise_lanes` lanes and its DSP blocks
    (two DSP48E1 a lane in the program engine, whose requantizers multiply by the
    whole multiplier: 16 on the PYNQ-Z2).
    True with ``fused_blocks`` where the vector unit has a lane for each of the
    half's sums (their multipliers are ``mult_width``, which is
    :data:`~fpgacnn.core.widths.MULT_BITS`, as the lanes'); a standalone
    engine (the UART and DMA tops) has no vector unit and keeps its own lanes,
    as does a program engine where this is False. The lanes take the same
    cycles either way (``Latencies.depthwise_requant``), so the cycle model
    does not depend on the top.

    While the block has the lanes the fused residual Add
    (:mod:`~fpgacnn.core.fused_add_fields`), which computes on them too, cannot
    have them: where this is True a program's fused block run does not enable
    the fused Add (:func:`fpgacnn.host.fused_add.fusions` leaves the Add a vector
    record; the vector unit gives the lanes to the block).
    """
    require_config(config)
    return bool(config.fused_blocks) and read_bytes(config) >= depthwise_lanes(config)
