"""Registers that synthesis keeps as copies of their own.

A select or an address computed once and registered once fans out to block
RAMs and multiplexers spread over the die; registered once per consumer,
each copy can sit beside the logic it drives, and the one long route moves
in front of the copies, where it has a cycle to itself. Yosys merges
registers with the same input and clock into one (``opt_merge``), which
undoes exactly that, and a ``keep`` on the register's *wire* does not stop
it; ``keep`` on the flip-flop *cell* does. Amaranth only puts attributes on
wires, so :func:`register_copy` marks the wire with :data:`KEEP_COPY` and
the open-toolchain flow runs :data:`YOSYS_KEEP_COPIES` right after reading
the design, moving the mark onto the cell that drives it.
"""

from amaranth.hdl import Signal

__all__ = ["KEEP_COPY", "YOSYS_KEEP_COPIES", "register_copy"]

#: Wire attribute marking a register :func:`register_copy` made.
KEEP_COPY = "fpgacnn_keep_copy"

#: Yosys command: ``keep`` on every flip-flop driving a marked wire.
YOSYS_KEEP_COPIES = f"setattr -set keep 1 a:{KEEP_COPY} %ci1:+[Q] a:{KEEP_COPY} %d"


def register_copy(m, value, name, *, reset_less=True, domain="sync"):
    """``value`` registered in a flip-flop of its own (one cycle later).

    Parameters
    ----------
    m : amaranth.hdl.Module
    value : amaranth value
    name : str
        Name of the register (each copy its own).
    reset_less : bool
        No reset (the default: copies of selects and addresses, which the
        consumer's valid qualifies).
    domain : str

    Returns
    -------
    amaranth.hdl.Signal
    """
    copy = Signal.like(value, name=name, reset_less=reset_less, attrs={KEEP_COPY: "1"})
    m.d[domain] += copy.eq(value)
    return copy
