"""Delay lines: a value carried through pipeline stages beside the data it belongs to."""

from amaranth.hdl import Signal

__all__ = ["delay_line", "delayed"]


def delay_line(m, value, cycles, name, *, reset_less=False):
    """``value`` and its registered copies in ``m``: ``[value, 1 cycle later, ..., cycles later]``.

    Parameters
    ----------
    m : Module
    value : Value or View
        The copies take its shape (a View's layout too).
    cycles : int
        Registers in the line (0: just ``value``).
    name : str
        Stem of the registers' names (``name1``, ``name2``, ...).
    reset_less : bool
        Registers without reset, for data a valid bit qualifies.
    """
    stages = [value]
    for i in range(cycles):
        nxt = Signal.like(value, name=f"{name}{i + 1}", reset_less=reset_less)
        m.d.sync += nxt.eq(stages[-1])
        stages.append(nxt)
    return stages


def delayed(m, value, cycles, name, *, reset_less=False):
    """``value`` ``cycles`` cycles later (the last stage of :func:`delay_line`)."""
    return delay_line(m, value, cycles, name, reset_less=reset_less)[-1]
