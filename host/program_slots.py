"""Copies of one sequencer program in board memory, for streaming batches (issue 16 item 5).

While the engine runs batch ``n`` from one copy, the host writes batch
``n + 1``'s input into the other (docs/program.md, "Batches"): each copy is
a whole :class:`~fpgacnn.host.sequencer_table.SequencerProgram` (image, run
tables, arena, counters) in a board buffer of its own, so the two batches
share no byte the engine writes, and batch ``n``'s output stays where it is
until the host has read it, after the engine has started on batch ``n + 1``.

A buffer of its own per copy, not two copies in one buffer: a Zynq host
drops its cache's copy of the attached buffer when the engine stops
(``memory_from_device``) and writes it back at a start
(``memory_to_device``); with the next input in a buffer of its own, the
drop after batch ``n`` cannot lose the input written for ``n + 1`` (not yet
written back), and its write-back at ``n + 1``'s start touches no byte of
batch ``n``'s output. Every address in a
run table is an offset from the sequencer's ``seq_memory``, so the copies
are byte for byte the same. The weights the engine keeps resident are the
program's, not a copy's: a warm start from either copy runs on them.

The cost is the program's memory twice (0.2 MB more for ResNet-8 on the
PYNQ-Z2's engine); the engine's gateware does not change.
"""

from .sequencer_table import SequencerProgram

__all__ = ["ProgramSlots"]


class ProgramSlots:
    """``count`` copies of ``image`` as sequencer programs, each in a buffer of its own.

    Parameters
    ----------
    image : ProgramImage
    count : int
        How many copies (2: one the engine runs, one the host fills).
    allocate : callable, optional
        ``allocate(nbytes)``: a board memory buffer (``board.allocate``);
        default a numpy array.

    Attributes
    ----------
    slots : list of SequencerProgram
    """

    def __init__(self, image, *, count=2, allocate=None):
        if count < 1:
            raise ValueError(f"a program needs at least one slot, not {count}")
        first = SequencerProgram(image, allocate=allocate)
        self.slots = [first] + [first.copy(allocate) for _ in range(count - 1)]

    def __len__(self):
        return len(self.slots)

    def __getitem__(self, k):
        return self.slots[k]
