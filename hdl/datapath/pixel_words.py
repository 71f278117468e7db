"""The pixel words between the stream loader and the line buffer's writer.

With ``writer_words`` 1 a transfer is one ``pin``-byte word. With 2 it is a
group of one or two words of one input row: ``Cat(first, second, two)``,
``second`` meaningful when ``two`` is set. Both ends walk the row in the same
order (``for x: for ci``), so they share the step from one word to the next.
"""

from amaranth.hdl import Mux, unsigned

__all__ = ["pixel_group_shape", "step_in_row"]


def pixel_group_shape(config):
    """The payload shape of one transfer from the loader to the line buffer."""
    if config.writer_words == 2:
        return unsigned(16 * config.pin + 1)
    return unsigned(8 * config.pin)


def step_in_row(position, ci_tiles, in_w):
    """The position after a word that does not end its input row.

    Parameters
    ----------
    position : tuple
        ``(ci, ci_last, x, x_last)``: the word's input tile and column, and
        whether each is the row's last.
    ci_tiles, in_w : Value
        The run's input tiles and row width.

    Returns
    -------
    tuple
        The next word's ``(ci, ci_last, x, x_last)``, as expressions.
    """
    ci, ci_last, x, x_last = position
    return (Mux(ci_last, 0, ci + 1), Mux(ci_last, ci_tiles == 1, ci + 2 == ci_tiles),
            Mux(ci_last, x + 1, x), Mux(ci_last, x + 2 == in_w, x_last))
