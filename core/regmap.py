"""The engine's register map, declared once.

Everything that talks to the engine's AXI4-Lite port reads this declaration:
the gateware (:class:`fpgacnn.hdl.bus.csr_bank.CSRBank` decodes it), the driver
(the Python view, :class:`RegisterMap`), and C code (the header written by
:meth:`RegisterMap.c_header`). Addresses are assigned by
:class:`RegisterMapBuilder`, never typed by hand.

Layout (each block starts on a 64-byte boundary)::

    id      magic, version, one ``cfg_*`` register per EngineConfig parameter   (const)
            (the first fourteen: the block is full; the others in ``id_more``)
    ctrl    control (start, soft_reset: write 1 to pulse), status (busy, done,
            error, pending, error_fields: one bit per descriptor field)
    desc    one ``desc_*`` register per descriptor field                         (rw)
    perf    busy / stall-on-input / stall-on-output cycle counters               (ro)
    id_more ``cfg_*`` registers of the parameters added since 2.3 (pixel_pairs,
            param_words; fused_blocks only on an engine with the block,
            depthwise_pixels only on one with its half-rate unit)               (const)

Register map 2.6 adds the fused block's registers (``desc_fused``,
``desc_dw_base``, ``desc_dw_y_zp``, ``desc_dw_clamp_lo``, ``desc_dw_clamp_hi``
after ``desc_param_base``, and ``cfg_fused_blocks`` after ``cfg_param_words``)
on engines generated with ``fused_blocks`` only, whose ID ROM says 2.6; every
other engine's map, ROM (2.5) and Verilog are those of 2.5, byte for byte
(:func:`rom_version`). A driver reads a missing ``cfg_fused_blocks`` as 0.
Register map 2.7 adds ``cfg_depthwise_pixels`` after ``cfg_fused_blocks`` on
engines with the half-rate depthwise unit (``depthwise_pixels`` 1) only; a
driver reads a missing one as 2.

``status.done`` is sticky: set when a layer run finishes, cleared by the next
``start`` (and by a reset). ``status.error`` is sticky too: set when a
``start`` is refused because the descriptor breaks the engine contract
(:func:`fpgacnn.core.contract.descriptor_violations`; ``status.error_fields``
names the fields) or was written during the run before (no field set),
cleared by the next ``start`` and by a reset. A ``start`` is decided on
the descriptor registers as written: one that comes before the descriptor
check has settled after the last descriptor write is held (``status.pending``
and ``busy`` set), not dropped, and decided once it has (docs/engine.md,
"Descriptor check": the settle rule). The
performance counters are cleared by an accepted ``start`` and count until
``done``; they saturate at ``2**32-1``.

Examples
--------
>>> from fpgacnn.core.config import EngineConfig
>>> regs = build_regmap(EngineConfig())
>>> hex(regs["control"].address)
'0x40'
>>> regs.encode("desc_x_zp", -3)
253
>>> regs.decode("status", 0b10)
{'busy': 0, 'done': 1, 'error': 0, 'pending': 0, 'error_fields': 0}
"""

from dataclasses import dataclass, fields as dc_fields
import json

from .config import EngineConfig, require_config
from .contract import engine_contract

__all__ = [
    "MAGIC", "VERSION", "DATA_WIDTH", "ADDR_WIDTH", "ACCESS_KINDS",
    "Field", "Register", "RegisterMap", "RegisterMapBuilder", "RegisterMapError",
    "build_regmap", "rom_version",
]

#: ID ROM magic: the bytes ``b"FCNN"`` read as a little-endian word.
MAGIC = int.from_bytes(b"FCNN", "little")
#: Register-map and stream-format version (major, minor). A driver refuses a
#: different major version; minor versions only add registers.
VERSION = (2, 6)
#: The version in the ID ROM of an engine without the fused block: its map is
#: 2.5's, unchanged (the 2.6 registers exist only with the block).
_VERSION_WITHOUT_FUSED = (2, 5)
#: The version in the ID ROM of an engine with the half-rate depthwise unit
#: (``depthwise_pixels`` 1): 2.6's map and ``cfg_depthwise_pixels`` after
#: ``cfg_fused_blocks``, which no other engine has (a missing one reads 2).
_VERSION_HALF_RATE = (2, 7)
#: AXI4-Lite data width in bits.
DATA_WIDTH = 32
#: AXI4-Lite byte-address width: a 4 KiB window, the smallest address
#: segment Vivado assigns, so the map can grow without changing the port.
ADDR_WIDTH = 12

#: ``const``: value baked into the bitstream (ID ROM); ``ro``: driven by the
#: hardware; ``rw``: written by the host, read by the hardware, readable back;
#: ``pulse``: writing 1 to a field pulses it for one cycle, reads return 0.
ACCESS_KINDS = ("const", "ro", "rw", "pulse")

_BLOCK_ALIGN = 64


class RegisterMapError(ValueError):
    """A register declaration is inconsistent, or a name or value is unknown."""


@dataclass(frozen=True)
class Field:
    """A bit field of a register.

    Parameters
    ----------
    name : str
    offset : int
        Least significant bit.
    width : int
    signed : bool
        Two's complement; :meth:`RegisterMap.decode` sign-extends it.
    doc : str
    """

    name: str
    offset: int
    width: int
    signed: bool = False
    doc: str = ""

    @property
    def mask(self):
        """Mask of the field in the register word."""
        return ((1 << self.width) - 1) << self.offset

    def encode(self, value):
        """Field value to its bits in the register word; rejects values out of range."""
        if isinstance(value, bool) or not isinstance(value, int):
            try:
                value = int(value)  # numpy integers
            except (TypeError, ValueError):
                raise RegisterMapError(f"field {self.name!r} needs an integer, not {value!r}") from None
        lo, hi = ((-(1 << (self.width - 1)), (1 << (self.width - 1)) - 1) if self.signed
                  else (0, (1 << self.width) - 1))
        if not lo <= value <= hi:
            raise RegisterMapError(f"field {self.name!r} holds {lo}..{hi}, not {value}")
        return (value & ((1 << self.width) - 1)) << self.offset

    def decode(self, word):
        """The field's value in a register word (sign-extended if signed)."""
        value = (word >> self.offset) & ((1 << self.width) - 1)
        if self.signed and value >> (self.width - 1):
            value -= 1 << self.width
        return value


@dataclass(frozen=True)
class Register:
    """One 32-bit register.

    Parameters
    ----------
    name : str
        Lower-case identifier, unique in the map.
    address : int
        Byte address (a multiple of 4).
    access : str
        One of :data:`ACCESS_KINDS`.
    fields : tuple of Field
        LSB first; together at most 32 bits.
    group : str
        The block the register belongs to (``id``, ``ctrl``, ``desc``, ``perf``).
    doc : str
    value : int or None
        The constant word of a ``const`` register.
    """

    name: str
    address: int
    access: str
    fields: tuple
    group: str
    doc: str = ""
    value: int = None

    def field(self, name):
        for f in self.fields:
            if f.name == name:
                return f
        raise RegisterMapError(f"register {self.name!r} has no field {name!r} "
                               f"(fields: {', '.join(f.name for f in self.fields)})")

    @property
    def width(self):
        """Bits used, up to the top of the highest field."""
        return max(f.offset + f.width for f in self.fields)


class RegisterMapBuilder:
    """Assigns addresses and bit offsets to registers as they are declared.

    Parameters
    ----------
    data_width : int
        Register width in bits.
    addr_width : int
        Byte-address width of the bus; the map must fit.
    origin : int
        Byte address of the first register (a map that shares the bus with
        another, such as the program sequencer's at 0x800).

    Examples
    --------
    >>> b = RegisterMapBuilder()
    >>> b.begin_group("ctrl")
    >>> _ = b.add("control", "pulse", [("start", 1), ("soft_reset", 1)])
    >>> b.build()["control"].field("soft_reset").offset
    1
    """

    def __init__(self, *, data_width=DATA_WIDTH, addr_width=ADDR_WIDTH, origin=0):
        self._data_width = data_width
        self._addr_width = addr_width
        self._registers = []
        self._next = origin
        self._group = None

    def begin_group(self, name, *, align=_BLOCK_ALIGN):
        """Start a block of registers at the next ``align``-byte boundary."""
        self._next = -(-self._next // align) * align
        self._group = name

    def add(self, name, access, fields, *, doc="", value=None):
        """Declare a register at the next free address.

        Parameters
        ----------
        name : str
        access : str
            One of :data:`ACCESS_KINDS`.
        fields : list
            ``(name, width)`` or ``(name, width, signed)`` or
            ``(name, width, signed, doc)`` tuples, packed LSB first.
        doc : str
        value : int, optional
            For ``const`` registers: the field values as a dict, or one int
            for a single-field register.

        Returns
        -------
        Register
        """
        if self._group is None:
            raise RegisterMapError("begin_group() before add()")
        if access not in ACCESS_KINDS:
            raise RegisterMapError(f"register {name!r}: access must be one of {ACCESS_KINDS}, not {access!r}")
        if not name.isidentifier() or name != name.lower():
            raise RegisterMapError(f"register name must be a lower-case identifier, not {name!r}")
        if any(r.name == name for r in self._registers):
            raise RegisterMapError(f"register {name!r} declared twice")
        packed, offset = [], 0
        for spec in fields:
            fname, width, signed, fdoc = (tuple(spec) + (False, ""))[:4]
            if width < 1:
                raise RegisterMapError(f"register {name!r} field {fname!r}: width must be positive")
            packed.append(Field(fname, offset, width, bool(signed), fdoc))
            offset += width
        if not packed:
            raise RegisterMapError(f"register {name!r} has no fields")
        if offset > self._data_width:
            raise RegisterMapError(f"register {name!r}: fields take {offset} bits, "
                                   f"more than {self._data_width}")
        if len({f.name for f in packed}) != len(packed):
            raise RegisterMapError(f"register {name!r} has two fields of the same name")
        word = None
        if access == "const":
            if value is None:
                raise RegisterMapError(f"const register {name!r} needs a value")
            if not isinstance(value, dict):
                if len(packed) != 1:
                    raise RegisterMapError(f"const register {name!r}: give a dict of field values")
                value = {packed[0].name: value}
            word = 0
            for f in packed:
                word |= f.encode(value[f.name])
        elif value is not None:
            raise RegisterMapError(f"register {name!r}: only const registers take a value")
        address = self._next
        if address + self._data_width // 8 > (1 << self._addr_width):
            raise RegisterMapError(f"register {name!r} at {address:#x} does not fit "
                                   f"a {self._addr_width}-bit address space")
        reg = Register(name, address, access, tuple(packed), self._group, doc, word)
        self._registers.append(reg)
        self._next += self._data_width // 8
        return reg

    def build(self, *, config=None):
        """The finished :class:`RegisterMap`."""
        return RegisterMap(self._registers, data_width=self._data_width,
                           addr_width=self._addr_width, config=config)


class RegisterMap:
    """The driver's (and the gateware's) view of the registers.

    Registers are looked up by name (``regs["desc_in_h"]``) and iterate in
    address order. Single-field registers have one field called ``value``.

    Parameters
    ----------
    registers : iterable of Register
    data_width, addr_width : int
    config : EngineConfig or None
        The configuration the ID ROM describes.
    """

    def __init__(self, registers, *, data_width=DATA_WIDTH, addr_width=ADDR_WIDTH, config=None):
        self._registers = tuple(sorted(registers, key=lambda r: r.address))
        self._by_name = {r.name: r for r in self._registers}
        self._by_address = {r.address: r for r in self._registers}
        self.data_width = data_width
        self.addr_width = addr_width
        self.config = config

    def __getitem__(self, name):
        try:
            return self._by_name[name]
        except KeyError:
            raise RegisterMapError(f"no register named {name!r}") from None

    def __contains__(self, name):
        return name in self._by_name

    def __iter__(self):
        return iter(self._registers)

    def __len__(self):
        return len(self._registers)

    @property
    def version(self):
        """``(major, minor)``: the ID ROM's (:func:`rom_version` of the map's
        configuration), :data:`VERSION` for a map without one."""
        if "version" in self and self["version"].value is not None:
            v = self.decode("version", self["version"].value)
            return v["major"], v["minor"]
        return VERSION

    def at(self, address):
        """The register at a byte address, or None."""
        return self._by_address.get(address)

    def group(self, name):
        """Registers of one block, in address order."""
        return [r for r in self._registers if r.group == name]

    def id_rom(self):
        """The ID ROM's registers: the ``id`` block and the ``id_more`` one after the
        counters (the parameters the full ``id`` block had no room for)."""
        return self.group("id") + self.group("id_more")

    def address(self, name):
        return self[name].address

    def encode(self, name, value=None, **fields):
        """A register word from field values.

        ``encode("desc_in_h", 32)`` for a single-field register,
        ``encode("control", start=1)`` by field name (missing fields are 0).
        """
        reg = self[name]
        if value is not None:
            if fields or len(reg.fields) != 1:
                raise RegisterMapError(f"register {name!r}: give field values by name")
            fields = {reg.fields[0].name: value}
        word = 0
        for fname, fvalue in fields.items():
            word |= reg.field(fname).encode(fvalue)
        return word

    def decode(self, name, word):
        """Field values of a register word, as a dict."""
        return {f.name: f.decode(word) for f in self[name].fields}

    # -- the ID ROM ---------------------------------------------------------------

    def read_config(self, read):
        """Read and check the ID ROM of a running engine.

        Parameters
        ----------
        read : callable
            ``read(address) -> int``: one 32-bit register read.

        Returns
        -------
        EngineConfig
            The configuration the bitstream was generated with.

        Raises
        ------
        fpgacnn.core.errors.BackendError
            If the magic number or the major version does not match, or the
            ROM holds an invalid configuration.
        """
        from .errors import BackendError
        from .config import ConfigError
        magic = read(self.address("magic"))
        if magic != MAGIC:
            raise BackendError(f"no fpgacnn engine at this address: ID magic is {magic:#010x}, "
                               f"expected {MAGIC:#010x}")
        version = self.decode("version", read(self.address("version")))
        if version["major"] != VERSION[0]:
            raise BackendError(f"engine register map version {version['major']}.{version['minor']} "
                               f"is not supported (this driver speaks {VERSION[0]}.x)")
        values = {}
        for reg in self.id_rom():
            if reg.name.startswith("cfg_"):
                values[reg.name[4:]] = reg.fields[0].decode(read(reg.address))
        if (version["major"], version["minor"]) >= VERSION and "cfg_fused_blocks" not in self:
            # A 2.6 engine has the fused block's ID register, which this map
            # (of an engine without it) leaves out: read it where 2.6 puts it.
            reg = _fused_rom_register()
            values["fused_blocks"] = reg.fields[0].decode(read(reg.address))
        if (version["major"], version["minor"]) < _VERSION_HALF_RATE:
            # (a map with the register reading an older engine: nothing is there)
            values.pop("depthwise_pixels", None)
        elif "cfg_depthwise_pixels" not in self:
            # (likewise the half-rate unit's, where 2.7 puts it)
            reg = _half_rate_rom_register()
            values["depthwise_pixels"] = reg.fields[0].decode(read(reg.address))
        try:
            return EngineConfig.from_dict(values, source="engine ID ROM")
        except ConfigError as e:
            raise BackendError(str(e)) from None

    # -- exports -------------------------------------------------------------

    def to_dict(self):
        return {
            "format": "fpgacnn-regmap",
            "version": list(self.version),
            "magic": MAGIC,
            "data_width": self.data_width,
            "addr_width": self.addr_width,
            "config": self.config.as_dict() if self.config is not None else None,
            "registers": [
                {
                    "name": r.name, "address": r.address, "access": r.access,
                    "group": r.group, "doc": r.doc,
                    **({"value": r.value} if r.value is not None else {}),
                    "fields": [{"name": f.name, "offset": f.offset, "width": f.width,
                                "signed": f.signed, "doc": f.doc} for f in r.fields],
                }
                for r in self._registers
            ],
        }

    def to_json(self):
        """The map as JSON text (what ``fpgacnn generate`` writes)."""
        return json.dumps(self.to_dict(), indent=2) + "\n"

    @classmethod
    def from_json(cls, text):
        """Load a map written by :meth:`to_json` (for drivers of a prebuilt bitstream)."""
        try:
            doc = json.loads(text)
            if doc.get("format") != "fpgacnn-regmap":
                raise RegisterMapError("not an fpgacnn register map (format field)")
            registers = [
                Register(r["name"], r["address"], r["access"],
                         tuple(Field(f["name"], f["offset"], f["width"], f["signed"], f.get("doc", ""))
                               for f in r["fields"]),
                         r["group"], r.get("doc", ""), r.get("value"))
                for r in doc["registers"]
            ]
            config = EngineConfig.from_dict(doc["config"]) if doc.get("config") else None
        except (ValueError, KeyError, TypeError) as e:
            if isinstance(e, RegisterMapError):
                raise
            raise RegisterMapError(f"malformed register map JSON ({e})") from None
        return cls(registers, data_width=doc["data_width"], addr_width=doc["addr_width"],
                   config=config)

    def c_header(self, *, prefix="FPGACNN"):
        """The map as a C header: addresses, field shifts/masks, ROM values.

        Register ``status`` becomes ``FPGACNN_REG_STATUS`` (its byte
        address), its field ``done`` ``FPGACNN_REG_STATUS_DONE_SHIFT`` /
        ``_MASK``; a ``const`` register also gets ``..._VALUE``.
        """
        guard = f"{prefix}_REGS_H"
        out = [
            "/* Generated by fpgacnn from fpgacnn/hdl/regmap.py; do not edit. */",
            f"#ifndef {guard}", f"#define {guard}", "",
            f"#define {prefix}_MAGIC 0x{MAGIC:08x}u",
            f"#define {prefix}_VERSION_MAJOR {self.version[0]}",
            f"#define {prefix}_VERSION_MINOR {self.version[1]}",
            f"#define {prefix}_ADDR_WIDTH {self.addr_width}",
        ]
        group = None
        for r in self._registers:
            if r.group != group:
                group = r.group
                out += ["", f"/* {group} */"]
            name = f"{prefix}_REG_{r.name.upper()}"
            out.append(f"#define {name} 0x{r.address:03x}u  /* {r.access}: {r.doc} */")
            if r.value is not None:
                out.append(f"#define {name}_VALUE 0x{r.value:08x}u")
            if not (len(r.fields) == 1 and r.fields[0].name == "value"):
                for f in r.fields:
                    fname = f"{name}_{f.name.upper()}"
                    out.append(f"#define {fname}_SHIFT {f.offset}")
                    out.append(f"#define {fname}_MASK 0x{f.mask:08x}u")
            elif r.fields[0].width < self.data_width:
                out.append(f"#define {name}_WIDTH {r.fields[0].width}")
        out += ["", f"#endif /* {guard} */", ""]
        return "\n".join(out)


def _fused_rom_register():
    """``cfg_fused_blocks`` as a 2.6 map places it (after ``cfg_param_words``, the same
    on every engine with the block)."""
    probe = EngineConfig(spare_bank=1, pixel_pairs=1, fused_blocks=1)
    return build_regmap(probe)["cfg_fused_blocks"]


def _half_rate_rom_register():
    """``cfg_depthwise_pixels`` as a 2.7 map places it (after ``cfg_fused_blocks``, the
    same on every engine with the half-rate unit)."""
    probe = EngineConfig(spare_bank=1, pixel_pairs=1, fused_blocks=1, depthwise_pixels=1)
    return build_regmap(probe)["cfg_depthwise_pixels"]


def rom_version(config):
    """The ``(major, minor)`` version the ID ROM of ``config``'s engine holds:
    :data:`VERSION` with the fused block, 2.7 with its half-rate depthwise unit
    (``cfg_depthwise_pixels`` more), else 2.5 (the map without their registers)."""
    require_config(config)
    if config.depthwise_pixels != 2:
        return _VERSION_HALF_RATE
    return VERSION if config.fused_blocks else _VERSION_WITHOUT_FUSED


def build_regmap(config):
    """The register map of an engine generated with ``config``.

    Parameters
    ----------
    config : EngineConfig

    Returns
    -------
    RegisterMap
    """
    require_config(config)
    contract = engine_contract(config)
    b = RegisterMapBuilder()

    def add_cfg(params):
        for f in params:
            if f.name == "fused_blocks" and not config.fused_blocks:
                continue  # (2.6: only on an engine with the block)
            if f.name == "depthwise_pixels" and config.depthwise_pixels == 2:
                continue  # (only on an engine with the half-rate unit; absent reads 2)
            b.add(f"cfg_{f.name}", "const", [("value", 32)], value=getattr(config, f.name),
                  doc=f"generator parameter {f.name}")

    # The ID block is full with the parameters of register map 2.3: later ones
    # are in a block of their own after the performance counters, so that
    # every 2.x register stays where it was.
    params = dc_fields(EngineConfig)
    in_id = _BLOCK_ALIGN // (DATA_WIDTH // 8) - 2
    b.begin_group("id")
    b.add("magic", "const", [("value", 32)], value=MAGIC, doc='ID magic, b"FCNN"')
    version = rom_version(config)
    b.add("version", "const", [("minor", 16), ("major", 16)],
          value={"major": version[0], "minor": version[1]}, doc="register map version")
    add_cfg(params[:in_id])

    b.begin_group("ctrl")
    b.add("control", "pulse", [
        ("start", 1, False, "start a layer run with the descriptor registers (ignored while busy)"),
        ("soft_reset", 1, False, "abort the layer run and return the core to idle"),
    ], doc="write 1 to pulse")
    b.add("status", "ro", [
        ("busy", 1, False, "a start was taken and its layer run is not over"),
        ("done", 1, False, "the last layer run finished (cleared by start)"),
        ("error", 1, False, "the last start was refused: the descriptor breaks the "
                            "engine contract (error_fields) or was written while busy "
                            "(cleared by start)"),
        ("pending", 1, False, "a start waits for the descriptor check (busy is set too)"),
        ("error_fields", len(contract.descriptor_fields), False,
         "with error: bit i set when descriptor field i (in register order) breaks the "
         "engine contract; none when the registers were written while busy"),
    ], doc="engine status")

    # 21 registers, 26 with the fused block: a 128-byte block (the engine
    # tells a descriptor write by its block). A field this engine has no use for is a constant (no
    # flip-flops): resident weights and depthwise runs on the compact
    # arrangement, depthwise runs where pin != pout, param_base where the
    # parameter buffer holds one run's tiles.
    b.begin_group("desc", align=128)
    supported = contract.supported_fields
    for f in contract.descriptor_fields:
        if f.default is not None and not supported[f.name]:
            b.add(f"desc_{f.name}", "const", [("value", f.width, f.signed)], value=f.default,
                  doc=f.doc + " (a constant on this engine)")
        else:
            b.add(f"desc_{f.name}", "rw", [("value", f.width, f.signed)], doc=f.doc)

    b.begin_group("perf")
    b.add("perf_busy_cycles", "ro", [("value", 32)], doc="cycles busy in the last layer run")
    b.add("perf_stall_in_cycles", "ro", [("value", 32)],
          doc="busy cycles waiting for input stream data")
    b.add("perf_stall_out_cycles", "ro", [("value", 32)],
          doc="busy cycles held up by output stream back-pressure")

    b.begin_group("id_more")
    add_cfg(params[in_id:])
    return b.build(config=config)
