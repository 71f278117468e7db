"""Network programs of fused depthwise + pointwise blocks, built without the compiler.

The compiler does not fuse blocks yet; these helpers make what its fused steps
will be (an :class:`~fpgacnn.host.compiler.EngineRun` per block, from
:func:`~fpgacnn.host.packing.pack_fused_block`'s descriptor and constants) and a
:class:`~fpgacnn.host.compiler.Program` of them, so that the program image
(:func:`~fpgacnn.host.program_image.build_image`), the run table
(:class:`~fpgacnn.host.sequencer_table.SequencerProgram`) and the sequencer take
them by the same path the compiled steps will.

A program here is a chain: block ``i`` reads the output of block ``i - 1``
(the network's input for the first), so its channels are the last block's
output channels and its size that block's output size.
"""

from dataclasses import dataclass
from types import MappingProxyType, SimpleNamespace

import numpy as np

from fpgacnn.core.contract import engine_contract
from fpgacnn.core.errors import MappingError
from fpgacnn.core.fused_block import pointwise_tiles
from fpgacnn.host import integer_ops
from fpgacnn.host.compiler import (ChannelColumns, ColumnSlice, EngineRun, EngineStep,
                                   PixelPacking, Program)
from fpgacnn.host.cycle_model import layer_cycles
from fpgacnn.host.packing import pack_fused_block, unpack_output


@dataclass(frozen=True)
class Block:
    """One block's shape: ``cout`` output channels (the input's are the chain's), a
    ``k x k`` depthwise kernel, ``stride``, ``pads`` (top, left, bottom, right) and
    a depthwise Relu (``relu``: the depthwise half clamped at its zero point)."""

    cout: int
    k: int = 3
    stride: int = 1
    pads: tuple = (1, 1, 1, 1)
    relu: bool = False


def random_layers(rng, c, cout, k, relu):
    """A depthwise ``k x k`` layer of ``c`` channels and the pointwise ``c -> cout``
    after it, as :func:`~fpgacnn.host.packing.pack_fused_block` takes them, with
    random weights, biases, multipliers, shifts and zero points."""
    dw = dict(w=rng.integers(-128, 128, (c, 1, k, k)).astype(np.int8),
              bias=rng.integers(-20000, 20000, c), mult=rng.integers(1 << 23, 1 << 24, c),
              shift=rng.integers(29, 33, c), y_zp=int(rng.integers(-10, 11)))
    dw["clamp"] = (dw["y_zp"], 127) if relu else (-128, 127)
    lo = int(rng.integers(-128, -100))
    pw = dict(w=rng.integers(-128, 128, (cout, c, 1, 1)).astype(np.int8),
              bias=rng.integers(-20000, 20000, cout), mult=rng.integers(1 << 23, 1 << 24, cout),
              shift=rng.integers(30, 35, cout), y_zp=int(rng.integers(-10, 11)),
              clamp=(lo, 127))
    return dw, pw


def reference(x, x_zp, dw, pw, stride, pads):
    """The block as two layers of :func:`~fpgacnn.host.integer_ops.conv2d`: the
    depthwise (``group = C``), then the pointwise on its output."""
    c = x.shape[1]
    mid = integer_ops.conv2d(x, dw["w"], dw["bias"], x_zp, dw["mult"], dw["shift"], dw["y_zp"],
                             *dw["clamp"], stride=(stride, stride), pads=pads, group=c)
    return integer_ops.conv2d(mid, pw["w"], pw["bias"], dw["y_zp"], pw["mult"], pw["shift"],
                              pw["y_zp"], *pw["clamp"])


def fused_run(config, in_shape, x_zp, dw, pw, *, stride=1, pads=(0, 0, 0, 0), dw_base=0,
              weight_base=0, param_base=0, resident=False, name="block"):
    """A fused block as one compiled engine run over its whole input (``in_shape``:
    ``(N, C, H, W)``), as the compiler's fused step will make it.

    Its ``weights`` are :func:`~fpgacnn.host.packing.pack_fused_block`'s stream
    without the pixels (the pointwise parameters, the depthwise words, the
    pointwise weights: the order the engine takes them), ``params_nbytes`` the
    parameters'; ``resident``: its warm descriptor streams the parameters alone
    (the depthwise words and the pointwise weights stay at ``dw_base`` and
    ``weight_base``).

    Returns
    -------
    EngineRun
    """
    n, c, h, w = in_shape
    x0 = np.zeros(in_shape, np.int8)
    desc, data = pack_fused_block(config, x0, x_zp, dw, pw, stride=stride, pads=pads,
                                  dw_base=dw_base, weight_base=weight_base,
                                  param_base=param_base, name=name)
    kh, kw = dw["w"].shape[2:]
    packing = PixelPacking(config, x_zp, (c, c, kh, kw), (stride, stride), tuple(pads), 0, name)
    pixels = packing(x0).size
    weights = data[:data.size - pixels]
    contract = engine_contract(config)
    params = int(desc["co_tiles"]) * contract.param_beats * config.stream_bytes
    cout = pw["w"].shape[0]
    out_h, out_w = int(desc["out_h"]), int(desc["out_w"])
    warm = dict(desc, load_weights=0, load_params=1) if resident else None
    return EngineRun(
        channels=(0, cout), descriptor=MappingProxyType(desc), gather=ColumnSlice(0, w),
        scatter=ChannelColumns(0, cout, 0, out_w), weights=weights,
        predicted_cycles=layer_cycles(config, desc).cycles,
        out_nbytes=contract.output_nbytes(desc), in_shape=tuple(in_shape), pads=tuple(pads),
        pack_pixels=packing,
        unpack=lambda raw, d=desc, co=cout: unpack_output(config, raw, d, co),
        warm_descriptor=None if warm is None else MappingProxyType(warm),
        warm_predicted_cycles=None if warm is None else layer_cycles(config, warm).cycles,
        params_nbytes=params), (cout, out_h, out_w)


def fused_program(config, c, h, w, blocks, *, batch=1, seed=0):
    """A chain of fused ``blocks`` (:class:`Block`) on an input of ``c x h x w``, its
    layers random: ``(program, x8, expected)``, ``x8`` a random batch and
    ``expected`` its output through :func:`reference`.

    The blocks' depthwise words and pointwise weights are placed one after the
    other (``dw_base``, ``weight_base``); where all of them fit the engine's
    depthwise memory and weight buffer the program is resident (its warm runs
    stream the pointwise parameters alone).
    """
    rng = np.random.default_rng(seed)
    contract = engine_contract(config)
    x8 = rng.integers(-128, 128, (batch, c, h, w)).astype(np.int8)
    # The bases: each block's words after the block before's.
    runs, channels = [], c
    dw_base = weight_base = 0
    for b in blocks:
        tiles = -(-channels // config.pin)
        runs.append((dw_base, weight_base))
        dw_base += tiles
        weight_base += -(-b.cout // config.pout) * pointwise_tiles(config, tiles)
        channels = b.cout
    resident = (dw_base <= contract.fused.depthwise_memory.words
                and weight_base <= contract.weights.words)
    y, steps, model_layers = x8, [], []
    prev = "t0"
    shape = (c, h, w)
    for i, (b, (db, wb)) in enumerate(zip(blocks, runs)):
        x_zp = int(rng.integers(-20, 21))
        dw, pw = random_layers(rng, shape[0], b.cout, b.k, b.relu)
        run, out_shape = fused_run(config, (batch, *shape), x_zp, dw, pw, stride=b.stride,
                                   pads=b.pads, dw_base=db if resident else 0,
                                   weight_base=wb if resident else 0, resident=resident,
                                   name=f"block{i}")
        y = reference(y, x_zp, dw, pw, b.stride, b.pads)
        assert y.shape[1:] == out_shape
        layer = SimpleNamespace(name=f"block{i}", inputs=[prev], output=f"t{i + 1}",
                                output_shape=out_shape, op="FusedBlock", lo=-128, hi=127,
                                macs=int(np.prod(out_shape)) * shape[0] * (b.k * b.k + 1))
        steps.append(EngineStep(layer, runs=[run], mapping="fused"))
        model_layers.append(layer)
        prev, shape = layer.output, out_shape
    model = SimpleNamespace(name="fused_chain", input_tensor="t0",
                            input=SimpleNamespace(shape=(c, h, w)), layers=model_layers,
                            output_tensor=prev)
    program = Program(model, config, steps, batch=batch, resident=resident)
    return program, x8, y


def random_chain(config, rng, *, blocks=3):
    """A random chain for :func:`fused_program` that the engine takes: ``(c, h, w,
    blocks, batch)``, channels from one to the pair buffer's limit (``max_channels``)
    and output channels to ``max_out_channels``, strides 1 to the pairs' stride,
    ``2 x 2`` and ``3 x 3`` kernels (up to ``kmax``), pads of 0 to ``k - 1`` a
    side; each block drawn until the engine takes it
    (:func:`~fpgacnn.core.contract.descriptor_violations`, through
    :func:`~fpgacnn.host.packing.pack_fused_block`)."""
    contract = engine_contract(config)
    c = int(rng.integers(1, config.max_channels + 1))
    h, w = int(rng.integers(2, 8)), int(rng.integers(2, min(config.max_width, 9) + 1))
    chain, shape = [], (c, h, w)
    while len(chain) < blocks:
        k = int(rng.integers(2, config.kmax + 1))
        block = Block(cout=int(rng.integers(1, config.max_out_channels + 1)), k=k,
                      stride=int(rng.integers(1, contract.pair_stride + 1)),
                      pads=tuple(int(p) for p in rng.integers(0, k, 4)),
                      relu=bool(rng.integers(2)))
        dw, pw = random_layers(rng, shape[0], block.cout, k, block.relu)
        try:
            _, out_shape = fused_run(config, (1, *shape), 0, dw, pw, stride=block.stride,
                                     pads=block.pads)
        except MappingError:
            continue  # no output, or over a limit of the engine: draw again
        chain.append(block)
        shape = out_shape
    return c, h, w, chain, int(rng.integers(1, 3))


__all__ = ["Block", "fused_program", "fused_run", "random_chain", "random_layers",
           "reference"]
