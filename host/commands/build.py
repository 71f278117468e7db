"""``fpgacnn build``: a bitstream (or a Vivado project) of the engine for a board.

::

    fpgacnn build --board NAME [--config ENGINE.toml] [--clock-mhz MHZ]
                  [--name NAME] -o DIR

Without ``--config`` the engine is sized to the board
(:func:`fpgacnn.boards.engine_sizing.size_engine`) and the choice, with its
reasons, is printed. The configuration used is written to ``DIR/engine.toml``.

- Open-toolchain boards (ECP5, iCE40): the engine behind its UART bridge
  (:mod:`fpgacnn.boards.host_link`); yosys + nextpnr + ecppack/icepack from
  PyPI build ``DIR/NAME.bit`` / ``DIR/NAME.bin`` and ``DIR/report.json``
  (:mod:`fpgacnn.boards.open_flow`); the build fails if a clock misses its
  target.
- Zynq boards: the engine Verilog, a wrapper and ``DIR/NAME.tcl``
  (:mod:`fpgacnn.boards.zynq_vivado`); Vivado runs it if ``vivado`` is on PATH.

Exit status: 0 bitstream built; 1 error (including timing not met);
2 bad arguments; 3 Vivado project written but not built, because ``vivado``
is not on PATH (the command to run is printed).
"""

import argparse
import shutil
from pathlib import Path

from ...core.errors import FpgacnnError
from ..paths import check_output_directory

__all__ = ["add_parser", "run", "EXIT_VIVADO_MISSING"]

#: Exit status when the Vivado script is written but Vivado is not on PATH.
EXIT_VIVADO_MISSING = 3


def add_parser(subparsers):
    p = subparsers.add_parser(
        "build", help="build a bitstream of the engine for a board",
        description="Build the engine for a board: a bitstream with the open toolchain "
                    "(ECP5, iCE40), or a Vivado block-design project (Zynq). "
                    "Exit status 3: Vivado script written, vivado not on PATH.")
    p.add_argument("--board", required=True, metavar="NAME",
                   help="board name, as `fpgacnn boards` lists it")
    p.add_argument("--config", metavar="ENGINE.toml", type=Path,
                   help="engine parameters (default: sized to the board)")
    p.add_argument("--clock-mhz", type=float, metavar="MHZ",
                   help="engine clock (default: the board's target clock)")
    p.add_argument("--fused-block", action=argparse.BooleanOptionalAction, default=None,
                   help="without --config: the sized engine with (or without) the fused "
                        "depthwise + pointwise block where its memory fits (default: as the "
                        "board's file chooses; docs/boards.md, \"The fused block\")")
    p.add_argument("--name", default="fpgacnn",
                   help="design name: NAME.bit, NAME.hwh (default: fpgacnn)")
    p.add_argument("-o", "--output", metavar="DIR", type=Path, required=True,
                   help="build directory (created if missing)")
    return p


def _write_config(config, path):
    lines = ["# The engine this build used (fpgacnn build --config accepts this file).",
             "[engine]"]
    lines += [f"{k} = {v}" for k, v in config.as_dict().items()]
    path.write_text("\n".join(lines) + "\n")


def _build_open(board, config, args):
    from ...boards.host_link import host_link_top
    from ...boards.open_flow import build_open
    from ...boards.pll import pll_settings

    target = board.clock.target_mhz if args.clock_mhz is None else args.clock_mhz
    # The UART divisor is fixed in gateware: take it from the clock the PLL
    # will really make, not the one asked for.
    clock_mhz = pll_settings(board.family, board.clock.input_mhz, target).achieved_mhz
    link = host_link_top(board, config, clock_mhz)
    print(f"host link: UART at {link.report['baud']:,} baud ({link.report['clocks_per_bit']} "
          f"clocks per bit at {clock_mhz:g} MHz; protocol in docs/host_link.md)")
    build_open(board, link.component, args.output, name=args.name, target_mhz=target,
               host_link=link.report)
    print(f"to run a model on it: fpgacnn run MODEL --backend serial --port DEVICE "
          f"--baud {board.uart_baud} --config {args.output / 'engine.toml'}")
    return 0


def run(args):
    from ...boards.board import load_board
    from ...boards.engine_sizing import size_engine, multipliers_needed, bram_blocks_needed
    from ...core.config import EngineConfig

    board = load_board(args.board)
    check_output_directory(args.output, "-o")
    if args.clock_mhz is not None and not args.clock_mhz > 0:
        raise FpgacnnError(f"--clock-mhz must be positive, not {args.clock_mhz}")
    if args.config is not None and args.fused_block is not None:
        raise FpgacnnError("--[no-]fused-block sizes the engine: with --config, set fused_blocks in "
                           f"{args.config} instead")
    if args.config is not None:
        config = EngineConfig.from_toml(args.config)
        r = board.resources
        print(f"engine from {args.config}: pin={config.pin} pout={config.pout} "
              f"kmax={config.kmax}; estimated {multipliers_needed(config, board)} of "
              f"{r.multipliers} {r.multiplier_kind}, "
              f"{bram_blocks_needed(config, board)['total']} of {r.bram_blocks} block RAMs")
    else:
        sizing = size_engine(board, fused_block=args.fused_block)
        config = sizing.config
        print(f"no --config: default engine for {board.name}")
        print(sizing.describe())
    args.output.mkdir(parents=True, exist_ok=True)
    _write_config(config, args.output / "engine.toml")

    if board.toolchain == "open":
        return _build_open(board, config, args)

    from ...boards.zynq_vivado import write_zynq_project, run_vivado, vivado_command
    if args.clock_mhz is not None:
        raise FpgacnnError(f"--clock-mhz is not supported for Vivado boards yet; the PS "
                           f"fabric clock is {board.clock.target_mhz:g} MHz")
    project = write_zynq_project(board, config, args.output, name=args.name)
    print(f"wrote {project.script} and the engine's Verilog in {project.directory / 'rtl'}")
    if shutil.which("vivado") is None:
        print("vivado is not on PATH, so nothing was built. To build, run:")
        print(f"  {vivado_command(project)}")
        return EXIT_VIVADO_MISSING
    seconds = run_vivado(project)
    print(f"built {project.bitstream} and {project.hwh} in {seconds:.0f}s "
          f"(for pynq.Overlay({str(project.bitstream)!r}))")
    return 0
