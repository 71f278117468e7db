"""fpgacnn: FPGA CNN accelerator generator and host driver.

The package is one import namespace laid over the repository's top-level
folders: :mod:`fpgacnn.host` (model import, quantized IR, reference backend,
CLI), :mod:`fpgacnn.hdl` (Amaranth generators), :mod:`fpgacnn.sim` (RTL
simulation) and :mod:`fpgacnn.boards` (boards as data).
"""

__version__ = "0.1.0"
