"""The compiler: a quantized model -> a program of engine runs and host steps.

Every Conv and Gemm runs on the engine; a 2x2 stride-2 MaxPool that directly
follows a Conv is fused into it. The other layer kinds (Add, AveragePool,
GlobalAveragePool, Flatten, other pools) run on the host with the reference
semantics and are reported as host work. A Conv or Gemm that the engine cannot
run (kernel larger than ``kmax``, too many input channels for the line buffer,
...) is an error that names the layer and the limit: it never falls back to
the host quietly.

Within a layer the compiler tiles:

- output channels, when the layer's weights or parameters do not fit the
  engine's buffers (each group re-streams the input);
- columns, when an input row does not fit the line buffer (vertical strips
  with a halo of ``k - stride`` columns; strips of a pooled layer hold whole
  pooling pairs);
- Gemm batches, laid out as a 2-D image of a 1x1 convolution (as wide as
  the line buffer allows, as many rows as it takes), so that a batch runs
  like a 1x1 layer instead of one row at a time.

Weights, biases and requantization parameters are sliced here once; the
stream bytes themselves are packed by :mod:`fpgacnn.host.packing`.
"""

from dataclasses import dataclass, field
import math

import numpy as np

from ..core.contract import engine_contract
from . import packing
from ..core.errors import MappingError
from .layers import Conv, Gemm, MaxPool

__all__ = ["EngineRun", "EngineStep", "HostStep", "Program", "compile_model", "run_inputs", "pack_run"]


@dataclass(frozen=True)
class EngineRun:
    """One engine layer run: an output-channel group over a column strip.

    Attributes
    ----------
    channels : (int, int)
        Output channels ``[c0, c1)``.
    in_cols : (int, int)
        Input columns ``[x0, x1)`` streamed.
    out_cols : (int, int)
        Output columns ``[o0, o1)`` produced (after pooling, if fused).
    pads : (int, int, int, int)
        Padding of this strip ``(top, left, bottom, right)``.
    grid : (int, int) or None
        Gemm runs: the batch images ``in_cols`` laid out as ``(rows, width)``
        pixels of a 1x1 convolution (the last row padded).
    """

    channels: tuple
    in_cols: tuple
    out_cols: tuple
    pads: tuple
    grid: tuple = None


@dataclass
class EngineStep:
    """A Conv (or Gemm, as a 1x1 convolution) on the engine, maybe with a fused max-pool."""

    layer: object
    pool: object = None
    runs: list = field(default_factory=list)

    @property
    def name(self):
        return self.layer.name if self.pool is None else f"{self.layer.name}+{self.pool.name}"

    @property
    def inputs(self):
        return self.layer.inputs

    @property
    def output(self):
        return (self.pool or self.layer).output

    @property
    def macs(self):
        return self.layer.macs

    @property
    def op(self):
        return self.layer.op if self.pool is None else f"{self.layer.op}+MaxPool"

    @property
    def clamp(self):
        lo, hi = self.layer.lo, self.layer.hi
        if self.pool is not None:  # clamps commute with max: apply both at once
            lo, hi = max(lo, self.pool.lo), min(hi, self.pool.hi)
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
    """A compiled model: steps in order, for one engine configuration."""

    model: object
    config: object
    steps: list


def _fusable_pool(layer, pool, readers):
    """A MaxPool the engine can fuse behind ``layer``: 2x2, stride 2, no pads, pure max."""
    return (isinstance(pool, MaxPool) and pool.inputs == (layer.output,)
            and readers.get(layer.output, 0) == 1
            and pool.kernel == (2, 2) and pool.stride == (2, 2) and pool.pads == (0, 0, 0, 0)
            and pool.identity_scale
            and max(layer.lo, pool.lo) <= min(layer.hi, pool.hi))


def compile_model(model, config, *, batch=1):
    """Compile ``model`` for an engine generated with ``config``.

    Parameters
    ----------
    model : fpgacnn.host.model.QuantizedModel
    config : fpgacnn.core.config.EngineConfig
    batch : int
        Images per run (Gemm layers lay the batch along the image width, so it
        shapes their tiling; convolution runs take any batch).

    Returns
    -------
    Program

    Raises
    ------
    MappingError
        A Conv or Gemm cannot run on this engine; the message names the
        layer and the limit.
    """
    readers = {}
    for layer in model.layers:
        for t in layer.inputs:
            readers[t] = readers.get(t, 0) + 1
    readers[model.output_tensor] = readers.get(model.output_tensor, 0) + 1
    steps, layers, i = [], model.layers, 0
    while i < len(layers):
        layer = layers[i]
        if isinstance(layer, Conv):
            pool = layers[i + 1] if i + 1 < len(layers) else None
            pool = pool if _fusable_pool(layer, pool, readers) else None
            step = EngineStep(layer, pool)
            step.runs = _conv_runs(config, layer, pool is not None)
            _check_runs(config, step, batch)
            steps.append(step)
            i += 2 if pool is not None else 1
        elif isinstance(layer, Gemm):
            step = EngineStep(layer)
            step.runs = _gemm_runs(config, layer, batch)
            _check_runs(config, step, batch)
            steps.append(step)
            i += 1
        else:
            steps.append(HostStep(layer))
            i += 1
    return Program(model, config, steps)


def _check_runs(config, step, batch):
    """Every run against the engine's limits (packing's rules), before anything runs."""
    layer = step.layer
    for run in step.runs:
        (c0, c1), (x0, x1) = run.channels, run.in_cols
        if isinstance(layer, Gemm):
            x_shape, w_shape, stride = (1, layer.weight.shape[1], *run.grid), \
                (c1 - c0, layer.weight.shape[1], 1, 1), 1
        else:
            cin, h, _ = layer.input_shape
            x_shape, w_shape, stride = (batch, cin, h, x1 - x0), \
                (c1 - c0, *layer.weight.shape[1:]), layer.stride
        packing.map_layer(config, x_shape, w_shape, stride=stride, pads=run.pads,
                          pool=step.pool is not None, name=f"layer {layer.name!r}")


def _channel_groups(config, layer, ci_tiles):
    """Output-channel groups whose parameters and weights fit the buffers."""
    cout = layer.weight.shape[0]
    contract = engine_contract(config)
    co_tiles_max = contract.max_co_tiles_for(ci_tiles)
    if co_tiles_max < 1:
        raise MappingError(f"layer {layer.name!r}: the weights of even one output tile "
                           f"({ci_tiles} input tiles) exceed the weight buffer's "
                           f"{contract.weights.words} words (max_channels {config.max_channels})")
    group = co_tiles_max * config.pout
    return [(c, min(c + group, cout)) for c in range(0, cout, group)]


def _input_tiles(config, cin, remap):
    """Input tiles of a layer of ``cin`` channels (after the 1x1 remap when ``remap``)."""
    return math.ceil((math.ceil(cin / config.kmax ** 2) if remap else cin) / config.pin)


def _conv_runs(config, layer, pooled):
    """Runs of one Conv: output-channel groups x column strips."""
    cout, cin, kh, kw = layer.weight.shape
    _, h, w = layer.input_shape
    _, oh, ow = layer.output_shape
    sy, sx = layer.stride
    top, left, bottom, right = layer.pads
    contract = engine_contract(config)
    remap = packing.use_remap(config, cin, (kh, kw))
    ci_tiles = _input_tiles(config, cin, remap)
    groups = _channel_groups(config, layer, ci_tiles)
    # Widest strip (output columns) whose input row fits a line-buffer bank
    # and, pooled, whose output row fits the max-pool's row memory.
    max_in = contract.widest_row(ci_tiles)
    if remap:  # an output pixel is a kmax x kmax block of input pixels
        max_out = max_in // config.kmax
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
    runs = []
    for c0, c1 in groups:
        for o0, o1 in strips:
            x0 = o0 * sx - left
            x1 = (o1 - 1) * sx - left + kw
            pl, pr = max(0, -x0), max(0, x1 - w)
            x0, x1 = max(0, x0), min(w, x1)
            out_cols = (o0 // 2, o1 // 2) if pooled else (o0, o1)
            runs.append(EngineRun((c0, c1), (x0, x1), out_cols, (top, pl, bottom, pr)))
    return runs


def _gemm_runs(config, layer, batch):
    """Runs of one Gemm: output-channel groups x batch chunks, each a 2-D 1x1-conv image."""
    cout, cin = layer.weight.shape
    contract = engine_contract(config)
    remap = packing.use_remap(config, cin, (1, 1))
    ci_tiles = _input_tiles(config, cin, remap)
    per_run = contract.widest_row(ci_tiles)
    if remap:  # a remapped pixel is a kmax x kmax block
        per_run //= config.kmax
    if per_run < 1:
        raise MappingError(f"layer {layer.name!r}: {cin} input features do not fit the line buffer "
                           f"(bank depth {contract.line_buffer.words} words; max_channels "
                           f"{config.max_channels})")
    width = min(batch, per_run)
    # Rows are bounded by the descriptor's row range (kmax rows each when remapped).
    per_chunk = width * (contract.ranges["in_h"][1] // (config.kmax if remap else 1))
    chunks = [(b, min(b + per_chunk, batch)) for b in range(0, batch, per_chunk)]
    return [EngineRun((c0, c1), chunk, chunk, (0, 0, 0, 0),
                      grid=(math.ceil((chunk[1] - chunk[0]) / width), width))
            for c0, c1 in _channel_groups(config, layer, ci_tiles) for chunk in chunks]


def run_inputs(step, run, x):
    """The int8 NCHW input of one run, and the weights it uses.

    ``x`` is the step's input: NCHW for a Conv, ``(N, C)`` for a Gemm.
    """
    layer = step.layer
    c0, c1 = run.channels
    if isinstance(layer, Gemm):
        b0, b1 = run.in_cols
        rows, width = run.grid
        flat = np.zeros((x.shape[1], rows * width), np.int8)  # padding pixels: results dropped
        flat[:, :b1 - b0] = x[b0:b1].T
        xs = flat.reshape(1, x.shape[1], rows, width)
        w = layer.weight[c0:c1, :, None, None]
    else:
        x0, x1 = run.in_cols
        xs = np.ascontiguousarray(x[:, :, :, x0:x1])
        w = layer.weight[c0:c1]
    return xs, w


def pack_run(config, step, run, x, *, load_weights=True):
    """Descriptor and input stream of one run: :func:`run_inputs`, then
    :func:`fpgacnn.host.packing.pack_layer` with the layer's parameters for
    the run's output channels. Returns ``(desc, data)``."""
    layer = step.layer
    xs, w = run_inputs(step, run, x)
    c0, c1 = run.channels
    return packing.pack_layer(
        config, xs, w, layer.bias[c0:c1], layer.x_zero_point, layer.mult[c0:c1],
        layer.shift[c0:c1], layer.y_zero_point, clamp=step.clamp,
        stride=1 if isinstance(layer, Gemm) else layer.stride, pads=run.pads,
        pool=step.pool is not None, load_weights=load_weights, name=layer.name)
