"""``fpgacnn compile``: a quantized model -> its network program, checked, without a board.

::

    fpgacnn compile MODEL.onnx [--board NAME | --config ENGINE.toml] [--batch N]
                    [--clock-mhz MHZ] [--memory-bytes N] [-o PROGRAM.fcnp]

Compiles the model for the engine (the board's sized engine with
``--board``, as ``fpgacnn build --board`` makes it; ``--config``; or the
default :class:`~fpgacnn.core.config.EngineConfig`), lays the program out as
its memory image (docs/program.md, "The image as built") and prints, per
layer, how it reaches the engine (its mapping and runs) and the cycle model's
cycles, how many of its runs the engine's own address generation can read
and write (``addressed``: the pixel reader and writer take both patterns;
docs/program.md), then the image's size by region and the engine's
predicted time.
A layer the engine cannot run, or an image over ``--memory-bytes``, is one
error line naming the layer and the limit, in milliseconds: nothing is
generated, built or simulated. ``-o`` writes the image (checked before
anything runs).
"""

import argparse
from pathlib import Path

from ..compiler import EngineStep, compile_model, constants_residency
from ..onnx_import import load_onnx
from ..paths import check_input_file, check_output_file
from ..pixel_reader_setup import reader_fields
from ..pixel_writer_setup import writer_fields
from ..program_image import EngineRecord, VectorRecord, build_image
from ...core.errors import InputError

__all__ = ["add_parser", "run"]


def add_parser(subparsers):
    p = subparsers.add_parser(
        "compile", help="compile a quantized ONNX model to a network program (no board needed)",
        description="Compile a quantized ONNX model for an engine, print how each layer maps "
                    "and its predicted cycles, and optionally write the program's memory image.")
    p.add_argument("model", metavar="MODEL.onnx", type=Path,
                   help="quantized ONNX model (QDQ or QOperator int8)")
    engine = p.add_mutually_exclusive_group()
    engine.add_argument("--board", metavar="NAME",
                        help="compile for the board's sized engine (as `fpgacnn build --board` "
                             "makes it)")
    engine.add_argument("--config", metavar="ENGINE.toml", type=Path,
                        help="engine configuration (default: the default EngineConfig)")
    p.add_argument("--fused-block", action=argparse.BooleanOptionalAction, default=None,
                   help="with --board: the sized engine with (or without) the fused depthwise "
                        "+ pointwise block, as `fpgacnn build --board NAME --[no-]fused-block` "
                        "makes it (default: as the board's file chooses)")
    p.add_argument("--batch", type=int, default=1, help="images per inference (default: 1)")
    p.add_argument("--clock-mhz", type=float, default=None,
                   help="engine clock for the predicted time (default: the board's target "
                        "clock, else 100)")
    p.add_argument("--memory-bytes", type=int, default=None,
                   help="refuse a program image larger than this (the board memory budget)")
    p.add_argument("-o", "--output", metavar="PROGRAM.fcnp", type=Path,
                   help="write the program's memory image to this file")
    return p


def _engine(args):
    from ...core.config import EngineConfig
    if args.board is not None:
        from ...boards.board import load_board
        from ...boards.engine_sizing import size_engine
        board = load_board(args.board)
        clock = board.clock.target_mhz if args.clock_mhz is None else args.clock_mhz
        config = size_engine(board, fused_block=args.fused_block).config
        what = "sized engine with the fused block" if config.fused_blocks else "sized engine"
        return config, clock, f"board {args.board}'s {what}"
    if args.config is not None:
        return (EngineConfig.from_toml(args.config), args.clock_mhz or 100.0,
                f"engine {args.config}")
    return EngineConfig(), args.clock_mhz or 100.0, "the default engine"


def run(args):
    check_input_file(args.model, "MODEL", "a quantized ONNX model")
    check_output_file(args.output, "--output", (".fcnp",))
    if args.fused_block is not None and args.board is None:
        raise InputError("--[no-]fused-block sizes a board's engine: give --board NAME (or "
                         "fused_blocks in --config's file)")
    if args.batch < 1:
        raise InputError(f"--batch must be at least 1, not {args.batch}")
    if args.memory_bytes is not None and args.memory_bytes < 1:
        raise InputError(f"--memory-bytes must be positive, not {args.memory_bytes}")
    config, clock_mhz, which = _engine(args)
    model = load_onnx(args.model)
    program = compile_model(model, config, batch=args.batch)
    image = build_image(program, memory_bytes=args.memory_bytes)
    print(f"{model.name}: {len(program.steps)} steps for {which} (pin {config.pin}, "
          f"pout {config.pout}, kmax {config.kmax}), batch {args.batch}")
    warm = program.resident
    cycles_total = 0
    width = max(len(step.name) for step in program.steps)
    # Which runs the engine's own address generation reads and writes (the others
    # are gathered or scattered by the host).
    addressed, vector = {}, set()
    for record in image.records:
        if isinstance(record, VectorRecord):
            vector.add(record.step)
        if isinstance(record, EngineRecord):
            both = reader_fields(image, record) is not None \
                and writer_fields(image, record) is not None
            addressed[record.step] = addressed.get(record.step, 0) + both
    for index, step in enumerate(program.steps):
        if isinstance(step, EngineStep):
            cycles = sum((r.warm_predicted_cycles if warm else r.predicted_cycles)
                         for r in step.runs)
            cycles_total += cycles
            print(f"  {step.name:<{width}}  {step.op:<16} engine  {step.mapping:<14} "
                  f"{len(step.runs):>4} runs  {cycles:>10,} cycles  "
                  f"{addressed[index]}/{len(step.runs)} addressed")
            if step.unfused_reason:  # a depthwise + pointwise pair the block did not take
                print(f"      not fused: {step.unfused_reason}")
        elif index in vector:  # the program engine's vector unit; a host layer elsewhere
            print(f"  {step.name:<{width}}  {step.op:<16} vector (the sequencer's unit)")
        else:
            print(f"  {step.name:<{width}}  {step.op:<16} host")
    h = image.header
    runs = sum(len(s.runs) for s in program.steps if isinstance(s, EngineStep))
    print(f"address generation: {sum(addressed.values())} of {runs} runs read and written "
          f"by the engine's pixel reader and writer (the others by the host)")
    print(f"image: {image.nbytes:,} bytes (records {h.records} x {4 * h.record_words} B, "
          f"constants {h.constants_nbytes:,} B, arena {h.arena_nbytes:,} B)")
    if warm:
        parameters = constants_residency(program, True)["parameters"]
        state = f"weights resident, parameters {parameters}, every inference after the first"
    else:
        state = "weights and parameters streamed"
    print(f"engine: {cycles_total:,} cycles per batch ({state}), "
          f"{cycles_total / (clock_mhz * 1e3):.3f} ms at {clock_mhz:g} MHz; host layers and "
          f"transfers not counted")
    if args.output is not None:
        try:
            args.output.write_bytes(image.data.tobytes())
        except OSError as e:
            raise InputError(f"--output {args.output}: cannot write ({e.strerror or e})") \
                from None
        print(f"wrote {args.output}")
    return 0
