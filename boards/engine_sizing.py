"""A default engine for a board: as many multipliers and as much buffer as fit.

:func:`size_engine` picks an :class:`~fpgacnn.core.config.EngineConfig` for a
:class:`~fpgacnn.boards.board.Board` and says why. The rules, in order:

1. ``kmax = 3``: 3x3 is the common kernel, and 1x1 layers and Gemm are
   remapped onto the 3x3 window without wasting lanes (docs/engine.md).
2. ``pin`` and ``pout`` (powers of two) give the most MACs per cycle,
   ``kmax*kmax*pin*pout``, such that the multipliers fit the board's hard
   multipliers: one per int8 x int8 product -- except on iCE40 UltraPlus
   parts, where :class:`~fpgacnn.hdl.tech.int8_products.Int8Products` puts two
   products in each ``SB_MAC16`` (its 8x8 mode) and a lane's odd product in
   LUTs -- plus per output lane the requantizer's
   multiply: its partial products (``requant_product_parts``, 17-bit operand
   parts, one hard multiplier each; on the Zynq boards, whose top is the
   program engine, the parts of the sum times the whole multiplier) with
   ``deep_pipeline``, else the ``acc_width x (mult_width + 1)`` product split
   into tiles of the DSP's operand widths; with pixel pairs (3d) two
   requantizers a lane and a tap's two products in one DSP48; plus the
   descriptor check's product and, on the Zynq boards, the program engine's
   vector unit (:func:`multiplier_parts`, docs/boards.md "DSP blocks"); and
   the smallest buffers (step 4) must
   fit the block RAMs, because a weight word is ``pout*kmax*kmax*pin`` bytes wide. Among equal MAC counts the balanced one (``pin == pout``)
   wins, then the one with more output lanes. If even ``pin = pout = 1`` does
   not fit, that is chosen and the rest is built from LUTs.
3. ``stream_width``: on Zynq boards the HP port's width of the board's
   family (:class:`~fpgacnn.boards.zynq_design.ProcessingSystem`
   ``hp_max_width``: 64 bits on a Zynq-7000, 128 on a Zynq UltraScale+), so
   that the DMA's stream and the program engine's memory reads (``R =
   max(pin, stream_bytes)`` bytes) move what the port does each cycle -- but
   no wider than a beat of two input words (``16*pin`` bits), which the
   line buffer stores in one cycle (3b): a wider beat would lose the pair
   writer and halve the input rate of the layers it bounds, for faster
   weight loads only (the Ultra96-V2's ``pin = 4`` engine stays at 64 bits;
   docs/boards.md gives the cycles either way). Elsewhere 64 bits (the open
   boards' streams are behind a UART, far slower than either width). 32 on
   parts under 10k LUTs. A width that does not divide with ``pin`` and
   ``pout`` is passed over for the nearest that does.
3b. ``writer_words``: 2 where a beat holds two input words (``stream_width
   == 16*pin``) on parts of 10k LUTs or more (docs/engine.md, "The pair
   writer"), else 1.
3c. ``spare_bank``: 1 on Xilinx parts (DSP48 multipliers) for steps 2 and 4:
   ``kmax + 1`` line-buffer column banks, the same windows and cycles in
   fewer block RAMs by this model (shallower banks fit the blocks better),
   and the two windows of a stride-1 pixel pair in one read (docs/engine.md,
   "Pixel pairs"); 0 elsewhere, where the ECP5 and iCE40 builds stand as
   measured. More spare banks are step 4b's.
3d. ``pixel_pairs``: 1 on Xilinx parts too: layers of a stride up to
   ``spare_bank`` (4b) run two adjacent output pixels a window issue, the pair's two products of a tap
   in one DSP48 (docs/engine.md, "Pixel pairs"), so the same DSPs make
   twice the products; the requantizers double. Counted in step 2 (the
   multipliers); 0 elsewhere, whose multipliers cannot take a packed pair.
4. Buffers: starting from a small engine, ``max_channels``,
   ``max_out_channels`` and ``max_width`` are doubled in turn while the
   engine contract's buffers (line, weight, parameter buffers and the
   max-pool's row memory) fit the block RAMs, counted per memory in whole
   blocks of the best aspect ratio (half blocks where a block splits in
   two, a Xilinx RAMB36 into RAMB18s), leaving 5% of the blocks (at least the
   2 the FIFOs take) for FIFOs and skid buffers.
4b. More spare banks (engines with pixel pairs): ``spare_bank`` up to
   ``kmax``, so that pairs run at every stride up to it (stride-2 layers,
   and with ``kmax`` the 1x1 remap, which runs at stride ``kmax``), where the
   extra banks' block RAMs fit beside the buffers of step 4 -- the
   parallelism and the channel capacities (the resident weights) as they
   are, ``max_width`` as it is or halved, never below 128. The PYNQ-Z2's
   engine takes ``kmax`` at ``max_width`` 128: by the cycle model ResNet-8
   46,273 cycles against 55,879 with one spare bank at 256, MobileNetV1
   65,501 against 88,241 (docs/engine.md, "Pixel pairs").
4c. ``param_words`` (Xilinx parts): the deepest parameter buffer that takes
   no more block RAMs than one run's output tiles do (a power of two, at
   most :data:`_PARAM_WORDS_CAP`): a RAMB36 is 512 words deep at 72 bits, so
   the PYNQ-Z2's 4 blocks hold 512 words where one run needs 64. Each channel
   group of a resident program then keeps its parameters there too
   (``param_base``), and a warm run streams only its pixels (docs/engine.md,
   "Resident weights"). Elsewhere one run's: the ECP5 and iCE40 builds stand
   as measured.
4d. ``fused_blocks`` (engines with pixel pairs, whose depthwise unit reads
   the line buffer's window pairs): the fused depthwise + pointwise block
   (docs/engine.md, "The fused depthwise + pointwise block") where its
   depthwise memory fits the block RAMs left beside the buffers:
   :data:`_FUSED_BLOCKS_WANTED` blocks (MobileNetV1's 13, the zoo's most),
   or fewer down to :data:`_FUSED_BLOCKS_LEAST` (DS-CNN's 4), and then as
   many more as take no more block RAMs (the memory's depth to the end of
   its blocks). A memory deeper than
   :data:`~fpgacnn.core.technology.LUT_RAM_MAX_WORDS` is built in block RAM
   (:func:`~fpgacnn.core.technology.in_block_ram`), each stream beat of
   its words in blocks of its own (the beat-wide write lanes); the block
   adds no DSP on the Zynq boards' top, whose program engine lends it the
   vector unit's lanes (:func:`~fpgacnn.core.fused_block.depthwise_on_vector_lanes`).
   The PYNQ-Z2 takes 16 blocks in 9 RAMB36 (docs/boards.md). Where the
   board's file chooses it (``[sizing] fused_block``, with
   ``depthwise_pixels`` the depthwise unit's rate) or where asked
   (``size_engine(board, fused_block=True)``): the block's logic is not in
   these estimates, so a file chooses it where the board's whole top with
   it was measured within 85 % of the LUTs. The PYNQ-Z1/Z2 files do, with
   the half-rate unit (``depthwise_pixels = 1``, docs/engine.md "The
   half-rate depthwise unit"): 44,872 LUTs (84.3 %) by yosys, against
   47,689 (89.6 %) at the full rate, which costs MobileNetV1 6.5 % more
   cycles (its 32 -> 32 block is depthwise-bound at the half rate) and
   DS-CNN 1.1 %; the Ultra96-V2's too (82.4 %), the KV260's at the full
   rate (74.9 %).
5. ``deep_pipeline``: 1 (registers for 100 MHz and more), 0 on iCE40
   parts, whose logic cells are few and whose clock is slow anyway.

These are estimates of what the generated engine needs, made from the
engine contract's buffers (:mod:`fpgacnn.core.contract`); the place-and-route
report is the truth.
"""

import dataclasses
from dataclasses import dataclass, field
import math

from ..core.config import ConfigError, EngineConfig
from ..core.contract import engine_contract, requant_product_parts
from ..core.fused_block import depthwise_on_vector_lanes
from ..core.program_products import PROGRAM_WHOLE_MULTIPLIER, program_engine_products
from ..core.technology import in_block_ram
from ..hdl.datapath.descriptor_check import check_products
from ..hdl.tech.ecp5_block_ram import blocks_in_parts
from ..hdl.tech.pair_products import PACKED_WIDTH
from ..hdl.tech.pipelined_memory import in_ecp5_blocks
from .board import require_board
from .zynq_design import DESIGN

__all__ = ["Sizing", "size_engine", "multipliers_needed", "multiplier_parts", "bram_blocks_needed",
           "fifo_reserve", "sizing_markdown"]

_KMAX = 3
_POWERS = (1, 2, 4, 8, 16, 32, 64)
_START = {"max_channels": 8, "max_out_channels": 8, "max_width": 16}
#: The narrowest ``max_width`` rule 4b takes for more spare banks: rows of 128
#: pixels at the engine's most channels (ResNet-18's 112-pixel rows and their
#: padding, MobileNet-VWW's 96); rows of fewer channels take more pixels.
_PAIR_MIN_WIDTH = 128
_CAP = {"max_channels": 512, "max_out_channels": 512, "max_width": 512}
#: The deepest parameter buffer rule 4c tries: every MLPerf Tiny model's
#: parameters at pout 4 but MobileNetV1's 685 words fit 512, which a RAMB36
#: holds at 72 bits; deeper ones cost blocks on every Xilinx part.
_PARAM_WORDS_CAP = 512
_GROW_ORDER = ("max_channels", "max_out_channels", "max_width")
#: Fused blocks rule 4d gives an engine where they fit: MobileNetV1's 13
#: depthwise + pointwise blocks, the most of the zoo's networks.
_FUSED_BLOCKS_WANTED = 13
#: The fewest fused blocks rule 4d gives (else none): DS-CNN's 4.
_FUSED_BLOCKS_LEAST = 4
#: Parts with fewer LUTs (the iCE40s) take 32-bit streams and one word a cycle:
#: their logic is full and their clock slow.
_SMALL_PART_LUTS = 10000


#: Block RAMs the design's FIFOs take beside the engine's buffers: the
#: engine's output FIFO and the host link's (the UART bridge's). Measured:
#: the iCEBreaker's default engine used 30 / 30 blocks with 28 counted here,
#: the ULX3S-85F's 193 / 208 with 192 (BENCHMARKS.md section 3.1).
_FIFO_BLOCKS = 2


def fifo_reserve(bram_blocks):
    """Block RAMs kept out of the buffers' budget: the FIFOs, or 5% of a bigger part."""
    return max(_FIFO_BLOCKS, math.ceil(0.05 * bram_blocks))


def multipliers_needed(config, board):
    """Hard multipliers ``config`` takes on ``board``'s top: the sum of
    :func:`multiplier_parts`."""
    return sum(multiplier_parts(config, board).values())


def multiplier_parts(config, board):
    """Hard multipliers of ``config`` on ``board``'s top, by part.

    Returns
    -------
    dict
        ``{"mac_array": n, "requantizers": n, "descriptor_check": n,
        "vector_unit": n}``: the MAC array; the requantizers (their partial
        products, :func:`~fpgacnn.core.contract.requant_product_parts`, with
        the whole multiplier on a board whose top is the program engine); the
        descriptor check's product
        (:func:`~fpgacnn.hdl.datapath.descriptor_check.check_products`); on a
        board whose top is the program engine (the Zynq boards) its vector
        unit's lanes (:func:`~fpgacnn.core.program_products.program_engine_products`),
        else 0.
    """
    r = board.resources
    windows = 1 + config.pixel_pairs  # windows a cycle: each lane's products per tap
    if r.multiplier_kind == "SB_MAC16":
        # Int8Products: two 8x8 products per DSP, a lane's odd product in LUTs.
        mac = windows * config.pout * ((config.kmax * config.kmax * config.pin) // 2)
    elif config.pixel_pairs and _xilinx(r):
        # PairProducts: a tap's two products in one 25 x 8 multiply.
        mac = config.window_macs * r.multipliers_for(PACKED_WIDTH, config.weight_width)
    else:
        mac = config.peak_macs_per_cycle * r.multipliers_for(config.act_width, config.weight_width)
    # A requantizer a window. The deep arrangement's multiplies the operands'
    # parts (PipelinedMultiplier), a hard multiplier or more each (an unsigned
    # part counted with its zero sign bit); the compact one's is one product that
    # synthesis tiles.
    program_top = board.family in DESIGN.families  # the Zynq boards' top: the program engine
    if config.deep_pipeline:
        whole = program_top and PROGRAM_WHOLE_MULTIPLIER
        per_lane = sum(r.multipliers_for(a[1] + (not a[2]), b[1] + (not b[2]))
                       for a, b in requant_product_parts(config, whole_multiplier=whole))
    else:
        per_lane = r.multipliers_for(config.acc_width, config.mult_width + 1)

    def count(products):
        return sum(r.multipliers_for(a, b) for a, b in products)

    return {"mac_array": mac, "requantizers": windows * config.pout * per_lane,
            "descriptor_check": count(check_products(config)),
            "vector_unit": count(program_engine_products(config)) if program_top else 0}


def bram_blocks_needed(config, board):
    """Block RAMs the buffers of ``config`` (the engine contract's) take on ``board``.

    Returns
    -------
    dict
        ``{"line_buffer": n, "weight_buffer": n, "param_buffer": n,
        "pool_row": n, "depthwise_memory": n, "total": n}``; a count with a
        half block (a Xilinx RAMB18) is a float. The fused block's depthwise
        memory counts where it is built in block RAM
        (:func:`~fpgacnn.core.technology.in_block_ram`), else 0 (LUT RAM).
    """
    r = board.resources
    k = engine_contract(config)
    line = k.line_buffer.banks * config.writer_words * \
        r.blocks_for(k.line_buffer_memory_words, 8 * k.line_buffer.word_bytes)
    weight = r.blocks_for(k.weights.words, 8 * k.weights.word_bytes)
    param = r.blocks_for(k.params.words, 8 * k.params.word_bytes)
    pool = r.blocks_for(k.pool_row.words, 8 * k.pool_row.word_bytes)
    if board.family == "ecp5" and config.deep_pipeline:
        # The loader's buffers are written a stream beat at a time, and on
        # the ECP5 built from blocks with their output registers, a beat's
        # lane in blocks of its own (hdl/tech/ecp5_block_ram.py).
        weight, param = (_in_beat_lanes(beats, buffer.words, config, r)
                         for beats, buffer in ((k.weight_beats, k.weights),
                                               (k.param_beats, k.params)))
    depthwise = 0
    if k.fused and in_block_ram(k.fused.depthwise_memory.words):
        # Written a stream beat at a time: each beat's lane of the word in
        # blocks of its own (synth_xilinx: 9 RAMB36E1 for 416 words of nine
        # 64-bit beats, where 576 bits in 72-bit blocks would be 8).
        depthwise = k.depthwise_beats * r.blocks_for(k.fused.depthwise_memory.words,
                                                     config.stream_width)
    counts = {"line_buffer": line, "weight_buffer": weight, "param_buffer": param,
              "pool_row": pool, "depthwise_memory": depthwise,
              "total": line + weight + param + pool + depthwise}
    # Whole numbers as ints; half blocks (RAMB18s, Resources.blocks_for) stay floats.
    return {name: int(n) if float(n).is_integer() else n for name, n in counts.items()}


def _in_beat_lanes(beats, depth, config, resources):
    """Blocks of a loader buffer whose words are ``beats`` whole stream beats."""
    width = beats * config.stream_width
    if not in_ecp5_blocks(width):
        return resources.blocks_for(depth, width)
    return blocks_in_parts(width, depth, config.stream_width)


@dataclass(frozen=True)
class Sizing:
    """A chosen engine and the reasons for it.

    Attributes
    ----------
    config : EngineConfig
    multipliers : int
        Hard multipliers it is estimated to take (may exceed the board's; see reasons).
    bram_blocks : dict
        Block RAMs per buffer, from :func:`bram_blocks_needed`.
    reasons : list of str
    """

    config: EngineConfig
    multipliers: int
    bram_blocks: dict
    reasons: list = field(default_factory=list)

    def describe(self):
        """Several lines: the config, the estimates, the reasons."""
        c = self.config
        lines = [f"engine: kmax={c.kmax} pin={c.pin} pout={c.pout} "
                 f"({c.peak_macs_per_cycle} MACs/cycle), stream_width={c.stream_width}, "
                 f"max_width={c.max_width}, max_channels={c.max_channels}, "
                 f"max_out_channels={c.max_out_channels}, deep_pipeline={c.deep_pipeline}"]
        lines += [f"  - {r}" for r in self.reasons]
        return "\n".join(lines)


def _pair_beat_width(pin):
    """Bits of a beat of two input words: what the pair writer stores in one cycle
    (EngineConfig's ``writer_words`` 2, rule 3b), the widest beat rule 3 takes on Zynq."""
    return 2 * 8 * pin


def _stream_widths(pin, board):
    """The stream widths rule 3 tries for ``board``, in order of preference."""
    if board.resources.luts < _SMALL_PART_LUTS:
        # Small parts (iCE40) take 32-bit streams: less packing logic, and the
        # UART host link is far slower than either width.
        return (32, 64, 128)
    if board.family not in DESIGN.families:
        return (64, 32, 128)
    # The HP port's width, no wider than two input words: a third word a beat
    # would wait a cycle in the line buffer's writer (it stores at most two).
    widest = min(DESIGN.ps(board.family).hp_max_width, _pair_beat_width(pin))
    narrower = tuple(w for w in (128, 64, 32) if w <= widest)
    return narrower + tuple(w for w in (32, 64, 128) if w not in narrower)


def _stream_width(pin, pout, board):
    for width in _stream_widths(pin, board):
        b = width // 8
        if (pin % b == 0 or b % pin == 0) and (pout % b == 0 or b % pout == 0):
            return width
    raise AssertionError("unreachable: pin and pout are powers of two")


def _config(pin, pout, sizes, board):
    resources = board.resources
    stream = _stream_width(pin, pout, board)
    # Two input words a beat: the line buffer stores both a cycle (its banks
    # in halves), where one a cycle bounds the 1x1 remap, Gemm, stride-2 and
    # thin first layers at half the stream. Not on parts under 10k LUTs (the
    # iCE40s): their logic is full.
    pairs = stream == _pair_beat_width(pin) and resources.luts >= _SMALL_PART_LUTS
    xilinx = int(_xilinx(resources))
    return EngineConfig(pin=pin, pout=pout, kmax=_KMAX, stream_width=stream,
                        writer_words=2 if pairs else 1, spare_bank=xilinx, pixel_pairs=xilinx,
                        **sizes)


def _xilinx(resources):
    """Whether the part's multipliers are Xilinx DSP48s (the pairs' packed products)."""
    return resources.multiplier_kind.startswith("DSP48")


def _spare_banks(config, board, budget, blocks, reasons):
    """Rule 4b: the most spare column banks that fit beside ``config``'s buffers.

    ``config`` is the engine sized with one spare bank. Its parallelism and its
    channel capacities stay; ``spare_bank`` goes up to ``kmax`` (pairs at every
    stride, the 1x1 remap's included) where the extra banks fit the block RAMs,
    at ``max_width`` or at half of it, never below :data:`_PAIR_MIN_WIDTH`.
    Returns ``(config, blocks)``.
    """
    widths = [w for w in (config.max_width, config.max_width // 2) if w >= _PAIR_MIN_WIDTH]
    for spare in range(config.kmax, 1, -1):
        for width in widths:
            trial = dataclasses.replace(config, spare_bank=spare, max_width=width)
            trial_blocks = bram_blocks_needed(trial, board)
            if trial_blocks["total"] <= budget:
                halved = (f", max_width {config.max_width} -> {width} (the spare banks' blocks "
                          f"fit no wider rows)" if width != config.max_width else "")
                reasons.append(
                    f"spare_bank={spare}: {config.kmax + spare} line-buffer column banks, so "
                    f"pixel pairs run at strides up to {spare}"
                    f"{' (the 1x1 remap too)' if spare == config.kmax else ''}: line buffer "
                    f"{blocks['line_buffer']} -> {trial_blocks['line_buffer']} block RAMs, "
                    f"{trial_blocks['total']} in all{halved}")
                return trial, trial_blocks
    reasons.append(f"spare_bank=1: more spare banks do not fit at max_width "
                   f">= {_PAIR_MIN_WIDTH} beside the buffers; pairs at stride 1 only")
    return config, blocks


def _param_words(config, board, blocks, reasons):
    """Rule 4c: the deepest parameter buffer (a power of two up to
    :data:`_PARAM_WORDS_CAP`) in the block RAMs one run's output tiles take.
    Returns ``(config, blocks)``."""
    tiles = engine_contract(config).params.words
    best = None
    depth = 1 << tiles.bit_length()  # the next power of two above one run's tiles
    while depth <= _PARAM_WORDS_CAP:
        trial = dataclasses.replace(config, param_words=depth)
        trial_blocks = bram_blocks_needed(trial, board)
        if trial_blocks["param_buffer"] > blocks["param_buffer"]:
            break
        best = trial, trial_blocks
        depth *= 2
    if best is None:
        reasons.append(f"param_words=0: a parameter buffer deeper than one run's {tiles} "
                       f"output tiles would take more block RAMs")
        return config, blocks
    config, trial_blocks = best
    reasons.append(
        f"param_words={config.param_words}: a parameter buffer of {config.param_words} words "
        f"in the {blocks['param_buffer']} block RAMs one run's {tiles} output tiles take, so "
        f"that a resident program's parameters stay there too (param_base) and its warm runs "
        f"stream no constants")
    return config, trial_blocks


def _fused_blocks(config, board, budget, blocks, reasons):
    """Rule 4d: the fused block where its depthwise memory fits the block RAMs left.

    :data:`_FUSED_BLOCKS_WANTED` blocks, or fewer down to
    :data:`_FUSED_BLOCKS_LEAST`; then more while the memory takes no more block
    RAMs. Returns ``(config, blocks)``.
    """
    def fits(n):
        try:
            trial = dataclasses.replace(config, fused_blocks=n)
        except ConfigError:  # more than EngineConfig takes
            return None
        trial_blocks = bram_blocks_needed(trial, board)
        return (trial, trial_blocks) if trial_blocks["total"] <= budget else None

    if not depthwise_on_vector_lanes(dataclasses.replace(config, fused_blocks=1)):
        # The Zynq top would build the half's own requantizer, 2 * pin lanes
        # of two DSP48 each, which the multiplier count above does not hold.
        reasons.append("fused_blocks=0: the program engine's vector unit has fewer lanes "
                       "than the depthwise half's sums (its own requantizer's DSPs are not "
                       "in the multiplier budget)")
        return config, blocks
    for n in range(_FUSED_BLOCKS_WANTED, _FUSED_BLOCKS_LEAST - 1, -1):
        best = fits(n)
        if best is not None:
            break
    else:
        need = bram_blocks_needed(dataclasses.replace(config, fused_blocks=_FUSED_BLOCKS_LEAST),
                                  board)
        reasons.append(
            f"fused_blocks=0: even {_FUSED_BLOCKS_LEAST} fused blocks' depthwise memory "
            f"({need['depthwise_memory']} block RAMs) does not fit beside the buffers "
            f"({blocks['total']} of {budget})")
        return config, blocks
    # More blocks in the block RAMs these take: the memory's depth to their end.
    n = best[0].fused_blocks
    while True:
        more = fits(n + 1)
        if more is None or more[1]["depthwise_memory"] > best[1]["depthwise_memory"]:
            break
        best, n = more, n + 1
    config, trial_blocks = best
    words = engine_contract(config).fused.depthwise_memory.words
    where = ("block RAM" if in_block_ram(words) else "LUT RAM")
    reasons.append(
        f"fused_blocks={config.fused_blocks}: the fused depthwise + pointwise block on the "
        f"program engine's vector-unit lanes (no DSP more), its depthwise memory of "
        f"{config.fused_blocks} blocks ({words} words) in {where}, "
        f"{trial_blocks['depthwise_memory']} block RAMs, {trial_blocks['total']} in all "
        f"(MobileNetV1 has {_FUSED_BLOCKS_WANTED} blocks, DS-CNN "
        f"{_FUSED_BLOCKS_LEAST})")
    return config, trial_blocks


def size_engine(board, *, fused_block=None, depthwise_pixels=None):
    """Choose the default engine for ``board``.

    Parameters
    ----------
    board : Board
    fused_block : bool or None
        Rule 4d, the fused depthwise + pointwise block where its depthwise
        memory fits the block RAMs. ``None`` (the default): as the board's
        file chooses (``[sizing] fused_block``, :class:`~fpgacnn.boards.board.
        SizingChoices`), set where the board's whole top with the block was
        measured within the LUT margin a default engine keeps for placement
        at 100 MHz (85 %; the PYNQ-Z1/Z2 with the half-rate unit: 84.3 % by
        yosys, docs/boards.md "The fused block"; the Ultra96-V2 and the KV260
        too); the block's logic is not in this estimate.
    depthwise_pixels : int or None
        The fused block's depthwise unit (``EngineConfig.depthwise_pixels``):
        2, the full-rate unit, or 1, the half-rate one. ``None``: the board
        file's choice where the block is in the engine (2 where the file has
        none). Only with the block.

    Returns
    -------
    Sizing

    Raises
    ------
    TypeError
        If ``board`` is not a Board or ``fused_block`` not a bool.
    ValueError
        If ``depthwise_pixels`` is not 1 or 2, or 1 without ``fused_block``.
    """
    require_board(board)
    if fused_block is not None and not isinstance(fused_block, bool):
        raise TypeError(f"fused_block must be a bool or None, not {fused_block!r}")
    if depthwise_pixels is not None and (isinstance(depthwise_pixels, bool)
                                         or depthwise_pixels not in (1, 2)):
        raise ValueError(f"depthwise_pixels must be 1 or 2, not {depthwise_pixels!r}")
    chosen = fused_block is None
    if chosen:
        fused_block = board.sizing.fused_block
    if depthwise_pixels is None:
        depthwise_pixels = board.sizing.depthwise_pixels if fused_block else 2
    if depthwise_pixels != 2 and not fused_block:
        raise ValueError(f"depthwise_pixels {depthwise_pixels} needs fused_block=True (it "
                         f"sets the fused block's depthwise unit)")
    r = board.resources
    reasons = []
    reserve = fifo_reserve(r.bram_blocks)
    budget = r.bram_blocks - reserve

    # 2. parallelism from the multipliers
    candidates = []
    for pin in _POWERS:
        for pout in _POWERS:
            small = _config(pin, pout, _START, board)
            need = multipliers_needed(small, board)
            # Wide words need many block RAMs side by side, even when shallow:
            # the smallest buffers must fit too.
            if need <= r.multipliers and bram_blocks_needed(small, board)["total"] <= budget:
                macs = _KMAX * _KMAX * pin * pout
                candidates.append((macs, -abs(math.log2(pin) - math.log2(pout)), pout, pin))
    if candidates:
        _, _, pout, pin = max(candidates)
        parts = multiplier_parts(_config(pin, pout, _START, board), board)
        paired = (" (two 8x8 products per SB_MAC16, a lane's odd one in LUTs)"
                  if r.multiplier_kind == "SB_MAC16" else "")
        others = "".join(f" + {what} {parts[key]}" for key, what in (
            ("descriptor_check", "the descriptor check"),
            ("vector_unit", "the program engine's vector unit")) if parts[key])
        reasons.append(
            f"pin={pin}, pout={pout}: the MAC array of {_KMAX * _KMAX * pin * pout} "
            f"products a window {parts['mac_array']} + {pout} requantizer lane(s) "
            f"{parts['requantizers']}{others} = {sum(parts.values())} of {r.multipliers} "
            f"{r.multiplier_kind}{paired}; doubling pin or pout would need more multipliers "
            f"or block RAMs")
    else:
        pin = pout = 1
        need = multipliers_needed(_config(1, 1, _START, board), board)
        reasons.append(
            f"pin=1, pout=1: even the smallest 3x3 engine needs {need} multipliers and the "
            f"board has {r.multipliers} {r.multiplier_kind}; yosys builds the other "
            f"{need - r.multipliers} from LUTs")

    stream = _stream_width(pin, pout, board)
    if r.luts < _SMALL_PART_LUTS:
        why = "32 bits on a part under 10k LUTs"
    elif board.family in DESIGN.families:
        why = (f"the {board.family} HP port's width ({DESIGN.ps(board.family).hp_max_width} "
               f"bits), at most two input words a beat ({_pair_beat_width(pin)} bits)")
    else:
        why = "64 bits (the host link is far slower than the stream)"
    reasons.append(f"stream_width={stream}: {why}, or the nearest that pin/pout divide with")
    if _config(pin, pout, _START, board).writer_words == 2:
        reasons.append("writer_words=2: a beat holds two input words, and the line buffer "
                       "stores both a cycle (its banks in halves)")
    if _xilinx(r):
        reasons.append("spare_bank=1 while sizing the buffers: kmax + 1 line-buffer column "
                       "banks on a Xilinx part, the same windows and cycles in fewer block "
                       "RAMs (more spare banks below, where they fit)")
        reasons.append("pixel_pairs=1: layers of a stride up to spare_bank two output pixels "
                       "a window issue, a tap's two products in one DSP48, two requantizers "
                       "a lane")

    # 4. buffers from the block RAMs
    sizes = dict(_START)
    blocks = bram_blocks_needed(_config(pin, pout, sizes, board), board)
    if blocks["total"] > budget:
        reasons.append(
            f"buffers: the smallest sizes tried ({sizes}) already take {blocks['total']} of "
            f"{r.bram_blocks} block RAMs ({reserve} kept for FIFOs); they are kept as they are")
    else:
        grew = True
        while grew:
            grew = False
            for key in _GROW_ORDER:
                if sizes[key] >= _CAP[key]:
                    continue
                trial = dict(sizes, **{key: sizes[key] * 2})
                trial_blocks = bram_blocks_needed(_config(pin, pout, trial, board), board)
                if trial_blocks["total"] <= budget:
                    sizes, blocks, grew = trial, trial_blocks, True
        reasons.append(
            f"buffers: line {blocks['line_buffer']} + weights {blocks['weight_buffer']} + "
            f"params {blocks['param_buffer']} + max-pool row {blocks['pool_row']} = "
            f"{blocks['total']} of {r.bram_blocks} "
            f"block RAMs ({reserve} kept for FIFOs); doubling any of max_channels, "
            f"max_out_channels, max_width would not fit (or is at its cap, "
            f"{_CAP['max_width']})")
    config = _config(pin, pout, sizes, board)
    if config.pixel_pairs:
        config, blocks = _spare_banks(config, board, budget, blocks, reasons)
    if _xilinx(r) and config.deep_pipeline:
        config, blocks = _param_words(config, board, blocks, reasons)
    why = (f"as {board.name}'s file chooses ([sizing])" if chosen else "as asked")
    if config.pixel_pairs and fused_block:
        config, blocks = _fused_blocks(config, board, budget, blocks, reasons)
        reasons[-1] += f", {why}"
        if config.fused_blocks and depthwise_pixels != 2:
            # (the unit's logic is not in the estimates: no block RAM or DSP changes)
            config = dataclasses.replace(config, depthwise_pixels=depthwise_pixels)
            reasons.append(f"depthwise_pixels={depthwise_pixels}: the half-rate depthwise "
                           f"unit, {why} (half the block's LUT products, a window pair "
                           f"every other cycle)")
    elif config.pixel_pairs:
        reasons.append(f"fused_blocks=0: the fused block where a board's file chooses it or "
                       f"where asked (size_engine(board, fused_block=True)), {why}: its "
                       f"logic's LUTs are not estimated here")
    if board.family == "ice40":
        # Few logic cells and a clock in the tens of MHz: the compact
        # arrangement, a few hundred flip-flops fewer (docs/engine.md).
        config = dataclasses.replace(config, deep_pipeline=0)
        reasons.append("deep_pipeline=0: the compact pipeline, for a small part with a slow clock")
    return Sizing(config=config, multipliers=multipliers_needed(config, board),
                  bram_blocks=blocks, reasons=reasons)


def _fused_cell(sizing):
    """The sizing table's fused-block cell (rule 4d): the blocks, where their memory is
    and the depthwise unit's rate."""
    config, blocks = sizing.config, sizing.bram_blocks
    if not config.fused_blocks:
        return "-"
    words = engine_contract(config).fused.depthwise_memory.words
    where = (f"{blocks['depthwise_memory']} BRAM" if in_block_ram(words) else "LUT RAM")
    rate = "half-rate" if config.depthwise_pixels == 1 else "full-rate"
    return f"{config.fused_blocks} ({words} words, {where}, {rate})"


def sizing_markdown(boards):
    """The default engine of each board as a Markdown table (docs/boards.md).

    Boards whose defaults and estimates are the same share a row.
    """
    rows = {}
    for board in boards:
        s = size_engine(board)
        c, r = s.config, board.resources
        row = (f"{c.pin} x {c.pout}", f"{c.peak_macs_per_cycle}",
               f"{c.max_width} / {c.max_channels} / {c.max_out_channels}", f"{c.writer_words}",
               f"{c.column_banks}",
               (f"2 (strides 1-{engine_contract(c).pair_stride})" if c.pixel_pairs else "1"),
               _fused_cell(s) if c.fused_blocks else
               f"where asked: {_fused_cell(size_engine(board, fused_block=True))}",
               f"{s.multipliers} / {r.multipliers}", f"{s.bram_blocks['total']} / {r.bram_blocks}")
        rows.setdefault(row, []).append(board.name)
    lines = ["| board | pin x pout | MACs/cycle | max width / ch in / ch out | input words "
             "stored a cycle | line-buffer column banks | output pixels a window "
             "| fused blocks (depthwise memory, depthwise unit) | DSPs (est.) | BRAM (est.) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {', '.join(names)} | " + " | ".join(row) + " |" for row, names in rows.items()]
    return "\n".join(lines)
