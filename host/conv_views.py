"""Every convolution as dense convolutions the engine runs: views of a layer.

The engine runs one kind of convolution: dense (group 1), no dilation, a
kernel of at most ``kmax x kmax``, one stride. A layer of any other shape is
presented to it as one or more :class:`ConvView`, each a dense convolution
with its own weights and a gather that makes its input from the layer's
input; the views' outputs are output-channel ranges of the layer's output.
Every view computes exactly the layer's integer semantics
(docs/semantics.md): the only changes are where zero weights sit and which
input pixels are streamed, and a padded tap still reads ``x_zp``.

- **Grouped and depthwise** (:func:`grouped_views`): ``k`` consecutive groups
  form one view, a dense convolution over their input channels whose weights
  are block-diagonal (zero between groups); the compiler picks ``k`` with the
  cycle model. A depthwise layer's views may also be *depthwise runs*
  (``ConvView.depthwise``, :func:`depthwise_sizes`): the engine pairs each
  output tile with its own input tile, one run for many channels. Where the
  views as they are cannot run (a stride or a top/left pad outside the
  descriptor's range, one group's input tiles past ``max_ci_tiles``), each
  view's taps fold into channels (``grouped_views(..., fold=True)``), as a
  dense Conv's do.
- **Dilated**, when the dilated span fits ``kmax``: the kernel with zeros
  between its taps (:func:`dense_view`).
- **Pixel rows** (:func:`rows_view`): a 1x1, stride-1, unpadded convolution
  computes each pixel alone, so its ``H x W`` pixels may run as rows of any
  width that divides ``H * W`` (the same bytes in the arena's NHWC layout):
  DS-CNN's 25 x 5 maps as 5 rows of 25, where pixel pairs waste less of a
  row's last issue. The compiler picks the width with the cycle model.
- **Space to depth** (:func:`space_to_depth_view`): a strided convolution on
  the network's own input as a stride-1 convolution over ``C * sy * sx``
  channels of ``sy x sx`` blocks of pixels, a kernel of about ``k / s`` taps
  and pads of whole blocks; the blocks are an :class:`Im2Col` whose kernel is
  its stride, so the host writes them with the input as any input fold. The
  compiler keeps it where the cycle model predicts fewer cycles.
- **Kernels larger than kmax, non-square strides, dilations that do not fit**:
  the taps folded into channels (:class:`Im2Col`): a 1x1 convolution over
  ``Cin * KH * KW`` channels at the output's resolution, which the engine
  runs through its 1x1 remap.

The gathers are host work today (numpy on the layer's input); the engine's
own address generation takes them over with the network program (issue 16).
"""

import dataclasses
from dataclasses import dataclass
import math

import numpy as np

from ..core.contract import engine_contract

__all__ = ["ChannelSlice", "ConvView", "Im2Col", "PixelRows", "compose", "dense_view",
           "depthwise_sizes", "fits", "folds_taps", "grouped_views", "pack_sizes", "row_widths",
           "rows_view", "space_to_depth_phases", "space_to_depth_view"]


@dataclass(frozen=True)
class ChannelSlice:
    """Gather: input channels ``[c0, c1)`` of an NCHW batch."""

    c0: int
    c1: int

    def __call__(self, x):
        return x[:, self.c0:self.c1]


@dataclass(frozen=True)
class PixelRows:
    """Gather: an NCHW batch's ``H x W`` pixels, in raster order, as ``rows`` rows of
    ``width`` (``rows * width == H * W``)."""

    rows: int
    width: int

    def __call__(self, x):
        return x.reshape(*x.shape[:2], self.rows, self.width)


@dataclass(frozen=True)
class Im2Col:
    """Gather: every tap of a ``KH x KW`` kernel as its own channel.

    ``y[n, c * KH * KW + p * KW + q, i, j] = x_padded[n, c, i * sy + p * dy, j * sx + q * dx]``,
    the padding holding ``x_zp``: a 1x1 convolution with the weights reshaped
    to ``(Cout, Cin * KH * KW, 1, 1)`` on ``y`` is the convolution on ``x``.
    """

    kernel: tuple
    stride: tuple
    pads: tuple
    dilation: tuple
    x_zp: int
    out_hw: tuple

    def __call__(self, x):
        (kh, kw), (sy, sx), (dy, dx) = self.kernel, self.stride, self.dilation
        top, left, bottom, right = self.pads
        oh, ow = self.out_hw
        n, c, h, w = x.shape
        # x's dtype (int8; the program image gathers element positions with it).
        padded = np.full((n, c, h + top + bottom, w + left + right), self.x_zp, x.dtype)
        padded[:, :, top:top + h, left:left + w] = x
        cols = np.empty((n, c, kh, kw, oh, ow), x.dtype)
        for p in range(kh):
            for q in range(kw):
                cols[:, :, p, q] = padded[:, :, p * dy:p * dy + (oh - 1) * sy + 1:sy,
                                          q * dx:q * dx + (ow - 1) * sx + 1:sx]
        return cols.reshape(n, c * kh * kw, oh, ow)


@dataclass(frozen=True)
class _Compose:
    """Gather: ``inner(outer(x))``; the engine run sees ``inner``'s columns."""

    outer: object
    inner: object

    @property
    def cols(self):
        return self.inner.cols

    def __call__(self, x):
        return self.inner(self.outer(x))


def compose(outer, inner):
    """The gather ``inner(outer(x))`` (``outer`` None: ``inner`` itself)."""
    return inner if outer is None else _Compose(outer, inner)


@dataclass(frozen=True, eq=False)
class ConvView:
    """A dense convolution that computes output channels ``channels`` of a layer.

    It has the attributes the compiler reads from a
    :class:`~fpgacnn.host.layers.Conv` (``weight``, ``bias``, ``mult``,
    ``shift``, zero points, shapes, ``stride``, ``pads``), plus ``gather``:
    the layer's input -> the view's input (None: the layer's input itself).
    """

    name: str
    weight: np.ndarray
    bias: np.ndarray
    mult: np.ndarray
    shift: np.ndarray
    x_zero_point: int
    y_zero_point: int
    input_shape: tuple
    output_shape: tuple
    stride: tuple
    pads: tuple
    channels: tuple
    gather: object = None
    how: str = "dense"
    #: A depthwise run (descriptor ``depthwise``): ``weight`` is zero off its
    #: diagonal and the engine pairs output tile ``t`` with input tile ``t``.
    depthwise: bool = False
    #: ``(rows, width)``: the view's output pixels are the layer's in raster order
    #: as ``rows`` rows of ``width`` (:func:`rows_view`); None: the layer's own.
    rows: tuple = None

    @property
    def kernel(self):
        return tuple(self.weight.shape[2:])

    def describe(self):
        """What the view is, for messages: the layer's channels it computes and how."""
        cout, cin, kh, kw = self.weight.shape
        what = {"dense": f"{cin} input channels", "dilated": f"a {kh}x{kw} kernel with zeros "
                f"between the dilated taps", "im2col": f"its taps folded into {cin} channels",
                "rows": f"its pixels as rows of {self.input_shape[2]}",
                "s2d": f"{cin} channels of pixel blocks (space to depth), a {kh}x{kw} "
                       f"kernel"}
        return f"output channels {self.channels[0]}..{self.channels[1] - 1} as a dense " \
               f"convolution with {what[self.how]}"


def fits(kernel, stride, config):
    """Whether the engine runs a ``kernel`` with ``stride`` as it is."""
    return max(kernel) <= config.kmax and stride[0] == stride[1]


def folds_taps(layer, config):
    """Whether :func:`dense_view` folds ``layer``'s taps into channels unasked: its
    kernel (or dilated span) is over ``kmax`` or its stride is not square."""
    (kh, kw), (dy, dx) = layer.weight.shape[2:], layer.dilation
    return not fits(((kh - 1) * dy + 1, (kw - 1) * dx + 1), layer.stride, config)


def dense_view(layer, config, *, weight=None, in_channels=None, out_channels=None, fold=False):
    """One view of a dense part of ``layer``: output channels ``out_channels``
    from input channels ``in_channels`` with ``weight`` (default: the whole,
    group-1 layer).

    A dilated kernel whose span fits ``kmax`` gets zeros between its taps; a
    kernel (or dilated span) larger than ``kmax``, or a non-square stride, or
    ``fold``, folds the taps into channels (:class:`Im2Col`).
    """
    weight = layer.weight if weight is None else weight
    c0, c1 = out_channels or (0, weight.shape[0])
    ci0, ci1 = in_channels or (0, layer.input_shape[0])
    _, h, w = layer.input_shape
    _, oh, ow = layer.output_shape
    kh, kw = weight.shape[2:]
    dy, dx = layer.dilation
    span = ((kh - 1) * dy + 1, (kw - 1) * dx + 1)
    gather = None if (ci0, ci1) == (0, layer.input_shape[0]) else ChannelSlice(ci0, ci1)
    common = dict(name=layer.name, bias=layer.bias[c0:c1], mult=layer.mult[c0:c1],
                  shift=layer.shift[c0:c1], x_zero_point=layer.x_zero_point,
                  y_zero_point=layer.y_zero_point, channels=(c0, c1))
    if not fold and not folds_taps(layer, config):
        if span != (kh, kw):  # zeros between the taps
            spread = np.zeros((*weight.shape[:2], *span), np.int8)
            spread[:, :, ::dy, ::dx] = weight
            weight, how = spread, "dilated"
        else:
            how = "dense"
        return ConvView(weight=weight, input_shape=(ci1 - ci0, h, w), output_shape=(c1 - c0, oh, ow),
                        stride=layer.stride, pads=layer.pads, gather=gather, how=how, **common)
    im2col = Im2Col((kh, kw), layer.stride, layer.pads, layer.dilation, layer.x_zero_point,
                    (oh, ow))
    taps = (ci1 - ci0) * kh * kw
    return ConvView(weight=np.ascontiguousarray(weight.reshape(weight.shape[0], taps, 1, 1)),
                    input_shape=(taps, oh, ow), output_shape=(c1 - c0, oh, ow), stride=(1, 1),
                    pads=(0, 0, 0, 0), gather=compose(gather, im2col), how="im2col", **common)


def _s2d_axis(n, k, s, before, out, phase):
    """One axis of :func:`space_to_depth_view`: ``(k2, pad_before, pad_after, blocks,
    host_before, host_after, shift)`` of a kernel ``k`` with stride ``s`` and pad
    ``before`` over ``n`` pixels making ``out``, when the host writes ``phase``
    padding pixels before the input's own (``phase <= before``).

    Output ``i``'s tap ``p`` reads input pixel ``i * s + p - before``, which sits in
    block ``i + (p + shift) // s - pad_before`` at offset ``(p + shift) % s``, with
    ``shift = s * pad_before + phase - before`` (the engine pads whole blocks:
    ``pad_before = ceil((before - phase) / s)``). So the blocks take a stride-1
    kernel of ``k2 = (k - 1 + shift) // s + 1`` taps; the last block an output
    reads is ``out - 1 + k2 - 1 - pad_before``: the host writes the blocks up to it
    that hold input pixels (padding the last with ``x_zp``), the engine pads the
    rest (``pad_after``)."""
    pad_before = -(-(before - phase) // s)
    shift = s * pad_before + phase - before
    k2 = (k - 1 + shift) // s + 1
    needed = out - 1 + k2 - pad_before
    blocks = min(-(-(n + phase) // s), needed)
    pad_after = needed - blocks
    host_after = max(0, s * blocks - phase - n)
    return k2, pad_before, pad_after, blocks, phase, host_after, shift


def space_to_depth_phases(layer):
    """The host's padding before the input's own pixels (rows, columns) that
    :func:`space_to_depth_view` may take for ``layer``: none (the host writes the
    input's pixels alone, the engine pads whole blocks: the fewest bytes), and the
    layer's pads modulo its stride (the blocks start at a padded pixel: the
    smallest kernel). One where both are the same."""
    (sy, sx), (top, left) = layer.stride, layer.pads[:2]
    return sorted({(0, 0), (top % sy, left % sx)})


def space_to_depth_view(layer, phase=(0, 0)):
    """``layer`` (a :class:`~fpgacnn.host.layers.Conv` on the network's input,
    stride ``(sy, sx)``) as a stride-1 convolution on its input's ``sy x sx``
    blocks of pixels (space to depth): the same output, bit for bit.

    The view's input is :class:`Im2Col` with kernel and stride ``(sy, sx)`` of the
    input padded by ``phase`` pixels (``x_zp``) before (:func:`space_to_depth_phases`)
    and as many after as the last block needs: ``C * sy * sx`` channels, channel
    ``c * sy * sx + ry * sx + rx`` of block ``(u, v)`` holding input pixel
    ``(sy * u + ry - phase[0], sx * v + rx - phase[1])``. Its weights are the
    layer's taps at their block offsets, zeros where a block tap falls outside the
    layer's kernel; its pads are whole blocks, asymmetric
    (``_s2d_axis`` derives them).

    Raises
    ------
    ValueError
        ``phase`` is more padding than the layer has, or an output reads padding alone
        on an axis (no block of input pixels to write).
    """
    cout, cin, kh, kw = layer.weight.shape
    _, h, w = layer.input_shape
    _, oh, ow = layer.output_shape
    (sy, sx), (top, left, _, _) = layer.stride, layer.pads
    if not (0 <= phase[0] <= top and 0 <= phase[1] <= left):
        raise ValueError(f"layer {layer.name!r}: the host pads {phase} before the input, "
                         f"the layer only ({top}, {left})")
    ky, ptop, pbottom, hz, hy0, hy1, dy = _s2d_axis(h, kh, sy, top, oh, phase[0])
    kx, pleft, pright, wz, hx0, hx1, dx = _s2d_axis(w, kw, sx, left, ow, phase[1])
    if hz < 1 or wz < 1:
        raise ValueError(f"layer {layer.name!r}: its outputs read no input pixel in blocks "
                         f"of {sy}x{sx}")
    weight = np.zeros((cout, cin, sy, sx, ky, kx), np.int8)
    for p in range(kh):
        a, ry = divmod(p + dy, sy)
        for q in range(kw):
            b, rx = divmod(q + dx, sx)
            weight[:, :, ry, rx, a, b] = layer.weight[:, :, p, q]
    blocks = Im2Col((sy, sx), (sy, sx), (hy0, hx0, hy1, hx1), (1, 1), layer.x_zero_point,
                    (hz, wz))
    return ConvView(name=layer.name, weight=weight.reshape(cout, cin * sy * sx, ky, kx),
                    bias=layer.bias, mult=layer.mult, shift=layer.shift,
                    x_zero_point=layer.x_zero_point, y_zero_point=layer.y_zero_point,
                    input_shape=(cin * sy * sx, hz, wz), output_shape=(cout, oh, ow),
                    stride=(1, 1), pads=(ptop, pleft, pbottom, pright), channels=(0, cout),
                    gather=blocks, how="s2d")


def row_widths(layer, config):
    """The row widths a 1x1, stride-1, unpadded convolution ``layer`` may run its
    pixels in besides its own (:func:`rows_view`): every divisor of ``H * W`` up to
    the engine's ``max_width`` (wider rows are split into strips anyway), none for
    any other layer."""
    _, h, w = layer.input_shape
    if (tuple(layer.weight.shape[2:]) != (1, 1) or tuple(layer.stride) != (1, 1)
            or any(layer.pads) or getattr(layer, "group", 1) != 1):
        return []
    pixels = h * w
    return [d for d in range(1, min(pixels, config.max_width) + 1)
            if pixels % d == 0 and d != w]


def rows_view(layer, width):
    """The 1x1, stride-1, unpadded ``layer`` with its ``H x W`` pixels as rows of
    ``width``: the same weights, the input gathered by :class:`PixelRows`, the
    output the layer's pixels in the same order (``ConvView.rows``)."""
    cout, cin = layer.weight.shape[:2]
    _, h, w = layer.input_shape
    if (h * w) % width:
        raise ValueError(f"layer {layer.name!r}: {h}x{w} pixels are not rows of {width}")
    rows = h * w // width
    return ConvView(name=layer.name, weight=layer.weight, bias=layer.bias, mult=layer.mult,
                    shift=layer.shift, x_zero_point=layer.x_zero_point,
                    y_zero_point=layer.y_zero_point, input_shape=(cin, rows, width),
                    output_shape=(cout, rows, width), stride=(1, 1), pads=(0, 0, 0, 0),
                    channels=(0, cout), gather=PixelRows(rows, width), how="rows",
                    rows=(rows, width))


def grouped_views(layer, config, per_view, *, depthwise=False, fold=False):
    """Views of a grouped (or depthwise) ``layer``, ``per_view`` consecutive groups each:
    a dense convolution over their input channels with block-diagonal weights
    (``depthwise``: one channel per group, run as depthwise runs; None when a
    view's kernel does not fit the window as it is, or with ``fold``).

    ``fold``: every view's taps folded into channels (:class:`Im2Col` of its own
    groups' input channels, the weights block-diagonal over the folded taps), as
    :func:`dense_view` folds a kernel over ``kmax`` or a stride that is not
    square anyway. ``per_view`` equal to the groups folds the whole layer: one
    1x1 convolution over ``Cin * KH * KW`` channels."""
    cout, cin_g, kh, kw = layer.weight.shape
    groups = layer.group
    cout_g = cout // groups
    views = []
    for g0 in range(0, groups, per_view):
        k = min(per_view, groups - g0)
        weight = np.zeros((k * cout_g, k * cin_g, kh, kw), np.int8)
        for t in range(k):
            weight[t * cout_g:(t + 1) * cout_g, t * cin_g:(t + 1) * cin_g] = \
                layer.weight[(g0 + t) * cout_g:(g0 + t + 1) * cout_g]
        view = dense_view(layer, config, weight=weight,
                          in_channels=(g0 * cin_g, (g0 + k) * cin_g),
                          out_channels=(g0 * cout_g, (g0 + k) * cout_g), fold=fold)
        if depthwise:
            if view.how == "im2col" or cin_g != 1 or cout_g != 1:
                return None
            view = dataclasses.replace(view, depthwise=True)
        views.append(view)
    return views


def depthwise_sizes(layer, config):
    """Channels per depthwise view: the most one run takes (its input and output
    tiles, the parameter buffer), and the multiples of ``pin`` below it by powers
    of two (the cycle model picks; a narrower view fits a wider row)."""
    c = engine_contract(config)
    most = min(layer.group, c.max_ci_tiles * config.pin, c.max_co_tiles * config.pout,
               c.weights.words * config.pout)
    sizes, k = set(), most
    while k >= config.pin:
        sizes.add(k - k % config.pin if k > config.pin else config.pin)
        k //= 2
    return sorted(sizes)


def pack_sizes(layer, config, *, fold=False):
    """Candidate groups per view of a grouped ``layer``: the powers of two, and the
    counts that fill the input lanes or the output lanes exactly, up to all groups.

    ``fold``: of views that fold their taps into channels (:func:`grouped_views`),
    whose groups take ``Cin / group * KH * KW`` input channels each, also the
    counts that fill the input lanes of the 1x1 remap (``kmax * kmax`` taps of
    ``pin`` lanes), through which the engine runs the folded 1x1 convolution."""
    cout, cin_g, kh, kw = layer.weight.shape
    cout_g = cout // layer.group
    sizes = {1, layer.group}
    sizes |= {2 ** i for i in range(int(math.log2(layer.group)) + 1)}
    fills = [(config.pin, cin_g), (config.pout, cout_g)]
    if fold:
        fills += [(config.pin, cin_g * kh * kw), (config.pin * config.kmax ** 2, cin_g * kh * kw)]
    for lanes, per_group in fills:
        for m in (1, 2, 4):
            sizes.add(max(1, m * lanes // per_group))
    return sorted(s for s in sizes if 1 <= s <= layer.group)
