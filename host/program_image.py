"""The network program: a compiled model as one relocatable memory image (issue 16).

docs/program.md is the design; this module is its format. :func:`build_image`
turns a compiled :class:`~fpgacnn.host.compiler.Program` into a
:class:`ProgramImage`: one byte buffer holding

- a **header** (magic, format version, the engine configuration the program
  was compiled for, the batch, where every region starts);
- a **tensor table**: where each tensor of the network lives in the arena
  (and the *pixel-row views* of a tensor that runs read or write as rows
  of another width: entries at the tensor's own bytes, named
  ``<tensor>/rows<width>``, :func:`fpgacnn.host.conv_views.rows_view`);
- the **records**, one per engine run or host layer, in program order;
- the **constants**: each channel group's parameters and weights, once, in
  the engine's stream format;
- the **arena**: every tensor, the network's input and output included, in
  the engine's own layout (below), at offsets assigned by liveness (a
  tensor's bytes are reused once its last reader has run).

Every word of the header, the tensor table and the records is a
little-endian signed 32-bit integer, and every address is a byte offset
from the image's start, so the image can be placed anywhere.

**Activation layout.** A tensor of ``(C, H, W)`` per image (a flat ``(C,)``
tensor is ``(C, 1, 1)``) is stored per image as NHWC, each pixel
``cp = ceil(C / L) * L`` bytes with ``L = lcm(pin, pout)`` (the network's
input and its folds, which the host writes, ``ceil(C / pin) * pin`` where
only engine runs read them: :mod:`fpgacnn.core.arena`); an image takes
``image_stride`` bytes (rounded up to :func:`alignment`), the batch's images
follow each other. The padding channels are never read as data: a run's
padding lanes meet zero weights.

**Engine records** are what the engine's address generation and sequencer
read (docs/program.md): the run's descriptor (stored as every field some engine
has, :data:`~fpgacnn.core.descriptor.ALL_DESCRIPTOR_FIELDS` order, the fused
block's five 0 on an engine without it; read back as the fields of the image's
engine, ``EngineContract.descriptor_fields``),
its constants (offset and bytes, and the parameter bytes a warm run streams
alone), a **source pattern** (how the pixel section of its input stream is
read from a tensor: a channel range, the taps folded into channels, a column
strip or a column of the zero point, or a batch of feature vectors laid out
as an image) and a **destination pattern** (where the output stream's pixels
go: a channel range and a column range, or the feature vectors of a batch
range). Together with the descriptor's geometry these are exactly the
gathers and scatters the compiler makes (:mod:`fpgacnn.host.compiler`,
:mod:`fpgacnn.host.conv_views`), written down as numbers:
:func:`source_gather` and :func:`dest_scatter` turn them back into those
functions, and the tests require the stream made from a record to equal the
compiled run's stream byte for byte.

**Host records** name a layer the engine does not run yet (an AveragePool
whose windows divide by different counts, Concat, Softmax, ...); the host runs it from the arena
with the reference semantics (:mod:`fpgacnn.host.program_runner`).
**Vector records** are host records that the program engine's vector unit
runs from the arena by itself (a residual Add, a max or average pool, a
copy: :mod:`fpgacnn.host.vector_mapping`): they name the operand and output
tensors and carry the layer's integer parameters; a board without the unit
runs them as host records.

**Input folds** come first: a convolution whose taps fold into channels
(:class:`~fpgacnn.host.conv_views.Im2Col`: kernels past ``kmax``, such as
DS-CNN's 10x4 first layer, non-square strides) and that reads the network's
input reads a tensor of its own, the input's folded taps, which the host
writes with the input (:meth:`ProgramImage.write_input`): a transform of the
network's own input, which the host writes anyway, so the engine reads it
as a plain 1x1 strip and no host work falls between layers. A strided first
layer run as space to depth (:func:`~fpgacnn.host.conv_views.space_to_depth_view`)
reads its input's pixel blocks the same way: an ``Im2Col`` whose kernel is its
stride, which the run reads as a strip under its own window and pads.
"""

from dataclasses import astuple, dataclass, fields, replace
from typing import ClassVar
import math

import numpy as np

from ..core.arena import input_pixel_bytes, pixel_bytes
from ..core.config import EngineConfig
from ..core.contract import engine_contract
from ..core.descriptor import ALL_DESCRIPTOR_FIELDS, complete_descriptor
from ..core.errors import InputError, MappingError
from . import conv_views
from .compiler import (BatchImage, BatchTranspose, ChannelColumns, ColumnSlice, EngineStep,
                       PixelPacking, ZeroPointColumn, refuse_warm_weight_loads)
from .vector_mapping import VECTOR_ADD, vector_params

__all__ = ["ALIGN", "FORMAT_MAGIC", "FORMAT_VERSION", "DestPattern", "EngineRecord",
           "FoldRecord", "Header", "HostRecord", "ProgramImage", "SourcePattern",
           "TensorPlace", "VectorRecord", "alignment", "build_image", "dest_scatter",
           "fusable_add", "pixel_packing", "source_gather", "tensor_names"]

#: ``b"FCNP"``: the first word of every program image.
FORMAT_MAGIC = int.from_bytes(b"FCNP", "little")
#: The image format's version (major, minor); a reader refuses another major.
#: 1.1: vector records; 1.2: input folds; 2.0: the header's engine parameters gain
#: ``writer_words`` (the words after it move); 3.0: and ``spare_bank``; 4.0: and
#: ``pixel_pairs``, and a record's descriptor the field ``pixel_pairs``; 4.1: a vector
#: record's ``fusable`` (an Add the engine records before it may do); 5.0: a record's
#: layout ``remap`` is the 1x1 remap's block (2..kmax, 0 for none), not 0/1, and the
#: tensor table holds pixel-row views (``<tensor>/rows<w>``); 6.0: the header's engine
#: parameters gain ``param_words``, and a record's descriptor the field ``param_base``;
#: 7.0: a vector record's ``pixels`` is its window (``kernel_rows kernel_cols
#: stride_rows stride_cols pad_top pad_left``) and ``maximum`` (max pools); 8.0: the
#: header's engine parameters gain ``fused_blocks``, and a record's descriptor the
#: fused block's fields (``fused dw_base dw_y_zp dw_clamp_lo dw_clamp_hi``, 0 on an
#: engine without it: the descriptor is every field some engine has); 9.0: the
#: header's engine parameters gain ``depthwise_pixels`` (the fused block's depthwise
#: unit's rate, which the cycle model of a fused run reads; the words after it move).
FORMAT_VERSION = (9, 0)
#: Alignment in bytes of every region and of every tensor image (a memory burst); an
#: engine whose words (``pin`` or ``pout`` bytes) do not divide it aligns to the
#: least common multiple (:func:`alignment`), so that every address is a whole word.
ALIGN = 64

#: Record kinds (a record's first word).
RECORD_ENGINE, RECORD_HOST, RECORD_VECTOR, RECORD_FOLD = 1, 2, 3, 4
#: Source pattern kinds: pixels of a column strip; one column of the zero point
#: (a strip wholly in the padding); feature vectors as the pixels of an image (Gemm).
SOURCE_STRIP, SOURCE_ZERO_COLUMN, SOURCE_BATCH = 0, 1, 2
#: Destination pattern kinds: channels x columns of a tensor; feature vectors of a batch range.
DEST_COLUMNS, DEST_BATCH = 0, 1


def _words(record):
    return [int(v) for v in astuple(record)]


class _Words:
    """A frozen dataclass of int32 words, in field order."""

    @classmethod
    def nwords(cls):
        return len(fields(cls))

    @classmethod
    def from_words(cls, words):
        return cls(*(int(w) for w in words[:cls.nwords()]))


@dataclass(frozen=True)
class TensorPlace(_Words):
    """Where one tensor lives: ``batch`` images of ``(channels, height, width)``
    (``flat``: a ``(channels,)`` tensor) from byte ``offset`` of the image."""

    offset: int
    channels: int
    height: int
    width: int
    cp: int
    image_stride: int
    batch: int
    flat: int

    @property
    def nbytes(self):
        return self.batch * self.image_stride

    def nhwc(self, image):
        """An int8 ``(batch, height, width, cp)`` view of the tensor in ``image`` (uint8)."""
        return np.ndarray((self.batch, self.height, self.width, self.cp), np.int8,
                          buffer=image, offset=self.offset,
                          strides=(self.image_stride, self.width * self.cp, self.cp, 1))

    def view(self, image):
        """The tensor as the layers see it, a view into ``image``: ``(N, C, H, W)``
        or, flat, ``(N, C)``."""
        t = self.nhwc(image)[..., :self.channels]
        return t[:, 0, 0, :] if self.flat else t.transpose(0, 3, 1, 2)


@dataclass(frozen=True)
class SourcePattern(_Words):
    """How a run's pixels are read: from the tensor at ``tensor`` (its index in
    the tensor table), channels ``[c0, c1)``; ``fold``: then the taps of a
    ``kh x kw`` kernel (stride, dilation, pads, output size) folded into channels
    (:class:`~fpgacnn.host.conv_views.Im2Col`); then, by ``kind``, columns
    ``[a, b)`` (strip), one column of ``x_zp`` (zero column), or the images
    ``[a, b)`` of a flat tensor as a ``rows x cols`` image (batch). The run's
    own layout (kernel, stride, pads, remap) then packs them
    (:class:`PixelLayout`)."""

    kind: int
    tensor: int
    c0: int
    c1: int
    fold: int
    fold_kh: int
    fold_kw: int
    fold_sy: int
    fold_sx: int
    fold_dy: int
    fold_dx: int
    fold_top: int
    fold_left: int
    fold_bottom: int
    fold_right: int
    fold_oh: int
    fold_ow: int
    a: int
    b: int
    rows: int
    cols: int


@dataclass(frozen=True)
class PixelLayout(_Words):
    """The run's layer geometry that orders its pixel section
    (:func:`fpgacnn.host.packing.pack_pixels`)."""

    kh: int
    kw: int
    sy: int
    sx: int
    top: int
    left: int
    bottom: int
    right: int
    remap: int  # the 1x1 remap's block (fpgacnn.host.packing.remap_block), 0 for none


@dataclass(frozen=True)
class DestPattern(_Words):
    """Where a run's output goes: into the tensor at ``tensor``, channels
    ``[c0, c1)`` (the run's first ``c1 - c0`` lanes), and columns ``[a, b)``
    (columns) or images ``[a, b)`` of a flat tensor (batch)."""

    kind: int
    tensor: int
    c0: int
    c1: int
    a: int
    b: int


@dataclass(frozen=True)
class EngineRecord:
    """One engine run. ``step``: the index of its step in the program (for the
    report); ``warm_load_params``: the warm descriptor's ``load_params`` (a
    resident program's later inferences run the descriptor with
    ``load_weights = 0`` and that)."""

    step: int
    descriptor: dict
    const_offset: int
    const_nbytes: int
    params_nbytes: int
    out_nbytes: int
    predicted_cycles: int
    warm_predicted_cycles: int
    warm_load_params: int
    source: SourcePattern
    layout: PixelLayout
    dest: DestPattern

    def words(self):
        desc = complete_descriptor(self.descriptor, ALL_DESCRIPTOR_FIELDS)
        head = [RECORD_ENGINE, self.step, self.const_offset, self.const_nbytes,
                self.params_nbytes, self.out_nbytes, self.predicted_cycles,
                self.warm_predicted_cycles, self.warm_load_params]
        return (head + [int(desc[f.name]) for f in ALL_DESCRIPTOR_FIELDS]
                + _words(self.source) + _words(self.layout) + _words(self.dest))

    def warm_descriptor(self):
        """The descriptor of the run with the program's weights resident."""
        return dict(self.descriptor, load_weights=0, load_params=self.warm_load_params)


@dataclass(frozen=True)
class HostRecord:
    """A layer the host runs: the program's step ``step``. Its subclasses add fields
    and their own record kind (:attr:`KIND`); a record's words are the kind, then
    its fields in order."""

    KIND: ClassVar[int] = RECORD_HOST

    step: int

    def words(self):
        return [self.KIND] + [int(getattr(self, f.name)) for f in fields(self)]


@dataclass(frozen=True)
class VectorRecord(HostRecord):
    """A host layer the vector unit runs: the program's step ``step``, of ``kind``
    (:data:`~fpgacnn.host.vector_mapping.VECTOR_ADD`, ``VECTOR_POOL``,
    ``VECTOR_COPY``), reading the tensors at ``a`` and ``b`` (-1: none) of the tensor
    table and writing ``out``, with the unit's integer parameters
    (:mod:`fpgacnn.core.vector_fields`; a pool's window, one tap for an Add or a
    copy). ``fusable``: an Add whose operand is the
    output of the engine records just before it, which reads nothing else,
    and whose other operand was written before them (:func:`fusable_add`); its
    output is placed with that operand, so a program engine may do the Add on
    those records' writes (:mod:`fpgacnn.host.fused_add`)."""

    KIND: ClassVar[int] = RECORD_VECTOR

    kind: int = 0
    a: int = -1
    b: int = -1
    out: int = -1
    kernel_rows: int = 1
    kernel_cols: int = 1
    stride_rows: int = 1
    stride_cols: int = 1
    pad_top: int = 0
    pad_left: int = 0
    maximum: int = 0
    has_b: int = 0
    ties_to_even: int = 0
    za: int = 0
    zb: int = 0
    ma: int = 1
    mb: int = 0
    shift: int = 0
    zy: int = 0
    lo: int = -128
    hi: int = 127
    fusable: int = 0


@dataclass(frozen=True)
class FoldRecord(HostRecord):
    """An input fold: the taps of the network input's channels ``[c0, c1)`` (the
    tensor at ``a``) under a ``kh x kw`` kernel (stride, dilation, pads, output size,
    the padding holding ``x_zp``) as the channels of the tensor at ``out``
    (:class:`~fpgacnn.host.conv_views.Im2Col`), which the engine records of the
    program's step ``step`` read. The host writes it with the input
    (:meth:`ProgramImage.write_input`); it is no run of its own."""

    KIND: ClassVar[int] = RECORD_FOLD

    a: int = -1
    out: int = -1
    c0: int = 0
    c1: int = 0
    kh: int = 1
    kw: int = 1
    sy: int = 1
    sx: int = 1
    dy: int = 1
    dx: int = 1
    top: int = 0
    left: int = 0
    bottom: int = 0
    right: int = 0
    oh: int = 1
    ow: int = 1
    x_zp: int = 0

    def gather(self):
        """The fold as a function of the NCHW input to the folded NCHW tensor."""
        fold = conv_views.Im2Col((self.kh, self.kw), (self.sy, self.sx),
                                 (self.top, self.left, self.bottom, self.right),
                                 (self.dy, self.dx), self.x_zp, (self.oh, self.ow))
        return conv_views.compose(conv_views.ChannelSlice(self.c0, self.c1), fold)


#: Words of every record (engine records are the longest; host records are padded).
RECORD_WORDS = 9 + len(ALL_DESCRIPTOR_FIELDS) + SourcePattern.nwords() + PixelLayout.nwords() \
    + DestPattern.nwords()


def _parse_record(words, fields_of_engine, index):
    """Record ``index`` from its words; an engine record's descriptor holds the fields
    of the image's engine (``fields_of_engine``, its contract's ``descriptor_fields``),
    those it has not (the fused block's, on an engine without it) checked 0."""
    kind = int(words[0])
    host_kinds = {cls.KIND: cls for cls in (HostRecord, VectorRecord, FoldRecord)}
    if kind in host_kinds:
        cls = host_kinds[kind]
        return cls(*(int(w) for w in words[1:1 + len(fields(cls))]))
    if kind != RECORD_ENGINE:
        raise InputError(f"program image: unknown record kind {kind}")
    head = [int(w) for w in words[1:9]]
    i = 9
    every = {f.name: int(words[i + j]) for j, f in enumerate(ALL_DESCRIPTOR_FIELDS)}
    i += len(ALL_DESCRIPTOR_FIELDS)
    desc = {f.name: every[f.name] for f in fields_of_engine}
    extra = [f"{f.name} {every[f.name]}" for f in ALL_DESCRIPTOR_FIELDS
             if f not in fields_of_engine and every[f.name] != f.default]
    if extra:
        raise InputError(f"program image: record {index} sets {', '.join(extra)}, which its "
                         f"engine has no registers for (generated without fused_blocks)")
    source = SourcePattern.from_words(words[i:])
    i += SourcePattern.nwords()
    layout = PixelLayout.from_words(words[i:])
    i += PixelLayout.nwords()
    dest = DestPattern.from_words(words[i:])
    return EngineRecord(head[0], desc, *head[1:], source, layout, dest)


@dataclass(frozen=True)
class Header(_Words):
    """The image's first words: what it is, for which engine and where its regions are."""

    magic: int
    version_major: int
    version_minor: int
    pin: int
    pout: int
    kmax: int
    act_width: int
    weight_width: int
    acc_width: int
    mult_width: int
    max_width: int
    max_channels: int
    max_out_channels: int
    stream_width: int
    deep_pipeline: int
    writer_words: int
    spare_bank: int
    pixel_pairs: int
    param_words: int
    fused_blocks: int
    depthwise_pixels: int
    batch: int
    resident: int
    records_offset: int
    records: int
    record_words: int
    tensors_offset: int
    tensors: int
    constants_offset: int
    constants_nbytes: int
    arena_offset: int
    arena_nbytes: int
    input_tensor: int
    output_tensor: int
    total_nbytes: int

    @property
    def config(self):
        return EngineConfig(**{f.name: getattr(self, f.name) for f in fields(EngineConfig)
                               if f.name in _HEADER_NAMES})


_HEADER_NAMES = {f.name for f in fields(Header)}


def alignment(config):
    """Bytes every region and tensor image of an image for ``config`` is aligned to."""
    return math.lcm(ALIGN, config.pin, config.pout)


def _align(n, to=ALIGN):
    return -(-n // to) * to


class ProgramImage:
    """A program image: the bytes and their decoded header, tensor table and records.

    Parameters
    ----------
    data : bytes-like
        The whole image (:attr:`data` keeps its own copy, writable: the arena
        is in it).

    Raises
    ------
    InputError
        Not a program image, another major version, or truncated.
    """

    def __init__(self, data):
        self._load(np.array(np.frombuffer(bytes(data), np.uint8)))

    @classmethod
    def over(cls, buffer):
        """The image in ``buffer`` itself, not a copy: a contiguous uint8 array
        (board memory that the host and the engine share, as the sequencer's
        :class:`~fpgacnn.host.sequencer_table.SequencerProgram` holds it).

        Raises
        ------
        InputError
            As the constructor.
        """
        if not (isinstance(buffer, np.ndarray) and buffer.dtype == np.uint8
                and buffer.ndim == 1 and buffer.flags.c_contiguous):
            raise InputError("a program image's buffer must be a contiguous 1-D uint8 array")
        image = cls.__new__(cls)
        image._load(buffer)
        return image

    def _load(self, data):
        self.data = data
        if self.data.size < 4 * Header.nwords():
            raise InputError(f"program image of {self.data.size} bytes is shorter than its header")
        words = self.data[:4 * Header.nwords()].view("<i4")
        if int(words[0]) != FORMAT_MAGIC:
            raise InputError("not a program image (bad magic)")
        self.header = Header.from_words(words)
        if self.header.version_major != FORMAT_VERSION[0]:
            raise InputError(f"program image format {self.header.version_major}."
                             f"{self.header.version_minor}, this reader takes "
                             f"{FORMAT_VERSION[0]}.x")
        h = self.header
        if h.total_nbytes != self.data.size:
            raise InputError(f"program image is {self.data.size} bytes, its header says "
                             f"{h.total_nbytes}")
        if h.record_words != RECORD_WORDS:
            raise InputError(f"program image records are {h.record_words} words, "
                             f"this reader's {RECORD_WORDS}")
        tw = self._words(h.tensors_offset, h.tensors * TensorPlace.nwords())
        self.tensors = [TensorPlace.from_words(tw[i * TensorPlace.nwords():])
                        for i in range(h.tensors)]
        rw = self._words(h.records_offset, h.records * RECORD_WORDS)
        fields_of_engine = engine_contract(h.config).descriptor_fields
        self.records = [_parse_record(rw[i * RECORD_WORDS:(i + 1) * RECORD_WORDS],
                                      fields_of_engine, i) for i in range(h.records)]
        self._config = h.config  # built once: the runner asks for it every run
        # The input's and the output's views, and each input fold's gather
        # and views, made once: the host writes and reads them every inference.
        self._input_view = self.input.view(self.data)
        self._output_view = self.output.view(self.data)
        self._folds = [self._fold_gather(r) for r in self.records if isinstance(r, FoldRecord)]

    def _words(self, offset, count):
        return self.data[offset:offset + 4 * count].view("<i4")

    @property
    def config(self):
        """The engine configuration the program was compiled for."""
        return self._config

    @property
    def nbytes(self):
        return int(self.data.size)

    def constants(self, record, *, warm=False):
        """The constants a run streams before its pixels (read-only view)."""
        n = record.params_nbytes if warm else record.const_nbytes
        return self.data[record.const_offset:record.const_offset + n]

    @property
    def input(self):
        return self.tensors[self.header.input_tensor]

    def write_input(self, x8):
        """Write the network input ``x8`` (int8, the input's view shape) into the arena,
        and its folds (:class:`FoldRecord`) where the records that read them look.

        Raises
        ------
        InputError
            ``x8`` is not of the shape the program was compiled for.
        """
        view = self._input_view
        if x8.shape != view.shape:
            raise InputError(f"the program was compiled for input {view.shape}, not "
                             f"{x8.shape} (compile the program for this batch)")
        view[...] = x8
        self.write_folds()

    @property
    def input_view(self):
        """The network input in the arena: a writable int8 view of the input's
        shape (``(N, C, H, W)`` or ``(N, C)``), made once. Whoever writes the
        input here (quantizing straight into it) calls :meth:`write_folds` after."""
        return self._input_view

    @property
    def output_view(self):
        """The network output in the arena: an int8 view, made once, valid until the
        engine runs the program again (:meth:`read_output` copies it)."""
        return self._output_view

    def _fold_gather(self, record):
        """An input fold as one gather: ``(source, staged, staging, positions, out)``,
        where ``out[...] = staging[positions]`` once ``staged`` (``staging[:-1]``
        in the input's shape) holds ``source`` (the input's view) and
        ``staging[-1]`` is the padding's ``x_zp``.

        The positions are the fold's own gather applied to the input's element
        indices (its padding -1, then the staging's last element), made once:
        the gather itself is a numpy slice a kernel tap, dozens of calls each
        inference (DS-CNN's 10x4 kernel: 40).
        """
        source = self.tensors[record.a].view(self.data)
        out = self.tensors[record.out].view(self.data)
        index = np.arange(source.size, dtype=np.int64).reshape(source.shape)
        positions = replace(record, x_zp=-1).gather()(index)
        positions[positions < 0] = source.size
        if positions.shape != out.shape:
            raise InputError(f"program image: an input fold makes {positions.shape}, its "
                             f"tensor holds {out.shape}")
        staging = np.empty(source.size + 1, np.int8)
        staging[-1] = record.x_zp
        return source, staging[:-1].reshape(source.shape), staging, positions, out

    def write_folds(self):
        """Write the input's folds (:class:`FoldRecord`) from the input in the arena
        where the records that read them look (none in most programs)."""
        for source, staged, staging, positions, out in self._folds:
            staged[...] = source
            out[...] = staging[positions]

    @property
    def output(self):
        return self.tensors[self.header.output_tensor]

    def read_output(self):
        """A copy of the network output in the arena (int8, the output's view shape)."""
        return self._output_view.copy()


# -- the patterns as the compiler's gathers and scatters -------------------------------------


def source_gather(pattern, x_zp):
    """The gather a source pattern stands for: a function of the NCHW (or flat)
    tensor to the run's images."""
    parts = []
    if pattern.kind == SOURCE_BATCH:
        return BatchImage(pattern.a, pattern.b, pattern.rows, pattern.cols)
    parts.append(conv_views.ChannelSlice(pattern.c0, pattern.c1))
    if pattern.fold:
        p = pattern
        parts.append(conv_views.Im2Col((p.fold_kh, p.fold_kw), (p.fold_sy, p.fold_sx),
                                       (p.fold_top, p.fold_left, p.fold_bottom, p.fold_right),
                                       (p.fold_dy, p.fold_dx), x_zp, (p.fold_oh, p.fold_ow)))
    parts.append(ZeroPointColumn(x_zp) if pattern.kind == SOURCE_ZERO_COLUMN
                 else ColumnSlice(pattern.a, pattern.b))
    gather = None
    for part in parts:
        gather = conv_views.compose(gather, part)
    return gather


def dest_scatter(pattern):
    """The scatter a destination pattern stands for: ``scatter(y, out)``."""
    if pattern.kind == DEST_BATCH:
        return BatchTranspose(pattern.c0, pattern.c1, pattern.a, pattern.b)
    return ChannelColumns(pattern.c0, pattern.c1, pattern.a, pattern.b)


def pixel_packing(config, layout, x_zp, channels, name):
    """The pixel packing of a run with ``layout``, ``x_zp`` and ``channels`` input channels."""
    return PixelPacking(config, x_zp=x_zp, w_shape=(0, channels, layout.kh, layout.kw),
                        stride=(layout.sy, layout.sx),
                        pads=(layout.top, layout.left, layout.bottom, layout.right),
                        remap=layout.remap, name=name)


# -- building an image from a compiled program -----------------------------------------------


def _gather_parts(gather):
    """The gather's parts, outermost first (the compiler composes them with ``compose``)."""
    if isinstance(gather, conv_views._Compose):
        return _gather_parts(gather.outer) + _gather_parts(gather.inner)
    return [gather]


def _source(run, tensor, channels, name, fold=None):
    """The run's source pattern. ``fold``: ``(tensor, channels)`` of the input's fold
    the run reads (:class:`FoldRecord`), which it reads as a plain strip."""
    parts = _gather_parts(run.gather)
    if fold is not None:
        tensor, channels = fold
        parts = [p for p in parts
                 if not isinstance(p, (conv_views.ChannelSlice, conv_views.Im2Col))]
    values = dict(tensor=tensor, c0=0, c1=channels, fold=0, fold_kh=0, fold_kw=0, fold_sy=0,
                  fold_sx=0, fold_dy=0, fold_dx=0, fold_top=0, fold_left=0, fold_bottom=0,
                  fold_right=0, fold_oh=0, fold_ow=0, a=0, b=0, rows=0, cols=0)
    last = parts.pop()
    if isinstance(last, BatchImage):
        kind = SOURCE_BATCH
        values.update(a=last.b0, b=last.b1, rows=last.rows, cols=last.width)
    elif isinstance(last, ColumnSlice):
        kind = SOURCE_STRIP
        values.update(a=last.x0, b=last.x1)
    elif isinstance(last, ZeroPointColumn):
        kind = SOURCE_ZERO_COLUMN
    else:
        raise MappingError(f"layer {name!r}: the program format has no source pattern for "
                           f"{type(last).__name__}")
    for part in parts:
        if isinstance(part, conv_views.PixelRows):
            continue  # the record reads the tensor's pixel-row view (tensor names it)
        if isinstance(part, conv_views.ChannelSlice) and not values["fold"]:
            values.update(c0=part.c0, c1=part.c1)
        elif isinstance(part, conv_views.Im2Col) and not values["fold"]:
            (kh, kw), (sy, sx), (dy, dx) = part.kernel, part.stride, part.dilation
            top, left, bottom, right = part.pads
            values.update(fold=1, fold_kh=kh, fold_kw=kw, fold_sy=sy, fold_sx=sx, fold_dy=dy,
                          fold_dx=dx, fold_top=top, fold_left=left, fold_bottom=bottom,
                          fold_right=right, fold_oh=part.out_hw[0], fold_ow=part.out_hw[1])
        else:
            raise MappingError(f"layer {name!r}: the program format has no source pattern for "
                               f"{type(part).__name__} here")
    return SourcePattern(kind=kind, **values)


def _layout(packing):
    (kh, kw), (sy, sx) = packing.w_shape[2:], packing.stride
    return PixelLayout(kh, kw, sy, sx, *packing.pads, int(packing.remap))


def _dest(run, tensor, name):
    s = run.scatter
    if isinstance(s, ChannelColumns):  # a RowsColumns too: ``tensor`` is then the view
        return DestPattern(DEST_COLUMNS, tensor, s.c0, s.c1, s.o0, s.o1)
    if isinstance(s, BatchTranspose):
        return DestPattern(DEST_BATCH, tensor, s.c0, s.c1, s.b0, s.b1)
    raise MappingError(f"layer {name!r}: the program format has no destination pattern for "
                       f"{type(s).__name__}")


def tensor_names(program):
    """The program's tensors in tensor-table order (the input, then each layer's output,
    then the input's folds, named ``<input>/fold<n>``, then the pixel-row views,
    ``<tensor>/rows<width>``)."""
    return list(_shapes(program))


def _rows_of(run):
    """``(rows, width)`` of a run that sees its step's pixels as rows of another
    width (:func:`~fpgacnn.host.conv_views.rows_view`), else None."""
    for part in _gather_parts(run.gather):
        if isinstance(part, conv_views.PixelRows):
            return part.rows, part.width
    return None


def _rows_name(tensor, width):
    return f"{tensor}/rows{width}"


def _row_views(program):
    """``{view name: (tensor, rows, width)}``: the pixel-row views the runs read and
    write, in the order of the runs."""
    views = {}
    for step in program.steps:
        for run in getattr(step, "runs", ()):
            rows = _rows_of(run)
            if rows is not None:
                for t in (step.inputs[0], step.output):
                    views.setdefault(_rows_name(t, rows[1]), (t, *rows))
    return views


def _input_folds(program):
    """The input's folds the program's runs read: ``{(step, c0, c1, Im2Col): name}``,
    in the order of the runs (runs of one step that fold alike share one)."""
    model = program.model
    folds = {}
    for i, step in enumerate(program.steps):
        if not isinstance(step, EngineStep) or step.inputs[0] != model.input_tensor:
            continue
        for run in step.runs:
            key = _fold_key(run, i, model.input.shape[0])
            if key is not None and key not in folds:
                folds[key] = f"{model.input_tensor}/fold{len(folds)}"
    return folds


def _fold_key(run, step, channels):
    """``(step, c0, c1, Im2Col)`` of a run whose gather folds taps, else None."""
    c0, c1, fold = 0, channels, None
    for part in _gather_parts(run.gather)[:-1]:
        if isinstance(part, conv_views.ChannelSlice) and fold is None:
            c0, c1 = part.c0, part.c1
        elif isinstance(part, conv_views.Im2Col):
            fold = part
    return None if fold is None else (step, c0, c1, fold)


def _shapes(program):
    model = program.model
    shapes = {model.input_tensor: tuple(model.input.shape)}
    for layer in model.layers:
        shapes[layer.output] = tuple(layer.output_shape)
    for (_, c0, c1, fold), name in _input_folds(program).items():
        shapes[name] = ((c1 - c0) * fold.kernel[0] * fold.kernel[1], *fold.out_hw)
    for name, (t, rows, width) in _row_views(program).items():
        shapes[name] = (shapes[t][0], rows, width)
    return shapes


def fusable_add(program, index):
    """Whether step ``index`` of ``program`` is an Add the engine can do on the writes
    of the step before it (docs/program.md, "The residual Add fused into the
    convolution"): a vector Add (:func:`~fpgacnn.host.vector_mapping.vector_params`)
    one of whose operands is the output of the engine step just before it, which
    no other step reads and which is not the network's output, the other
    operand written before that step (or the input)."""
    steps = program.steps
    if index < 1 or not isinstance(steps[index - 1], EngineStep):
        return False
    add, conv = steps[index], steps[index - 1]
    params = vector_params(add.layer, _shapes(program)) if not isinstance(add, EngineStep) \
        else None
    if params is None or params["kind"] != VECTOR_ADD or len(set(add.inputs)) != 2:
        return False
    if conv.output not in add.inputs or conv.output == program.model.output_tensor:
        return False
    if sum(conv.output in s.inputs for s in steps) != 1:
        return False
    other = next(t for t in add.inputs if t != conv.output)
    first, _ = _lifetimes(program)
    return first.get(other, len(steps)) < index - 1


def _lifetimes(program):
    """Per tensor: the index of the step that writes it (-1: the input) and the last that reads it."""
    model = program.model
    first, last = {model.input_tensor: -1}, {}
    for i, step in enumerate(program.steps):
        for t in step.inputs:
            last[t] = i
        first.setdefault(step.output, i)
        last.setdefault(step.output, i)
    last[model.output_tensor] = len(program.steps)
    return first, last


class _Arena:
    """First-fit placement of tensors in one region, space reused after a tensor's last read."""

    def __init__(self):
        self.free = []  # (offset, size), sorted
        self.end = 0

    def take(self, size):
        for i, (off, n) in enumerate(self.free):
            if n >= size:
                self.free[i:i + 1] = [(off + size, n - size)] if n > size else []
                return off
        if self.free and self.free[-1][0] + self.free[-1][1] == self.end:
            off = self.free.pop()[0]  # grow the last free block
        else:
            off = self.end
        self.end = off + size
        return off

    def give(self, off, size):
        self.free.append((off, size))
        self.free.sort()
        merged = []
        for o, n in self.free:
            if merged and merged[-1][0] + merged[-1][1] == o:
                merged[-1] = (merged[-1][0], merged[-1][1] + n)
            else:
                merged.append((o, n))
        self.free = merged


def build_image(program, *, memory_bytes=None):
    """Lay a compiled program out as one memory image.

    Parameters
    ----------
    program : fpgacnn.host.compiler.Program
    memory_bytes : int, optional
        The board memory the image may take (a Zynq board's budget for the
        program); None: no limit.

    Returns
    -------
    ProgramImage

    Raises
    ------
    MappingError
        The image would exceed ``memory_bytes`` (the message names the layer
        whose output no longer fits, or the constants), a run's gather or
        scatter has no pattern in the format, or a run's warm descriptor
        loads weights (a fused block past the depthwise memory, compiled with
        ``fuse="always"``: :func:`~fpgacnn.host.compiler.refuse_warm_weight_loads`).
    """
    refuse_warm_weight_loads(program, "the program image")
    config, model = program.config, program.model
    align = alignment(config)
    shapes = _shapes(program)
    first, last = _lifetimes(program)
    names = list(shapes)
    index = {t: i for i, t in enumerate(names)}

    # Constants: each channel group's section once, in the order the runs use them.
    const_at, constants = {}, []
    const_nbytes = 0
    for step in program.steps:
        for run in getattr(step, "runs", ()):
            if id(run.weights) not in const_at:
                const_at[id(run.weights)] = const_nbytes
                constants.append(run.weights)
                const_nbytes += _align(run.weights.size, align)

    folds = _input_folds(program)
    nrecords = len(folds) + sum(len(s.runs) if isinstance(s, EngineStep) else 1
                                for s in program.steps)
    tensors_offset = _align(4 * Header.nwords(), align)
    records_offset = tensors_offset + _align(4 * TensorPlace.nwords() * len(names), align)
    constants_offset = records_offset + _align(4 * RECORD_WORDS * nrecords, align)
    arena_offset = constants_offset + const_nbytes
    if memory_bytes is not None and arena_offset > memory_bytes:
        raise MappingError(f"model {model.name!r}: its records and constants take "
                           f"{arena_offset:,} bytes, over the board memory budget of "
                           f"{memory_bytes:,} bytes")

    # Tensors, placed in step order; a step's output never shares space with its inputs.
    arena, places = _Arena(), {}
    views_of = {}  # tensor -> its pixel-row views: (name, rows, width)
    for view, (t, rows, width) in _row_views(program).items():
        views_of.setdefault(t, []).append((view, rows, width))

    # The host writes the input and its folds: where only engine runs read them,
    # whole input words are their pixels (core.arena.input_pixel_bytes).
    engine_read = {name for name in folds.values()}
    if all(isinstance(s, EngineStep) for s in program.steps
           if model.input_tensor in s.inputs):
        engine_read.add(model.input_tensor)

    def place(t, who):
        shape = shapes[t]
        flat = len(shape) == 1
        c, h, w = (shape[0], 1, 1) if flat else shape
        cp = (input_pixel_bytes if t in engine_read else pixel_bytes)(config, c)
        stride = _align(h * w * cp, align)
        off = arena.take(program.batch * stride)
        places[t] = TensorPlace(arena_offset + off, c, h, w, cp, stride, program.batch,
                                int(flat))
        for view, rows, width in views_of.get(t, ()):  # the same bytes, other rows
            places[view] = replace(places[t], height=rows, width=width)
        if memory_bytes is not None and arena_offset + arena.end > memory_bytes:
            raise MappingError(
                f"layer {who!r}: its output {t!r} ({program.batch} x {c}x{h}x{w}) takes the "
                f"program to {arena_offset + arena.end:,} bytes, over the board memory "
                f"budget of {memory_bytes:,} bytes")

    place(model.input_tensor, "input")
    # The input's folds, written with the input: live from the start to their step.
    records = []
    for (step_index, c0, c1, fold), name in folds.items():
        place(name, program.steps[step_index].name)
        (kh, kw), (sy, sx), (dy, dx) = fold.kernel, fold.stride, fold.dilation
        records.append(FoldRecord(step_index, index[model.input_tensor], index[name], c0, c1,
                                  kh, kw, sy, sx, dy, dx, *fold.pads, *fold.out_hw, fold.x_zp))

    def fold_of(run, i):
        name = folds.get(_fold_key(run, i, shapes[model.input_tensor][0]))
        return None if name is None else (index[name], shapes[name][0])

    fusable = [fusable_add(program, i) for i in range(len(program.steps))]
    for i, step in enumerate(program.steps):
        if step.output not in places:
            place(step.output, step.name)
        if i + 1 < len(program.steps) and fusable[i + 1]:
            # The Add's output with its operand: written while this step runs, it must
            # not take the place of this step's input.
            place(program.steps[i + 1].output, program.steps[i + 1].name)
        if isinstance(step, EngineStep):
            channels = shapes[step.inputs[0]][0]
            for run in step.runs:
                rows = _rows_of(run)
                src, dst = (index[step.inputs[0]], index[step.output]) if rows is None else \
                    (index[_rows_name(step.inputs[0], rows[1])],
                     index[_rows_name(step.output, rows[1])])
                warm = run.warm_descriptor
                records.append(EngineRecord(
                    step=i, descriptor=dict(run.descriptor),
                    const_offset=constants_offset + const_at[id(run.weights)],
                    const_nbytes=int(run.weights.size), params_nbytes=int(run.params_nbytes),
                    out_nbytes=int(run.out_nbytes), predicted_cycles=int(run.predicted_cycles),
                    warm_predicted_cycles=int(run.warm_predicted_cycles or 0),
                    warm_load_params=int(warm["load_params"]) if warm else 0,
                    source=_source(run, src, channels, step.name, fold_of(run, i)),
                    layout=_layout(run.pack_pixels),
                    dest=_dest(run, dst, step.name)))
        else:
            params = vector_params(step.layer, shapes)
            if params is None:
                records.append(HostRecord(i))
            else:
                tensors = [index[t] for t in step.inputs] + [-1]
                records.append(VectorRecord(i, a=tensors[0], b=tensors[1] if params["has_b"]
                                            else -1, out=index[step.output],
                                            fusable=int(fusable[i]), **params))
        done = [t for t in set(step.inputs) if last.get(t) == i and t != model.output_tensor]
        done += [name for (at, *_), name in folds.items() if at == i]
        for t in done:
            p = places[t]
            arena.give(p.offset - arena_offset, p.nbytes)
    arena_nbytes = _align(arena.end, align)
    total = arena_offset + arena_nbytes

    # The header's engine parameters: every EngineConfig field it names, in its order.
    header = Header(FORMAT_MAGIC, *FORMAT_VERSION, *(getattr(config, f.name)
                                                     for f in fields(EngineConfig)
                                                     if f.name in _HEADER_NAMES),
                    program.batch, int(program.resident), records_offset, nrecords,
                    RECORD_WORDS, tensors_offset, len(names), constants_offset, const_nbytes,
                    arena_offset, arena_nbytes, index[model.input_tensor],
                    index[model.output_tensor], total)
    data = np.zeros(total, np.uint8)
    data[:4 * Header.nwords()] = np.array(_words(header), "<i4").view(np.uint8)
    table = [w for t in names for w in _words(places.get(t) or TensorPlace(0, 0, 0, 0, 0, 0, 0, 0))]
    data[tensors_offset:tensors_offset + 4 * len(table)] = np.array(table, "<i4").view(np.uint8)
    rw = []
    for r in records:
        w = r.words()
        rw += w + [0] * (RECORD_WORDS - len(w))
    data[records_offset:records_offset + 4 * len(rw)] = np.array(rw, "<i4").view(np.uint8)
    for section in constants:
        off = constants_offset + const_at[id(section)]
        data[off:off + section.size] = section
    return ProgramImage(data)
