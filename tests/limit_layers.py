"""Seeded single layers at, one under and one over every limit of the engine contract.

Tier 4 of DESIGN.md section 6: every capacity and range that
:func:`fpgacnn.core.contract.engine_contract` defines gets layers just inside
it, on it and just outside it, and each layer must either run bit-exact on the
engine or be refused at compile time with a ``MappingError`` that names the
layer and the limit.

A :class:`LimitCase` is one generated layer: a Conv (maybe with a fused Relu
and a fused 2x2 MaxPool; grouped or depthwise when ``group > 1``) or a Gemm,
the limit it targets (:data:`TARGETS`),
the side of that limit (``under``, ``at``, ``over``) and the outcome the
engine contract predicts for it (:func:`expected_refusal`: ``None`` for
bit-exact, else the limits one of which a refusal must name). Over-limit layers that the
compiler can tile (wide rows, many output channels, long pooled rows, Gemm
batches) are expected bit-exact; only what no tiling can map (kernel or
stride above ``kmax``, pads above ``kmax - 1``, too many input tiles, more
than 65535 rows or images in a run) is expected refused. One exception:
left padding above ``kmax - 1`` only ever reaches windows of padding, which
the compiler may stream as a column of the zero point, so such a layer may
also run -- bit-exact (:attr:`LimitCase.may_run`).

Grouped and depthwise layers (:data:`GROUPED_TARGETS`) reach the engine as
views (host/conv_views.py): block-diagonal dense convolutions of consecutive
groups and, where the contract has ``depthwise_runs`` (the deep arrangement,
``pin == pout``), depthwise runs that pair each output tile with its own
input tile. Their limits decide how a layer is split into views and runs
(the channels of one depthwise run, its row, the group against pin and pout,
all groups as one view against the weight and parameter buffers, the
program's weight words against the weight buffer when resident); the only
one no split gets past is a single group's input tiles over
``max_ci_tiles``, unless its taps folded into channels take fewer. A layer
is refused exactly when one of its groups, as a dense Conv, is: where the
views cannot run as they are (a stride over ``kmax``, a top or left pad over
``kmax - 1``, its input tiles), they fold their taps as a Conv does
(:func:`views_fold`). Otherwise it is bit-exact, and two runs or more when no
mapping fits it in one (:func:`single_run_fits`). On an engine without
depthwise runs a depthwise layer runs as block-diagonal views.

Every case is a pure function of the configuration name, the base seed and
its index (and its target and side, which cycle with the index unless
given): :func:`limit_case` rebuilds it from what a failure prints::

    from limit_layers import limit_case, build_model, case_input
    case = limit_case("k3", seed=0, index=17, target="width", side="under")
    model, x = build_model(case), case_input(case)

The expected outcome is derived from the contract's capacities here, not from
the compiler's code: the compiler's tiling is checked against it, not with it.
"""

from dataclasses import dataclass, replace
import math

import numpy as np

from fpgacnn.core.config import EngineConfig
from fpgacnn.core.contract import ROW_FIELD_MAX, engine_contract
from fpgacnn.host.conv_views import space_to_depth_view
from fpgacnn.host.layers import Conv, Gemm, GroupedConv, MaxPool
from fpgacnn.host.model import QuantizedModel, TensorSpec

from conftest import SMALL_ENGINE

__all__ = ["CONFIGS", "COMPILE_CONFIGS", "TARGETS", "CONV_TARGETS", "GROUPED_TARGETS", "SIDES",
           "REFUSAL_PATTERNS", "LimitCase", "limit_case", "limit_cases", "expected_refusal",
           "single_run_fits", "single_run_fits_as", "mapping_kinds", "depthwise_run_channels", "input_tiles",
           "views_fold", "views_must_fold", "fold_limit_layers",
           "build_model", "case_input", "layer_case", "regression_96_case"]

#: Engines the limit cases run on, in Verilator. ``k3`` is tests/conftest.py's
#: SMALL_ENGINE (3x3 windows, 4-lane words, 32-bit stream; the session's
#: simulated board); ``k2`` is tests/test_engine_rtl.py's "k2" (2x2 windows,
#: 8-channel pixel words, 4 output lanes, 64-bit stream, 24-bit accumulator).
#: Both keep their buffers small, so layers at the limits are small and fast.
CONFIGS = {
    "k3": SMALL_ENGINE,
    "k2": EngineConfig(pin=8, pout=4, kmax=2, stream_width=64, max_width=12, max_channels=16,
                       max_out_channels=12, acc_width=24),
}

#: More engines for the compile-only checks (no Verilator build): the default
#: engine, kmax = 1 (no remap, no padding), pout > pin, and an engine whose
#: 20-bit accumulator, not its buffers, bounds the input tiles.
COMPILE_CONFIGS = {
    **CONFIGS,
    "default": EngineConfig(),
    "k1": EngineConfig(pin=1, pout=1, kmax=1, stream_width=32, max_width=16, max_channels=8,
                       max_out_channels=8),
    "p4x16": EngineConfig(pin=4, pout=16, kmax=2, stream_width=32, max_width=16,
                          max_channels=16, max_out_channels=32),
    "acc20": EngineConfig(pin=4, pout=2, kmax=2, acc_width=20, stream_width=32, max_width=8,
                          max_channels=16, max_out_channels=8),
}

SIDES = ("under", "at", "over")

#: What each target puts at its limit.
TARGETS = {
    "width": "input row width in pixels vs a line-buffer bank (at a random input-tile count)",
    "channels": "input tiles vs max_ci_tiles (line-buffer bank, weight buffer, accumulator)",
    "pool_strip": "one pooled strip (two output columns) vs the line-buffer bank",
    "pool_row": "pooled row (output columns x output tiles) vs the max-pool row memory",
    "weights": "output tiles x input tiles vs the weight buffer",
    "params": "output channels vs one run's output tiles (co_tiles's range: one run's words "
              "of the parameter buffer)",
    "out_channels": "output channels vs one output tile (pout)",
    "rows": "input / output rows vs the descriptor's 16-bit row fields",
    "batch": "convolution batch vs the descriptor's 16-bit batch field",
    "gemm_rows": "Gemm batch laid out as rows: one row of the grid (the line buffer's width)",
    "gemm_chunks": "Gemm batch vs a grid of 65535 rows (kmax rows per image when remapped): chunks",
    "stride": "stride 1..kmax, kmax + 1 and not square (over: the taps folded into channels)",
    "pad": "pads 0..kmax - 1, kmax (top/left: descriptor fields, over: folded; bottom/right: "
           "output size)",
    "kernel": "kernels 1..kmax, kmax + 1, square and not (over: the taps folded into channels)",
    "remap": "1x1 layers through the remap: remapped input tiles vs max_ci_tiles",
    "gemm": "Gemm input features vs max_ci_tiles (remapped), output channels in groups",
    # Grouped (1 < groups < C) and depthwise (groups == C) layers, as views.
    "dw_channels": "depthwise channels vs one depthwise run (max_ci_tiles x pin, max_co_tiles "
                   "x pout, weight words x pout; over: two runs or more)",
    "dw_row": "depthwise row width vs a line-buffer bank at the input tiles of one run of "
              "every channel",
    "dw_resident": "depthwise output tiles (the fewest weight words of any mapping) vs the "
                   "weight buffer: a resident program, or (over) the weights streamed",
    "group_window": "grouped / depthwise kernels 1..kmax, kmax + 1, strides 1..kmax, kmax + 1 "
                    "and not square, top/left pads 0..kmax - 1, kmax (over: the taps folded "
                    "into channels; no depthwise run)",
    "group_in": "input channels per group vs pin (n*pin - 1, n*pin, n*pin + 1)",
    "group_out": "output channels per group vs pout (n*pout - 1, n*pout, n*pout + 1; "
                 "depthwise with a channel multiplier)",
    "group_tiles": "one group's input tiles vs max_ci_tiles (over: refused, no view splits "
                   "a group, unless its taps folded into channels take fewer tiles)",
    "group_view": "all groups as one block-diagonal view: output tiles vs max_co_tiles_for "
                  "its input tiles (weight and parameter buffers; over: two runs or more)",
}
#: The targets of group-1 layers and Gemm, and those of grouped and depthwise
#: layers: :func:`limit_cases` cycles through one family at a time.
GROUPED_TARGETS = tuple(t for t in TARGETS if t.startswith(("dw_", "group_")))
CONV_TARGETS = tuple(t for t in TARGETS if t not in GROUPED_TARGETS)

#: What a refusal of each limit must say (``re.search`` on the message, after
#: the ``layer 'NAME': `` that every refusal starts with).
REFUSAL_PATTERNS = {
    "kernel": r"kernel \d+x\d+ exceeds the engine's kmax \d+",
    "stride": r"stride (= \d+ is outside the engine's range 1\.\.\d+|\d+x\d+ is not square)",
    "pad": r"pad_(top|left) = \d+ is outside the engine's range 0\.\.\d+",
    "channels": r"weight buffer|line buffer|ci_tiles = \d+ is outside|accumulator",
    "rows": r"(in_h|out_h) = \d+ is outside the engine's range 1\.\.65535",
    "batch": r"batch = \d+ is outside the engine's range 1\.\.65535",
}


@dataclass(frozen=True)
class LimitCase:
    """One generated layer and the outcome the contract predicts for it.

    Attributes
    ----------
    config : str
        Key of :data:`COMPILE_CONFIGS`.
    seed, index : int
        The base seed and the case's index: :func:`limit_case` rebuilds it.
    target, side : str
        The limit aimed at (:data:`TARGETS`) and ``under`` / ``at`` / ``over``.
    op : {"Conv", "Gemm"}
    cin, h, w, cout : int
        Input channels (Gemm: features), input rows and columns (Gemm: 1), output channels.
    kernel, stride : (int, int)
    pads : (int, int, int, int)
        ``(top, left, bottom, right)``.
    pool, relu : bool
        Fused 2x2 MaxPool, fused Relu.
    batch : int
    data : {"uniform", "extreme"}
        Random int8 data over the whole range, or only -128 and 127.
    pauses : (int, int)
        Stream back-pressure on the simulated board (per mille: input beats
        withheld, output not ready).
    expect : tuple of str, or None
        ``None``: bit-exact; else the limits the layer breaks (keys of
        :data:`REFUSAL_PATTERNS`), one of which a refusal must name.
    group : int
        Groups of a Conv (1: dense; ``cin``: depthwise, maybe with a channel
        multiplier); ``cin`` and ``cout`` are multiples of it. A grouped
        layer's MaxPool runs on the host.
    """

    config: str
    seed: int
    index: int
    target: str
    side: str
    op: str
    cin: int
    h: int
    w: int
    cout: int
    kernel: tuple
    stride: tuple
    pads: tuple
    pool: bool
    relu: bool
    batch: int
    data: str
    pauses: tuple
    expect: object
    group: int = 1

    @property
    def id(self):
        return f"{self.config}-{self.index:03d}-{self.target}-{self.side}"

    @property
    def layer_seed(self):
        config = sorted(COMPILE_CONFIGS).index(self.config)
        return (self.seed * 1_000_003 + self.index) * 64 + config

    def describe(self):
        if self.op == "Gemm":
            shape = f"Gemm {self.cin}->{self.cout}"
        else:
            groups = "" if self.group == 1 else \
                f"g{self.group}{' (depthwise)' if self.group == self.cin else ''} "
            shape = (f"Conv {self.cin}x{self.h}x{self.w}->{self.cout} {groups}"
                     f"k{self.kernel[0]}x{self.kernel[1]} s{self.stride[0]}x{self.stride[1]} "
                     f"pads{self.pads}{' +Relu' if self.relu else ''}"
                     f"{' +MaxPool2x2' if self.pool else ''}")
        return (f"{shape}, batch {self.batch}, {self.data} data, pauses {self.pauses}; "
                f"target {self.target}/{self.side}; expected "
                f"{'bit-exact' if self.expect is None else 'refused: ' + ', '.join(self.expect)}")

    @property
    def may_run(self):
        """Refused naming ``pad`` and bit-exact are both right: only the left
        padding is over ``kmax - 1``. The columns beyond ``kmax - 1`` reach
        only windows of padding (a window of ``kw <= kmax`` columns cannot
        hold both one of them and a pixel), which a compiler may stream as a
        column of the zero point instead of refusing the layer."""
        k = COMPILE_CONFIGS[self.config].kmax
        return self.expect == ("pad",) and self.pads[0] <= k - 1

    def repro(self):
        """The line that rebuilds this case, with what it is."""
        return (f"limit_case({self.config!r}, seed={self.seed}, index={self.index}, "
                f"target={self.target!r}, side={self.side!r}) [FPGACNN_LIMIT_SEED={self.seed}]: "
                f"{self.describe()}")


# -- the contract's prediction ------------------------------------------------

def _out(size, k, s, p0, p1):
    return (size + p0 + p1 - k) // s + 1


def _remapped(config, cin, kernel):
    """Whether a 1x1 layer goes through the remap (fewer input tiles), as docs/engine.md says."""
    k, pin = config.kmax, config.pin
    return (tuple(kernel) == (1, 1) and k > 1
            and math.ceil(math.ceil(cin / k ** 2) / pin) < math.ceil(cin / pin))


def input_tiles(config, cin, kernel, block=None):
    """Input tiles of a run of a ``cin``-channel layer (after the 1x1 remap of
    ``block``, by default the one :func:`_remapped` says)."""
    if block is None:
        block = config.kmax if _remapped(config, cin, kernel) else 0
    if block:
        return math.ceil(math.ceil(cin / block ** 2) / config.pin)
    return math.ceil(cin / config.pin)


def _other_blocks(config, case):
    """The 1x1 remap's other blocks (0: none) the compiler tries for ``case``, as
    docs/engine.md says: an unpadded 1x1 Conv without a fused pool, every block
    from none to kmax."""
    if (case.op != "Conv" or tuple(case.kernel) != (1, 1) or any(case.pads) or case.pool
            or config.kmax == 1):
        return []
    default = config.kmax if _remapped(config, case.cin, (1, 1)) else 0
    return [b for b in (0, *range(2, config.kmax + 1)) if b != default]


def _row_cases(config, case):
    """``case`` with its pixels as rows of another width, as the compiler tries them
    (docs/engine.md): an unpadded 1x1 stride-1 Conv without a fused pool, every
    width up to ``max_width`` that divides its ``H * W`` pixels."""
    if (case.op != "Conv" or tuple(case.kernel) != (1, 1) or tuple(case.stride) != (1, 1)
            or any(case.pads) or case.pool or case.group != 1):
        return []
    pixels = case.h * case.w
    return [replace(case, h=pixels // d, w=d) for d in range(1, config.max_width + 1)
            if pixels % d == 0 and d != case.w]


def _dense_refusal(config, case, *, alternatives=True):
    """The limits no tiling of ``case`` as it is (a dense convolution) gets past:
    those of its default mapping, unless another the compiler tries (another
    remap block, its pixels as rows of another width) has none. The compiler
    tries those of a layer, not of its taps folded into channels (its
    fallback): ``alternatives=False``."""
    default = _dense_refusal_with(config, case, None)
    if default is None or not alternatives:
        return default
    for view in [case, *_row_cases(config, case)]:
        blocks = _other_blocks(config, view) + ([None] if view is not case else [])
        if any(_dense_refusal_with(config, view, b) is None for b in blocks):
            return None
    return default


def _dense_refusal_with(config, case, block):
    """:func:`_dense_refusal` with the 1x1 remap's ``block`` (None: the default)."""
    c = engine_contract(config)
    k = config.kmax
    if case.op == "Gemm":
        kernel, stride, pads, h = (1, 1), (1, 1), (0, 0, 0, 0), 1
    else:
        kernel, stride, pads, h = case.kernel, case.stride, case.pads, case.h
    kh, kw = kernel
    broken = []
    if kh > k or kw > k:
        broken.append("kernel")
    if block is None:
        block = k if _remapped(config, case.cin, kernel) else 0
    remap = bool(block)
    oh = _out(h, kh, stride[0], pads[0], pads[2])
    ci = input_tiles(config, case.cin, kernel, block)
    if remap:
        in_h, in_cols, win = block * oh, block, block  # an output pixel is a block x block block
    else:
        if stride[0] != stride[1] or stride[0] > k:
            broken.append("stride")
        if pads[0] > k - 1 or pads[1] > k - 1:
            broken.append("pad")
        in_h, in_cols, win = h, stride[1], kw
    # The narrowest strip: one output column, two when pooled.
    need = (2 if case.pool else 1) * in_cols if remap else \
        (in_cols + win if case.pool else win)
    if ci > c.max_ci_tiles or c.line_words(need, ci) > c.line_buffer.words:
        broken.append("channels")
    if case.op == "Conv":
        if in_h > ROW_FIELD_MAX or oh > ROW_FIELD_MAX:
            broken.append("rows")
        if case.batch > ROW_FIELD_MAX:
            broken.append("batch")
    return tuple(broken) or None


def im2col_case(case):
    """``case`` with its taps folded into channels (host/conv_views.py's Im2Col): a
    1x1 stride-1 convolution over ``cin * kh * kw`` channels at the output's
    size, unpadded, without the pool (which then runs on the host)."""
    (kh, kw), (sy, sx), (t, l, b, r) = case.kernel, case.stride, case.pads
    return replace(case, cin=case.cin * kh * kw, kernel=(1, 1), stride=(1, 1),
                   pads=(0, 0, 0, 0), h=_out(case.h, kh, sy, t, b), w=_out(case.w, kw, sx, l, r),
                   pool=False)


def s2d_case(case, phase=(0, 0)):
    """``case`` as space to depth (host/conv_views.py's ``space_to_depth_view``, the
    host padding ``phase`` before the input): a stride-1 convolution over its input's
    ``sy x sx`` blocks, the view's own kernel, pads and size."""
    view = space_to_depth_view(build_model(case).layers[0], phase)
    return replace(case, cin=view.input_shape[0], h=view.input_shape[1], w=view.input_shape[2],
                   kernel=view.kernel, stride=(1, 1), pads=view.pads)


def mapped_case(config, case):
    """``case`` as the engine runs it: as it is, or with its taps folded into
    channels where the engine cannot take it as it is (the compiler's fallback)."""
    if case.op == "Gemm" or _dense_refusal(config, case) is None:
        return case
    return im2col_case(case)


def _fits_window(config, case):
    """Whether the engine's window takes ``case``'s kernel and stride as they are
    (docs/engine.md): a view keeps them, else it folds its taps into channels."""
    return max(case.kernel) <= config.kmax and case.stride[0] == case.stride[1]


def _one_group(case):
    """One group of a grouped ``case`` as a dense Conv (no pool: the host pools a
    grouped layer's output)."""
    return replace(case, group=1, cin=case.cin // case.group, cout=case.cout // case.group,
                   pool=False)


def views_must_fold(config, case):
    """Whether a grouped ``case``'s views fold their taps into channels whatever
    else (host/conv_views.py, ``grouped/<k>/im2col``, docs/runtime.md): the window
    does not take its kernel and stride."""
    return not _fits_window(config, _one_group(case))


def views_fold(config, case):
    """Whether a grouped ``case``'s views may fold their taps into channels: they
    must (:func:`views_must_fold`), or, as a dense Conv's im2col fallback, one group
    as it is (the narrowest view, with the 1x1 remap's default block) breaks a limit
    no tiling gets past -- a stride over ``kmax``, a top/left pad over ``kmax - 1``,
    its input tiles. Then the compiler folds them unless a view of more groups runs
    as it is: the 1x1 remap, which takes any stride and padding, remaps a view
    whose channels it packs into fewer input tiles, where one group's it may not."""
    one = _one_group(case)
    return views_must_fold(config, case) or \
        _dense_refusal(config, one, alternatives=False) is not None


def mapping_kinds(config, case):
    """How ``case`` may reach the engine: the kinds of ``EngineStep.mapping`` (before
    ``/``) that the contract allows. A depthwise run needs ``depthwise_runs``, one
    input and one output channel per group and a window that takes the kernel and
    stride as they are (a view that folds its taps has one output channel for
    ``KH * KW`` inputs); everything else grouped runs as block-diagonal views."""
    if case.op == "Gemm":
        return {"gemm"}
    if case.group == 1:
        # a strided Conv (on the network's input, as every case is) also as its blocks
        return {"dense", "im2col"} | ({"s2d"} if case.stride != (1, 1) else set())
    kinds = {"grouped"}
    if (engine_contract(config).depthwise_runs and case.cin == case.group == case.cout
            and not views_fold(config, case)):
        kinds.add("depthwise")
    return kinds


def depthwise_run_channels(config):
    """Most channels of a depthwise layer (a kernel in the window, not 1x1, a short
    row) that one engine run takes: one depthwise run where the contract has
    them (its input tiles, its output tiles and its weight words, one per output
    tile), else one block-diagonal view of every channel (its output tiles vs
    :meth:`max_co_tiles_for` its input tiles)."""
    c, pin, pout = engine_contract(config), config.pin, config.pout
    if c.depthwise_runs:
        return min(c.max_ci_tiles * pin, c.max_co_tiles * pout, c.weights.words * pout)
    n = 0
    while (math.ceil((n + 1) / pin) <= c.max_ci_tiles and math.ceil((n + 1) / pout)
           <= c.max_co_tiles_for(math.ceil((n + 1) / pin))):
        n += 1
    return n


def resident_possible(config, case):
    """Whether the program of ``case`` can keep its weights resident at all: every
    run's weights take a word per output tile at least (a depthwise run's one per
    tile, a dense one's one per input tile too), so the layer's output tiles must
    fit the weight buffer (docs/engine.md, "Resident weights")."""
    c = engine_contract(config)
    return c.resident_weights and math.ceil(case.cout / config.pout) <= c.weights.words


def expected_refusal(config, case):
    """The limits no tiling of ``case`` can get past on ``config``: a tuple of
    :data:`REFUSAL_PATTERNS` keys (a refusal names one of them), or ``None``.

    Tiling over output channels (groups of whole output tiles), columns
    (strips, each at least one output column -- two pooled) and Gemm batches
    (grids of at most 65535 rows) absorbs the buffer limits; a Conv the engine
    cannot take as it is (kernel over ``kmax``, a stride or pad out of range, a
    non-square stride, an input past the line buffer) is tried with its taps
    folded into channels. The refusal names the first mapping the compiler
    tried: the layer as it is when its kernel and stride fit the engine, else
    the folded one.

    A grouped layer is refused exactly when one of its groups, as a dense Conv
    (unpooled), is: views of one group each are the narrowest split there is.
    """
    if case.group > 1:
        return expected_refusal(config, _one_group(case))
    dense = _dense_refusal(config, case)
    if dense is None or case.op == "Gemm":
        return dense
    folded = _dense_refusal(config, im2col_case(case), alternatives=False)
    if folded is None:
        return None
    k = config.kmax
    takes_as_is = max(case.kernel) <= k and case.stride[0] == case.stride[1]
    return dense if takes_as_is else folded


def single_run_fits(config, case):
    """Whether ``case`` fits the contract as one run (no tiling): when it does
    not, a bit-exact result must have come from two runs or more.

    A grouped layer's one run is either one block-diagonal view of every group
    (a dense Conv over all channels, unpooled, as it is or its taps folded where
    the views may fold them: :func:`views_fold`) or one depthwise run of every
    channel."""
    if case.expect is not None and not case.may_run:
        return False
    if case.group > 1:
        whole = replace(case, group=1, pool=False)
        wholes = ([] if views_must_fold(config, case) else [whole]) + \
            ([im2col_case(whole)] if views_fold(config, case) else [])
        return any(_dense_refusal(config, w) is None and _one_run(config, w) for w in wholes) \
            or _one_depthwise_run(config, case)
    return _one_run(config, mapped_case(config, case))


def _one_depthwise_run(config, case):
    """Whether one depthwise run takes every channel of ``case`` (whole rows)."""
    c = engine_contract(config)
    if "depthwise" not in mapping_kinds(config, case) or \
            case.cin > depthwise_run_channels(config):
        return False
    kw, sx = case.kernel[1], case.stride[1]
    l, r = case.pads[1], case.pads[3]
    ow = _out(case.w, kw, sx, l, r)
    in_w = max(1, min(case.w, (ow - 1) * sx - l + kw))
    return c.line_words(in_w, math.ceil(case.cin / config.pin)) <= c.line_buffer.words \
        and ow <= c.max_cols


def single_run_fits_as(config, case, mapping):
    """:func:`single_run_fits` of ``case`` as the compiler mapped it: ``mapping``
    (the step's) may name its pixels as rows of another width (``rows<w>``) and
    the 1x1 remap's block (``remap<b>``, ``plain``); a dense Conv's ``im2col`` may
    also be the thin first layer's choice where it runs as it is (the folded
    taps fill the input lanes), so the folded taps are what one run must take."""
    if mapping == "im2col" and case.group == 1 and (case.expect is None or case.may_run):
        return _one_run(config, im2col_case(case))
    if mapping.startswith("s2d"):  # with today's pool fused or not: either may be one run
        phase = (case.pads[0] % case.stride[0], case.pads[1] % case.stride[1]) \
            if mapping == "s2d/phase" else (0, 0)
        blocks = s2d_case(case, phase)
        return any(_one_run(config, replace(blocks, pool=p)) for p in (False, case.pool))
    parts = mapping.split("/")
    widths = [int(p[4:]) for p in parts if p.startswith("rows")]
    blocks = [int(p[5:]) for p in parts if p.startswith("remap")] + \
        [0 for p in parts if p == "plain"]
    if not widths and not blocks:
        return single_run_fits(config, case)
    if widths:
        case = replace(case, h=case.h * case.w // widths[0], w=widths[0])
    return _one_run(config, case, blocks[0] if blocks else None)


def _one_run(config, case, block=None):
    """Whether the dense (or Gemm) ``case``, as the engine takes it, fits one run
    (with the 1x1 remap's ``block``; None: the default)."""
    c, k, pout = engine_contract(config), config.kmax, config.pout
    kernel = (1, 1) if case.op == "Gemm" else case.kernel
    if block is None:
        block = k if _remapped(config, case.cin, kernel) else 0
    co = math.ceil(case.cout / pout)
    ci = input_tiles(config, case.cin, kernel, block)
    if co > c.max_co_tiles_for(ci):
        return False
    if case.op == "Gemm":
        remap = _remapped(config, case.cin, (1, 1))
        per_row = c.widest_row(ci) // (k if remap else 1)
        return math.ceil(case.batch / per_row) * (k if remap else 1) <= ROW_FIELD_MAX
    kw, sx = case.kernel[1], case.stride[1]
    l, r = case.pads[1], case.pads[3]
    ow = _out(case.w, kw, sx, l, r)
    used = ow - ow % 2 if case.pool else ow
    if block:
        in_w = block * used
    else:  # the columns the used outputs read (from the first; one, if only padding)
        in_w = max(1, min(case.w, (used - 1) * sx - l + kw))
    if c.line_words(in_w, ci) > c.line_buffer.words or used > c.max_cols:
        return False
    if case.may_run and (used - 1) * sx - l + kw > 0:  # a pixel needs the left pad in range
        return False
    return not (case.pool and c.pool_words(used, co) > c.pool_row.words)


# -- the generator ------------------------------------------------------------

class _Draw:
    """Random free parameters of a layer, in every range, small."""

    def __init__(self, rng, config):
        self.rng, self.config = rng, config
        self.c = engine_contract(config)

    def int(self, lo, hi):
        """Uniform in ``lo..hi`` (inclusive)."""
        return int(self.rng.integers(lo, hi + 1))

    def chance(self, p):
        return bool(self.rng.random() < p)

    def cin_in_tiles(self, tiles, per_tile=None):
        """Channels that take exactly ``tiles`` tiles of ``per_tile`` (default pin)."""
        per = per_tile or self.config.pin
        return self.int((tiles - 1) * per + 1, tiles * per)

    def kernel(self, kmax=None):
        k = kmax or self.config.kmax
        if self.chance(0.75):
            v = self.int(1, k)
            return (v, v)
        return (self.int(1, k), self.int(1, k))

    def stride(self):
        v = self.int(1, self.config.kmax)
        return (v, v)

    def pads(self, top_left_max=None, bottom_right_max=None):
        k = self.config.kmax
        a = k - 1 if top_left_max is None else top_left_max
        b = k - 1 if bottom_right_max is None else bottom_right_max
        if self.chance(0.5):
            p = self.int(0, min(a, b))
            return (p, p, p, p)
        return (self.int(0, a), self.int(0, a), self.int(0, b), self.int(0, b))

    def conv(self, **fixed):
        """A random small Conv; ``fixed`` overrides any field."""
        pin, pout = self.config.pin, self.config.pout
        kernel = fixed.get("kernel") or self.kernel()
        cin = fixed.get("cin") or self.int(1, 2 * pin + 1)
        p = dict(op="Conv", cin=cin, kernel=kernel, stride=self.stride(), pads=self.pads(),
                 cout=self.int(1, 2 * pout + 1), pool=self.chance(0.4), relu=self.chance(0.5),
                 batch=self.int(1, 3))
        p.update(fixed)
        kh, kw = p["kernel"]
        sy, sx = p["stride"]
        t, l, b, r = p["pads"]
        least = 2 if p["pool"] else 1
        # Rows and columns: a few outputs, at least one (two pooled) -- unless fixed.
        if "h" not in p:
            oh = self.int(least, least + 4)
            p["h"] = max(1, (oh - 1) * sy + kh - t - b)
        if "w" not in p:
            ow = self.int(least, least + 5)
            p["w"] = max(1, (ow - 1) * sx + kw - l - r)
        return p

    def gemm(self, **fixed):
        pin, pout = self.config.pin, self.config.pout
        p = dict(op="Gemm", cin=self.int(1, 3 * pin), h=1, w=1, kernel=(1, 1), stride=(1, 1),
                 pads=(0, 0, 0, 0), cout=self.int(1, 3 * pout), pool=False,
                 relu=self.chance(0.3), batch=self.int(1, 5))
        p.update(fixed)
        return p


def _valid(p):
    """The Conv (and MaxPool) exist: outputs at least 1x1, 2x2 when pooled."""
    if p["op"] == "Gemm":
        return True
    oh = _out(p["h"], p["kernel"][0], p["stride"][0], p["pads"][0], p["pads"][2])
    ow = _out(p["w"], p["kernel"][1], p["stride"][1], p["pads"][1], p["pads"][3])
    least = 2 if p["pool"] else 1
    return min(p["h"], p["w"]) >= 1 and oh >= least and ow >= least


def _nonremap_conv(d, **fixed):
    """A Conv that does not go through the 1x1 remap (``None`` if ``fixed`` makes one)."""
    p = d.conv(**fixed)
    if not _remapped(d.config, p["cin"], p["kernel"]):
        return p
    if "kernel" not in fixed:  # another kernel (the remap needs kmax > 1)
        kernel = (1, 1)
        while kernel == (1, 1):
            kernel = d.kernel()
        return d.conv(**fixed, kernel=kernel)
    if "cin" not in fixed:
        return dict(p, cin=d.int(1, d.config.pin))
    return None


def _side_value(d, side, at, lo=1):
    """``at - 1`` (or lower), ``at`` or ``at + 1``."""
    if side == "under":
        return max(lo, at - 1 if d.chance(0.7) else d.int(lo, max(lo, at - 1)))
    return at if side == "at" else at + 1


def _width(d, side):
    c = d.c
    t = 1 if d.chance(0.4) else d.int(1, c.max_ci_tiles)
    widest = c.widest_row(t)
    w = _side_value(d, side, widest)
    if side == "over" and d.chance(0.3):
        w = widest + d.int(1, widest)  # several strips
    return _nonremap_conv(d, cin=d.cin_in_tiles(t), w=w), None


def _channels(d, side):
    m = d.c.max_ci_tiles
    t = {"under": max(1, m - 1), "at": m, "over": m + 1}[side]
    k = d.config.kmax
    kernel = d.kernel() if k == 1 else (d.int(2, k), d.int(2, k)) if d.chance(0.7) else d.kernel()
    return _nonremap_conv(d, cin=d.cin_in_tiles(t), kernel=kernel), \
        "refused" if side == "over" else None


def _pool_strip(d, side):
    """A pooled layer whose narrowest strip (two output columns) is at the line buffer's width."""
    c, k = d.c, d.config.kmax
    t = d.int(1, c.max_ci_tiles)
    widest = c.widest_row(t)
    if k > 1 and d.chance(0.25):
        # The remap: two pooled columns are 2*kmax input columns, so the
        # input tiles are at the limit (a bank's words // 2).
        at = min(c.max_ci_tiles, c.line_buffer.words // 2)
        t = {"under": at - 1, "at": at, "over": at + 1}[side]
        if not 1 <= t <= c.max_ci_tiles:
            return None, None
        lo = max(d.config.pin + 1, (t - 1) * d.config.pin * k * k + 1)
        cin = d.int(lo, max(lo, t * d.config.pin * k * k))
        if not _remapped(d.config, cin, (1, 1)):
            return None, None
        p = d.conv(cin=cin, kernel=(1, 1), pool=True, pads=d.pads(k, k),
                   stride=(d.int(1, k + 1),) * 2)
        return p, "refused" if side == "over" else None
    need = {"under": widest - 1, "at": widest, "over": widest + 1}[side]
    pairs = [(s, kw) for s in range(1, k + 1) for kw in range(1, k + 1) if s + kw == need]
    if not pairs:
        return None, None
    s, kw = pairs[d.int(0, len(pairs) - 1)]
    kh = d.int(1, k)
    return _nonremap_conv(d, cin=d.cin_in_tiles(t), kernel=(kh, kw), stride=(s, s), pool=True), \
        "refused" if side == "over" else None


def _pool_row(d, side):
    """Pooled rows at the max-pool row memory, where the line buffer would take them wider."""
    c, pout = d.c, d.config.pout
    t = d.int(1, min(2, c.max_ci_tiles))
    group = c.max_co_tiles_for(t)
    co = d.int(1, group) if d.chance(0.6) else d.int(group + 1, 3 * group)  # several groups
    cout = d.int((co - 1) * pout + 1, co * pout)
    widest = c.widest_pooled_row(min(co, group))
    # One column over is absorbed by the pool's floor (its last conv column is
    # not used); two are not.
    ow = _side_value(d, side, widest, lo=2) + (side == "over" and d.chance(0.5))
    if side == "over" and d.chance(0.3):
        ow = widest + d.int(1, widest)
    p = _nonremap_conv(d, cin=d.cin_in_tiles(t), cout=cout, pool=True)
    if p is None:
        return None, None
    sx, kw = p["stride"][1], p["kernel"][1]
    l, r = p["pads"][1], p["pads"][3]
    p["w"] = (ow - 1) * sx + kw - l - r
    # Pure: the line buffer alone would take a strip of this row.
    if (min(ow, widest + 1) - 1) * sx + kw > c.widest_row(t):
        return None, None
    return p, None


def _weights(d, side):
    c = d.c
    candidates = [t for t in range(1, c.max_ci_tiles + 1)
                  if c.weights.words // t < c.max_co_tiles and
                  (side != "under" or c.max_co_tiles_for(t) >= 2)]
    if not candidates:
        candidates = [t for t in range(1, c.max_ci_tiles + 1)
                      if side != "under" or c.max_co_tiles_for(t) >= 2] or [1]
    t = candidates[d.int(0, len(candidates) - 1)]
    co = _side_value(d, side, c.max_co_tiles_for(t))
    pout = d.config.pout
    cout = d.int((co - 1) * pout + 1, co * pout)
    return _nonremap_conv(d, cin=d.cin_in_tiles(t), cout=cout), None


def _params(d, side):
    c = d.c
    cap = c.max_co_tiles * d.config.pout
    cout = _side_value(d, side, cap)
    t = 1 if d.chance(0.7) else d.int(1, max(1, c.weights.words // c.max_co_tiles))
    return _nonremap_conv(d, cin=d.cin_in_tiles(t), cout=cout), None


def _out_channels(d, side):
    pout = d.config.pout
    n = d.int(1, 3) if d.chance(0.5) else 1
    cout = _side_value(d, side, n * pout)
    return d.conv(cout=max(1, cout)), None


def _rows(d, side):
    k, pin, pout = d.config.kmax, d.config.pin, d.config.pout
    small = dict(cout=d.int(1, pout), batch=1, pool=d.chance(0.3))
    if k > 1 and d.chance(0.3):  # the remap: kmax input rows per output row
        oh = _side_value(d, side, ROW_FIELD_MAX // k)
        cin = d.int(pin + 1, 2 * pin) if pin > 1 else 2
        s = d.int(1, k + 1)
        p = d.conv(cin=cin, kernel=(1, 1), stride=(s, s), pads=(0, 0, 0, 0), w=d.int(2, 3), **small)
        p["h"] = (oh - 1) * s + 1
        return p, "refused" if side == "over" else None
    if d.chance(0.3) and k > 1:  # out_h past the input rows: bottom padding
        kh = d.int(1, k)
        pads = (d.int(0, k - 1), 0, d.int(0, k - 1), 0)
        oh = _side_value(d, side, ROW_FIELD_MAX)
        h = oh - 1 + kh - pads[0] - pads[2]
        p = _nonremap_conv(d, cin=d.int(1, pin), kernel=(kh, d.int(1, k)), stride=(1, 1),
                           pads=pads, h=h, **small)
        return p, "refused" if side == "over" else None
    h = _side_value(d, side, ROW_FIELD_MAX)
    kh = d.int(1, k)
    p = _nonremap_conv(d, cin=d.int(1, pin), kernel=(kh, d.int(1, k)), stride=(1, 1),
                       pads=(0, d.int(0, k - 1), 0, d.int(0, k - 1)), h=h, **small)
    return p, "refused" if side == "over" else None


def _batch(d, side):
    k, pin = d.config.kmax, d.config.pin
    n = _side_value(d, side, ROW_FIELD_MAX)
    kh, kw = d.int(1, k), d.int(1, k)
    pads = (kh // 2, kw // 2, (kh - 1) // 2, (kw - 1) // 2)
    p = _nonremap_conv(d, cin=d.int(1, pin), kernel=(kh, kw), stride=(1, 1), pads=pads, h=1, w=1,
                       cout=d.int(1, d.config.pout), batch=n, pool=False)
    return p, "refused" if side == "over" else None


def _gemm_grid(d, t):
    """Features of ``t`` input tiles (remapped when kmax > 1), and the grid's
    width and most images per run: ``(cin, width, chunk)``."""
    c, k, pin = d.c, d.config.kmax, d.config.pin
    cin = d.cin_in_tiles(t, pin * k * k) if t > 1 or d.chance(0.5) else d.int(1, pin)
    remap = _remapped(d.config, cin, (1, 1))
    width = c.widest_row(input_tiles(d.config, cin, (1, 1))) // (k if remap else 1)
    return cin, width, width * (ROW_FIELD_MAX // (k if remap else 1))


def _gemm_rows(d, side):
    cin, width, _ = _gemm_grid(d, d.int(1, d.c.max_ci_tiles))
    batch = _side_value(d, side, width * (d.int(1, 3) if d.chance(0.5) else 1))
    return d.gemm(cin=cin, batch=batch, cout=d.int(1, 2 * d.config.pout)), None


def _gemm_chunks(d, side):
    """The deepest Gemm has the narrowest grid, so the fewest images fill 65535 rows."""
    m = d.c.max_ci_tiles
    cin, _, chunk = _gemm_grid(d, m if d.chance(0.7) else d.int(max(1, m - 2), m))
    if chunk > 70_000:
        return None, None
    return d.gemm(cin=cin, batch=_side_value(d, side, chunk), cout=d.int(1, d.config.pout),
                  relu=False), None


def _stride(d, side):
    k = d.config.kmax
    s = {"under": d.int(1, max(1, k - 1)), "at": k, "over": k + 1}[side]
    p = _nonremap_conv(d, stride=(s, s))
    if p is not None and side == "over" and d.chance(0.15) and k > 1:  # not square
        p["stride"] = (s - 1, s - 1 + d.int(1, 2)) if d.chance(0.5) else (s, 1)
    return p, None  # over the range or not square: the taps folded into channels


def _pad(d, side):
    k = d.config.kmax
    batch = d.int(1, 4)  # rows of padding at the end of an image, then the next image
    if side == "under":
        return _nonremap_conv(d, pads=d.pads(max(0, k - 2), k - 1), batch=batch), None
    if side == "at":
        pads = list(d.pads())
        for i in range(4):
            if i == 0 or d.chance(0.5):
                pads[d.int(0, 3)] = k - 1
        return _nonremap_conv(d, pads=tuple(pads), batch=batch), None
    pads = list(d.pads())
    if d.chance(0.5):  # bottom / right: no descriptor field, the output is larger
        pads[2 if d.chance(0.5) else 3] = k
        if d.chance(0.3):
            pads[2], pads[3] = k, k
        return _nonremap_conv(d, pads=tuple(pads), batch=batch), None
    pads[0 if d.chance(0.5) else 1] = k
    return _nonremap_conv(d, pads=tuple(pads), batch=batch), None  # folded into channels


def _kernel(d, side):
    k = d.config.kmax
    if side == "under":
        kernel = (d.int(1, max(1, k - 1)), d.int(1, max(1, k - 1)))
    elif side == "at":
        kernel = (k, k) if d.chance(0.6) else \
            (k, d.int(1, k)) if d.chance(0.5) else (d.int(1, k), k)
    else:
        kernel = (k + 1, k + 1) if d.chance(0.6) else (k + 1, d.int(1, k)) if d.chance(0.5) \
            else (d.int(1, k), k + 1)
    return d.conv(kernel=kernel), None  # over kmax: the taps folded into channels


def _remap(d, side):
    c, k, pin = d.c, d.config.kmax, d.config.pin
    m = c.max_ci_tiles
    t = {"under": max(1, m - 1), "at": m, "over": m + 1}[side]
    lo = max(pin + 1, (t - 1) * pin * k * k + 1)
    cin = d.int(lo, max(lo, t * pin * k * k))
    p = d.conv(cin=cin, kernel=(1, 1), stride=(d.int(1, k + 1),) * 2, pads=d.pads(k, k))
    return p, "refused" if side == "over" and _remapped(d.config, cin, (1, 1)) else None


def _gemm(d, side):
    c, k, pin, pout = d.c, d.config.kmax, d.config.pin, d.config.pout
    m = c.max_ci_tiles
    t = {"under": max(1, m - 1), "at": m, "over": m + 1}[side]
    per = pin * k * k if k > 1 else pin
    cin = d.cin_in_tiles(t, per) if t > 1 else d.int(1, per)
    cout = d.int(1, 3 * c.max_co_tiles * pout) if d.chance(0.4) else d.int(1, 2 * pout)
    return d.gemm(cin=cin, cout=cout), "refused" if side == "over" else None


# -- grouped and depthwise layers ----------------------------------------------

def _grouped(d, groups, cin_g, cout_g, **fixed):
    """A Conv of ``groups`` groups of ``cin_g`` -> ``cout_g`` channels, its window in
    the engine's ranges unless ``fixed`` (a pooled one's MaxPool runs on the host)."""
    return dict(d.conv(cin=groups * cin_g, cout=groups * cout_g, **fixed), group=groups)


def _window_kernel(d):
    """A kernel in the window that does not go through the 1x1 remap (when kmax > 1)."""
    kernel = d.kernel()
    while kernel == (1, 1) and d.config.kmax > 1:
        kernel = d.kernel()
    return kernel


def _dw_channels(d, side):
    """Depthwise channels at what one run takes: one depthwise run's input tiles,
    output tiles and weight words (or, without depthwise runs, one block-diagonal
    view's output tiles at its input tiles)."""
    most = depthwise_run_channels(d.config)
    n = _side_value(d, side, most, lo=2)
    if side == "over" and d.chance(0.25):
        n = most + d.int(2, most + 1)  # several runs
    if n < 2 or (side == "under" and n >= most):
        return None, None
    return _grouped(d, n, 1, 1, kernel=_window_kernel(d)), None


def _dw_row(d, side):
    """A depthwise row at a line-buffer bank's width at the input tiles of a run of
    every channel (a depthwise run, or the block-diagonal view of every channel)."""
    c, pin = d.c, d.config.pin
    most = depthwise_run_channels(d.config)
    if most < 2:
        return None, None
    n = d.int(2, most)
    widest = c.widest_row(math.ceil(n / pin))
    w = _side_value(d, side, widest)
    if side == "over" and d.chance(0.3):
        w = widest + d.int(1, widest)  # several strips
    return _grouped(d, n, 1, 1, kernel=_window_kernel(d), w=w), None


def _dw_resident(d, side):
    """Depthwise output tiles at the weight buffer's words: the fewest weight words
    any mapping takes (a depthwise run's one per output tile)."""
    pout = d.config.pout
    co = _side_value(d, side, d.c.weights.words)
    n = max(2, d.int((co - 1) * pout + 1, co * pout))
    return _grouped(d, n, 1, 1), None


def _group_window(d, side):
    """A grouped or depthwise kernel, stride and top/left pads at the window: under
    and at, views as they are (depthwise runs); over (a kernel over kmax, a stride
    over kmax or not square, a top or left pad over kmax - 1), the taps folded into
    channels."""
    k, pin, pout = d.config.kmax, d.config.pin, d.config.pout
    groups = d.int(2, 4)
    cin_g, cout_g = (1, 1 if d.chance(0.7) else 2) if d.chance(0.5) else \
        (d.int(1, pin + 1), d.int(1, pout + 1))
    if side == "under":
        if k == 1:
            return None, None
        kernel = (d.int(1, k - 1), d.int(1, k - 1))
        s = d.int(1, max(1, k - 1))
        return _grouped(d, groups, cin_g, cout_g, kernel=kernel, stride=(s, s)), None
    if side == "at":
        kernel = (k, k) if d.chance(0.6) else (k, d.int(1, k)) if d.chance(0.5) \
            else (d.int(1, k), k)
        s = k if d.chance(0.5) else d.int(1, k)
        pads = d.pads() if d.chance(0.5) else (k - 1,) * 4
        return _grouped(d, groups, cin_g, cout_g, kernel=kernel, stride=(s, s), pads=pads), None
    if d.chance(0.4):
        kernel = (k + 1, k + 1) if d.chance(0.6) else (k + 1, d.int(1, k)) if d.chance(0.5) \
            else (d.int(1, k), k + 1)
        return _grouped(d, groups, cin_g, cout_g, kernel=kernel), None
    if d.chance(0.35):  # a stride over the descriptor's range
        return _grouped(d, groups, cin_g, cout_g, stride=(k + 1, k + 1)), None
    if d.chance(0.5):  # a top or left pad over the descriptor's range
        pads = list(d.pads())
        pads[d.int(0, 1)] = k
        return _grouped(d, groups, cin_g, cout_g, pads=tuple(pads)), None
    sy = d.int(1, k)
    sx = sy + d.int(1, 2) if d.chance(0.5) or sy == 1 else d.int(1, sy - 1)
    return _grouped(d, groups, cin_g, cout_g, stride=(sy, sx)), None


def _group_in(d, side):
    """Input channels per group at a multiple of pin (a group of exactly pin, one
    more, one less); refused only where one group's input tiles break max_ci_tiles."""
    pin, pout = d.config.pin, d.config.pout
    at = pin * min(1 if d.chance(0.6) else d.int(2, 3), max(1, d.c.max_ci_tiles))
    cin_g = {"under": at - 1, "at": at, "over": at + 1}[side]
    if cin_g < 1:
        return None, None
    p = _grouped(d, d.int(2, 4), cin_g, d.int(1, pout + 1))
    return p, "refused" if input_tiles(d.config, cin_g, p["kernel"]) > d.c.max_ci_tiles \
        else None


def _group_out(d, side):
    """Output channels per group at a multiple of pout (one input channel per group
    in some: depthwise with a channel multiplier, never a depthwise run)."""
    pin, pout = d.config.pin, d.config.pout
    at = pout * (1 if d.chance(0.6) else d.int(2, 3))
    cout_g = {"under": at - 1, "at": at, "over": at + 1}[side]
    if cout_g < 1:
        return None, None
    cin_g = 1 if d.chance(0.4) else d.int(1, min(2 * pin, d.c.max_ci_tiles * pin))
    return _grouped(d, d.int(2, 4), cin_g, cout_g), None


def _group_tiles(d, side):
    """One group's input tiles at max_ci_tiles: no view splits a group, so over is
    refused -- unless the kernel is narrower than the window, where the group's
    taps folded into channels (the 1x1 remap's ``kmax * kmax`` taps a pixel) may
    take fewer tiles: then its views fold and run."""
    c, k, pin, pout = d.c, d.config.kmax, d.config.pin, d.config.pout
    m = c.max_ci_tiles
    t = {"under": max(1, m - 1), "at": m, "over": m + 1}[side]
    if side == "over" and k > 1 and d.chance(0.3):
        kernel = (1, 2) if d.chance(0.5) else (2, 1)
        cin_g = d.cin_in_tiles(t)
        if input_tiles(d.config, cin_g * 2, (1, 1), block=k) > m:
            return None, None
        return _grouped(d, 2, cin_g, d.int(1, pout), kernel=kernel, pool=False,
                        batch=d.int(1, 2)), None
    if k > 1 and d.chance(0.3):  # 1x1 through the remap: kmax*kmax*pin channels per tile
        lo = max(pin + 1, (t - 1) * pin * k * k + 1)
        cin_g = d.int(lo, max(lo, t * pin * k * k))
        if not _remapped(d.config, cin_g, (1, 1)):
            return None, None
        kernel = (1, 1)
    else:
        # A full window: its taps folded into channels take as many tiles.
        cin_g, kernel = d.cin_in_tiles(t), (k, k)
    p = _grouped(d, 2 if cin_g > pin else d.int(2, 3), cin_g, d.int(1, pout), kernel=kernel,
                 pool=False, batch=d.int(1, 2))
    return p, "refused" if side == "over" else None


def _group_view(d, side):
    """Every group as one block-diagonal view (at least two input channels per
    group, so no depthwise run): its output tiles at what the weight and the
    parameter buffers take at its input tiles; over, two runs or more."""
    c, pin, pout = d.c, d.config.pin, d.config.pout
    ts = [t for t in range(1, min(c.max_ci_tiles, 8) + 1)
          if c.max_co_tiles_for(t) >= (2 if side == "under" else 1)]
    if not ts:
        return None, None
    t = ts[d.int(0, len(ts) - 1)]
    groups = d.int(2, 4)
    lo, hi = max(2, math.ceil(((t - 1) * pin + 1) / groups)), t * pin // groups
    co = _side_value(d, side, c.max_co_tiles_for(t))
    clo, chi = math.ceil(((co - 1) * pout + 1) / groups), co * pout // groups
    if lo > hi or clo > chi:
        return None, None
    return _grouped(d, groups, d.int(lo, hi), d.int(clo, chi), kernel=_window_kernel(d)), None


#: Targets at what one run takes: under and at, one run may take the layer;
#: over, none does (the generator keeps only such layers).
_ONE_RUN_TARGETS = ("dw_channels", "dw_row", "group_view")

_MAKERS = {
    "dw_channels": _dw_channels, "dw_row": _dw_row, "dw_resident": _dw_resident,
    "group_window": _group_window, "group_in": _group_in, "group_out": _group_out,
    "group_tiles": _group_tiles, "group_view": _group_view,
    "width": _width, "channels": _channels, "pool_strip": _pool_strip, "pool_row": _pool_row,
    "weights": _weights, "params": _params, "out_channels": _out_channels, "rows": _rows,
    "batch": _batch, "gemm_rows": _gemm_rows, "gemm_chunks": _gemm_chunks, "stride": _stride,
    "pad": _pad, "kernel": _kernel, "remap": _remap, "gemm": _gemm,
}
assert set(_MAKERS) == set(TARGETS)

_PAUSES = ((0, 0), (0, 0), (300, 0), (0, 500), (250, 600))


def limit_case(config, seed, index, *, target=None, side=None):
    """Case ``index`` of the cases of ``config`` for base ``seed`` (deterministic).

    ``target`` and ``side`` cycle with ``index`` unless given. Returns
    ``None`` when the configuration has no layer of that target and side
    (e.g. no pooled strip over the line buffer's width when the line
    buffer holds two pooled columns at every input-tile count).
    """
    cfg = COMPILE_CONFIGS[config]
    names = list(TARGETS)
    target = target or names[index % len(names)]
    side = side or SIDES[(index // len(names)) % len(SIDES)]
    rng = np.random.default_rng([seed, index, sorted(COMPILE_CONFIGS).index(config)])
    d = _Draw(rng, cfg)
    for _ in range(300):
        p, intent = _MAKERS[target](d, side)
        if p is None or not _valid(p):
            continue
        case = LimitCase(config=config, seed=seed, index=index, target=target, side=side,
                         h=p.pop("h", 1), w=p.pop("w", 1), **p,
                         data="extreme" if d.chance(0.1) else "uniform",
                         pauses=_PAUSES[d.int(0, len(_PAUSES) - 1)], expect=None)
        expect = expected_refusal(cfg, case)
        # The target says whether tiling absorbs its limit; a draw whose
        # free parameters break another limit is drawn again.
        if (expect is not None) != (intent == "refused"):
            continue
        # A refused layer breaks the targeted limit only (or, for the
        # targets whose over side is too many input tiles, that one).
        if expect is not None and expect != (target if target in REFUSAL_PATTERNS
                                             else "channels",):
            continue
        case = replace(case, expect=expect)
        if target in _ONE_RUN_TARGETS and single_run_fits(cfg, case) == (side == "over"):
            continue
        if _too_big(case):
            continue
        return case
    return None


def _too_big(case):
    """Keep every case quick on the simulator: bytes of input and of output."""
    per_image = case.cin * case.h * case.w
    return (case.batch * per_image > 16_000_000
            or case.batch * case.cout * case.h * case.w > 4_000_000)


def limit_cases(config, count, seed=0, start=0, skip=(), targets=None):
    """``count`` cases of ``config`` from index ``start`` on: every target of
    ``targets`` (default: all of :data:`TARGETS`; :data:`CONV_TARGETS`,
    :data:`GROUPED_TARGETS`) on every side, round robin (leaving out the targets
    in ``skip`` and the ones the configuration has no layer of)."""
    names = list(targets or TARGETS)
    cases, index = [], start
    while len(cases) < count:
        target = names[index % len(names)]
        side = SIDES[(index // len(names)) % len(SIDES)]
        case = None if target in skip else \
            limit_case(config, seed, index, target=target, side=side)
        if case is not None:
            cases.append(case)
        index += 1
        if index - start > 3 * (count + len(SIDES)) * len(names):
            raise RuntimeError(f"the generator finds too few layers for {config}")
    return cases


def layer_case(config, *, target="repro", side="at", **layer):
    """A hand-written case (a reproducer): ``layer`` overrides a 1x1x1 -> 1 Conv."""
    fields = dict(op="Conv", cin=1, h=1, w=1, cout=1, kernel=(1, 1), stride=(1, 1),
                  pads=(0, 0, 0, 0), pool=False, relu=False, batch=1, data="uniform",
                  pauses=(0, 0))
    fields.update(layer)
    case = LimitCase(config=config, seed=0, index=0, target=target, side=side, expect=None,
                     **fields)
    return replace(case, expect=expected_refusal(COMPILE_CONFIGS[config], case))


def fold_limit_layers(key):
    """``{name: (layer, outcome)}``: grouped and depthwise layers under, at and over
    each limit past which their views fold their taps into channels, on engine
    ``key``; ``outcome`` is ``"as is"``, ``"folded"`` or ``"refused"``."""
    config = COMPILE_CONFIGS[key]
    k, pin, m = config.kmax, config.pin, engine_contract(config).max_ci_tiles
    dw, g2 = dict(cin=8, cout=8, group=8, h=9, w=9), dict(cin=8, cout=6, group=2, h=6, w=7)
    # One group's input tiles: a 2x1 kernel reads one column a window (the line
    # buffer takes m tiles of it); folded, its taps take 2/kmax^2 of the tiles.
    tiles = dict(cout=2, group=2, h=4, w=3, kernel=(2, 1))
    return {
        "stride-under": (dict(dw, kernel=(k, k), stride=(k - 1,) * 2), "as is"),
        "stride-at": (dict(dw, kernel=(k, k), stride=(k, k)), "as is"),
        "stride-over": (dict(dw, kernel=(k, k), stride=(k + 1, k + 1)), "folded"),
        "pad-top-at": (dict(g2, kernel=(k, k), pads=(k - 1, 1, 0, 1)), "as is"),
        "pad-top-over": (dict(g2, kernel=(k, k), pads=(k, 1, 0, 1)), "folded"),
        "pad-left-at": (dict(dw, kernel=(2, 2), pads=(0, k - 1, 1, 0)), "as is"),
        "pad-left-over": (dict(dw, kernel=(2, 2), pads=(0, k, 1, 0)), "folded"),
        "tiles-at": (dict(tiles, cin=2 * m * pin), "as is"),
        "tiles-over-folded": (dict(tiles, cin=2 * (m * pin + 1)), "folded"),
        "tiles-over-refused": (dict(tiles, cin=2 * (m * pin + 1), kernel=(k, k), w=k),
                               "refused"),
    }


def regression_96_case(side="exact"):
    """Conv 3->64 + Relu + MaxPool 2x2 on a 96x96 input (pads 1) on the default engine.

    The compiler once cut it into strips by the line buffer alone: a strip of
    96 conv columns x 8 output tiles needs 384 words of the max-pool row
    memory, which holds 256; a third of the outputs were wrong. ``side``
    ``under`` / ``at`` / ``over`` puts the pooled row at 62, 64 and 66 columns
    (the memory's 64 at 8 tiles) instead of 96.
    """
    w = {"exact": 96, "under": 62, "at": 64, "over": 66}[side]
    return LimitCase(config="default", seed=0, index=0, target="pool_row", side=side, op="Conv",
                     cin=3, h=96 if side == "exact" else 6, w=w, cout=64, kernel=(3, 3),
                     stride=(1, 1), pads=(1, 1, 1, 1), pool=True, relu=True, batch=1,
                     data="uniform", pauses=(0, 0), expect=None)


# -- models and data ----------------------------------------------------------

def build_model(case):
    """The one-layer :class:`QuantizedModel` of ``case`` (Conv or GroupedConv [+ MaxPool],
    or Gemm), seeded."""
    rng = np.random.default_rng(case.layer_seed)
    cin, cout = case.cin, case.cout
    extreme = case.data == "extreme"
    wshape = (cout, cin) if case.op == "Gemm" else (cout, cin // case.group, *case.kernel)
    if extreme:
        weight = rng.choice(np.array([-128, 127], np.int8), wshape)
    else:
        weight = rng.integers(-128, 128, wshape).astype(np.int8)
    taps = int(np.prod(wshape[1:]))
    x_scale = float(rng.uniform(0.01, 0.05))
    w_scale = rng.uniform(0.5, 1.5, cout) / 100
    # Accumulators spread over about +-60 output steps (more with extreme data).
    y_scale = x_scale * float(w_scale.mean()) * 74 * 74 * math.sqrt(taps) / 40 \
        * float(rng.uniform(0.3, 3))
    x_zp = int(rng.choice([-128, 127])) if rng.random() < 0.1 else int(rng.integers(-30, 31))
    y_zp = int(rng.integers(-40, 41))
    bias = rng.integers(-20000, 20001, cout).astype(np.int32)
    lo = y_zp if case.relu else -128
    if case.op == "Gemm":
        layer = Gemm("fc", ["x"], "y", (cin,), weight, bias, x_scale, x_zp, w_scale, y_scale,
                     y_zp, lo=lo)
        layers, in_shape = [layer], (cin,)
    else:
        in_shape = (cin, case.h, case.w)
        args = ("conv", ["x"], "conv_out" if case.pool else "y", in_shape, weight, bias,
                x_scale, x_zp, w_scale, y_scale, y_zp)
        kw = dict(stride=case.stride, pads=case.pads, lo=lo)
        layer = Conv(*args, **kw) if case.group == 1 else \
            GroupedConv(*args, **kw, group=case.group)
        layers = [layer]
        if case.pool:
            layers.append(MaxPool("pool", ["conv_out"], "y", layer.output_shape, (2, 2),
                                  x_scale=y_scale, x_zero_point=y_zp))
    last = layers[-1]
    return QuantizedModel(f"limit_{case.id}", layers,
                          TensorSpec("x", in_shape, np.int8, x_scale, x_zp),
                          TensorSpec("y", last.output_shape, np.int8, y_scale, y_zp), "x", "y")


def case_input(case):
    """The seeded int8 input batch of ``case``."""
    rng = np.random.default_rng(case.layer_seed + 1)
    shape = (case.batch, case.cin) if case.op == "Gemm" else (case.batch, case.cin, case.h, case.w)
    if case.data == "extreme":
        return rng.choice(np.array([-128, 127], np.int8), shape)
    return rng.integers(-128, 128, shape, dtype=np.int8)
