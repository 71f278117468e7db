"""The ``fpgacnn`` command.

Each subcommand lives in its own module under :mod:`fpgacnn.host.commands`
and provides ``add_parser(subparsers)`` (returning its parser) and
``run(args) -> int``. User errors (:class:`~fpgacnn.core.errors.FpgacnnError`)
print one line and exit with status 1; argument errors exit with status 2.
"""

import argparse
import importlib
import sys

from .. import __version__
from ..core.errors import FpgacnnError
from ..core.config import ConfigError

__all__ = ["main"]

#: Subcommand modules, in the order ``fpgacnn --help`` lists them.
COMMANDS = ("demo", "run", "compile", "sim", "quantize", "generate", "boards", "build")


def build_parser():
    parser = argparse.ArgumentParser(
        prog="fpgacnn",
        description="FPGA CNN accelerator generator and host driver.")
    parser.add_argument("--version", action="version", version=f"fpgacnn {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        try:
            module = importlib.import_module(f".commands.{name}", __package__)
        except ModuleNotFoundError as e:
            if e.name == f"{__package__}.commands.{name}":
                continue  # not written yet
            raise
        p = module.add_parser(sub)
        p.set_defaults(handler=module.run)
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args) or 0
    except (FpgacnnError, ConfigError) as e:
        print(f"fpgacnn: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("fpgacnn: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
