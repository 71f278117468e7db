"""The layer descriptor: what the host tells the engine about one layer run.

Declared once; the core reads it as an Amaranth struct, the register map
(:mod:`fpgacnn.core.regmap`) gives each field a register, and the host compiler
fills it. Geometry is given explicitly (output size too) so that the engine
never re-derives what the host already decided. See docs/engine.md.
"""

from dataclasses import dataclass

from .fields import Field, struct_layout

__all__ = ["DescriptorField", "DESCRIPTOR_FIELDS", "FUSED_DESCRIPTOR_FIELDS", "ALL_DESCRIPTOR_FIELDS",
           "descriptor_layout", "complete_descriptor"]


@dataclass(frozen=True)
class DescriptorField(Field):
    #: The value a descriptor that leaves the field out means (fields added
    #: later: the behaviour before them). None: the field must be given.
    default: object = None


#: In register order. Widths are fixed (not per configuration) so that the
#: register map of every engine has the same shape; limits are checked against
#: the configuration by the host compiler.
DESCRIPTOR_FIELDS = (
    DescriptorField("in_h", 16, False, "input rows"),
    DescriptorField("in_w", 16, False, "input columns"),
    DescriptorField("ci_tiles", 16, False, "input channels / pin, rounded up"),
    DescriptorField("co_tiles", 16, False, "output channels / pout, rounded up"),
    DescriptorField("out_h", 16, False, "convolution output rows (before pooling)"),
    DescriptorField("out_w", 16, False, "convolution output columns (before pooling)"),
    DescriptorField("stride", 4, False, "stride, 1..kmax (same on both axes)"),
    DescriptorField("pad_top", 4, False, "rows of zero-point padding above, 0..kmax-1"),
    DescriptorField("pad_left", 4, False, "columns of zero-point padding left, 0..kmax-1"),
    DescriptorField("batch", 16, False, "images streamed after the weights, at least 1"),
    DescriptorField("x_zp", 8, True, "input zero point (also the padding value)"),
    DescriptorField("y_zp", 8, True, "output zero point"),
    DescriptorField("clamp_lo", 8, True, "lower output clamp (a fused Relu raises it to y_zp)"),
    DescriptorField("clamp_hi", 8, True, "upper output clamp"),
    DescriptorField("pool", 1, False, "fuse a 2x2 stride-2 max-pool on the output"),
    DescriptorField("load_weights", 1, False, "stream parameters and weights before the images"),
    # Register map 2.0: resident weights (docs/engine.md, "Resident weights").
    DescriptorField("load_params", 1, False, "stream the parameters before the images without "
                    "the weights (they are resident from an earlier run)", default=0),
    DescriptorField("weight_base", 16, False, "weight-buffer word of the run's first weight "
                    "word: where load_weights writes the weights and where the run reads them",
                    default=0),
    # Register map 2.1: depthwise runs (docs/engine.md, "Depthwise runs").
    DescriptorField("depthwise", 1, False, "output tile t reads input tile t only (pin == pout): "
                    "one window and one weight word per output tile", default=0),
    # Register map 2.4: pixel pairs (docs/engine.md, "Pixel pairs").
    DescriptorField("pixel_pairs", 1, False, "two adjacent output pixels a window issue "
                    "(a stride of at most the engine's pair_stride, no pool)", default=0),
    # Register map 2.5: resident parameters (docs/engine.md, "Resident weights").
    DescriptorField("param_base", 16, False, "parameter-buffer word of the run's first output "
                    "tile's records: where load_weights / load_params write them and where "
                    "the run reads them", default=0),
)

#: Register map 2.6: the fused depthwise + pointwise block (docs/engine.md, "The
#: fused depthwise + pointwise block", "Step 3"). Fields of their own, after
#: ``DESCRIPTOR_FIELDS``, with registers only on an engine generated with
#: ``fused_blocks`` (:attr:`fpgacnn.core.contract.EngineContract.descriptor_fields`):
#: every other engine keeps the 2.5 map and its Verilog, byte for byte. In a
#: fused run the other fields describe the block: the depthwise half's input
#: and geometry (``in_h``, ``in_w``, ``ci_tiles``, ``stride``, pads, ``x_zp``,
#: ``out_h``, ``out_w``, which the pointwise 1x1 keeps), the pointwise half's
#: output (``co_tiles``, ``weight_base``, ``param_base``, ``y_zp``, clamps);
#: the pointwise's input tiles a remap position are derived,
#: :func:`fpgacnn.core.fused_block.pair_buffer_run`.
FUSED_DESCRIPTOR_FIELDS = (
    DescriptorField("fused", 1, False, "a depthwise convolution (ci_tiles channels, the line "
                    "buffer's geometry) and the pointwise 1x1 after it (co_tiles output tiles) "
                    "as one run, through the depthwise unit and the pair buffer", default=0),
    DescriptorField("dw_base", 16, False, "depthwise-memory word of the block's first input "
                    "tile (its depthwise weights and parameter records): where load_weights "
                    "writes them and where the run reads them", default=0),
    DescriptorField("dw_y_zp", 8, True, "the depthwise half's output zero point (the "
                    "pointwise half's input zero point, folded into its bias)", default=0),
    DescriptorField("dw_clamp_lo", 8, True, "the depthwise half's lower output clamp",
                    default=0),
    DescriptorField("dw_clamp_hi", 8, True, "the depthwise half's upper output clamp",
                    default=0),
)

#: Every field some engine has, in register order.
ALL_DESCRIPTOR_FIELDS = DESCRIPTOR_FIELDS + FUSED_DESCRIPTOR_FIELDS


def complete_descriptor(desc, fields=DESCRIPTOR_FIELDS):
    """``desc`` (a mapping) with every field of ``fields``: those it leaves out that
    have a default take it. Raises ``KeyError`` naming a missing field without one."""
    out = {}
    for f in fields:
        if f.name in desc:
            out[f.name] = desc[f.name]
        elif f.default is not None:
            out[f.name] = f.default
        else:
            raise KeyError(f.name)
    return out


def descriptor_layout(fields=DESCRIPTOR_FIELDS):
    """The descriptor (``fields``: an engine's
    :attr:`~fpgacnn.core.contract.EngineContract.descriptor_fields`) as a
    :class:`amaranth.lib.data.StructLayout`."""
    return struct_layout(fields)
