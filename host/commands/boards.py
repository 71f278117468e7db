"""``fpgacnn boards``: the boards fpgacnn knows, with what their FPGAs have.

::

    fpgacnn boards [--json]

One row per board file in ``fpgacnn/boards/`` (see docs/boards.md): part,
LUTs, hard multipliers, block RAM, the engine clock a build aims at, the
toolchain and the host link.
"""

import json

__all__ = ["add_parser", "run", "board_table"]


def add_parser(subparsers):
    p = subparsers.add_parser(
        "boards", help="list the supported boards and their resources",
        description="List the boards fpgacnn can build for, with their FPGA's resources.")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return p


def _kbit(bits):
    return f"{bits // 1024:,}"


def board_table(boards):
    """The table ``fpgacnn boards`` prints, as text."""
    header = ("board", "part", "LUTs", "multipliers", "block RAM", "clock", "toolchain",
              "host link")
    rows = [header]
    for b in boards:
        r = b.resources
        bram = f"{r.bram_blocks} x {_kbit(r.bram_block_bits)} Kbit"
        if r.uram_blocks:
            bram += f" + {r.uram_blocks} URAM"
        rows.append((b.name, b.device, f"{r.luts:,}", f"{r.multipliers} {r.multiplier_kind}",
                     bram, f"{b.clock.target_mhz:g} MHz", b.toolchain, b.host_link))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines) + "\n"


def run(args):
    from ...boards.board import list_boards
    boards = list_boards()
    if args.json:
        out = []
        for b in boards:
            r = b.resources
            out.append({
                "name": b.name, "title": b.title, "family": b.family, "device": b.device,
                "package": b.package, "speed": b.speed, "toolchain": b.toolchain,
                "host_link": b.host_link, "platform": b.platform,
                "clock": {"input_mhz": b.clock.input_mhz, "target_mhz": b.clock.target_mhz},
                "resources": {"luts": r.luts, "multipliers": r.multipliers,
                              "multiplier_kind": r.multiplier_kind,
                              "bram_blocks": r.bram_blocks, "bram_bits": r.bram_bits,
                              "uram_blocks": r.uram_blocks, "spram_blocks": r.spram_blocks},
            })
        print(json.dumps(out, indent=2))
    else:
        print(board_table(boards), end="")
    return 0
