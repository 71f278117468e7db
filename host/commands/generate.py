"""``fpgacnn generate``: write an engine's Verilog, register map and summary.

::

    fpgacnn generate [--config ENGINE.toml] -o DIR

``ENGINE.toml`` holds :class:`~fpgacnn.core.config.EngineConfig` parameters,
in an ``[engine]`` table or at the top level (``examples/engine_default.toml``);
parameters left out take their defaults, and without ``--config`` every
parameter does. ``DIR`` receives ``fpgacnn_engine.v``,
``fpgacnn_engine_regs.json``, ``fpgacnn_engine_regs.h`` and
``fpgacnn_engine_summary.txt``; the summary is also printed.
"""

from pathlib import Path

from ...core.errors import FpgacnnError
from ..paths import check_output_directory

__all__ = ["add_parser", "run"]


def add_parser(subparsers):
    p = subparsers.add_parser(
        "generate", help="generate the engine's Verilog and register map",
        description="Generate the convolution engine for a configuration: Verilog, "
                    "register map (JSON and C header) and a summary (peak MACs/cycle, "
                    "buffer sizes).")
    p.add_argument("--config", metavar="ENGINE.toml", type=Path,
                   help="engine parameters (default: every parameter at its default)")
    p.add_argument("-o", "--output", metavar="DIR", type=Path, required=True,
                   help="directory to write into (created if missing)")
    return p


def run(args):
    from ...core.config import EngineConfig
    from ...hdl.verilog import write_engine, config_summary

    config = EngineConfig.from_toml(args.config) if args.config is not None else EngineConfig()
    check_output_directory(args.output, "-o")
    try:
        paths = write_engine(config, args.output)
    except OSError as e:
        raise FpgacnnError(f"-o {args.output}: cannot write ({e.strerror or e})") from None
    print(config_summary(config), end="")
    for kind, path in paths.items():
        print(f"wrote {path}")
    return 0
