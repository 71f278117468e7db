"""The compiler: a quantized model -> a program of engine runs and host steps.

Every convolution (dense, grouped, depthwise, dilated, any kernel and stride)
and every Gemm runs on the engine; a 2x2 stride-2 MaxPool that directly
follows a Conv is fused into it. A convolution the engine cannot take as it
is reaches it as dense views (:mod:`fpgacnn.host.conv_views`: block-diagonal
groups, zeros between dilated taps, taps folded into channels); where there
is a choice (groups per view; folding the taps of a thin layer that reads
the network's input), the cycle model picks. The other layer kinds (Add,
Concat, pools, Resize, Flatten/Reshape, Sigmoid/Softmax) run on the host with
the reference semantics and are reported as host work. A layer that the
engine cannot run (too many input channels for the line buffer, ...) is an
error that names the layer and the limit: it never falls back to the host
quietly.

Within a layer the compiler tiles:

- output channels, when the layer's weights or parameters do not fit the
  engine's buffers (each group re-streams the input);
- columns, when an input row does not fit the line buffer (vertical strips
  with a halo of ``k - stride`` columns; strips of a pooled layer hold whole
  pooling pairs);
- Gemm batches, laid out as a 2-D image of a 1x1 convolution (as wide as
  the line buffer allows, as many rows as it takes), so that a batch runs
  like a 1x1 layer instead of one row at a time.

A Gemm reaches the engine through one adapter, :class:`GemmAsConv`, which
presents it as that 1x1 convolution; from there on a Gemm run is a
convolution run like any other.

When the program's weights fit the engine's weight buffer together (and the
engine keeps resident weights: the deep arrangement), each channel group gets
a place of its own there (``weight_base``): the first inference loads the
weights, and every later one runs each run's warm descriptor, which streams
only the parameters and the pixels (:attr:`Program.resident`, docs/engine.md
"Resident weights"). On an engine whose parameter buffer is deeper than one
run's tiles (``param_words``), each group's parameters get a place there too
(``param_base``) where they fit, and its warm runs stream only the pixels.

Every run is compiled once, for the program's batch, into an
:class:`EngineRun` that carries what running it needs: its descriptor, its
parameters and weights packed into stream bytes
(:func:`fpgacnn.host.packing.pack_weights`), its predicted cycles
(:func:`fpgacnn.host.cycle_model.layer_cycles`), how its input is gathered
from the layer's input and where its output goes. A program is then laid out
as one memory image (:mod:`fpgacnn.host.program_image`: every gather and
scatter written down as a source and a destination pattern) and run record
by record (:mod:`fpgacnn.host.program_runner`), which packs only the pixels
of each run (:func:`fpgacnn.host.packing.pack_pixels`).
"""

import dataclasses
from dataclasses import dataclass, field
import functools
import math
from types import MappingProxyType
from typing import NamedTuple

import numpy as np

from ..core.contract import descriptor_violations, engine_contract
from ..core.errors import InputError, MappingError
from ..core.fused_block import pointwise_tiles
from . import conv_views, packing
from .cycle_model import layer_cycles
from .layers import Add, Conv, DilatedConv, Gemm, GroupedConv, MaxPool
from .nhwc_flatten import nhwc_flatten

__all__ = ["BatchImage", "BatchTranspose", "ChannelColumns", "ColumnSlice", "EngineRun",
           "EngineStep", "FusedBlockAsConv", "GemmAsConv", "HostStep", "PixelPacking", "Program",
           "RowsColumns", "compile_model", "constants_residency", "pack_run",
           "refuse_warm_weight_loads"]


@dataclass(frozen=True)
class ColumnSlice:
    """Gather of a column strip: input columns ``[x0, x1)`` of an NCHW batch."""

    x0: int
    x1: int

    @property
    def cols(self):
        return self.x0, self.x1

    def __call__(self, x):
        return x[:, :, :, self.x0:self.x1]


@dataclass(frozen=True)
class ZeroPointColumn:
    """Gather of a strip that lies wholly in the padding: one column of the padding value.

    Every tap of such a strip reads ``x_zp`` (DESIGN.md section 2), so one
    column of it, padded on the right as far as the strip's windows reach,
    gives the engine the strip's own windows.
    """

    x_zp: int

    @property
    def cols(self):
        return 0, 0

    def __call__(self, x):
        return np.full((*x.shape[:3], 1), self.x_zp, np.int8)


@dataclass(frozen=True)
class ChannelColumns:
    """Scatter of a strip: a run's NCHW output into channels ``[c0, c1)``, columns ``[o0, o1)``."""

    c0: int
    c1: int
    o0: int
    o1: int

    @property
    def cols(self):
        return self.o0, self.o1

    def __call__(self, y, out):
        y[:, self.c0:self.c1, :, self.o0:self.o1] = out[:, :, :y.shape[2], :]


@dataclass(frozen=True)
class RowsColumns(ChannelColumns):
    """Scatter of a strip of a run that sees the step's pixels as ``rows x width``
    (:func:`~fpgacnn.host.conv_views.rows_view`): :class:`ChannelColumns` of that
    view of the step's output, which shares its memory (never a copy)."""

    rows: int
    width: int

    def __call__(self, y, out):
        view = y.view()
        # Setting the shape refuses (AttributeError) where it would need a copy,
        # so the writes below always land in ``y``.
        view.shape = (*y.shape[:2], self.rows, self.width)
        super().__call__(view, out)


@dataclass(frozen=True)
class BatchImage:
    """Gather of a Gemm chunk: the feature vectors ``[b0, b1)`` of an ``(N, C)`` batch
    as the pixels of one ``rows x width`` image, row by row (the padding pixels of
    the last row are zeros whose results are dropped)."""

    b0: int
    b1: int
    rows: int
    width: int

    @property
    def cols(self):
        return self.b0, self.b1

    def __call__(self, x):
        flat = np.zeros((x.shape[1], self.rows * self.width), np.int8)
        flat[:, :self.b1 - self.b0] = x[self.b0:self.b1].T
        return flat.reshape(1, x.shape[1], self.rows, self.width)


@dataclass(frozen=True)
class BatchTranspose:
    """Scatter of a Gemm chunk: the pixels of a run's output image back into rows
    ``[b0, b1)`` and columns ``[c0, c1)`` of the ``(N, Cout)`` result."""

    c0: int
    c1: int
    b0: int
    b1: int

    @property
    def cols(self):
        return self.b0, self.b1

    def __call__(self, y, out):
        y[self.b0:self.b1, self.c0:self.c1] = \
            out[0].reshape(self.c1 - self.c0, -1)[:, :self.b1 - self.b0].T


@dataclass(frozen=True)
class PixelPacking:
    """How a run's gathered images become the pixel section of its stream:
    :func:`fpgacnn.host.packing.pack_pixels` with the run's layer geometry
    (kept as data, so that a network program can write it down)."""

    config: object
    x_zp: int
    w_shape: tuple
    stride: tuple
    pads: tuple
    remap: int  # the 1x1 remap's block (packing.remap_block), 0 for none
    name: str

    def __call__(self, x):
        return packing.pack_pixels(self.config, x, self.x_zp, self.w_shape, stride=self.stride,
                                   pads=self.pads, remap=self.remap, name=self.name)


@dataclass(frozen=True, eq=False)
class EngineRun:
    """One engine layer run, compiled: an output-channel group over a column
    strip (or a Gemm batch chunk).

    Attributes
    ----------
    channels : (int, int)
        Output channels ``[c0, c1)``.
    descriptor : mapping
        The run's descriptor, for the program's batch (read-only).
        ``load_weights`` is 0 when the previous run of the step streamed the
        same channel group's weights.
    gather : callable
        ``gather(x)``: the int8 NCHW images the run streams, from the step's
        input (:class:`ColumnSlice`, :class:`BatchImage`).
    scatter : callable
        ``scatter(y, out)``: the run's unpacked output into the step's output
        (:class:`ChannelColumns`, :class:`BatchTranspose`).
    weights : numpy.ndarray of uint8
        The parameter and weight section of the channel group, packed once and
        shared by the group's runs; streamed when ``descriptor["load_weights"]``.
    predicted_cycles : int
        The cycle model's count of the run.
    out_nbytes : int
        Bytes of the run's output stream.
    in_shape : tuple of int
        The shape of ``gather(x)``.
    pads : (int, int, int, int)
        The padding of the run's images ``(top, left, bottom, right)``.
    """

    channels: tuple
    descriptor: MappingProxyType
    gather: object
    scatter: object
    weights: np.ndarray = field(repr=False)
    predicted_cycles: int
    out_nbytes: int
    in_shape: tuple
    pads: tuple
    pack_pixels: object = field(repr=False)  # a PixelPacking: gather(x) -> the pixel section
    unpack: object = field(repr=False)       # output bytes -> int8 NCHW of the run's channels
    #: Resident programs (:attr:`Program.resident`): the run once every weight of
    #: the program is in the engine (no weights; the parameters unless they are
    #: resident too, ``param_base``, or the run before it in their words was the
    #: same group's), and its predicted cycles. None otherwise.
    warm_descriptor: MappingProxyType = None
    warm_predicted_cycles: int = None
    params_nbytes: int = 0                   # the parameter section's bytes (of ``weights``)

    @property
    def in_cols(self):
        """Input columns ``[x0, x1)`` streamed (Gemm: the batch images ``[b0, b1)``; ``(0, 0)``
        for a strip that lies in the padding and streams a column of ``x_zp``)."""
        return self.gather.cols

    @property
    def out_cols(self):
        """Output columns ``[o0, o1)`` produced (Gemm: the batch images ``[b0, b1)``)."""
        return self.scatter.cols

    def stream(self, x, *, load_weights=None, warm=False):
        """The run's input stream for the step input ``x``: the packed weights
        (when the descriptor loads them, or ``load_weights`` says so), then the
        pixels; ``warm``: as :attr:`warm_descriptor` wants it (the parameters
        at most, or every constant where it loads weights: a fused block whose
        depthwise words are streamed, :func:`_make_resident`)."""
        xs = self.gather(x)
        if xs.shape != self.in_shape:
            raise InputError(f"the run was compiled for input {self.in_shape}, not {xs.shape} "
                             f"(compile the program for this batch)")
        pixels = self.pack_pixels(xs)
        if warm and self.warm_descriptor["load_weights"]:
            # a fused block whose depthwise words have no place of their own in
            # the depthwise memory streams every constant on its first warm run
            return np.concatenate((self.weights, pixels))
        if warm:
            if self.warm_descriptor["load_params"]:
                return np.concatenate((self.weights[:self.params_nbytes], pixels))
            return pixels
        if load_weights is None:
            load_weights = self.descriptor["load_weights"]
        return np.concatenate((self.weights, pixels)) if load_weights else pixels

    def store(self, y, raw):
        """Unpack the output stream ``raw`` and scatter it into the step's output ``y``."""
        self.scatter(y, self.unpack(raw))


@dataclass
class EngineStep:
    """A Conv (or Gemm, as a 1x1 convolution) on the engine, maybe with a fused max-pool,
    or a fused depthwise + pointwise block (``layer`` the depthwise, ``pointwise``
    the 1x1 Conv after it: :attr:`fused`)."""

    layer: object
    pool: object = None
    runs: list = field(default_factory=list)
    #: How the layer reaches the engine: ``"dense"``, ``"dilated"`` (zeros between
    #: taps), ``"im2col"`` (taps folded into channels), ``"grouped/k"`` (``k``
    #: groups per block-diagonal view; ``"grouped/k/im2col"``: each view's taps
    #: folded into channels), ``"gemm"``, ``"fused"`` (a fused block).
    mapping: str = "dense"
    #: The pointwise 1x1 Conv of a fused block (None otherwise).
    pointwise: object = None
    #: Why a depthwise layer whose output only a pointwise Conv reads did not fuse
    #: with it on an engine with ``fused_blocks`` (the limit it broke); "" otherwise.
    unfused_reason: str = ""

    @property
    def fused(self):
        """Whether the step is a fused depthwise + pointwise block (descriptor ``fused``)."""
        return self.pointwise is not None

    @property
    def _last(self):
        return self.pool or self.pointwise or self.layer

    @property
    def name(self):
        last = self._last
        return self.layer.name if last is self.layer else f"{self.layer.name}+{last.name}"

    @property
    def inputs(self):
        return self.layer.inputs

    @property
    def output(self):
        return self._last.output

    @property
    def output_shape(self):
        """Per-image shape of the step's output (after the fused pool or pointwise)."""
        return self._last.output_shape

    @property
    def macs(self):
        return self.layer.macs + (self.pointwise.macs if self.fused else 0)

    @property
    def op(self):
        if self.fused:
            return f"{self.layer.op}+{self.pointwise.op}"
        return self.layer.op if self.pool is None else f"{self.layer.op}+MaxPool"

    @property
    def clamp(self):
        """The output clamp (of a fused block: the pointwise's; the depthwise's is the
        descriptor's ``dw_clamp_lo``/``dw_clamp_hi``)."""
        lo, hi = self._last.lo, self._last.hi
        if self.pool is not None:  # clamps commute with max: apply both at once
            lo, hi = max(self.layer.lo, lo), min(self.layer.hi, hi)
        return lo, hi


@dataclass
class HostStep:
    """A layer the engine does not run: numpy, with the reference semantics."""

    layer: object

    @property
    def name(self):
        return self.layer.name

    @property
    def op(self):
        return self.layer.op

    @property
    def inputs(self):
        return self.layer.inputs

    @property
    def output(self):
        return self.layer.output

    @property
    def macs(self):
        return self.layer.macs


@dataclass
class Program:
    """A compiled model: steps in order, for one engine configuration and batch.

    ``resident``: every run's weights have a place of their own in the
    engine's weight buffer (``weight_base``), so once the program has run,
    the weights stay and later runs use ``EngineRun.warm_descriptor``;
    ``weight_words`` of the buffer are taken. ``param_words``: the words of
    the parameter buffer taken by the channel groups whose parameters stay
    there too (``param_base``; an engine with ``param_words``), whose warm
    runs stream no constants at all. ``depthwise_words``: the same for the
    fused blocks' depthwise words (``dw_base``).
    """

    model: object
    config: object
    steps: list
    batch: int = 1
    resident: bool = False
    weight_words: int = 0
    param_words: int = 0
    #: Words of the depthwise memory taken by the fused blocks whose depthwise
    #: words stay there (``dw_base``; resident programs on an engine with
    #: ``fused_blocks``); the others' are streamed to the words after them.
    depthwise_words: int = 0


class _Plan(NamedTuple):
    """A run before compilation: its tile and how its input and output move."""

    channels: tuple
    x_shape: tuple
    pads: tuple
    gather: object
    scatter: object


def _feeds_an_add(layer, nxt, readers):
    """Whether ``layer``'s output is read by the next layer alone, an Add: a program
    engine may then do the Add on its runs' writes (docs/program.md, "The residual
    Add fused into the convolution"), which pixel-row views of its output would
    keep it from (the fused Add writes the Add's output in the runs' own rows);
    a whole pass over two tensors is worth more than the rows' few cycles."""
    return (isinstance(nxt, Add) and layer.output in nxt.inputs
            and readers.get(layer.output, 0) == 1)


def _fusable_pool(layer, pool, readers):
    """A MaxPool the engine can fuse behind ``layer``: 2x2, stride 2, no pads, pure max."""
    return (isinstance(pool, MaxPool) and pool.inputs == (layer.output,)
            and readers.get(layer.output, 0) == 1
            and pool.kernel == (2, 2) and pool.stride == (2, 2) and pool.pads == (0, 0, 0, 0)
            and pool.identity_scale
            and max(layer.lo, pool.lo) <= min(layer.hi, pool.hi))


def _pointwise_partner(layer, nxt, readers):
    """The pointwise 1x1 Conv ``nxt`` when it alone reads the depthwise ``layer``'s output
    and could take its place in a fused block (docs/engine.md, "Step 4"); None when
    the pair is not a block at all (no reason to tell).

    Found as :func:`_feeds_an_add` finds an Add's convolution: the next layer,
    the only reader. A Relu or clamp between them is already the depthwise's
    clamp (the importer folds it into ``lo``/``hi``), which the block applies
    (``dw_clamp_lo``/``dw_clamp_hi``)."""
    if not (isinstance(layer, GroupedConv) and layer.depthwise
            and layer.weight.shape[0] == layer.group):
        return None  # (a channel multiplier: not one output channel a channel)
    if not (isinstance(nxt, Conv) and nxt.kernel == (1, 1) and nxt.inputs == (layer.output,)
            and readers.get(layer.output, 0) == 1):
        return None
    return nxt


def _unfusable(layer, pw, after, readers):
    """Why the depthwise ``layer`` and its pointwise partner ``pw`` cannot run as one
    fused block, "" when nothing the block's shape alone
    rules out (the engine's limits are then :func:`_fused_step`'s to check).

    The pointwise must be a plain 1x1 (stride 1, no pads: the pair buffer holds
    the depthwise's output pixels one for one), its input zero point the
    depthwise's output zero point (one tensor between them), and not followed by
    a max-pool the engine would fuse behind it (a fused run has no pool: fusing
    the block would send the pool to the host)."""
    if layer.dilation != (1, 1):
        return f"dilation {layer.dilation[0]}x{layer.dilation[1]} (the block's window is dense)"
    if pw.stride != (1, 1) or any(pw.pads):
        return f"{pw.name!r} has stride {pw.stride} or pads {pw.pads} (a fused pointwise has none)"
    if pw.x_zero_point != layer.y_zero_point:
        return (f"{pw.name!r}'s input zero point {pw.x_zero_point} is not {layer.name!r}'s "
                f"output zero point {layer.y_zero_point}")
    if _fusable_pool(pw, after, readers):
        return (f"the max-pool {after.name!r} after {pw.name!r} fuses into it (a fused block "
                f"has no pool)")
    return ""


def compile_model(model, config, *, batch=1, resident=None, fuse=True):
    """Compile ``model`` for an engine generated with ``config``.

    Parameters
    ----------
    model : fpgacnn.host.model.QuantizedModel
    config : fpgacnn.core.config.EngineConfig
    batch : int
        Images per run: the runs' descriptors are for this batch (Gemm layers
        lay the batch along the image width, so it shapes their tiling too).
    resident : bool, optional
        Keep every run's weights in the engine between inferences
        (docs/engine.md, "Resident weights"). Default: when the engine can
        (its contract's ``resident_weights``) and the program's weights fit
        its weight buffer together. True where they cannot is a MappingError.
    fuse : bool or "always"
        On an engine with ``fused_blocks``, compile each depthwise Conv whose
        output only the next pointwise 1x1 Conv reads, with it, into one step
        of fused runs (:attr:`EngineStep.fused`, docs/engine.md "Step 4")
        where the cycle model predicts fewer cycles than the two unfused
        (``"always"``: wherever the block takes them). A pair the block cannot
        take (its channels, kernel, stride, a pool after it, ...) or that is
        faster unfused compiles unfused, exactly as without the block, the
        reason in the depthwise step's :attr:`EngineStep.unfused_reason`.
        False: every layer unfused.

    Returns
    -------
    Program

    Raises
    ------
    MappingError
        A Conv or Gemm cannot run on this engine; the message names the
        layer and the limit.
    """
    # A Flatten that only Gemms read: in the arena's NHWC order, their weights permuted.
    model = nhwc_flatten(model, config)
    readers = {}
    for layer in model.layers:
        for t in layer.inputs:
            readers[t] = readers.get(t, 0) + 1
    readers[model.output_tensor] = readers.get(model.output_tensor, 0) + 1
    cycles = {}  # the cycle model of each distinct descriptor, once per program
    steps, layers, i = [], model.layers, 0
    if fuse not in (True, False, "always"):
        raise InputError(f"fuse must be True, False or 'always', not {fuse!r}")
    fusing = fuse and engine_contract(config).fused is not None

    def convolution(j, s2d=True):
        """``layers[j]`` compiled as without the block (a max-pool after it fused);
        ``s2d``: may it run as space to depth (:func:`_space_to_depth`)."""
        layer, nxt = layers[j], layers[j + 1] if j + 1 < len(layers) else None
        pool = nxt if _fusable_pool(layer, nxt, readers) else None
        return _convolution_step(config, layer, pool, batch, cycles,
                                 reads_input=layer.inputs == (model.input_tensor,) and s2d,
                                 rows=not _feeds_an_add(layer, nxt, readers))

    ready = {}  # index -> its step, compiled unfused to weigh it against a block
    blocks = {}  # step index -> layer index of the steps as space to depth
    # Depthwise memory words left for the blocks the cycle model keeps: a block
    # past it would stream its depthwise words, which come only with the pointwise
    # weights (the stream's sections), on every warm run.
    room = engine_contract(config).fused.depthwise_memory.words \
        if fusing and fuse is True else None
    while i < len(layers):
        layer = layers[i]
        nxt, after = (layers[j] if j < len(layers) else None for j in (i + 1, i + 2))
        pw = _pointwise_partner(layer, nxt, readers) if fusing else None
        reason = ""
        if pw is not None:
            fused, unfused, reason = _fuse_or_not(
                config, layer, pw, after, batch, cycles, readers, room=room,
                unfused=lambda j=i: (convolution(j), convolution(j + 1)))
            if fused is not None:
                if room is not None:
                    room -= int(fused.runs[0].descriptor["ci_tiles"])
                steps.append(fused)
                i += 2
                continue
            if unfused is not None:
                ready[i], ready[i + 1] = unfused
        if isinstance(layer, (Conv, GroupedConv, DilatedConv)):
            step = ready.pop(i, None) or convolution(i)
            step.unfused_reason = reason
            if step.mapping.startswith("s2d"):
                blocks[len(steps)] = i
            steps.append(step)
            i += 2 if step.pool is not None else 1
        elif isinstance(layer, Gemm):
            step = EngineStep(layer, mapping="gemm")
            conv = GemmAsConv(layer)
            step.runs = _compile_runs(config, conv, conv.plans(config, batch), pool=False,
                                      clamp=step.clamp, cycles=cycles)
            steps.append(step)
            i += 1
        else:
            steps.append(HostStep(layer))
            i += 1
    program = Program(model, config, steps, batch)
    if blocks and resident is not False and engine_contract(config).resident_weights \
            and not _weights_fit(program):
        # Space to depth widens a layer's input tiles, and so its weights: never at
        # the cost of the program's resident weights (every warm inference would
        # stream every weight again), whatever it saves on the layer.
        kept = list(steps)
        for k, j in blocks.items():
            kept[k] = convolution(j, s2d=False)
            kept[k].unfused_reason = steps[k].unfused_reason
        without = Program(model, config, kept, batch)
        if _weights_fit(without):
            program = without
    return _make_resident(program, resident, cycles)


def _fuse_or_not(config, layer, pw, after, batch, cycles, readers, *, room, unfused):
    """Whether the depthwise ``layer`` and its pointwise ``pw`` run as one fused block:
    ``(fused step or None, (depthwise step, pointwise step) or None, reason)``.

    Where the block cannot take them (:func:`_unfusable`, or a limit of the
    engine's that :func:`_fused_step` names), no fused step and the reason.
    ``room`` None (``fuse="always"``): the block. Otherwise a block whose
    depthwise words exceed the ``room`` words the depthwise memory has left
    does not fuse (streamed, they would come with the pointwise weights on
    every warm run), and the pair compiled unfused (``unfused()``, as without
    the block) is weighed against the block by the cycle model, as the
    compiler weighs its other choices (the runs as compiled, constants
    loaded): the block's pixel pairs wait on its pipeline where a pixel has
    few channels (MobileNet's first, 8-channel block: about 15 cycles a pair),
    so it is not always the faster; the slower is dropped, the reason names
    both counts. A pair only the block takes (its layers refused unfused) fuses."""
    reason = _unfusable(layer, pw, after, readers)
    if not reason:
        try:
            fused = _fused_step(config, layer, pw, batch, cycles)
        except MappingError as e:
            reason = str(e)
    if reason:
        return None, None, reason
    if room is None:
        return fused, None, ""
    words = int(fused.runs[0].descriptor["ci_tiles"])
    if words > room:
        return None, None, (f"layer {fused.name!r}: its {words} depthwise words exceed the "
                            f"{room} the depthwise memory has left (fused_blocks "
                            f"{config.fused_blocks})")
    try:
        steps = unfused()
    except MappingError:
        return fused, None, ""
    block, pair = _predicted(fused), sum(_predicted(s) for s in steps)
    if block <= pair:
        return fused, None, ""
    return None, steps, (f"layer {fused.name!r}: the cycle model predicts {block:,} cycles "
                         f"fused, {pair:,} unfused")


def _fused_step(config, dw, pw, batch, cycles):
    """The engine step of a fused block: :class:`FusedBlockAsConv`'s runs, planned as
    any convolution's (output-channel groups of the pointwise, column strips of
    the depthwise's input with their halos, the batch), each checked against the
    contract (:func:`~fpgacnn.host.packing.fused_block_descriptor`).

    Raises
    ------
    MappingError
        The block does not fit the engine; the message names the layer and the limit.
    """
    block = FusedBlockAsConv(dw, pw)
    step = EngineStep(dw, mapping="fused", pointwise=pw)
    plans = _strip_plans(config, block, False, batch)
    step.runs = _compile_runs(config, block, plans, pool=False, clamp=step.clamp, cycles=cycles)
    return step


class FusedBlockAsConv:
    """A depthwise Conv and the pointwise 1x1 Conv after it presented as one convolution
    to the run planning (:func:`_strip_plans`: the depthwise's input, kernel, stride
    and pads; the pointwise's output channels): the one place that knows how a
    block's run is described and packed.

    Parameters
    ----------
    dw : fpgacnn.host.layers.GroupedConv
        The depthwise layer (``group`` = its channels = its output channels).
    pw : fpgacnn.host.layers.Conv
        The 1x1 Conv that alone reads its output.
    """

    fused = True
    depthwise = False

    def __init__(self, dw, pw):
        self.dw, self.pw = dw, pw
        self.name = f"{dw.name}+{pw.name}"
        cout, c = pw.weight.shape[:2]
        # The kernel as the strips see it (C' outputs, C inputs, the depthwise's
        # taps): a shape without memory; the block's weights are dw's and pw's.
        self.weight = np.broadcast_to(np.int8(0), (cout, c, *dw.kernel))
        self.input_shape, self.output_shape = dw.input_shape, pw.output_shape
        self.stride, self.pads, self.x_zero_point = dw.stride, dw.pads, dw.x_zero_point

    def descriptor(self, config, plan, *, load_weights):
        """The checked descriptor of the run ``plan`` (a :class:`_Plan` of this block)."""
        c0, c1 = plan.channels
        dw, pw = self.dw, self.pw
        return packing.fused_block_descriptor(
            config, plan.x_shape, dw.kernel, c1 - c0, x_zp=dw.x_zero_point,
            dw_y_zp=dw.y_zero_point, dw_clamp=(dw.lo, dw.hi), y_zp=pw.y_zero_point,
            clamp=(pw.lo, pw.hi), stride=dw.stride, pads=plan.pads, load_weights=load_weights,
            name=f"layer {self.name!r}")

    def pack(self, config, channels):
        """The constants of output channels ``channels`` (``(c0, c1)``): ``(data,
        params_nbytes)`` (:func:`~fpgacnn.host.packing.pack_fused_weights`)."""
        c0, c1 = channels
        dw, pw = self.dw, self.pw
        layer = dict(w=dw.weight, bias=dw.bias, mult=dw.mult, shift=dw.shift,
                     y_zp=dw.y_zero_point)
        point = dict(w=pw.weight[c0:c1], bias=pw.bias[c0:c1], mult=pw.mult[c0:c1],
                     shift=pw.shift[c0:c1])
        return packing.pack_fused_weights(config, dw.x_zero_point, layer, point, name=self.name)

    def pixel_packing(self, config, plan):
        """The :class:`PixelPacking` of a run: the depthwise's input, as a depthwise run's."""
        c = self.dw.input_shape[0]
        return PixelPacking(config, x_zp=self.dw.x_zero_point,
                            w_shape=(c, c, *(int(k) for k in self.dw.kernel)),
                            stride=tuple(self.dw.stride), pads=tuple(plan.pads), remap=0,
                            name=self.name)


def refuse_warm_weight_loads(program, what):
    """Raise :class:`~fpgacnn.core.errors.MappingError` naming the first step of
    ``program`` with a run whose warm descriptor loads weights, which ``what``
    (the program image: a record's warm run streams its parameters at most)
    cannot express: a fused block past the depthwise memory, compiled with
    ``fuse="always"`` (:func:`_make_resident`; the default ``fuse=True`` never
    makes one)."""
    for step in program.steps:
        for run in getattr(step, "runs", ()):
            if run.warm_descriptor is not None and run.warm_descriptor["load_weights"]:
                raise MappingError(
                    f"layer {step.name!r}: {what} cannot stream a block's depthwise words "
                    f"on its warm runs (it is past the depthwise memory: compile with "
                    f"fuse=True, which keeps it unfused)")


def _place_params(contract, groups):
    """Places in the parameter buffer for the channel groups ``groups`` (``(key,
    co_tiles)`` in the order they first run) of a resident program: ``(bases,
    shared)``, ``bases`` the ``param_base`` of each group whose parameters stay,
    ``shared`` the base the others' are streamed to, run by run.

    Every group gets a place of its own when their output tiles fit the buffer
    together. Otherwise the buffer's last ``s`` words are shared by the streamed
    groups (``s`` their most output tiles) and the words before them go to the
    groups in the order they first run, each that still fits (first fit), for
    the ``s`` that keeps the most words resident: a model whose parameters do
    not all fit (MobileNetV1 on the PYNQ-Z2's engine) keeps most of them. On an
    engine without :attr:`~fpgacnn.core.contract.EngineContract.resident_params`
    nothing stays, and every run's parameters go to word 0, as before."""
    if not contract.resident_params:
        return {}, 0
    return _place(contract.params.words, groups)


def _place(words, groups):
    """First-fit places of ``groups`` (``(key, size)`` in run order) in a buffer of
    ``words`` words, the streamed groups sharing its last words: ``(bases,
    shared)``, for the split that keeps the most words resident
    (:func:`_place_params`)."""
    best = ({}, 0, -1)  # bases, shared, resident words
    for shared_words in sorted({co for _, co in groups} | {0}):
        bases, used = {}, 0
        for key, co in groups:
            if used + co <= words - shared_words:
                bases[key], used = used, used + co
        # every group left out must fit the shared words
        if all(co <= shared_words for key, co in groups if key not in bases) \
                and used > best[2]:
            best = bases, words - shared_words, used
    return best[0], best[1]


def _place_depthwise(contract, program):
    """Places in the depthwise memory for the fused blocks of a resident program:
    ``(bases, shared, words)``, ``bases`` the ``dw_base`` of each fused step
    (by ``id``) whose depthwise words stay there, ``shared`` the base the others'
    are streamed to (:func:`_place`: first fit in run order, by words, the
    split that keeps the most words), ``words`` the words of those that stay.
    Up to ``fused_blocks`` blocks of ``max_channels`` all stay (more where they
    are thinner); with more, the streamed ones need words of their own to
    stream to, so ``fused_blocks - 1`` of those stay."""
    blocks = [(id(step), int(step.runs[0].descriptor["ci_tiles"]))
              for step in program.steps if getattr(step, "fused", False)]
    if not blocks:
        return {}, 0, 0
    bases, shared = _place(contract.fused.depthwise_memory.words, blocks)
    return bases, shared, sum(ci for key, ci in blocks if key in bases)


def _weight_words(program):
    """``(words, groups)``: the weight buffer's words the program's channel groups take
    together (in the order they first run) and ``{id(weights): base}``."""
    contract = engine_contract(program.config)
    bases, words = {}, 0
    for step in program.steps:
        for run in getattr(step, "runs", ()):
            if id(run.weights) not in bases:
                bases[id(run.weights)] = words
                words += contract.weight_words(run.descriptor)
    return words, bases


def _weights_fit(program):
    """Whether the engine keeps resident weights and the program's fit its buffer."""
    contract = engine_contract(program.config)
    return contract.resident_weights and _weight_words(program)[0] <= contract.weights.words


def _make_resident(program, resident, cycles):
    """``program`` with a place in the weight buffer for each channel group's
    weights (in the order they first run), a place in the parameter buffer for
    each group's parameters where the engine keeps them (:func:`_place_params`),
    a place in the depthwise memory for each fused block's depthwise words where
    they fit (:func:`_place_depthwise`; the others' are streamed, on the first
    warm run of their block too) and each run's warm descriptor, or as it is
    when it should not or cannot be resident."""
    contract = engine_contract(program.config)
    words, bases = _weight_words(program)
    groups, seen = [], set()
    for step in program.steps:
        for run in getattr(step, "runs", ()):
            if id(run.weights) not in seen:
                seen.add(id(run.weights))
                groups.append((id(run.weights), int(run.descriptor["co_tiles"])))
    fits = contract.resident_weights and words <= contract.weights.words
    if resident is None:
        resident = fits
    if not resident:
        return program
    if not fits:
        why = ("the compact arrangement keeps no resident weights"
               if not contract.resident_weights else
               f"its weights take {words} words of the weight buffer's {contract.weights.words}")
        raise MappingError(f"model {program.model.name!r} cannot keep its weights resident: {why}")
    param_bases, shared = _place_params(contract, groups)
    dw_bases, dw_shared, dw_words = _place_depthwise(contract, program)
    # The group whose parameters the shared words hold: a streamed run loads its
    # own unless they are still there (the run before it in the shared words
    # was the same group's: a column strip's, or one between resident groups).
    # The same for the fused block whose depthwise words the shared words hold.
    in_shared = in_dw_shared = None
    for step in program.steps:
        runs = []
        for run in getattr(step, "runs", ()):
            key = id(run.weights)
            cold = dict(run.descriptor, weight_base=bases[key],
                        param_base=param_bases.get(key, shared))
            load_params = key not in param_bases and key != in_shared
            if key not in param_bases:
                in_shared = key
            warm = dict(cold, load_weights=0, load_params=int(load_params))
            if getattr(step, "fused", False):
                block = id(step)
                cold["dw_base"] = warm["dw_base"] = dw_bases.get(block, dw_shared)
                if block not in dw_bases and block != in_dw_shared:
                    # its depthwise words come only with the weights (the stream's
                    # sections: docs/engine.md "Step 3")
                    warm.update(load_weights=1, load_params=0)
                if block not in dw_bases:
                    in_dw_shared = block
                _check_fused(program.config, step, cold, warm)
            for desc in (cold, warm):
                memo = tuple(sorted(desc.items()))
                if memo not in cycles:
                    cycles[memo] = layer_cycles(program.config, desc).cycles
            runs.append(dataclasses.replace(
                run, descriptor=MappingProxyType(cold), warm_descriptor=MappingProxyType(warm),
                predicted_cycles=cycles[tuple(sorted(cold.items()))],
                warm_predicted_cycles=cycles[tuple(sorted(warm.items()))],
                params_nbytes=cold["co_tiles"] * contract.param_beats
                * program.config.stream_bytes))
        if runs:
            step.runs = runs
    program.resident, program.weight_words = True, words
    program.param_words = sum(co for key, co in groups if key in param_bases)
    program.depthwise_words = dw_words
    return program


def _check_fused(config, step, *descriptors):
    """Raise a MappingError naming the block and the limit where a fused run's placed
    descriptor breaks the contract (the places are the compiler's own, so this
    is a guard: :func:`~fpgacnn.core.contract.descriptor_violations`)."""
    for desc in descriptors:
        violations = descriptor_violations(config, desc)
        if violations:
            raise MappingError(f"layer {step.name!r}: {violations[0][1]}")


def constants_residency(program, warm):
    """Where an inference's constants came from: the report's ``weights`` and
    ``parameters``.

    ``weights``: ``streamed`` (every run streams its channel group's weights),
    ``loaded, now resident`` (this inference loaded them into the engine's
    weight buffer, where they stay) or ``resident`` (none streamed). ``parameters``
    the same for the parameter records, or, where only some channel groups'
    fit the parameter buffer (MobileNetV1 on the PYNQ-Z2's engine), how many
    of their words stay: ``"429 of 685 words resident, the rest streamed"``
    (``loaded, 429 of 685 words now resident, ...`` on the first inference).

    Parameters
    ----------
    program : fpgacnn.host.compiler.Program
    warm : bool
        The inference ran warm (the board's engine held the program's weights).

    Returns
    -------
    dict
    """
    if not program.resident:
        return {"weights": "streamed", "parameters": "streamed"}
    weights = "resident" if warm else "loaded, now resident"
    groups = {}
    for step in program.steps:
        for run in getattr(step, "runs", ()):
            groups.setdefault(id(run.weights), int(run.descriptor["co_tiles"]))
    total = sum(groups.values())
    if program.param_words == 0:
        parameters = "streamed"
    elif program.param_words == total:
        parameters = weights
    else:
        kept = f"{program.param_words} of {total} words"
        parameters = (f"{kept} resident, the rest streamed" if warm
                      else f"loaded, {kept} now resident, the rest streamed")
    return {"weights": weights, "parameters": parameters}


def _convolution_step(config, layer, pool, batch, cycles, *, reads_input, rows=True):
    """The engine step of a convolution: the candidate mappings compiled, the one
    with the fewest predicted cycles kept (the first on a tie).

    A Conv the window takes: as it is (``dense``), with the 1x1 remap's other
    blocks (``dense/remap<b>``, ``dense/plain``), its pixels as rows of another
    width (``dense/rows<w>``, each with every block), and a thin first layer's
    taps as channels (``im2col``). A grouped layer: its block-diagonal views
    (``grouped/<k>``; ``grouped/<k>/im2col`` where they fold their taps) and
    depthwise runs (``depthwise/<k>``). Anything else, and a Conv or dilated
    Conv no candidate fits: its taps folded into channels; a grouped layer no
    candidate fits: its views' taps folded into channels
    (``grouped/<k>/im2col``). ``rows``:
    whether pixel-row views are candidates (not where an Add may fuse into the
    step, :func:`_feeds_an_add`)."""
    candidates = []
    if isinstance(layer, Conv) and conv_views.fits(layer.kernel, layer.stride, config):
        candidates.append(("dense", [layer], pool, None))
        candidates += [(f"dense/{_remap_name(b)}", [layer], pool, b)
                       for b in _other_remap_blocks(config, layer, pool)]
        if pool is None and rows:
            # its pixels as rows of another width, each with every remap block
            for width in conv_views.row_widths(layer, config):
                view = conv_views.rows_view(layer, width)
                candidates += [(f"dense/rows{width}" + (f"/{_remap_name(b)}" if b is not None
                                                         else ""),
                                [view], None, b)
                               for b in (None, *_other_remap_blocks(config, view, None))]
        if reads_input and pool is None and layer.kernel != (1, 1) \
                and layer.input_shape[0] < config.pin:
            # A thin layer on the network's own input: its taps as channels may fill
            # the input lanes (the host writes that input anyway).
            candidates.append(("im2col", [conv_views.dense_view(layer, config, fold=True)],
                               None, None))
    elif isinstance(layer, GroupedConv):
        candidates += _grouped_candidates(config, layer, fold=False)
        if (engine_contract(config).depthwise_runs and layer.depthwise
                and layer.weight.shape[0] == layer.group):
            for k in conv_views.depthwise_sizes(layer, config):
                views = conv_views.grouped_views(layer, config, k, depthwise=True)
                if views:
                    candidates.append((f"depthwise/{k}", views, None, None))
    else:
        view = conv_views.dense_view(layer, config)
        candidates.append((view.how, [view], None, None))
    best, errors = _fastest(config, layer, candidates, batch, cycles)
    if (best is None and isinstance(layer, (Conv, DilatedConv)) and errors
            and candidates[0][0] != "im2col"):
        # As it is (a dilated Conv: with zeros between its taps), no tiling fits (a
        # stride or a left pad out of range, a row past the line buffer); its taps as
        # channels may. The first refusal is the one told.
        candidate = ("im2col", [conv_views.dense_view(layer, config, fold=True)], None, None)
        best, _ = _fastest(config, layer, [candidate], batch, cycles)
    if (best is None and isinstance(layer, GroupedConv) and errors
            and not candidates[0][0].endswith("/im2col")):
        # As views, no tiling fits (a stride or a top/left pad out of range, one
        # group's input tiles past max_ci_tiles); their taps as channels may, as a
        # Conv's do. The cycle model picks the groups per view (all of them: the
        # whole layer folded); the first refusal is the one told.
        best, _ = _fastest(config, layer, _grouped_candidates(config, layer, fold=True), batch,
                           cycles)
    if best is None:
        raise errors[0]
    if reads_input and isinstance(layer, Conv):
        best = _space_to_depth(config, layer, best, batch, cycles)
    candidate, step = best
    if step.runs and step.runs[0].weights is None:
        step = _step_of_candidate(config, layer, candidate, batch, cycles)
    return step


def _space_to_depth(config, layer, best, batch, cycles):
    """``best`` (today's mapping of a Conv on the network's input, ``(candidate,
    step)``), or the layer as space to depth (``s2d``, ``s2d/phase``:
    :func:`~fpgacnn.host.conv_views.space_to_depth_view` with no host padding
    before the input, or with the layer's pads modulo its stride) where the cycle
    model predicts fewer cycles.

    Only a strided Conv, only on the network's input (the host writes its blocks
    with the input, an input fold), and only beside a mapping that runs: it is a
    choice for speed, never a fallback, so a layer refused today is refused with
    today's message. It keeps today's fused pool (the output is the layer's
    own), or runs without one where today's mapping does."""
    s2d = _space_to_depth_fastest(config, layer, best[0][2], batch, cycles)
    return s2d if s2d is not None and _predicted(s2d[1]) < _predicted(best[1]) else best


def _space_to_depth_fastest(config, layer, pool, batch, cycles):
    """The fastest of the Conv ``layer``'s space-to-depth candidates with ``pool``
    as ``(candidate, step)``, None where the layer has stride 1 or every one is
    refused."""
    if tuple(layer.stride) == (1, 1):
        return None
    candidates = []
    for phase in conv_views.space_to_depth_phases(layer):
        try:
            view = conv_views.space_to_depth_view(layer, phase)
        except ValueError:
            continue  # an axis whose outputs read padding alone: nothing to gain
        candidates.append(("s2d" + ("/phase" if any(phase) else ""), [view], pool, None))
    return _fastest(config, layer, candidates, batch, cycles)[0]


def _grouped_candidates(config, layer, *, fold):
    """The block-diagonal views of the grouped ``layer`` as candidates, for every
    count of groups per view (:func:`~fpgacnn.host.conv_views.pack_sizes`); ``fold``:
    each view's taps folded into channels. Views that fold their taps (asked to,
    or because the window does not take the kernel or the stride) are named
    ``grouped/<k>/im2col``."""
    folded = fold or conv_views.folds_taps(layer, config)
    return [(f"grouped/{k}" + ("/im2col" if folded else ""),
             conv_views.grouped_views(layer, config, k, fold=fold), None, None)
            for k in conv_views.pack_sizes(layer, config, fold=folded)]


def _fastest(config, layer, candidates, batch, cycles):
    """``(best, errors)``: the candidate with the fewest predicted cycles (the first on
    a tie) as ``(candidate, step)``, None if every one is refused, and the refusals.
    Candidates are compared on descriptors and predicted cycles alone: unless there
    is only one, the step carries no weights (the caller packs the one it keeps)."""
    pack = len(candidates) == 1
    best, errors = None, []
    for candidate in candidates:
        try:
            step = _step_of_candidate(config, layer, candidate, batch, cycles, pack=pack)
        except MappingError as e:
            errors.append(e)
            continue
        if best is None or _predicted(step) < _predicted(best[1]):
            best = candidate, step
    return best, errors


def _step_of_candidate(config, layer, candidate, batch, cycles, *, pack=True):
    """:func:`_step_of_views` of a candidate ``(mapping, views, pool, remap)``."""
    mapping, views, pool, remap = candidate
    return _step_of_views(config, layer, mapping, views, pool, batch, cycles, remap=remap,
                          pack=pack)


def _remap_name(block):
    return f"remap{block}" if block else "plain"


def _other_remap_blocks(config, layer, pool):
    """The 1x1 remap's blocks (0: none) a 1x1 layer may run with besides the one
    :func:`~fpgacnn.host.packing.remap_block` picks by its input tiles: every
    block from 2 to ``kmax`` spreads a thin layer's channels over fewer pixels
    (MobileNet's 8-channel pointwise layer: the ``kmax`` block pads its 8 bytes a
    pixel to 36, a 2x2 block to 16), and the plain layout (no remap) can be
    faster where the remap's lanes would be mostly padding. The compiler keeps
    the fastest by the cycle model. Only
    unpadded layers without a fused pool: the pixel reader takes no other
    remap (docs/program.md), and the choice must not send a run to the host."""
    if layer.kernel != (1, 1) or pool is not None or any(layer.pads) or config.kmax == 1:
        return []
    default = packing.remap_block(config, layer.input_shape[0], (1, 1))
    return [b for b in (0, *range(2, config.kmax + 1)) if b != default]


def _step_of_views(config, layer, mapping, views, pool, batch, cycles, *, remap=None,
                   pack=True):
    """An engine step of ``layer`` made of the runs of ``views`` (``[layer]``: as it is);
    ``remap``: the 1x1 remap's block (:func:`~fpgacnn.host.packing.remap_block`;
    None decides); without ``pack``, the runs carry no weights (to compare candidates)."""
    step = EngineStep(layer, pool, mapping=mapping)
    for view in views:
        try:
            plans = _strip_plans(config, view, pool is not None, batch, remap)
            if view is not layer:
                plans = [_in_view(view, plan) for plan in plans]
            step.runs += _compile_runs(config, view, plans, pool=pool is not None,
                                       clamp=step.clamp, cycles=cycles, pack=pack, remap=remap)
        except MappingError as e:
            if view is layer:
                raise
            raise MappingError(f"{e} ({view.describe()})") from None
    return step


def _predicted(step):
    return sum(run.predicted_cycles for run in step.runs)


def _in_view(view, plan):
    """A plan of ``view`` as a plan of its layer: the view's gather first, its
    output channels placed at the view's channels (and its pixels at the
    layer's, for a view of its pixels as rows)."""
    off = view.channels[0]
    sc = plan.scatter
    scatter = ChannelColumns(sc.c0 + off, sc.c1 + off, sc.o0, sc.o1)
    if view.rows is not None:
        scatter = RowsColumns(scatter.c0, scatter.c1, scatter.o0, scatter.o1, *view.rows)
    return plan._replace(gather=conv_views.compose(view.gather, plan.gather), scatter=scatter)


def _compile_runs(config, conv, plans, *, pool, clamp, cycles, pack=True, remap=None):
    """Each planned run of the convolution ``conv`` (a Conv, a view, or a
    :class:`GemmAsConv`), checked against the engine's limits and compiled into
    an :class:`EngineRun` (its ``weights`` None without ``pack``); ``remap`` as
    for :func:`~fpgacnn.host.packing.map_layer`."""
    lo, hi = clamp
    if lo > hi:
        raise MappingError(f"{conv.name}: clamp_lo {lo} is above clamp_hi {hi}")
    runs, weights, loaded = [], {}, None
    for plan in plans:
        c0, c1 = plan.channels
        # The run order is fixed: a run that follows one of its own channel group
        # finds the group's weights in the engine.
        parts = _fused_run if getattr(conv, "fused", False) else _conv_run
        desc, pixel_packing, constants = parts(config, conv, plan, pool=pool, clamp=clamp,
                                               remap=remap, load_weights=plan.channels != loaded)
        loaded = plan.channels
        if not pack:
            weights[plan.channels] = None
        elif plan.channels not in weights:
            weights[plan.channels] = constants()
            weights[plan.channels].flags.writeable = False  # shared by the group's runs
        key = tuple(sorted(desc.items()))
        if key not in cycles:
            cycles[key] = layer_cycles(config, desc).cycles
        runs.append(EngineRun(
            channels=plan.channels, descriptor=MappingProxyType(desc), gather=plan.gather,
            scatter=plan.scatter, weights=weights[plan.channels], predicted_cycles=cycles[key],
            out_nbytes=packing.output_nbytes(config, desc), in_shape=tuple(plan.x_shape),
            pads=plan.pads, pack_pixels=pixel_packing,
            unpack=functools.partial(_unpack, config, desc, c1 - c0)))
    return runs


def _conv_run(config, conv, plan, *, pool, clamp, remap, load_weights):
    """``(descriptor, PixelPacking, constants)`` of a convolution's run ``plan``, mapped
    and checked (:func:`~fpgacnn.host.packing.map_layer`); ``constants()`` packs its
    channel group's parameters and weights."""
    c0, c1 = plan.channels
    w_shape = (c1 - c0, *conv.weight.shape[1:])
    depthwise = getattr(conv, "depthwise", False)
    geo = packing.map_layer(config, plan.x_shape, w_shape, stride=conv.stride, pads=plan.pads,
                            pool=pool, depthwise=depthwise, remap=remap,
                            name=f"layer {conv.name!r}")
    desc = packing.layer_descriptor(geo, x_zp=conv.x_zero_point, y_zp=conv.y_zero_point,
                                    clamp=clamp, load_weights=load_weights)
    pixel_packing = PixelPacking(
        config, x_zp=conv.x_zero_point, w_shape=tuple(int(d) for d in w_shape),
        stride=tuple(conv.stride), pads=tuple(plan.pads), remap=int(geo["remap"]),
        name=conv.name)

    def constants():
        return packing.pack_weights(
            config, conv.weight[c0:c1], conv.bias[c0:c1], conv.x_zero_point, conv.mult[c0:c1],
            conv.shift[c0:c1], remap=geo["remap"], depthwise=depthwise, name=conv.name)
    return desc, pixel_packing, constants


def _fused_run(config, block, plan, *, pool, clamp, remap, load_weights):
    """:func:`_conv_run` of a :class:`FusedBlockAsConv`'s run (never pooled or remapped:
    the pointwise half always takes the ``kmax`` block's remap)."""
    assert not pool and remap is None and clamp == (block.pw.lo, block.pw.hi)
    desc = block.descriptor(config, plan, load_weights=load_weights)
    return desc, block.pixel_packing(config, plan), \
        lambda: block.pack(config, plan.channels)[0]


def _unpack(config, desc, channels, raw):
    return packing.unpack_output(config, raw, desc, channels)


def _channel_groups(config, layer, ci_tiles):
    """Output-channel groups whose parameters and weights fit the buffers (one
    group for a depthwise view, whose output tiles pair with its input tiles; a
    fused block's output tile takes a weight word per remap window of its
    pointwise half, :func:`~fpgacnn.core.fused_block.pointwise_tiles`)."""
    cout = layer.weight.shape[0]
    contract = engine_contract(config)
    if getattr(layer, "depthwise", False):
        co_tiles = math.ceil(cout / config.pout)
        if co_tiles > min(contract.max_co_tiles, contract.weights.words):
            raise MappingError(f"layer {layer.name!r}: {co_tiles} output tiles of a depthwise "
                               f"run exceed the engine's {contract.max_co_tiles}")
        return [(0, cout)]
    words = pointwise_tiles(config, ci_tiles) if getattr(layer, "fused", False) else ci_tiles
    co_tiles_max = contract.max_co_tiles_for(words)
    if co_tiles_max < 1:
        raise MappingError(f"layer {layer.name!r}: the weights of even one output tile "
                           f"({ci_tiles} input tiles) exceed the weight buffer's "
                           f"{contract.weights.words} words (max_channels {config.max_channels})")
    group = co_tiles_max * config.pout
    return [(c, min(c + group, cout)) for c in range(0, cout, group)]


def _input_tiles(config, cin, block):
    """Input tiles of a layer of ``cin`` channels (after the 1x1 remap of ``block``, if any)."""
    return math.ceil((packing.remap_group(config, cin, block) if block else cin) / config.pin)


def _strip_inputs(layer, o0, o1):
    """Input columns ``[x0, x1)`` (padding included: may reach outside the image) of output columns ``[o0, o1)``."""
    _, kw = layer.weight.shape[2:]
    sx, left = layer.stride[1], layer.pads[1]
    return o0 * sx - left, (o1 - 1) * sx - left + kw


def _strip_columns(layer, o0, o1, w):
    """``(gather, in_w, pad_left, pad_right)`` of the strip of output columns ``[o0, o1)``.

    A kernel narrower than the padding (1x1 with pads, say) has output
    columns whose windows hold no pixel of the image; a strip of those alone
    streams one column of the padding value instead of an empty row.
    """
    kw, sx = layer.weight.shape[3], layer.stride[1]
    x0, x1 = _strip_inputs(layer, o0, o1)
    if x1 <= 0 or x0 >= w:
        return ZeroPointColumn(layer.x_zero_point), 1, 0, max(0, (o1 - o0 - 1) * sx + kw - 1)
    return ColumnSlice(max(0, x0), min(w, x1)), min(w, x1) - max(0, x0), max(0, -x0), \
        max(0, x1 - w)


def _strip_plans(config, layer, pooled, batch, remap=None):
    """Runs of one Conv: output-channel groups x column strips (``remap`` as for
    :func:`~fpgacnn.host.packing.map_layer`)."""
    cout, cin, kh, kw = layer.weight.shape
    _, h, w = layer.input_shape
    _, oh, ow = layer.output_shape
    sy, sx = layer.stride
    top, left, bottom, right = layer.pads
    contract = engine_contract(config)
    # (a fused block's input is the depthwise's: never remapped)
    block = 0 if getattr(layer, "depthwise", False) or getattr(layer, "fused", False) else \
        packing.remap_block(config, cin, (kh, kw), remap)
    ci_tiles = _input_tiles(config, cin, block)
    groups = _channel_groups(config, layer, ci_tiles)
    # Widest strip (output columns) whose input row fits a line-buffer bank
    # and, pooled, whose output row fits the max-pool's row memory.
    max_in = contract.widest_row(ci_tiles)
    if block:  # an output pixel is a block x block block of input pixels
        max_out = max_in // block
    else:
        max_out = (max_in - kw) // sx + 1 if max_in >= kw else 0
    if pooled:
        co_tiles = max(math.ceil((c1 - c0) / config.pout) for c0, c1 in groups)
        max_out = min(max_out - max_out % 2, contract.widest_pooled_row(co_tiles))
    if max_out < (2 if pooled else 1):
        raise MappingError(f"layer {layer.name!r}: one input row of {cin} channels does not fit "
                           f"the line buffer even {kw} columns wide (bank depth "
                           f"{contract.line_buffer.words} words; max_channels "
                           f"{config.max_channels})")
    usable = ow - ow % 2 if pooled else ow
    strips = [(o, min(o + max_out, usable)) for o in range(0, usable, max_out)]
    plans = []
    for c0, c1 in groups:
        for o0, o1 in strips:
            gather, in_w, pl, pr = _strip_columns(layer, o0, o1, w)
            out_cols = (o0 // 2, o1 // 2) if pooled else (o0, o1)
            plans.append(_Plan((c0, c1), (batch, cin, h, in_w), (top, pl, bottom, pr),
                               gather, ChannelColumns(c0, c1, *out_cols)))
    return plans


class GemmAsConv:
    """A Gemm presented as a 1x1 convolution: the one place that knows how.

    The weights become a ``(Cout, Cin, 1, 1)`` kernel, and a batch of feature
    vectors the pixels of 2-D images (:class:`BatchImage`: as wide as the line
    buffer allows, as many rows as the descriptor's row range allows); each
    output image goes back to ``(N, Cout)`` with :class:`BatchTranspose`.
    Everything else (checks, packing, cycles) is the convolution's.

    Parameters
    ----------
    gemm : fpgacnn.host.layers.Gemm
    """

    stride = (1, 1)

    def __init__(self, gemm):
        self.gemm = gemm
        self.name = gemm.name
        self.weight = gemm.weight[:, :, None, None]
        self.bias, self.mult, self.shift = gemm.bias, gemm.mult, gemm.shift
        self.x_zero_point, self.y_zero_point = gemm.x_zero_point, gemm.y_zero_point

    def plans(self, config, batch):
        """Runs of the Gemm: output-channel groups x batch chunks, each one image."""
        cout, cin = self.gemm.weight.shape
        contract = engine_contract(config)
        block = packing.remap_block(config, cin, (1, 1))
        ci_tiles = _input_tiles(config, cin, block)
        per_run = contract.widest_row(ci_tiles)
        if block:  # a remapped pixel is a block x block block
            per_run //= block
        if per_run < 1:
            raise MappingError(f"layer {self.name!r}: {cin} input features do not fit the line "
                               f"buffer (bank depth {contract.line_buffer.words} words; "
                               f"max_channels {config.max_channels})")
        width = min(batch, per_run)
        # Rows are bounded by the descriptor's row range (block rows each when remapped).
        per_chunk = width * (contract.ranges["in_h"][1] // (block or 1))
        chunks = [(b, min(b + per_chunk, batch)) for b in range(0, batch, per_chunk)]
        plans = []
        for c0, c1 in _channel_groups(config, self.gemm, ci_tiles):
            for b0, b1 in chunks:
                rows = math.ceil((b1 - b0) / width)
                plans.append(_Plan((c0, c1), (1, cin, rows, width), (0, 0, 0, 0),
                                   BatchImage(b0, b1, rows, width),
                                   BatchTranspose(c0, c1, b0, b1)))
        return plans


def pack_run(config, step, run, x, *, load_weights=True):
    """Descriptor and input stream of one compiled run on the step input ``x``,
    with or without the weights: ``(desc, data)``.

    For tools that drive runs themselves (benchmarks); the
    :class:`~fpgacnn.host.accelerator.Accelerator` uses ``run.descriptor``
    and :meth:`EngineRun.stream`. ``config`` must be the program's.
    """
    desc = dict(run.descriptor, load_weights=int(bool(load_weights)))
    return desc, run.stream(x, load_weights=load_weights)
