"""The host side of the engine's stream format (docs/engine.md).

:func:`pack_layer` turns one quantized convolution (plain numpy arrays, NCHW /
OIHW) into the layer descriptor and the bytes of the engine's input stream;
:func:`unpack_output` turns the bytes of the output stream back into an int8
NCHW tensor. On the way, the layer is checked against the engine's limits, and
mapped onto the engine: kernels smaller than ``kmax`` are embedded in a
``kmax x kmax`` grid, 1x1 convolutions are remapped (their channels spread
over a ``b x b`` block of pixels, ``b`` up to ``kmax``) so that more of the
``kmax*kmax*pin`` multipliers work, channels are padded to whole tiles, and the
input zero point is folded into the bias.

Examples
--------
>>> import numpy as np
>>> from fpgacnn.core.config import EngineConfig
>>> cfg = EngineConfig(pin=2, pout=2, kmax=3, stream_width=32, max_width=16, max_channels=8,
...                    max_out_channels=8)
>>> x = np.zeros((1, 3, 5, 5), np.int8); w = np.ones((4, 3, 3, 3), np.int8)
>>> desc, data = pack_layer(cfg, x, w, np.zeros(4, np.int32), 0, [1 << 23] * 4, [24] * 4, 0,
...                         pads=(1, 1, 1, 1))
>>> desc["out_h"], desc["ci_tiles"], desc["co_tiles"], len(data)
(5, 2, 2, 276)
"""

import math

import numpy as np

from ..core.contract import (PARAM_RECORD_BYTES, PARAM_RECORD_FIELDS, beats as _beats,
                             descriptor_violations, engine_contract)
from ..core.widths import MAX_SHIFT, MULT_BITS
from ..core.errors import InputError, MappingError
from ..core.fused_block import pair_buffer_run

__all__ = ["map_layer", "pack_layer", "layer_descriptor", "pack_weights", "pack_pixels",
           "unpack_output", "output_nbytes", "input_nbytes", "remap_group", "remap_block",
           "pack_depthwise_words", "pack_fused_block", "fused_block_descriptor",
           "pack_fused_weights"]

#: The descriptor fields that do not shape a run, at values inside every range.
_NEUTRAL_FIELDS = dict(x_zp=0, y_zp=0, clamp_lo=-128, clamp_hi=127, load_weights=1)


def _pad_to_beat(buf, beat):
    buf = np.ascontiguousarray(buf, dtype=np.uint8).ravel()
    return np.concatenate([buf, np.zeros(_beats(buf.size, beat) * beat - buf.size, np.uint8)])


def _pair(value, what, name):
    if np.ndim(value) == 0:
        value = (value, value)
    value = tuple(int(v) for v in value)
    if len(value) != 2 or any(v < 1 for v in value):
        raise InputError(f"{name}: {what} must be a positive integer or a pair of them, "
                         f"not {value!r}")
    return value


def _int8_array(value, what, name, ndim):
    a = np.asarray(value)
    if a.dtype != np.int8:
        raise InputError(f"{name}: {what} must be int8, not {a.dtype}")
    if a.ndim != ndim:
        raise InputError(f"{name}: {what} must have {ndim} dimensions, not shape {a.shape}")
    return a


def _per_channel(value, what, name, cout, lo, hi):
    a = np.asarray(value)
    if not np.issubdtype(a.dtype, np.integer):
        raise InputError(f"{name}: {what} must be integers, not {a.dtype}")
    a = np.broadcast_to(a.astype(np.int64), (cout,)) if a.ndim == 0 else a.astype(np.int64)
    if a.shape != (cout,):
        raise InputError(f"{name}: {what} must have shape ({cout},), not {a.shape}")
    bad = (a < lo) | (a > hi)
    if bad.any():
        c = int(np.argmax(bad))
        raise MappingError(f"{name}: {what}[{c}] = {a[c]} is outside the engine's range "
                           f"{lo}..{hi}")
    return a


def _scalar(value, what, name, lo, hi):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise InputError(f"{name}: {what} must be an integer, not {value!r}")
    if not lo <= int(value) <= hi:
        raise MappingError(f"{name}: {what} = {value} is outside {lo}..{hi}")
    return int(value)


def zero_point_rows(in_h, out_h, stride, pad_top):
    """Rows of ``x_zp`` streamed below an image whose last output rows read bottom padding only.

    The engine contract wants an input row in every window
    (:func:`~fpgacnn.core.contract.descriptor_violations`: the line buffer
    loses the next image's rows otherwise), so output rows that start below
    the image get rows of the padding value to start on; they contribute
    nothing, as padding does.
    """
    return max(0, (out_h - 1) * stride - pad_top - in_h + 1)


def remap_group(config, cin, block=None):
    """Channels of a remapped 1x1 layer's pixel per position of its ``block x block``
    block (``block`` default ``kmax``): ``ceil(Cin / block^2)`` rounded up to whole
    ``pin``-channel words.

    Rounding up costs nothing (the run's input tiles are ``ceil(g / pin)``
    either way; the positions past ``Cin`` hold zeros, times weight 0) and puts
    every position's channels on a word boundary of the layer's input pixel, so
    the engine's pixel reader fetches them as whole words (docs/program.md).
    """
    block = config.kmax if block is None else block
    return math.ceil(cin / block ** 2 / config.pin) * config.pin


def remap_block(config, cin, kernel, remap=None):
    """The block of the 1x1 remap a layer runs through: ``b`` (its channels spread
    over ``b x b`` pixels, stride ``b``), or 0 for none (docs/engine.md, "Kernels smaller
    than kmax, 1x1 and Gemm").

    Parameters
    ----------
    config : EngineConfig
    cin : int
    kernel : (int, int)
    remap : None, bool or int
        ``None`` decides: the ``kmax`` block where it needs fewer input tiles
        than the plain layout (whenever ``Cin > pin``), else none. ``False``
        (or 0, or 1: a block of one pixel is the plain layout): none; ``True``:
        the ``kmax`` block; an int ``2..kmax``: that block (the compiler tries
        each and keeps the fastest, ``fpgacnn.host.compiler``).

    Raises
    ------
    InputError
        A remap asked of a kernel other than 1x1, or a block outside ``1..kmax``.
    """
    is_1x1 = tuple(kernel) == (1, 1)
    if remap is None:
        if not is_1x1 or config.kmax == 1:
            return 0
        return config.kmax if remap_group(config, cin) < math.ceil(cin / config.pin) * config.pin \
            else 0
    block = config.kmax if remap is True else int(remap)
    if not 0 <= block <= config.kmax:
        raise InputError(f"a 1x1 remap block of {block} is outside 1..kmax ({config.kmax})")
    if block > 1 and not is_1x1:
        raise InputError(f"the 1x1 remap needs a 1x1 kernel, not {kernel[0]}x{kernel[1]}")
    return block if block > 1 else 0


_GEOMETRY_FIELDS = ("in_h", "in_w", "ci_tiles", "co_tiles", "out_h", "out_w", "stride",
                    "pad_top", "pad_left", "batch", "pool", "depthwise", "pixel_pairs")


def map_layer(config, x_shape, w_shape, *, stride=1, pads=(0, 0, 0, 0), pool=False, remap=None,
              depthwise=False, pixel_pairs=None, name="layer"):
    """How a convolution of the given shapes runs on the engine, checked against its limits.

    Parameters
    ----------
    config : fpgacnn.core.config.EngineConfig
    x_shape : (int, int, int, int)
        Input shape ``(N, Cin, H, W)``.
    w_shape : (int, int, int, int)
        Weight shape ``(Cout, Cin, KH, KW)``.
    stride, pads, pool, remap, pixel_pairs, name
        As for :func:`pack_layer`.
    depthwise : bool
        A depthwise run: ``w_shape`` is the dense ``(C, C, KH, KW)`` of a
        kernel that is zero off its diagonal (:func:`pack_weights`).

    Returns
    -------
    dict
        The geometry fields of the descriptor (``in_h``, ``in_w``, ``ci_tiles``,
        ``co_tiles``, ``out_h``, ``out_w``, ``stride``, ``pad_top``, ``pad_left``,
        ``batch``, ``pool``, ``depthwise``, ``pixel_pairs``), plus ``remap``
        (the remap's block, 0 for none: :func:`remap_block`) and ``macs``: the layer's
        real multiply-accumulates for the whole batch.

    Raises
    ------
    InputError
        Inconsistent shapes or bad stride / pads.
    MappingError
        The layer does not fit the engine; the message names the limit.
    """
    n, cin, h, wd = (int(v) for v in x_shape)
    cout, wcin, kh, kw = (int(v) for v in w_shape)
    if wcin != cin:
        raise InputError(f"{name}: input has {cin} channels, weights expect {wcin}")
    if min(n, cin, h, wd, cout, kh, kw) < 1:
        raise InputError(f"{name}: empty tensor (input {tuple(x_shape)}, weights {tuple(w_shape)})")
    kmax, pin, pout = config.kmax, config.pin, config.pout
    sy, sx = _pair(stride, "stride", name)
    pads = tuple(int(p) for p in pads)
    if len(pads) != 4 or min(pads) < 0:
        raise InputError(f"{name}: pads must be four non-negative integers "
                         f"(top, left, bottom, right), not {pads!r}")
    if kh > kmax or kw > kmax:
        raise MappingError(f"{name}: kernel {kh}x{kw} exceeds the engine's kmax {kmax}")
    out_h = (h + pads[0] + pads[2] - kh) // sy + 1
    out_w = (wd + pads[1] + pads[3] - kw) // sx + 1
    if out_h < 1 or out_w < 1:
        raise MappingError(f"{name}: the {kh}x{kw} kernel does not fit the padded "
                           f"{h}x{wd} input (no output)")
    macs = n * out_h * out_w * cout * (1 if depthwise else cin) * kh * kw
    # (a depthwise run pairs tile t with tile t: the 1x1 remap would mix them)
    block = 0 if depthwise else remap_block(config, cin, (kh, kw), remap)
    if block:
        # Output pixel (y, x) is the block of input pixels (b*y .. b*y+b-1, b*x ..):
        # unpadded, stride b; a block narrower than kmax leaves the window's last
        # taps on the next block's pixels (or past the image), times weight 0.
        cin = remap_group(config, cin, block)
        h, wd = block * out_h, block * out_w
        sy = sx = block
        pads = (0, 0, 0, 0)
    elif sy != sx:
        raise MappingError(f"{name}: stride {sy}x{sx} is not square; the engine has one stride")
    else:
        h += zero_point_rows(h, out_h, sy, pads[0])
    if pixel_pairs is None:
        # Two pixels a window wherever the engine takes them: never slower (the
        # same windows in half the issues; docs/engine.md, "Pixel pairs").
        pixel_pairs = sy <= engine_contract(config).pair_stride and not pool
    geo = dict(in_h=h, in_w=wd, ci_tiles=math.ceil(cin / pin), co_tiles=math.ceil(cout / pout),
               out_h=out_h, out_w=out_w, stride=sy, pad_top=pads[0], pad_left=pads[1], batch=n,
               pool=int(bool(pool)), depthwise=int(bool(depthwise)),
               pixel_pairs=int(bool(pixel_pairs)))
    # Everything else the engine cannot take is the contract's to say.
    violations = descriptor_violations(config, dict(_NEUTRAL_FIELDS, **geo))
    if violations:
        raise MappingError(f"{name}: {violations[0][1]}")
    geo.update(remap=block, macs=macs)
    return geo


def pack_layer(config, x, w, bias, x_zp, mult, shift, y_zp, *, clamp=(-128, 127), stride=1,
               pads=(0, 0, 0, 0), pool=False, load_weights=True, remap=None, pixel_pairs=None,
               name="layer"):
    """Pack one convolution layer run (descriptor + input stream bytes).

    The composition of :func:`map_layer` (the checks), :func:`layer_descriptor`,
    :func:`pack_weights` (the parameter and weight section, when
    ``load_weights``) and :func:`pack_pixels` (the images). A compiled
    program calls the parts itself: the weights once, the pixels per run.

    Parameters
    ----------
    config : fpgacnn.core.config.EngineConfig
    x : numpy.ndarray of int8, shape (N, Cin, H, W)
        The batch of input images.
    w : numpy.ndarray of int8, shape (Cout, Cin, KH, KW)
    bias : array_like of int, shape (Cout,), or None
        int32 bias at scale ``x_scale*w_scale[c]`` (not yet folded).
    x_zp, y_zp : int
        Input and output zero points (int8).
    mult, shift : array_like of int, shape (Cout,) or scalar
        Requantization multiplier (uint24) and right shift (0..63) per output
        channel, from :func:`fpgacnn.host.requant.requant_params`.
    clamp : (int, int)
        Output clamp ``(lo, hi)`` (a fused Relu raises ``lo`` to ``y_zp``).
    stride : int or (int, int)
    pads : (int, int, int, int)
        ``(top, left, bottom, right)``.
    pool : bool
        Fuse a 2x2 stride-2 max-pool (floor mode) on the output.
    load_weights : bool
        Stream the parameters and weights (else the engine keeps the previous
        ones, which must be this layer's).
    remap : None, bool or int
        Run a 1x1 layer through the remap, and its block; ``None`` decides
        (:func:`remap_block`).
    pixel_pairs : bool or None
        Run two adjacent output pixels a window issue (an engine with
        ``pixel_pairs``, a stride of at most its ``pair_stride``, no pool);
        ``None`` takes them wherever the engine can.
    name : str
        Layer name used in error messages.

    Returns
    -------
    desc : dict
        Descriptor values keyed by :data:`fpgacnn.core.descriptor.DESCRIPTOR_FIELDS` names.
    data : numpy.ndarray of uint8
        The input stream, a whole number of beats.

    Raises
    ------
    InputError
        An array has the wrong dtype or shape.
    MappingError
        The layer does not fit the engine; the message names the limit.
    """
    x = _int8_array(x, "input", name, 4)
    w = _int8_array(w, "weights", name, 4)
    x_zp = _scalar(x_zp, "x_zp", name, -128, 127)
    y_zp = _scalar(y_zp, "y_zp", name, -128, 127)
    lo = _scalar(clamp[0], "clamp_lo", name, -128, 127)
    hi = _scalar(clamp[1], "clamp_hi", name, -128, 127)
    if lo > hi:
        raise MappingError(f"{name}: clamp_lo {lo} is above clamp_hi {hi}")
    geo = map_layer(config, x.shape, w.shape, stride=stride, pads=pads, pool=pool,
                    remap=remap, pixel_pairs=pixel_pairs, name=name)
    params = _parameters(w, bias, x_zp, mult, shift, name)  # checked even when not streamed
    desc = layer_descriptor(geo, x_zp=x_zp, y_zp=y_zp, clamp=(lo, hi), load_weights=load_weights)
    pixels = pack_pixels(config, x, x_zp, w.shape, stride=stride, pads=pads, remap=geo["remap"],
                         name=name)
    if not load_weights:
        return desc, pixels
    return desc, np.concatenate([_weight_section(config, w, *params, geo["remap"]), pixels])


def layer_descriptor(geo, *, x_zp, y_zp, clamp, load_weights, load_params=False,
                     weight_base=0, param_base=0):
    """The descriptor of a layer run: :func:`map_layer`'s geometry and the layer's constants.

    ``weight_base``, ``param_base`` and ``load_params`` are the resident-weights
    fields (docs/engine.md). The values are not checked here (:func:`pack_layer`
    and the driver check them).
    """
    desc = {key: geo[key] for key in _GEOMETRY_FIELDS}
    desc.update(x_zp=int(x_zp), y_zp=int(y_zp), clamp_lo=int(clamp[0]), clamp_hi=int(clamp[1]),
                load_weights=int(bool(load_weights)), load_params=int(bool(load_params)),
                weight_base=int(weight_base), param_base=int(param_base))
    return desc


def _parameters(w, bias, x_zp, mult, shift, name):
    """The per-channel parameters, checked, with the input zero point folded into the bias."""
    cout = w.shape[0]
    bias = np.zeros(cout, np.int64) if bias is None else \
        _per_channel(bias, "bias", name, cout, -(1 << 31), (1 << 31) - 1)
    mult = _per_channel(mult, "mult", name, cout, 0, (1 << MULT_BITS) - 1)
    shift = _per_channel(shift, "shift", name, cout, 0, MAX_SHIFT)
    folded = bias - x_zp * w.astype(np.int64).sum(axis=(1, 2, 3))
    if folded.min() < -(1 << 31) or folded.max() >= 1 << 31:
        c = int(np.argmax((folded < -(1 << 31)) | (folded >= 1 << 31)))
        raise MappingError(f"{name}: folded bias b - x_zp*sum(w) of channel {c} "
                           f"({folded[c]}) does not fit int32")
    return folded, mult, shift


def pack_weights(config, w, bias, x_zp, mult, shift, *, remap=None, depthwise=False,
                 name="layer"):
    """The parameter and weight section of a layer run's input stream.

    It depends on the layer alone, not on its input, so a compiled program
    packs it once and streams it before the pixels of every run that loads
    weights (:func:`pack_layer` is ``pack_weights`` + :func:`pack_pixels`).

    Parameters
    ----------
    config : fpgacnn.core.config.EngineConfig
    w, bias, x_zp, mult, shift, remap, name
        As for :func:`pack_layer`.
    depthwise : bool
        A depthwise run (descriptor ``depthwise``): ``w`` is the dense
        ``(C, C, KH, KW)`` kernel, zero off its diagonal, and only the words of
        output tile ``t`` and input tile ``t`` are streamed.

    Returns
    -------
    numpy.ndarray of uint8
        Parameter records, then weight words, each section in whole beats.

    Raises
    ------
    InputError
        An array has the wrong dtype or shape.
    MappingError
        A kernel larger than ``kmax``, or a parameter outside the engine's range.
    """
    w = _int8_array(w, "weights", name, 4)
    x_zp = _scalar(x_zp, "x_zp", name, -128, 127)
    cout, cin, kh, kw = w.shape
    if kh > config.kmax or kw > config.kmax:
        raise MappingError(f"{name}: kernel {kh}x{kw} exceeds the engine's kmax {config.kmax}")
    block = 0 if depthwise else remap_block(config, cin, (kh, kw), remap)
    return _weight_section(config, w, *_parameters(w, bias, x_zp, mult, shift, name), block,
                           depthwise)


def _weight_section(config, w, folded, mult, shift, block, depthwise=False):
    """``block``: the 1x1 remap's (:func:`remap_block`), 0 for none."""
    kmax, pin, pout, beat = config.kmax, config.pin, config.pout, config.stream_bytes
    cout, cin, kh, kw = w.shape
    if block:
        # channel (ky*b + kx)*g + j of the 1x1 kernel -> tap (ky, kx) of channel j
        # (taps past the block: 0)
        g = remap_group(config, cin, block)
        wc = np.zeros((cout, block * block * g), np.int8)
        wc[:, :cin] = w[:, :, 0, 0]
        w = wc.reshape(cout, block, block, g).transpose(0, 3, 1, 2)
        cin, kh, kw = g, block, block
    ci_tiles, co_tiles = math.ceil(cin / pin), math.ceil(cout / pout)
    rec = np.zeros((co_tiles * pout, PARAM_RECORD_BYTES), np.uint8)
    values = {"bias": folded, "mult": mult, "shift": shift}
    for field, offset, size, _ in PARAM_RECORD_FIELDS:  # little endian, two's complement
        raw = values[field].astype("<i8").view(np.uint8).reshape(cout, 8)
        rec[:cout, offset:offset + size] = raw[:, :size]
    sections = [_pad_to_beat(rec[co * pout:(co + 1) * pout], beat) for co in range(co_tiles)]
    wk = np.zeros((co_tiles * pout, ci_tiles * pin, kmax, kmax), np.int8)
    wk[:cout, :cin, :kh, :kw] = w
    # word (co, ci): for lane: for ky: for kx: for p
    wk = wk.reshape(co_tiles, pout, ci_tiles, pin, kmax, kmax).transpose(0, 2, 1, 4, 5, 3)
    for co in range(co_tiles):
        for ci in ((co,) if depthwise else range(ci_tiles)):
            sections.append(_pad_to_beat(wk[co, ci].view(np.uint8), beat))
    return np.concatenate(sections)


def pack_pixels(config, x, x_zp, w_shape, *, stride=1, pads=(0, 0, 0, 0), remap=None,
                name="layer"):
    """The pixel section of a layer run's input stream: each image in whole beats.

    The layer (``w_shape``, ``stride``, ``pads``) is the one :func:`map_layer`
    accepted; it is not checked again here, so that a compiled program pays
    only for the layout of its input.

    Parameters
    ----------
    config : fpgacnn.core.config.EngineConfig
    x : numpy.ndarray of int8, shape (N, Cin, H, W)
    x_zp : int
        Input zero point (the padding of a remapped layer).
    w_shape : (int, int, int, int)
        The layer's weight shape ``(Cout, Cin, KH, KW)``.
    stride, pads, remap, name
        As for :func:`pack_layer`.

    Returns
    -------
    numpy.ndarray of uint8

    Raises
    ------
    InputError
        ``x`` is not a 4-D int8 array.
    """
    x = _int8_array(x, "input", name, 4)
    pin, beat = config.pin, config.stream_bytes
    n, cin, h, wd = x.shape
    kh, kw = int(w_shape[2]), int(w_shape[3])
    block = remap_block(config, cin, (kh, kw), remap)
    if block:
        # Pad and subsample on the host: the remapped layer is unpadded, stride b.
        sy, sx = _pair(stride, "stride", name)
        top, left, bottom, right = (int(p) for p in pads)
        oh = (h + top + bottom - kh) // sy + 1
        ow = (wd + left + right - kw) // sx + 1
        if any(pads):
            x = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)), constant_values=x_zp)
        b = block
        g = remap_group(config, cin, b)
        xc = np.zeros((n, b * b * g, oh, ow), np.int8)
        xc[:, :cin] = x[:, :, ::sy, ::sx][:, :, :oh, :ow]
        # channel (ky*b + kx)*g + j of pixel (y, x) -> channel j of pixel (b*y+ky, b*x+kx),
        # written as NHWC: (n, y, ky, x, kx, j)
        h, wd, lanes = oh * b, ow * b, math.ceil(g / pin) * pin
        xk = np.zeros((n, oh, b, ow, b, lanes), np.int8)
        xk[..., :g] = xc.reshape(n, b, b, g, oh, ow).transpose(0, 4, 1, 5, 2, 3)
    else:
        sy, _ = _pair(stride, "stride", name)
        top, _, bottom, _ = (int(p) for p in pads)
        oh = (h + top + bottom - kh) // sy + 1
        rows = zero_point_rows(h, oh, sy, top)
        lanes = math.ceil(cin / pin) * pin
        xk = np.zeros((n, h + rows, wd, lanes), np.int8)
        xk[:, :h, :, :cin] = x.transpose(0, 2, 3, 1)
        xk[:, h:, :, :cin] = x_zp  # the rows of zero_point_rows, if any
        h += rows
    size = h * wd * lanes
    padded = _beats(size, beat) * beat
    if padded == size:
        return np.ascontiguousarray(xk).view(np.uint8).reshape(-1)
    out = np.zeros((n, padded), np.uint8)
    out[:, :size] = xk.reshape(n, size).view(np.uint8)
    return out.reshape(-1)


def output_nbytes(config, desc):
    """Bytes of the output stream of the layer run ``desc`` (whole beats)."""
    return engine_contract(config).output_nbytes(desc)


def input_nbytes(config, desc):
    """Bytes of the input stream of the layer run ``desc`` (whole beats)."""
    return engine_contract(config).input_nbytes(desc)


def unpack_output(config, raw, desc, out_channels):
    """Read the output stream of a layer run back into int8 NCHW.

    Parameters
    ----------
    config : fpgacnn.core.config.EngineConfig
    raw : bytes or numpy.ndarray of uint8
        The whole output stream (``output_nbytes(config, desc)`` bytes).
    desc : dict
        The descriptor returned by :func:`pack_layer`.
    out_channels : int
        The layer's real output channels (the padding lanes are dropped).

    Returns
    -------
    numpy.ndarray of int8, shape (batch, out_channels, OH, OW)
        ``OH, OW`` are ``out_h, out_w``, halved (floor) when ``pool``.

    Raises
    ------
    InputError
        ``raw`` does not have the expected length.
    """
    raw = np.frombuffer(bytes(raw), np.uint8) if not isinstance(raw, np.ndarray) \
        else raw.astype(np.uint8, copy=False).ravel()
    expected = output_nbytes(config, desc)
    if raw.size != expected:
        raise InputError(f"output stream has {raw.size} bytes, expected {expected}")
    oh, ow = engine_contract(config).pooled_shape(desc)
    co_tiles, batch = int(desc["co_tiles"]), int(desc["batch"])
    if not 1 <= out_channels <= co_tiles * config.pout:
        raise InputError(f"out_channels {out_channels} does not fit {co_tiles} tiles of "
                         f"{config.pout}")
    per_image = expected // batch
    used = oh * ow * co_tiles * config.pout
    imgs = raw.reshape(batch, per_image)[:, :used].view(np.int8)
    return np.ascontiguousarray(
        imgs.reshape(batch, oh, ow, co_tiles * config.pout).transpose(0, 3, 1, 2)[:, :out_channels])


def _records(folded, mult, shift, count):
    """``count`` parameter records (8 bytes each, little endian) of the channels given, zeros past them."""
    rec = np.zeros((count, PARAM_RECORD_BYTES), np.uint8)
    values = {"bias": folded, "mult": mult, "shift": shift}
    n = len(folded)
    for field, offset, size, _ in PARAM_RECORD_FIELDS:  # two's complement
        raw = np.asarray(values[field]).astype("<i8").view(np.uint8).reshape(n, 8)
        rec[:n, offset:offset + size] = raw[:, :size]
    return rec


def pack_depthwise_words(config, w, bias, x_zp, mult, shift, *, name="block"):
    """The depthwise words of a fused block's stream (docs/engine.md, "Step 3").

    Word ``t`` (``ceil(C / pin)`` of them, each padded to a beat) holds input
    tile ``t``: the depthwise unit's weights, ``for p in range(pin): for ky: for
    kx:`` ``w[t*pin + p, 0, ky, kx]`` (``kmax x kmax`` taps, a smaller kernel
    top-left in zeros), then the ``pin`` channels' parameter records (folded
    bias ``b - x_zp * sum(w)``, mult, shift); channels past ``C`` are zeros.

    Parameters
    ----------
    config : fpgacnn.core.config.EngineConfig
    w : numpy.ndarray of int8, shape (C, 1, KH, KW)
        The depthwise kernel (ONNX ``group = C``).
    bias, x_zp, mult, shift, name
        As for :func:`pack_layer`, of the depthwise layer.

    Returns
    -------
    numpy.ndarray of uint8
    """
    w = _int8_array(w, "depthwise weights", name, 4)
    x_zp = _scalar(x_zp, "x_zp", name, -128, 127)
    c, one, kh, kw = w.shape
    if one != 1:
        raise InputError(f"{name}: a depthwise kernel is (C, 1, KH, KW), not {w.shape}")
    if kh > config.kmax or kw > config.kmax:
        raise MappingError(f"{name}: kernel {kh}x{kw} exceeds the engine's kmax {config.kmax}")
    folded, mult, shift = _parameters(w, bias, x_zp, mult, shift, name)
    pin, k = config.pin, config.kmax
    tiles = math.ceil(c / pin)
    taps = np.zeros((tiles * pin, k, k), np.int8)
    taps[:c, :kh, :kw] = w[:, 0]
    rec = _records(folded, mult, shift, tiles * pin)
    words = [np.concatenate([taps[t * pin:(t + 1) * pin].view(np.uint8).reshape(-1),
                             rec[t * pin:(t + 1) * pin].reshape(-1)]) for t in range(tiles)]
    return np.concatenate([_pad_to_beat(word, config.stream_bytes) for word in words])


def fused_block_descriptor(config, x_shape, dw_kernel, cout, *, x_zp, dw_y_zp,
                           dw_clamp=(-128, 127), y_zp, clamp=(-128, 127), stride=1,
                           pads=(0, 0, 0, 0), load_weights=True, load_params=False, dw_base=0,
                           weight_base=0, param_base=0, name="block"):
    """The descriptor of a fused depthwise + pointwise block run, from the shapes alone,
    checked against the engine's contract (docs/engine.md, "Step 3").

    The geometry half of :func:`pack_fused_block`, for the compiler, which packs
    the block's constants once (:func:`pack_fused_weights`) and each run's
    pixels on its own.

    Parameters
    ----------
    config : fpgacnn.core.config.EngineConfig
    x_shape : (int, int, int, int)
        ``(N, C, H, W)`` of the depthwise layer's input (of the run).
    dw_kernel : (int, int)
        The depthwise kernel ``(KH, KW)``.
    cout : int
        Output channels of the pointwise layer (of the run).
    x_zp, dw_y_zp, dw_clamp, y_zp, clamp
        The depthwise's input zero point, output zero point and clamp; the
        pointwise's output zero point and clamp.
    stride, pads
        The depthwise layer's (the pointwise is 1x1, stride 1, unpadded).
    load_weights, load_params, dw_base, weight_base, param_base
        As for :func:`pack_fused_block`.
    name : str
        Named in errors.

    Returns
    -------
    dict
        Every descriptor field of the engine's (``fused`` 1, ``pixel_pairs`` 1).

    Raises
    ------
    InputError
        Bad pads.
    MappingError
        The block does not fit the engine (the pair buffer's channels, ``kmax``,
        the stride, the depthwise memory, ...); the message names the limit.
    """
    if engine_contract(config).fused is None:
        raise MappingError(f"{name}: the engine was generated without fused_blocks")
    n, c, h, width = (int(d) for d in x_shape)
    tiles, _ = pair_buffer_run(config, c, name=name)
    kh, kw = (int(k) for k in dw_kernel)
    if kh > config.kmax or kw > config.kmax:
        raise MappingError(f"{name}: kernel {kh}x{kw} exceeds the engine's kmax {config.kmax}")
    sy, sx = _pair(stride, "stride", name)
    if sy != sx:
        raise MappingError(f"{name}: stride {sy}x{sx} is not square; the engine has one stride")
    pads = tuple(int(p) for p in pads)
    if len(pads) != 4 or min(pads) < 0:
        raise InputError(f"{name}: pads must be four non-negative integers "
                         f"(top, left, bottom, right), not {pads!r}")
    out_h = (h + pads[0] + pads[2] - kh) // sy + 1
    out_w = (width + pads[1] + pads[3] - kw) // sx + 1
    if out_h < 1 or out_w < 1:
        raise MappingError(f"{name}: the {kh}x{kw} kernel does not fit the padded "
                           f"{h}x{width} input (no output)")
    x_zp = _scalar(x_zp, "x_zp", name, -128, 127)
    dy_zp = _scalar(dw_y_zp, "dw y_zp", name, -128, 127)
    y_zp = _scalar(y_zp, "y_zp", name, -128, 127)
    dlo, dhi = (_scalar(v, "dw clamp", name, -128, 127) for v in dw_clamp)
    lo, hi = (_scalar(v, "clamp", name, -128, 127) for v in clamp)
    if lo > hi or dlo > dhi:
        raise MappingError(f"{name}: a clamp's lower bound is above its upper one")
    desc = dict(in_h=h + zero_point_rows(h, out_h, sy, pads[0]), in_w=width, ci_tiles=tiles,
                co_tiles=math.ceil(int(cout) / config.pout), out_h=out_h, out_w=out_w,
                stride=sy, pad_top=pads[0], pad_left=pads[1], batch=n, x_zp=x_zp, y_zp=y_zp,
                clamp_lo=lo, clamp_hi=hi, pool=0, load_weights=int(bool(load_weights)),
                load_params=int(bool(load_params) and not load_weights),
                weight_base=int(weight_base), depthwise=0, pixel_pairs=1,
                param_base=int(param_base), fused=1, dw_base=int(dw_base), dw_y_zp=dy_zp,
                dw_clamp_lo=dlo, dw_clamp_hi=dhi)
    violations = descriptor_violations(config, desc)
    if violations:
        raise MappingError(f"{name}: {violations[0][1]}")
    return desc


def pack_fused_weights(config, x_zp, dw, pw, *, name="block"):
    """The constants of a fused block run's stream with ``load_weights``: the pointwise
    parameters, the depthwise words (:func:`pack_depthwise_words`), the pointwise
    weights (the ``kmax`` block's remap layout, input zero point the depthwise's
    ``y_zp``), each section in whole beats.

    Parameters
    ----------
    config : fpgacnn.core.config.EngineConfig
    x_zp : int
        The depthwise layer's input zero point.
    dw, pw : mapping
        As for :func:`pack_fused_block`.
    name : str
        Named in errors.

    Returns
    -------
    data : numpy.ndarray of uint8
    params_nbytes : int
        Bytes of the pointwise parameters at its start (what ``load_params``
        alone streams).
    """
    wd_, wp = (_int8_array(d["w"], what, name, 4)
               for d, what in ((dw, "depthwise weights"), (pw, "pointwise weights")))
    c = wd_.shape[0]
    if wd_.shape[1] != 1 or wp.shape[1:] != (c, 1, 1):
        raise InputError(f"{name}: a block of {c} channels takes a ({c}, 1, KH, KW) depthwise "
                         f"and a (C', {c}, 1, 1) pointwise kernel, not {wd_.shape} and {wp.shape}")
    dy_zp = _scalar(dw["y_zp"], "dw y_zp", name, -128, 127)
    section = _weight_section(config, wp, *_parameters(wp, pw.get("bias"), dy_zp, pw["mult"],
                                                       pw["shift"], name), config.kmax)
    split = math.ceil(wp.shape[0] / config.pout) * engine_contract(config).param_beats \
        * config.stream_bytes
    words = pack_depthwise_words(config, wd_, dw.get("bias"), x_zp, dw["mult"], dw["shift"],
                                 name=name)
    return np.concatenate([section[:split], words, section[split:]]), split


def pack_fused_block(config, x, x_zp, dw, pw, *, stride=1, pads=(0, 0, 0, 0),
                     load_weights=True, load_params=False, dw_base=0, weight_base=0,
                     param_base=0, name="block"):
    """Pack a fused depthwise + pointwise block run (descriptor ``fused``) of an engine
    with ``fused_blocks`` (docs/engine.md, "Step 3"):
    :func:`fused_block_descriptor`, :func:`pack_fused_weights` and the pixels.

    Parameters
    ----------
    config : fpgacnn.core.config.EngineConfig
    x : numpy.ndarray of int8, shape (N, C, H, W)
    x_zp : int
        The depthwise layer's input zero point.
    dw : mapping
        The depthwise layer: ``w`` (``(C, 1, KH, KW)`` int8), ``bias``, ``mult``,
        ``shift``, ``y_zp`` and optionally ``clamp`` (``(lo, hi)``).
    pw : mapping
        The pointwise layer after it: ``w`` (``(C', C, 1, 1)`` int8), ``bias``,
        ``mult``, ``shift``, ``y_zp``, ``clamp``; its input zero point is the
        depthwise's ``y_zp``.
    stride, pads
        The depthwise layer's (the pointwise is 1x1, stride 1, unpadded).
    load_weights : bool
        Stream the pointwise parameters, the depthwise words and the pointwise
        weights (else they are resident from an earlier run of the block).
    load_params : bool
        Without ``load_weights``: stream the pointwise parameters alone (the
        depthwise words' records are resident with their weights).
    dw_base, weight_base, param_base : int
        Where the block's depthwise words, pointwise weights and parameters are.

    Returns
    -------
    desc : dict
        Every descriptor field of the engine's (``fused`` 1, ``pixel_pairs`` 1).
    data : numpy.ndarray of uint8
        Pointwise parameters, depthwise words, pointwise weights (with
        ``load_weights``), then the pixels: :meth:`~fpgacnn.core.contract.
        EngineContract.input_nbytes` bytes.

    Raises
    ------
    InputError
        Inconsistent shapes or bad arguments.
    MappingError
        The block does not fit the engine; the message names the limit.
    """
    x = _int8_array(x, "input", name, 4)
    wd_, wp = (_int8_array(d["w"], what, name, 4)
               for d, what in ((dw, "depthwise weights"), (pw, "pointwise weights")))
    n, c, h, width = x.shape
    if wd_.shape[:2] != (c, 1) or wp.shape[1:] != (c, 1, 1):
        raise InputError(f"{name}: a block of {c} channels takes a ({c}, 1, KH, KW) depthwise "
                         f"and a (C', {c}, 1, 1) pointwise kernel, not {wd_.shape} and {wp.shape}")
    desc = fused_block_descriptor(
        config, x.shape, wd_.shape[2:], wp.shape[0], x_zp=x_zp, dw_y_zp=dw["y_zp"],
        dw_clamp=dw.get("clamp", (-128, 127)), y_zp=pw["y_zp"], clamp=pw.get("clamp", (-128, 127)),
        stride=stride, pads=pads, load_weights=load_weights, load_params=load_params,
        dw_base=dw_base, weight_base=weight_base, param_base=param_base, name=name)
    pixels = pack_pixels(config, x, desc["x_zp"], (c, c, *wd_.shape[2:]), stride=stride,
                         pads=pads, remap=False, name=name)
    if load_weights:
        constants, _ = pack_fused_weights(config, desc["x_zp"], dw, pw, name=name)
        return desc, np.concatenate([constants, pixels])
    if desc["load_params"]:
        constants, split = pack_fused_weights(config, desc["x_zp"], dw, pw, name=name)
        return desc, np.concatenate([constants[:split], pixels])
    return desc, pixels
