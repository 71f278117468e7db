"""The engine contract: every fact about an engine that two parts of fpgacnn read.

An engine generated from an :class:`~fpgacnn.core.config.EngineConfig` has
buffers of fixed capacity, a stream format with fixed sections and records,
a descriptor whose fields have ranges, and blocks with fixed latencies. Each
of these is defined here, once, as a function of the configuration; the
gateware (:mod:`fpgacnn.hdl`), the stream packing and the compiler
(:mod:`fpgacnn.host.packing`, :mod:`fpgacnn.host.compiler`), the driver, the
cycle model and the board sizing all read it and re-derive none of it.

A layer run either fits the contract (and is bit-exact) or is refused before
it runs: :func:`descriptor_violations` lists, for a descriptor, every field
or capacity it breaks, and is what the compiler's ``MappingError``, the
driver's check and the gateware's ``status.error`` all follow (the gateware
compares against the same :attr:`EngineContract.ranges`).

Examples
--------
>>> from fpgacnn.core.config import EngineConfig
>>> c = engine_contract(EngineConfig())
>>> c.ranges["stride"], c.line_buffer.words
((1, 3), 176)
>>> c.pool_row.words == (64 // 2) * 8
True
"""

from dataclasses import dataclass
import functools
import math

from .config import require_config
from .descriptor import ALL_DESCRIPTOR_FIELDS, DESCRIPTOR_FIELDS, FUSED_DESCRIPTOR_FIELDS, \
    complete_descriptor
from .fused_block import (PairBufferShape, check_depthwise_sums, depthwise_memory_words,
                          depthwise_unit_latency, depthwise_word_bytes, pair_buffer_shape,
                          pointwise_tiles)
from .widths import MULT_BITS, MAX_SHIFT, SHIFT_BITS
# (re-exported: defined below the contract, which fpgacnn.core.fused_block reads too)
from .technology import (PARAM_RECORD_FIELDS, PARAM_RECORD_BYTES, MEMORY_READ_LATENCY,
                         MULTIPLIER_LATENCY, OPERAND_PART_BITS, memory_part_depth, memory_parts,
                         memory_latency, operand_parts, products_latency)

__all__ = [
    "MULT_BITS", "MAX_SHIFT", "SHIFT_BITS", "PARAM_RECORD_FIELDS", "PARAM_RECORD_BYTES",
    "ROW_FIELD_MAX", "MEMORY_READ_LATENCY", "MULTIPLIER_LATENCY", "OPERAND_PART_BITS",
    "Buffer", "Latencies", "FusedBlock", "EngineContract", "engine_contract", "memory_parts",
    "memory_part_depth", "memory_latency", "operand_parts", "products_latency",
    "requant_sum_width", "requant_product_parts", "requant_tree_levels", "descriptor_violations",
    "beats",
]

#: Largest row count (``in_h``, ``out_h``) and batch: the descriptor's 16-bit fields.
ROW_FIELD_MAX = (1 << 16) - 1


def beats(nbytes, beat_bytes):
    """Whole stream beats of ``beat_bytes`` that ``nbytes`` bytes take."""
    return -(-int(nbytes) // int(beat_bytes))


def requant_sum_width(acc_width):
    """Bits of the requantizer's ``acc + bias`` (the bias is int32; one bit for the sum)."""
    return max(acc_width, 32) + 1


def requant_product_parts(config, *, whole_multiplier=False):
    """The deep requantizer's partial products, a hard multiplier each:
    ``(sum part, mult part)`` pairs of :func:`operand_parts` of ``acc + bias``
    (:func:`requant_sum_width`) and of the multiplier, ``(offset, width,
    signed)`` each. ``whole_multiplier``: the multiplier whole (one unsigned
    ``mult_width`` part), each sum part times it a 25 x 18 signed product, one
    DSP48 (the program engine's, whose tops are Zynq's:
    :data:`~fpgacnn.core.program_products.PROGRAM_WHOLE_MULTIPLIER`); else in
    17-bit parts too, 18 x 18 products (the ECP5's ``MULT18X18D``)."""
    sum_parts = operand_parts(requant_sum_width(config.acc_width), signed=True)
    mult_parts = ([(0, config.mult_width, False)] if whole_multiplier
                  else operand_parts(config.mult_width, signed=False))
    return [(a, b) for a in sum_parts for b in mult_parts]


def requant_tree_levels(config):
    """Register levels of the deep requantizer's adder tree over its partial products
    and the rounding term: those of the 17-bit parts (:func:`requant_product_parts`)
    whichever parts are built, so that its latency, and every cycle count, is the
    same on every top (the whole multiplier's fewer parts register their sum once
    more)."""
    return _tree_levels(len(requant_product_parts(config)) + 1)


def _tree_levels(count):
    """Register levels of a binary adder tree over ``count`` inputs."""
    return (count - 1).bit_length()


@dataclass(frozen=True)
class Buffer:
    """One on-chip buffer of the engine.

    Attributes
    ----------
    name : str
    words : int
        Capacity in words (per bank, for banked buffers).
    word_bytes : int
        Bytes per word.
    banks : int
        Identical banks (the line buffer's row slots x columns mod ``kmax``).
    holds : str
        What a word holds, for the docs and error messages.
    """

    name: str
    words: int
    word_bytes: int
    banks: int
    holds: str

    @property
    def total_bytes(self):
        return self.words * self.word_bytes * self.banks


@dataclass(frozen=True)
class Latencies:
    """Fixed latencies of the engine's blocks, in clock cycles.

    Attributes
    ----------
    line_buffer : int
        From a window's issue to the window at the MAC array.
    line_buffer_setup : int
        Cycles after ``start`` before the first window can issue.
    products : int
        The MAC array's multipliers.
    mac_array : int
        From a group's last window to its accumulators.
    param_lookup : int
        Parameter-buffer read between the MAC array and the requantizer.
    requantizer : int
    maxpool : int
        From a pooling window's last word to its result.
    weight_read, param_read : int
        From the address to the weight word / parameter records.
    start : int
        From ``start`` to the first beat the loader takes.
    pixel_slice_words : int
        Pixel words held between the loader and the line buffer's writer.
    output_fifo_slack : int
        Output FIFO words beyond the pipeline latency (the FIFO's and the packer's own).
    output_fifo_pair_words : int
        With ``pixel_pairs``, words each of the two output FIFOs holds beyond
        those: a pixel's every output tile (``max_co_tiles``), since the second
        pixel's words wait in theirs until the first pixel's are out, while
        the next pair's first words arrive (docs/engine.md, "Pixel pairs");
        else 0.
    depthwise_unit : int
        With ``fused_blocks``, the depthwise unit's, from a window pair to its
        sums (:func:`~fpgacnn.core.fused_block.depthwise_unit_latency`); else 0.
    depthwise_requant : int
        With ``fused_blocks``, the depthwise half's requantization, from the
        unit's sums to their int8 word at the pair buffer: the requantizer's
        (its own ``2 * pin`` lanes), which the vector unit's lanes lent to it in
        the program engine (:func:`~fpgacnn.core.fused_block.depthwise_on_vector_lanes`)
        are padded to, so that a fused run takes the same cycles on every top;
        else 0.
    descriptor_check : int
        Registered stages of the descriptor check
        (:class:`~fpgacnn.hdl.datapath.descriptor_check.DescriptorCheck`)
        from the descriptor registers (or its loops' results) to
        ``status.error``: 2 with ``deep_pipeline`` (each compare registered,
        then combined; the ECP5's 100 MHz), else 1. A start waits until the
        check has settled after a descriptor write (docs/engine.md,
        "Descriptor check"), so this is not in a run's busy cycles.
    """

    line_buffer: int
    line_buffer_setup: int
    products: int
    mac_array: int
    param_lookup: int
    requantizer: int
    maxpool: int
    weight_read: int
    param_read: int
    start: int
    pixel_slice_words: int
    output_fifo_slack: int
    output_fifo_pair_words: int = 0
    depthwise_unit: int = 0
    depthwise_requant: int = 0
    descriptor_check: int = 1

    def pipeline(self, pool):
        """From a group's last window issue to its output word's FIFO write."""
        return (self.line_buffer + self.mac_array + self.param_lookup + self.requantizer
                + (self.maxpool if pool else 0))

    @property
    def drain(self):
        """Cycles after the last issue before the core may report done (every result written)."""
        return self.pipeline(True) + 1

    @property
    def output_fifo_depth(self):
        """Words of the output FIFO (of each, with pixel pairs): credits to cover the
        pipeline at one word per cycle, and a pixel's words with pixel pairs."""
        return self.pipeline(True) + self.output_fifo_slack + self.output_fifo_pair_words


@dataclass(frozen=True)
class FusedBlock:
    """The fused depthwise + pointwise block of an engine with ``fused_blocks``
    (docs/engine.md, "The fused depthwise + pointwise block"), from
    :mod:`fpgacnn.core.fused_block`.

    Attributes
    ----------
    pair_buffer : PairBufferShape
        The double-buffered pixel pairs the array reads as the 1x1 remap's window.
    depthwise_memory : Buffer
        The depthwise weights and parameter records, a word an input tile
        (:func:`~fpgacnn.core.fused_block.depthwise_word_bytes`), ``fused_blocks``
        blocks of ``pair_buffer.tiles`` words.
    """

    pair_buffer: PairBufferShape
    depthwise_memory: Buffer

    @property
    def max_tiles(self):
        """Most depthwise input tiles (``ci_tiles``) of a fused run: a pixel of the pair
        buffer, ``ceil(max_channels / pin)``."""
        return self.pair_buffer.tiles


class EngineContract:
    """Capacities, stream format, descriptor ranges and latencies of one configuration.

    Build with :func:`engine_contract` (cached per configuration).

    Attributes
    ----------
    config : EngineConfig
    line_buffer, weights, params, pool_row : Buffer
        The engine's buffers: line-buffer banks (``row_slots * column_banks`` banks of
        :attr:`line_buffer.words` words of ``pin`` bytes), the weight buffer
        (a word per (output tile, input tile)), the parameter buffer (a word
        of ``pout`` records per output tile: one run's, or ``param_words``) and
        the max-pool's row memory (a word of ``pout`` running maxima per
        (pooled column, output tile)).
    line_buffer_memory_words : int
        Words of each memory a line-buffer bank is built from: ``writer_words``
        memories a bank, one per word address modulo ``writer_words``.
    max_cols : int
        Widest row (``in_w``, ``out_w``) any layer run can have:
        ``column_banks`` columns per line-buffer word plus ``kmax - 1`` of
        padding.
    max_ci_tiles, max_co_tiles : int
        Input and output tiles any run can have.
    fused : FusedBlock or None
        The fused block, on an engine generated with ``fused_blocks``.
    descriptor_fields : tuple of DescriptorField
        The descriptor's fields on this engine, in register order:
        :data:`~fpgacnn.core.descriptor.DESCRIPTOR_FIELDS`, and with the fused
        block :data:`~fpgacnn.core.descriptor.FUSED_DESCRIPTOR_FIELDS` after them.
    ranges : dict
        ``field -> (lo, hi)`` for every descriptor field.
    latency : Latencies
    """

    def __init__(self, config):
        require_config(config)
        self.config = c = config
        k, pin, pout = c.kmax, c.pin, c.pout
        ci_tiles = math.ceil(c.max_channels / pin)
        co_tiles = c.out_tiles
        # Column x of a row in bank x mod column_banks (kmax, or kmax + 1 with
        # the spare bank): kmax consecutive columns never share a bank.
        bank_words = math.ceil(c.max_width / c.column_banks) * ci_tiles
        self.row_slots = k + k  # kmax rows being read, up to max_stride (= kmax) being written
        self.line_buffer = Buffer("line buffer", bank_words, pin,
                                  self.row_slots * c.column_banks,
                                  f"{pin} channels of one pixel")
        # A bank is `writer_words` memories, one per word address modulo
        # writer_words, so that the words of a row stored in one cycle never
        # share a memory (the pair writer, docs/engine.md).
        self.line_buffer_memory_words = math.ceil(bank_words / c.writer_words)
        self.weights = Buffer("weight buffer", co_tiles * ci_tiles, pout * k * k * pin, 1,
                              "one (output tile, input tile) of weights")
        # One run's output tiles, or more (param_words): several runs' parameters
        # resident, each from its param_base.
        self.params = Buffer("parameter buffer", c.param_words or co_tiles,
                             pout * PARAM_RECORD_BYTES, 1, f"{pout} parameter records")
        self.pool_row = Buffer("max-pool row memory", math.ceil(c.max_width / 2) * co_tiles,
                               pout, 1, "one pooled column of one output tile")
        self.max_cols = c.column_banks * bank_words + k - 1
        # An input tile takes a line-buffer word and a weight word; the
        # accumulator must hold kmax*kmax*pin*ci_tiles products of 128*128.
        acc_tiles = ((1 << (c.acc_width - 1)) - 1) // (k * k * pin * 128 * 128)
        self.max_ci_tiles = max(0, min(self.weights.words, bank_words, acc_tiles))
        self.max_co_tiles = co_tiles
        self.fused = None
        self.descriptor_fields = DESCRIPTOR_FIELDS
        if c.fused_blocks:
            check_depthwise_sums(c)
            self.fused = FusedBlock(
                pair_buffer_shape(c),
                Buffer("depthwise memory", depthwise_memory_words(c), depthwise_word_bytes(c), 1,
                       f"one input tile's depthwise weights and {pin} parameter records"))
            self.descriptor_fields = DESCRIPTOR_FIELDS + FUSED_DESCRIPTOR_FIELDS
        self.ranges = self._ranges()
        self.latency = self._latencies()

    # -- descriptor ---------------------------------------------------------

    def _ranges(self):
        c = self.config
        full = {f.name: ((-(1 << (f.width - 1)), (1 << (f.width - 1)) - 1) if f.signed
                         else (0, (1 << f.width) - 1)) for f in ALL_DESCRIPTOR_FIELDS}
        full.update(
            in_h=(1, ROW_FIELD_MAX), out_h=(1, ROW_FIELD_MAX), batch=(1, ROW_FIELD_MAX),
            in_w=(1, self.max_cols), out_w=(1, self.max_cols),
            ci_tiles=(1, self.max_ci_tiles), co_tiles=(1, self.max_co_tiles),
            stride=(1, c.kmax), pad_top=(0, c.kmax - 1), pad_left=(0, c.kmax - 1),
            weight_base=(0, self.weights.words - 1),
            param_base=(0, self.params.words - 1),
        )
        if self.fused:
            full["dw_base"] = (0, self.fused.depthwise_memory.words - 1)
        for name, supported in self.supported_fields.items():
            if not supported:
                default = next(f.default for f in ALL_DESCRIPTOR_FIELDS if f.name == name)
                full[name] = (default, default)
        return full

    @property
    def depthwise_runs(self):
        """Whether a run may pair each output tile with its own input tile only
        (``depthwise``): the deep arrangement, with ``pin == pout``."""
        return bool(self.config.deep_pipeline) and self.config.pin == self.config.pout

    @property
    def supported_fields(self):
        """``field -> bool`` for the descriptor fields some engines leave out (those
        with a default): where False, the field's register is a constant and its
        range only its default (the fused block's fields have no register at
        all there: they are not in :attr:`descriptor_fields`)."""
        return {"load_params": self.resident_weights, "weight_base": self.resident_weights,
                "depthwise": self.depthwise_runs, "pixel_pairs": bool(self.config.pixel_pairs),
                "param_base": self.resident_params,
                **{f.name: bool(self.fused) for f in FUSED_DESCRIPTOR_FIELDS}}

    @property
    def pair_stride(self):
        """The largest stride a pixel-pair run takes: ``spare_bank`` on an engine with
        ``pixel_pairs`` (a pair's two windows, ``stride`` columns apart, span
        ``kmax + stride`` columns, each in a bank of its own), else 0. The 1x1 remap,
        at stride ``kmax``, pairs when it is ``kmax``."""
        c = self.config
        return c.spare_bank if c.pixel_pairs else 0

    @property
    def paired_beats(self):
        """Whether a pixel-pair run may move its output a beat at a time: pixel pairs
        on an engine whose beat holds two output words (``2 * pout == stream_bytes``):
        :attr:`~fpgacnn.core.config.EngineConfig.paired_beats`."""
        return self.config.paired_beats

    def output_entry_words(self, desc):
        """Output words an output FIFO entry holds in the run ``desc``: 2 (a beat) in a
        pixel-pair run with an even ``co_tiles`` on a :attr:`paired_beats` engine --
        each pixel's words are then whole beats, two output tiles of one pixel a beat
        (docs/engine.md, "Pixel pairs") -- else 1."""
        return 2 if (self.paired_beats and desc.get("pixel_pairs", 0)
                     and int(desc["co_tiles"]) % 2 == 0) else 1

    def weight_words(self, desc):
        """Weight words the run ``desc`` reads: a word per (output tile, input tile),
        one per output tile in a depthwise run; in a fused run the pointwise half's,
        a word per (output tile, remap window): ``co_tiles *``
        :func:`~fpgacnn.core.fused_block.pointwise_tiles` of ``ci_tiles``."""
        co, ci = int(desc["co_tiles"]), int(desc["ci_tiles"])
        if desc.get("fused", 0):
            return co * pointwise_tiles(self.config, ci)
        return co if desc.get("depthwise", 0) else co * ci

    @property
    def resident_weights(self):
        """Whether a run's weights may stay in the weight buffer for later runs
        (``weight_base``, ``load_params``): the deep arrangement. The compact one
        (iCE40, where every logic cell counts) holds one run's weights, from word 0,
        and its two registers read 0."""
        return bool(self.config.deep_pipeline)

    @property
    def resident_params(self):
        """Whether a run's parameters may stay in the parameter buffer for later runs
        (``param_base``): resident weights and a parameter buffer deeper than one
        run's output tiles (``param_words``). Elsewhere the buffer holds one run's
        parameters, from word 0, and ``param_base`` is a constant 0."""
        return self.resident_weights and self.params.words > self.max_co_tiles

    def range_reason(self, name):
        """What bounds the descriptor field ``name`` on this engine (``""`` for the field width)."""
        c = self.config
        return {
            "in_w": f"{c.column_banks} columns per word of a line-buffer bank of "
                    f"{self.line_buffer.words} words, and kmax-1 of padding",
            "out_w": "as in_w",
            "ci_tiles": f"input channels / pin {c.pin}: a line-buffer bank of "
                        f"{self.line_buffer.words} words, a weight buffer of "
                        f"{self.weights.words} words, a {c.acc_width}-bit accumulator",
            "co_tiles": (f"output channels / pout {c.pout}: max_out_channels "
                         f"{c.max_out_channels}" if self.resident_params else
                         f"output channels / pout {c.pout}: the parameter buffer holds "
                         f"{self.params.words} tiles"),
            "stride": f"the window is kmax = {c.kmax}",
            "weight_base": (f"a word of the weight buffer of {self.weights.words}"
                            if self.resident_weights else
                            "the compact arrangement keeps no resident weights"),
            "load_params": ("" if self.resident_weights else
                            "the compact arrangement keeps no resident weights"),
            "param_base": (f"a word of the parameter buffer of {self.params.words}"
                           if self.resident_params else
                           "the parameter buffer holds one run's tiles (param_words)"
                           if self.resident_weights else
                           "the compact arrangement keeps no resident weights"),
            "depthwise": ("" if self.depthwise_runs else
                          "depthwise runs need the deep arrangement and pin == pout"),
            "pixel_pairs": ("" if c.pixel_pairs else
                            "the engine was generated without pixel_pairs"),
            "pad_top": f"kmax - 1 = {c.kmax - 1}", "pad_left": f"kmax - 1 = {c.kmax - 1}",
            **{f.name: ("" if self.fused else "the engine was generated without fused_blocks")
               for f in FUSED_DESCRIPTOR_FIELDS},
            **({"dw_base": f"a word of the depthwise memory of "
                           f"{self.fused.depthwise_memory.words}"} if self.fused else {}),
        }.get(name, "")

    def line_words(self, in_w, ci_tiles):
        """Words of one line-buffer bank that a row of ``in_w`` pixels in ``ci_tiles`` tiles takes."""
        return math.ceil(in_w / self.config.column_banks) * ci_tiles

    def pool_words(self, out_w, co_tiles):
        """Words of the max-pool row memory a pooled row takes (an odd last column included)."""
        return math.ceil(out_w / 2) * co_tiles

    def widest_row(self, ci_tiles):
        """Most input columns a line-buffer bank holds at ``ci_tiles`` tiles."""
        return (self.line_buffer.words // ci_tiles) * self.config.column_banks

    def widest_pooled_row(self, co_tiles):
        """Most convolution output columns (even) the max-pool's row memory holds at ``co_tiles``."""
        return 2 * (self.pool_row.words // co_tiles)

    def max_co_tiles_for(self, ci_tiles):
        """Most output tiles of one run at ``ci_tiles`` input tiles (the range and the weights)."""
        return min(self.max_co_tiles, self.weights.words // max(ci_tiles, 1))

    def max_ci_tiles_for(self, co_tiles):
        """Most input tiles of one run at ``co_tiles`` output tiles (range and weight buffer).

        ``co_tiles * ci_tiles`` fits the weight buffer exactly when ``ci_tiles``
        is at most this (for ``ci_tiles`` in range); the gateware's check
        (:mod:`fpgacnn.hdl.datapath.descriptor_check`) reads it as a table
        indexed by ``co_tiles``, which is narrower than ``ci_tiles``.
        """
        return min(self.max_ci_tiles, self.weights.words // max(co_tiles, 1))

    # -- stream sections ----------------------------------------------------

    @property
    def param_beats(self):
        """Beats of one output tile's parameter records (``pout`` records, padded to a beat)."""
        return beats(self.params.word_bytes, self.config.stream_bytes)

    @property
    def weight_beats(self):
        """Beats of one weight word (padded to a beat)."""
        return beats(self.weights.word_bytes, self.config.stream_bytes)

    @property
    def depthwise_beats(self):
        """Beats of one depthwise-memory word (padded to a beat); 0 without the block."""
        return beats(self.fused.depthwise_memory.word_bytes, self.config.stream_bytes) \
            if self.fused else 0

    def image_beats(self, in_h, in_w, ci_tiles):
        """Beats of one input image (pixel words of ``pin`` bytes, padded to a beat)."""
        return beats(in_h * in_w * ci_tiles * self.config.pin, self.config.stream_bytes)

    def output_image_beats(self, out_h, out_w, co_tiles):
        """Beats of one output image (after pooling; words of ``pout`` bytes, padded)."""
        return beats(out_h * out_w * co_tiles * self.config.pout, self.config.stream_bytes)

    def input_nbytes(self, desc):
        """Bytes of the input stream of the run ``desc`` (whole beats)."""
        co, ci = int(desc["co_tiles"]), int(desc["ci_tiles"])
        total = 0
        if desc["load_weights"]:
            total += co * self.param_beats + self.weight_words(desc) * self.weight_beats
            if desc.get("fused", 0):
                total += ci * self.depthwise_beats
        elif desc.get("load_params", 0):
            total += co * self.param_beats
        total += int(desc["batch"]) * self.image_beats(int(desc["in_h"]), int(desc["in_w"]), ci)
        return total * self.config.stream_bytes

    @staticmethod
    def pooled_shape(desc):
        """``(rows, columns)`` of the run's output: ``out_h, out_w``, halved (floor) when pooled."""
        oh, ow = int(desc["out_h"]), int(desc["out_w"])
        return (oh // 2, ow // 2) if desc["pool"] else (oh, ow)

    def output_nbytes(self, desc):
        """Bytes of the output stream of the run ``desc`` (whole beats per image)."""
        oh, ow = self.pooled_shape(desc)
        per_image = self.output_image_beats(oh, ow, int(desc["co_tiles"]))
        return int(desc["batch"]) * per_image * self.config.stream_bytes

    # -- documentation -----------------------------------------------------

    def markdown(self):
        """Markdown tables of the buffers, descriptor ranges and latencies (docs/engine.md)."""
        lat = self.latency
        lines = ["| buffer | words | bytes per word | banks | bytes | a word holds |",
                 "|---|---:|---:|---:|---:|---|"]
        extra = (self.fused.depthwise_memory,) if self.fused else ()
        for b in (self.line_buffer, self.weights, self.params, self.pool_row) + extra:
            lines.append(f"| {b.name} | {b.words:,} | {b.word_bytes:,} | {b.banks} | "
                         f"{b.total_bytes:,} | {b.holds} |")
        if self.fused:
            pb = self.fused.pair_buffer
            lines.append(f"| pair buffer | {pb.depth} | {2 * pb.pin} | {pb.positions} | "
                         f"{pb.depth * 2 * pb.pin * pb.positions:,} | {pb.pin} channels of "
                         f"a pixel pair at one remap position |")
        lines += ["", "| descriptor field | range | bounded by |", "|---|---|---|"]
        for f in self.descriptor_fields:
            lo, hi = self.ranges[f.name]
            lines.append(f"| `{f.name}` | {lo}..{hi} | {self.range_reason(f.name) or f'{f.width}-bit field'} |")
        lines += ["", "| latency | cycles |", "|---|---:|"]
        rows = [("start to the loader's first beat", lat.start),
                ("setup before the first window", lat.line_buffer_setup),
                ("line buffer (issue to window)", lat.line_buffer),
                ("MAC array (last window to accumulators)", lat.mac_array),
                ("parameter lookup", lat.param_lookup), ("requantizer", lat.requantizer),
                ("max-pool", lat.maxpool), ("pipeline, unpooled / pooled",
                                            f"{lat.pipeline(False)} / {lat.pipeline(True)}"),
                ("output FIFO words", lat.output_fifo_depth),
                ("pixel words between loader and line buffer", lat.pixel_slice_words)]
        if self.fused:
            rows += [("depthwise unit (window pair to sums)", lat.depthwise_unit),
                     ("depthwise requantization (sums to the pair buffer)",
                      lat.depthwise_requant)]
        lines += [f"| {name} | {value} |" for name, value in rows]
        return "\n".join(lines)

    # -- latencies ----------------------------------------------------------

    def _latencies(self):
        c = self.config
        deep = bool(c.deep_pipeline)
        pin, pout = c.pin, c.pout
        taps = c.kmax * c.kmax * pin
        products = products_latency(deep)  # registered operands with deep_pipeline
        if deep:
            # the read address registered, the memory's read (its part select
            # registered too when a bank spans several block RAMs), the window
            # rows, the taps
            line = 3 + memory_latency(8 * pin, self.line_buffer_memory_words,
                                      register_output=True)
            # bias add, the multipliers, the tree of partial products (and
            # the rounding term), shift, saturate, zero point and clamp
            requant = 1 + MULTIPLIER_LATENCY + requant_tree_levels(c) + 3
            # register the word, the memory's read (and part select), compare
            pool = 2 + memory_latency(8 * pout, self.pool_row.words, register_output=True)
            weight_read = memory_latency(self.weight_beats * c.stream_width, self.weights.words,
                                         register_output=True)
            param_read = MEMORY_READ_LATENCY
        else:
            line, requant, pool, weight_read, param_read = 2, 5, 2, 1, 1
        return Latencies(
            line_buffer=line, line_buffer_setup=18, products=products,
            mac_array=products + _tree_levels(taps) + 1, param_lookup=1,
            requantizer=requant, maxpool=pool, weight_read=weight_read,
            param_read=param_read, start=1, pixel_slice_words=2 if deep else 0,
            output_fifo_slack=4,
            output_fifo_pair_words=self.max_co_tiles if c.pixel_pairs else 0,
            depthwise_unit=depthwise_unit_latency(c) if c.fused_blocks else 0,
            depthwise_requant=requant if c.fused_blocks else 0,
            # the compact arrangement's iCE40 has no logic cells for a second stage
            descriptor_check=2 if deep else 1)


@functools.lru_cache(maxsize=256)
def engine_contract(config):
    """The :class:`EngineContract` of ``config`` (cached: configurations are frozen)."""
    return EngineContract(config)


def descriptor_violations(config, desc):
    """Every way the descriptor ``desc`` breaks the contract of ``config``.

    Parameters
    ----------
    config : EngineConfig
    desc : mapping
        A value for every descriptor field.

    Returns
    -------
    list of (str, str)
        ``(field, reason)`` pairs: the out-of-range fields in descriptor order, else
        the broken capacities (line buffer, weights, parameters, rows, pool); empty
        when the run fits. ``field`` names the descriptor field that is out of range, or
        the first field of a capacity the run exceeds.
    """
    c = engine_contract(config)
    # Every field some engine has: a fused field given to an engine without the
    # block is out of its range 0..0.
    desc = complete_descriptor(desc, ALL_DESCRIPTOR_FIELDS)
    out = []
    for f in ALL_DESCRIPTOR_FIELDS:
        lo, hi = c.ranges[f.name]
        v = int(desc[f.name])
        if not lo <= v <= hi:
            why = c.range_reason(f.name)
            out.append((f.name, f"{f.name} = {v} is outside the engine's range {lo}..{hi}"
                                + (f" ({why})" if why else "")))
    if out:
        return out
    ci, co = int(desc["ci_tiles"]), int(desc["co_tiles"])
    words = c.line_words(int(desc["in_w"]), ci)
    if words > c.line_buffer.words:
        out.append(("in_w", f"a row of {desc['in_w']} px x {ci} input tiles takes {words} words "
                            f"of a line-buffer bank, which holds {c.line_buffer.words}"))
    base, wwords = int(desc["weight_base"]), c.weight_words(desc)
    what = (f"{co} depthwise" if desc["depthwise"] else
            f"{co} x {pointwise_tiles(config, ci)} pointwise" if desc["fused"] else f"{co} x {ci}")
    if base + wwords > c.weights.words:
        if base:
            out.append(("weight_base", f"{what} weight words from word {base} exceed the "
                                       f"weight buffer's {c.weights.words}"))
        else:
            out.append(("co_tiles", f"{what} weight words exceed the weight buffer's "
                                    f"{c.weights.words}"))
    pbase = int(desc["param_base"])
    if pbase + co > c.params.words:
        # (co_tiles alone always fits: its range is at most the buffer's words)
        out.append(("param_base", f"{co} output tiles' parameter words from word {pbase} "
                                  f"exceed the parameter buffer's {c.params.words}"))
    if desc["depthwise"] and ci != co:
        out.append(("depthwise", f"a depthwise run pairs each output tile with its input "
                                 f"tile: ci_tiles {ci} must equal co_tiles {co}"))
    if desc["pixel_pairs"]:
        # Two windows `stride` columns apart from one read: strides up to the
        # spare banks; the max-pool takes one pixel a window. (A depthwise run
        # pairs as a dense one: each lane's two trees are its channel's two
        # pixels.)
        why = [w for bad, w in ((int(desc["stride"]) > c.pair_stride,
                                 f"stride {desc['stride']} (at most {c.pair_stride}: the line "
                                 f"buffer's {c.config.spare_bank} spare column bank(s))"),
                                (desc["pool"], "a fused max-pool")) if bad]
        if why:
            out.append(("pixel_pairs", f"pixel pairs are two adjacent output pixels a window "
                                       f"issue: not with {' and '.join(why)}"))
    if desc["fused"]:
        out += _fused_violations(c, desc)
    last = (int(desc["out_h"]) - 1) * int(desc["stride"]) - int(desc["pad_top"])
    if last >= int(desc["in_h"]):
        # The line buffer turns its row slots by the input rows an output row
        # needs; a window of bottom padding only needs none, and the next
        # image's first rows were overwritten before they were read (found by
        # tests/test_limit_boundaries.py). The packing streams rows of x_zp
        # instead (fpgacnn.host.packing.zero_point_rows).
        out.append(("out_h", f"output row {desc['out_h']} starts at input row {last}, past the "
                             f"{desc['in_h']} input rows: every window must hold an input row "
                             f"(stream rows of x_zp for bottom padding)"))
    if desc["pool"]:
        oh, ow = int(desc["out_h"]), int(desc["out_w"])
        if oh < 2 or ow < 2:
            out.append(("pool", f"a 2x2 max-pool needs at least a 2x2 output, not {oh}x{ow}"))
        pwords = c.pool_words(ow, co)
        if pwords > c.pool_row.words:
            out.append(("out_w", f"a pooled row of {ow} columns x {co} output tiles takes "
                                 f"{pwords} words of the max-pool row memory, which holds "
                                 f"{c.pool_row.words}"))
    return out


def _fused_violations(c, desc):
    """The capacities and modes a fused run (``desc["fused"]``, every field in range)
    breaks: docs/engine.md, "Step 3"."""
    out = []
    ci = int(desc["ci_tiles"])
    # The depthwise unit takes the line buffer's window pairs (the pairs' own
    # rules, stride and no pool, are pixel_pairs'); the run is its own mode.
    if not desc["pixel_pairs"] or desc["depthwise"]:
        out.append(("fused", "a fused block takes the depthwise unit's window pairs: "
                             f"pixel_pairs must be 1 and depthwise 0, not {desc['pixel_pairs']} "
                             f"and {desc['depthwise']}"))
    fb = c.fused
    if ci > fb.max_tiles:
        out.append(("ci_tiles", f"a fused block of {ci} input tiles exceeds the pair buffer's "
                                f"{fb.max_tiles} a pixel (max_channels "
                                f"{c.config.max_channels} / pin {c.config.pin})"))
    dw_base, dw_words = int(desc["dw_base"]), fb.depthwise_memory.words
    if dw_base + ci > dw_words:
        # (reported on ci_tiles above when the block alone is too deep)
        if dw_base:
            out.append(("dw_base", f"{ci} depthwise words from word {dw_base} exceed the "
                                   f"depthwise memory's {dw_words}"))
        elif ci <= fb.max_tiles:
            out.append(("ci_tiles", f"{ci} depthwise words exceed the depthwise memory's "
                                    f"{dw_words}"))
    return out
