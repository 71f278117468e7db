"""The float32 inputs that sit on, just under and just over each boundary of int8
quantization: shared by the tests of ``QuantizedModel.quantize_input`` and of
:class:`~fpgacnn.host.input_quantizer.InputQuantizer`."""

import numpy as np

#: Codes (before the clamp) at and around int8's ends and the ties between them.
EDGE_CODES = (-129.5, -128.5, -128, -127.5, -127, -126.5, 125.5, 126, 126.5, 127, 127.5, 128.5)


def quantize_edges(scale, zp):
    """For each of :data:`EDGE_CODES`, the float32 value ``(code - zp) * scale`` and its
    two float32 neighbours, as a list of ``np.float32``."""
    edges = []
    for code in EDGE_CODES:
        v = np.float32((code - zp) * scale)
        edges += [np.nextafter(v, -np.inf, dtype=np.float32), v,
                  np.nextafter(v, np.inf, dtype=np.float32)]
    return edges
