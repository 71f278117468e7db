"""Generator parameters of the convolution engine, validated once, here.

Every generated block takes an :class:`EngineConfig`; buffer sizes, limits and
latencies are derived from it once, by :mod:`fpgacnn.core.contract`. A TOML file
with the same field names (``fpgacnn generate --config ENGINE.toml``) loads
through :meth:`EngineConfig.from_toml`.
"""

from dataclasses import dataclass, fields, asdict
from .widths import MULT_BITS

__all__ = ["EngineConfig", "ConfigError", "require_config"]


class ConfigError(ValueError):
    """An engine parameter is out of range; the message names it."""


def require_config(config):
    """Raise :class:`TypeError` unless ``config`` is an :class:`EngineConfig`
    (every generator checks this before anything else)."""
    if not isinstance(config, EngineConfig):
        raise TypeError(f"config must be an EngineConfig, not {config!r}")


def _check_int(name, value, lo, hi=None):
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{name} must be an integer, not {value!r}")
    if value < lo or (hi is not None and value > hi):
        bound = f"between {lo} and {hi}" if hi is not None else f"at least {lo}"
        raise ConfigError(f"{name} must be {bound}, not {value!r}")


@dataclass(frozen=True)
class EngineConfig:
    """Parameters of one generated convolution engine.

    Parameters
    ----------
    pin : int
        Input-channel parallelism: channels consumed per window per cycle.
    pout : int
        Output-channel parallelism: MAC lanes, one output channel each.
    kmax : int
        Window size; the engine computes ``kmax x kmax`` windows and smaller
        kernels are embedded (1x1 layers are remapped, see docs/engine.md).
    act_width, weight_width : int
        Activation and weight widths in bits. The integer contract (DESIGN.md
        section 2) is int8, so both must be 8.
    acc_width : int
        Accumulator width in bits (16..48).
    mult_width : int
        Requantization multiplier width (unsigned); must equal
        :data:`fpgacnn.host.requant.MULT_BITS` (24), the integer contract's width
        and the width of the multiplier in the stream's parameter records.
    max_width : int
        Widest input row (pixels) the line buffer holds at ``max_channels``.
    max_channels : int
        Deepest input (channels) the line buffer holds at ``max_width``.
    max_out_channels : int
        Output channels whose weights fit the weight buffer at once (at
        ``max_channels`` input channels); wider layers are tiled by the host.
    stream_width : int
        AXI4-Stream data width in bits: 32, 64 or 128.
    deep_pipeline : int
        1 (default): pipelined for 100 MHz and more on ECP5 and Zynq parts --
        registers behind every block RAM and inside the DSP blocks, control
        computed a cycle ahead (docs/engine.md, "Pipelining for the clock").
        0: the compact arrangement for small, slow parts (iCE40): a few
        hundred flip-flops fewer and shorter latencies. Both compute the
        same results; the cycle model follows either.
    writer_words : int
        Input words the line-buffer writer stores per cycle: 1 (default), or 2
        on an engine whose beat holds two words (``stream_width == 16*pin``),
        where one word a cycle leaves half of every beat's bandwidth unused:
        the line buffer's banks are then split in two by word address, so
        two consecutive words of a row always land in different memories
        (docs/engine.md, "The pair writer"). Input-bound layers (the 1x1
        remap, Gemm, stride 2, thin first layers) run up to twice as fast;
        compute-bound ones do not change.
    spare_bank : int
        Spare column banks of the line buffer, 0 (default) to ``kmax``: its
        rows are split into ``kmax + spare_bank`` column banks (column ``x``
        in bank ``x mod (kmax + spare_bank)``), so that ``kmax + s``
        consecutive columns -- two windows ``s <= spare_bank`` columns apart
        -- are in different banks and can be read in one cycle: the two
        windows of a pixel pair at stride ``s`` (docs/engine.md, "Pixel
        pairs"; ``spare_bank = kmax`` pairs the 1x1 remap, which runs at
        stride ``kmax``). It stores the same words in shallower memories;
        results and cycles are those of ``spare_bank = 0``.
    pixel_pairs : int
        0 (default): one window a cycle. 1: a run may compute two adjacent
        output pixels a cycle (a stride of at most ``spare_bank``, no pool:
        the descriptor's ``pixel_pairs``): the window and the one a stride on
        from one read of the spare banks' line buffer, two products a tap
        sharing its weight (one DSP48 a pair on Xilinx parts), two adder
        trees, accumulators and requantizers a lane, and the second pixel's
        words in a FIFO of their own until the first pixel's are out
        (docs/engine.md, "Pixel pairs"). Needs ``spare_bank >= 1`` and the
        deep arrangement (``deep_pipeline = 1``).
    param_words : int
        Words of the parameter buffer (a word holds one output tile's ``pout``
        parameter records). 0 (default): one run's, ``ceil(max_out_channels /
        pout)``. More (at least that) lets the parameters of several runs stay
        in the buffer, each run's from its descriptor's ``param_base``, so that
        a program whose weights are resident streams no parameters either
        (docs/engine.md, "Resident weights"). Only an engine with resident
        weights (``deep_pipeline = 1``) uses more words than one run's; on
        Xilinx parts a buffer of up to 512 words takes no more block RAMs
        than one of 64 (a RAMB36 is 512 deep at 72 bits).
    fused_blocks : int
        0 (default): no fused block. ``n >= 1``: a run may be a depthwise
        convolution and the pointwise 1x1 convolution after it (the
        descriptor's ``fused``): the depthwise half in a depthwise unit beside
        the array on the line buffer's pixel pairs, its int8 output in a pair
        buffer that the array reads as the 1x1 remap's window for the
        pointwise half (docs/engine.md, "The fused depthwise + pointwise
        block"). ``n`` is the blocks of up to ``max_channels`` channels whose
        depthwise weights and parameter records the depthwise memory holds
        (resident, each block's from its descriptor's ``dw_base``). Needs
        ``pixel_pairs = 1``. The engines without it keep their Verilog and
        their register map (its registers exist only with the block).
    depthwise_pixels : int
        2 (default): the fused block's depthwise unit computes both output
        pixels of a window pair a cycle (``2 * kmax^2 * pin`` products). 1:
        one pixel a cycle, half the products, a window pair in two cycles, so
        the line buffer issues a fused run's window pairs every other cycle
        (docs/engine.md, "The half-rate depthwise unit"). Only with
        ``fused_blocks``; the engines with 2 keep their Verilog and register
        map (``cfg_depthwise_pixels`` exists only with 1).

    Raises
    ------
    ConfigError
        If a parameter is out of range or parameters do not fit together.
    """

    pin: int = 8
    pout: int = 8
    kmax: int = 3
    act_width: int = 8
    weight_width: int = 8
    acc_width: int = 32
    mult_width: int = 24
    max_width: int = 64
    max_channels: int = 64
    max_out_channels: int = 64
    stream_width: int = 64
    deep_pipeline: int = 1
    writer_words: int = 1
    spare_bank: int = 0
    pixel_pairs: int = 0
    param_words: int = 0
    fused_blocks: int = 0
    depthwise_pixels: int = 2

    def __post_init__(self):
        _check_int("pin", self.pin, 1, 64)
        _check_int("pout", self.pout, 1, 64)
        _check_int("kmax", self.kmax, 1, 7)
        _check_int("act_width", self.act_width, 8, 8)
        _check_int("weight_width", self.weight_width, 8, 8)
        _check_int("acc_width", self.acc_width, 16, 48)
        _check_int("mult_width", self.mult_width, MULT_BITS, MULT_BITS)
        _check_int("max_width", self.max_width, 1, 4096)
        _check_int("max_channels", self.max_channels, 1, 4096)
        _check_int("max_out_channels", self.max_out_channels, 1, 4096)
        _check_int("deep_pipeline", self.deep_pipeline, 0, 1)
        if self.stream_width not in (32, 64, 128):
            raise ConfigError(f"stream_width must be 32, 64 or 128, not {self.stream_width!r}")
        b = self.stream_bytes
        if self.pin % b and b % self.pin:
            raise ConfigError(
                f"pin ({self.pin} bytes per word) and stream_width ({b} bytes per beat) "
                f"must divide one another")
        if self.pout % b and b % self.pout:
            raise ConfigError(
                f"pout ({self.pout} bytes per word) and stream_width ({b} bytes per beat) "
                f"must divide one another")
        _check_int("writer_words", self.writer_words, 1, 2)
        _check_int("spare_bank", self.spare_bank, 0, self.kmax)
        _check_int("pixel_pairs", self.pixel_pairs, 0, 1)
        if self.pixel_pairs and not (self.spare_bank and self.deep_pipeline):
            raise ConfigError(
                "pixel_pairs 1 needs spare_bank >= 1 (the two windows of a pair in one read) "
                f"and deep_pipeline 1, not spare_bank {self.spare_bank} and "
                f"deep_pipeline {self.deep_pipeline}")
        # A run's output tiles must fit the parameter buffer (0: exactly them).
        tiles = self.out_tiles
        _check_int("param_words", self.param_words, 0, 4096)
        if 0 < self.param_words < tiles:
            raise ConfigError(
                f"param_words must be 0 (one run's {tiles} output tiles) or at least "
                f"max_out_channels / pout = {tiles}, not {self.param_words}")
        if self.param_words > tiles and not self.deep_pipeline:
            # The compact arrangement keeps no resident weights: its param_base
            # is a constant 0, and the words past one run's would be unused.
            raise ConfigError(
                f"param_words {self.param_words} (more than one run's {tiles}) needs "
                f"deep_pipeline 1, whose runs keep their parameters resident")
        _check_int("fused_blocks", self.fused_blocks, 0, 64)
        if self.fused_blocks and not self.pixel_pairs:
            raise ConfigError(
                f"fused_blocks {self.fused_blocks} needs pixel_pairs 1 (the depthwise unit takes "
                f"the line buffer's window pairs), not pixel_pairs {self.pixel_pairs}")
        _check_int("depthwise_pixels", self.depthwise_pixels, 1, 2)
        if self.depthwise_pixels != 2 and not self.fused_blocks:
            raise ConfigError(
                f"depthwise_pixels {self.depthwise_pixels} needs fused_blocks >= 1 (it sets the "
                f"fused block's depthwise unit), not fused_blocks {self.fused_blocks}")
        if self.writer_words == 2 and b != 2 * self.pin:
            raise ConfigError(
                f"writer_words 2 needs a beat of two input words: stream_width "
                f"{self.stream_width} is {b} bytes, pin is {self.pin}")

    # -- parameter arithmetic; buffer sizes and limits are the engine
    # contract's (fpgacnn.core.contract), not the configuration's ------------

    @property
    def stream_bytes(self):
        """Bytes per AXI4-Stream beat."""
        return self.stream_width // 8

    @property
    def column_banks(self):
        """Column banks of the line buffer: ``kmax + spare_bank``."""
        return self.kmax + self.spare_bank

    @property
    def paired_beats(self):
        """Whether a pixel-pair run may move its output a beat at a time: pixel pairs
        on an engine whose beat holds two output words (``2 * pout == stream_bytes``;
        docs/engine.md, "Pixel pairs"). Read by the contract
        (:attr:`~fpgacnn.core.contract.EngineContract.paired_beats`) and the memory
        port (the pixel writer's wide mode)."""
        return bool(self.pixel_pairs) and 2 * self.pout == self.stream_bytes

    @property
    def out_tiles(self):
        """Output tiles of ``max_out_channels``: ``ceil(max_out_channels / pout)``, the
        most a run has (the contract's ``max_co_tiles``) and the parameter buffer's
        words unless ``param_words`` says more."""
        return -(-self.max_out_channels // self.pout)

    @property
    def window_macs(self):
        """Multiply-accumulates of one window issue: ``kmax*kmax*pin*pout``."""
        return self.kmax * self.kmax * self.pin * self.pout

    @property
    def peak_macs_per_cycle(self):
        """The array's products a cycle: a window's, two windows' with ``pixel_pairs``."""
        return self.window_macs * (1 + self.pixel_pairs)

    # -- (de)serialisation ---------------------------------------------------

    def as_dict(self):
        return asdict(self)

    @classmethod
    def from_dict(cls, values, *, source="configuration"):
        """Build from a mapping, rejecting unknown keys by name."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"{source}: unknown engine parameter {unknown[0]!r} "
                              f"(known: {', '.join(sorted(known))})")
        return cls(**values)

    @classmethod
    def from_toml(cls, path):
        """Load ``[engine]`` (or the top-level table) of a TOML file."""
        try:
            import tomllib
        except ModuleNotFoundError:  # Python 3.10
            import tomli as tomllib
        try:
            with open(path, "rb") as f:
                doc = tomllib.load(f)
        except FileNotFoundError:
            raise ConfigError(f"{path}: no such configuration file") from None
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{path}: not valid TOML ({e})") from None
        return cls.from_dict(doc.get("engine", doc), source=str(path))
