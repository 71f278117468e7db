"""The layer descriptor: what the host tells the engine about one layer run.

Declared once; the core reads it as an Amaranth struct, the register map
(:mod:`fpgacnn.core.regmap`) gives each field a register, and the host compiler
fills it. Geometry is given explicitly (output size too) so that the engine
never re-derives what the host already decided. See docs/engine.md.
"""

from dataclasses import dataclass

from .fields import Field, struct_layout

__all__ = ["DescriptorField", "DESCRIPTOR_FIELDS", "descriptor_layout", "complete_descriptor"]


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


def complete_descriptor(desc):
    """``desc`` (a mapping) with every field: those it leaves out that have a
    default take it. Raises ``KeyError`` naming a missing field without one."""
    out = {}
    for f in DESCRIPTOR_FIELDS:
        if f.name in desc:
            out[f.name] = desc[f.name]
        elif f.default is not None:
            out[f.name] = f.default
        else:
            raise KeyError(f.name)
    return out


def descriptor_layout():
    """The descriptor as a :class:`amaranth.lib.data.StructLayout`."""
    return struct_layout(DESCRIPTOR_FIELDS)
