"""A pipelined adder tree: the sum of many signed terms, one register per level."""

from amaranth.hdl import Module, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["AdderTree"]


def _check_positive(name, value):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be a positive integer, not {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be a positive integer, not {value!r}")


class AdderTree(wiring.Component):
    """Sum of ``count`` signed terms through a balanced binary tree of adders.

    Every level of the tree is registered, so the critical path is one adder
    whatever ``count`` is. A term left over at an odd-sized level is delayed by
    a register so that all terms reach the root after the same number of
    cycles. Each level widens its sums by one bit, so the result is exact.

    Parameters
    ----------
    count : int
        Number of terms (at least 1).
    width : int
        Width of each signed term in bits (at least 1).

    Members
    -------
    i_data : In(data.ArrayLayout(signed(width), count))
        The terms, sampled every cycle (the tree always flows).
    o_sum : Out(signed(width + levels))
        ``sum(i_data)`` from :attr:`latency` cycles earlier.

    Raises
    ------
    TypeError
        If ``count`` or ``width`` is not an integer.
    ValueError
        If ``count`` or ``width`` is less than 1.

    Latency
    -------
    ``ceil(log2(count))`` cycles (0 for a single term: then ``o_sum`` is
    ``i_data[0]`` combinationally).
    """

    def __init__(self, count, width):
        _check_positive("count", count)
        _check_positive("width", width)
        self._count = count
        self._width = width
        self._levels = (count - 1).bit_length()  # = ceil(log2(count)) for count >= 1
        super().__init__({
            "i_data": In(data.ArrayLayout(signed(width), count)),
            "o_sum": Out(signed(width + self._levels)),
        })

    @property
    def count(self):
        return self._count

    @property
    def width(self):
        return self._width

    @property
    def levels(self):
        """Adder levels (= registers on every path)."""
        return self._levels

    @property
    def latency(self):
        """Cycles from ``i_data`` to the matching ``o_sum``."""
        return self._levels

    def elaborate(self, platform):
        m = Module()
        terms = [self.i_data[i] for i in range(self._count)]
        width = self._width
        for level in range(self._levels):
            width += 1
            nxt = []
            for j in range(0, len(terms), 2):
                # No reset: the tree always flows and its user's valid says
                # when a sum matters; thousands fewer flip-flops on the reset net.
                s = Signal(signed(width), name=f"sum_l{level}_{j // 2}", reset_less=True)
                if j + 1 < len(terms):
                    m.d.sync += s.eq(terms[j] + terms[j + 1])
                else:
                    m.d.sync += s.eq(terms[j])
                nxt.append(s)
            terms = nxt
        m.d.comb += self.o_sum.eq(terms[0])
        return m
