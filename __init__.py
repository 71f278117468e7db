"""fpgacnn: FPGA CNN accelerator generator and host driver.

The package is one import namespace laid over the repository's top-level
folders: :mod:`fpgacnn.host` (model import, quantized IR, reference backend,
CLI), :mod:`fpgacnn.hdl` (Amaranth generators), :mod:`fpgacnn.sim` (RTL
simulation) and :mod:`fpgacnn.boards` (boards as data).
"""

import time as _time

__version__ = "0.1.0"

#: When this process imported fpgacnn: a generator source changed after it may
#: differ from its module in memory (fpgacnn.sim.verilator refuses to cache
#: a build made from such a module under the new source's key).
IMPORTED_AT = _time.time()


def __getattr__(name):
    # The high-level API, imported lazily so that `import fpgacnn` stays light.
    if name == "Accelerator":
        from .host.accelerator import Accelerator
        return Accelerator
    if name == "EngineConfig":
        from .core.config import EngineConfig
        return EngineConfig
    raise AttributeError(f"module 'fpgacnn' has no attribute {name!r}")
