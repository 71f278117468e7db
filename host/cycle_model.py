"""Analytic cycle count of one layer run on the convolution engine (docs/engine.md).

The model follows the engine's schedule at the granularity of rows:

- the parameters and weights stream in first, one beat per cycle (the
  parameters alone when the weights are resident, ``load_params``);
- the line-buffer writer stores input rows at one ``pin``-byte word per cycle
  (two of one row with ``writer_words`` 2;
  ``pin/B`` cycles per word when a word spans several beats; a cycle after
  the loader, and two words buffered, with ``deep_pipeline``'s register
  slice between them), but may only start a row once its slot is free,
  i.e. once the output row that still needed the slot's previous row has
  been issued; the words come a beat a cycle (a DMA), or as the program
  engine's pixel reader gives them (``reader``: a cycle a command);
- output row ``oy`` is issued once its input rows are complete, one window per
  cycle: ``out_w*co_tiles*ci_tiles`` cycles, or longer when the output stream
  (``pout/B`` beats per output word) is slower than the array; with pixel
  pairs two pixels a window, ``ceil(out_w/2)`` positions a row, followed word
  by word through the two output FIFOs (docs/engine.md, "Pixel pairs");
- a fused depthwise + pointwise block (descriptor ``fused``) is followed pair
  by pair: the line buffer's depthwise window pairs (``ci_tiles`` windows a
  pair, credited by the pair buffer's slots), the pair's words through the
  depthwise unit and its requantizer into the slots, which pair the image's
  pixels in raster order (across rows), then the pointwise issuer's
  ``co_tiles * group`` windows a slot as a pixel-pair position
  (docs/engine.md, "Step 3", "Pairs across rows");
- the last results then drain through the pipeline and the output packer,
  and the sink takes the last beat: a DMA a beat a cycle, or the program
  engine's pixel writer (``writer``), whose unit a cycle can keep an
  image's last beat waiting for the beat before.

It assumes the input stream is valid whenever its source has a beat (a
DMA's always, the reader's at its pace) and the output stream always
ready (back-pressure only adds cycles). RTL cycle counts are exact and are the
reference; tests check this model against them within 2%.

Examples
--------
>>> from fpgacnn.core.config import EngineConfig
>>> cfg = EngineConfig(pin=8, pout=8, kmax=3, stream_width=64)
>>> est = conv_cycles(cfg, (1, 32, 16, 16), (32, 32, 3, 3), pads=(1, 1, 1, 1))
>>> est.bound, round(est.compute_utilization, 2) > 0.9
('compute', True)
"""

from collections import deque
from dataclasses import dataclass, field

from ..core.contract import engine_contract
from ..core.fused_block import depthwise_issue_cycles, pointwise_tiles
from ..core.memory_port import writer_unit
from ..core.pixel_reader_fields import reader_beat_commands
from ..core.pixel_writer_fields import writer_beat_cycles
from ..core.vector_fields import VECTOR_RUN_OVERHEAD, vector_accesses, window_taps
from .packing import map_layer

__all__ = ["CycleEstimate", "layer_cycles", "conv_cycles", "sequenced_run_cycles",
           "fused_run_cycles", "FUSED_PORT_SHARE", "vector_run_cycles"]

@dataclass(frozen=True)
class CycleEstimate:
    """Cycle count of one layer run.

    Members
    -------
    cycles : int
        From ``start`` to ``done`` (the cycles ``busy`` is high).
    macs : int
        Useful multiply-accumulates of the run (the layer's, or the array's
        issued ones when the caller did not say).
    peak_macs_per_cycle : int
    load_cycles : int
        Parameter and weight beats.
    compute_cycles : int
        Cycles in which a window is issued into the array (a fused run's
        pointwise windows; its depthwise unit's are ``detail["demand"]
        ["depthwise"]``).
    input_wait_cycles : int
        Cycles the array waited for input rows (line-buffer fill included).
    output_wait_cycles : int
        Extra cycles imposed by the output stream's bandwidth.
    tail_cycles : int
        Pipeline drain and the last output beats.
    bound : str
        What bounds the run: ``"compute"`` (the array), ``"depthwise"`` (a
        fused run's depthwise unit), ``"input"``, ``"output"`` or ``"weights"``:
        the largest of ``detail["demand"]``, the cycles each needs on its own
        (the first of a tie in that order, the depthwise unit before the
        array, whose pointwise windows wait for the unit's pairs).
    reason : str
        One sentence saying why.
    detail : dict
        ``"demand"``: ``"depthwise"`` (the window pairs of a fused run's
        depthwise unit at :func:`~fpgacnn.core.fused_block.depthwise_issue_cycles`
        each, 0 in other runs), ``"compute"`` (``compute_cycles``), ``"input"``
        (the line-buffer writer's cycles), ``"output"`` (the output stream's)
        and ``"weights"`` (``load_cycles``); the schedule's ``"fill"``,
        ``"first_issue"``, ``"last_issue"`` and ``"latency"``.
    """

    cycles: int
    macs: int
    peak_macs_per_cycle: int
    load_cycles: int
    compute_cycles: int
    input_wait_cycles: int
    output_wait_cycles: int
    tail_cycles: int
    bound: str
    reason: str
    detail: dict = field(default_factory=dict, compare=False)

    @property
    def utilization(self):
        """``macs / (cycles * peak)``."""
        return self.macs / (self.cycles * self.peak_macs_per_cycle)

    @property
    def compute_utilization(self):
        """Utilization counting only the cycles after the weights are in."""
        return self.macs / ((self.cycles - self.load_cycles) * self.peak_macs_per_cycle)


#: The demands of :attr:`CycleEstimate.detail` as a reason names them.
_DEMAND_NAMES = {"depthwise": "the depthwise unit", "compute": "the array",
                 "input": "the input", "output": "the output", "weights": "the weights"}


def _produced(oy, out_w, out_h, co, pool):
    """Indices (within the output row's groups, ``ox*co + c``) of the groups that emit a word."""
    if not pool:
        return range(out_w * co)
    if oy % 2 == 0 or oy >= 2 * (out_h // 2):
        return range(0)
    return [ox * co + c for ox in range(1, 2 * (out_w // 2), 2) for c in range(co)]


def layer_cycles(config, desc, *, macs=None, writer=None, reader=None):
    """Cycle count of the layer run ``desc`` (a descriptor dict, as from ``pack_layer``).

    Parameters
    ----------
    config : fpgacnn.core.config.EngineConfig
    desc : mapping
        Descriptor values keyed by field name.
    macs : int, optional
        The layer's real MACs (for the utilization); default: the MACs the
        array issues, ``out_h*out_w*co_tiles*ci_tiles*window_macs*batch``.
    writer : mapping, optional
        The output stream's sink: None for a DMA, which takes a beat a cycle
        (the default), or the fields of the program engine's pixel writer
        (:data:`~fpgacnn.core.pixel_writer_fields.WRITER_FIELDS`), which
        takes a unit of its mode a cycle
        (:func:`~fpgacnn.core.memory_port.writer_unit`: a beat in a wide
        run) and the next beat only once the last unit of the one before
        has left (:func:`~fpgacnn.core.pixel_writer_fields.writer_beat_cycles`).
        It matters where the packer sends more than a unit a cycle (a beat
        of two words, pixel pairs), and where a run's last beat holds fewer
        words than the writer's cycles on the beat before (an image's words
        end early in its last beat, which the packer sends at once).
    reader : mapping, optional
        The input stream's source: None for a DMA, which gives a beat a
        cycle (the default), or the fields of the program engine's pixel
        reader (:data:`~fpgacnn.core.pixel_reader_fields.READER_FIELDS`, the
        run's pixel section), which gives a command a cycle
        (:func:`~fpgacnn.core.pixel_reader_fields.reader_beat_commands`): on
        an engine whose word is narrower than its beat, a beat of narrow
        words takes a cycle a word. Where every beat is one command (wide
        sections, the remap's pairs) the run is the DMA's; elsewhere the
        input rows follow the reader's beats (:class:`_ReaderPace`).

    Returns
    -------
    CycleEstimate
    """
    beat, pin, pout, k = config.stream_bytes, config.pin, config.pout, config.kmax
    contract = engine_contract(config)
    lat = contract.latency
    slots = contract.row_slots
    in_h, in_w = int(desc["in_h"]), int(desc["in_w"])
    ci, co = int(desc["ci_tiles"]), int(desc["co_tiles"])
    out_h, out_w = int(desc["out_h"]), int(desc["out_w"])
    s, pt, batch = int(desc["stride"]), int(desc["pad_top"]), int(desc["batch"])
    pool = bool(desc["pool"])
    peak = config.peak_macs_per_cycle
    # Windows per output tile: one per input tile, one in a depthwise run (but
    # every input tile is still written to the line buffer); in a fused block's
    # pointwise half, the pair buffer's windows of a remap position (`group`).
    fused = bool(desc.get("fused", 0))
    wins = 1 if desc.get("depthwise", 0) else pointwise_tiles(config, ci) if fused else ci
    if macs is None:
        macs = out_h * out_w * co * wins * config.window_macs * batch
    # Output pixels a window issue computes: two adjacent ones with pixel pairs.
    pairs = bool(desc.get("pixel_pairs", 0))
    positions = -(-out_w // 2) if pairs else out_w

    load = 0
    if desc["load_weights"]:
        load = co * contract.param_beats + co * wins * contract.weight_beats
        if fused:
            load += ci * contract.depthwise_beats
    elif desc.get("load_params", 0):  # the weights are resident
        load = co * contract.param_beats
    # The input streams from the run's start, a beat a cycle (the DMA's, and the
    # program engine's reader, which the sequencer starts first: sequenced_run_cycles).
    t0 = lat.start + load

    per_word_in = max(1, pin // beat)            # cycles per line-buffer word
    held = lat.pixel_slice_words                 # words between loader and writer (a cycle)
    row_in = in_w * ci * per_word_in             # cycles to write one input row
    if config.writer_words == 2:
        # Pairs of one row a cycle; a row starting on the second word of a
        # beat (its word offset in the image odd) writes that word alone.
        row_cycles = [_pair_row_cycles(r * in_w * ci, in_w * ci) for r in range(in_h)]
    else:
        row_cycles = [row_in] * in_h
    per_word_out = max(1, pout // beat)          # cycles per output word
    # Output words an output FIFO entry holds (two, a beat, in some pair runs) and
    # the cycles the packer takes for one.
    entry_words = contract.output_entry_words(desc)
    sink = beat if writer is None else writer_unit(config, wide=bool(writer["wide"]))
    per_entry_out = max(1, entry_words * pout // sink)
    # Entries a beat holds where several fit one (an image's last beat may hold fewer),
    # and the pops of the stream's last entries, enough for the run's last beat and
    # the one before it (_last_beat_taken).
    entry_bytes = entry_words * pout
    beat_entries = beat // entry_bytes if entry_bytes <= beat else None
    recent = deque(maxlen=(beat_entries or 1) + 1)
    issue = positions * co * wins                # cycles to issue one output row
    latency, drain = lat.pipeline(pool), lat.drain
    depth = lat.output_fifo_depth

    pace = None
    if reader is not None and pin < beat:
        commands = reader_beat_commands(config, reader)
        if any(c > 1 for c in commands):
            pace = _ReaderPace(config, desc, commands, t0, bool(load), held)

    rows = batch * in_h
    orows = batch * out_h
    w_end = []      # cycle from which input row g counts as written
    r_start, r_end = [], []
    j_free = 0      # output rows issued before the writer may start its next row
    wait_in = wait_out = 0
    pops = []       # output-word pop cycles (only kept while they can throttle the issue)
    pair_pops = ([], [])  # pixel pairs: the even and the odd pixels' FIFOs' pops
    last_pop = -(1 << 60)
    pw_ends = []    # a fused block's pairs: the cycle after each one's last pointwise window
    fused_next = None  # a fused run: the first cycle the line buffer's next window may issue
    g = j = 0
    while g < rows or j < orows:
        # Writer: row g may start once every output row that needs row g - slots is issued.
        if g < rows:
            while j_free < orows and _need(j_free, in_h, out_h, s, pt) + slots <= g:
                j_free += 1
            if j_free <= len(r_end):
                freed = t0 if j_free == 0 else r_end[j_free - 1]
                prev = w_end[-1] if w_end else t0 + (1 if held else 0)
                row_time = row_cycles[g % in_h]
                if pace is not None:
                    end = pace.row(g, freed)
                elif freed > prev:
                    # blocked: the words in the register slice and all but the last beat
                    # of the next word are waiting
                    end = max(prev + row_time, freed + row_time - (held + 1) * (per_word_in - 1))
                else:
                    end = prev + row_time
                w_end.append(end)
                g += 1
                continue
        # Reader: output row j once its input rows are written.
        n, oy = divmod(j, out_h)
        target = n * in_h + min(oy * s - pt + k, in_h)
        prev = r_end[-1] if r_end else max(t0, lat.line_buffer_setup)
        if fused and r_end:
            # (the half-rate depthwise unit's pairs: no issue the cycle after one)
            prev = fused_next
        start = max(prev, w_end[target - 1])
        wait_in += start - prev
        groups = _produced(oy, out_w, out_h, co, pool)
        if fused:
            last_pop, end, fused_next = _fused_row(config, start, n, oy, out_w, out_h, ci, co,
                                                   wins, latency, depth, entry_words,
                                                   per_entry_out, pair_pops, last_pop, recent,
                                                   pw_ends)
            if pw_ends:
                wait_out += max(0, pw_ends[-1] - start - issue)
        elif pairs:
            last_pop, end = _pair_row(start, out_w, co, wins, latency, depth, entry_words,
                                      per_entry_out, pair_pops, last_pop, recent)
            wait_out += end - start - issue
        elif per_word_out <= wins:
            # Pops keep up with results: the issue never waits for credits.
            end = start + issue
            # Word i of the row pops two cycles after its write, or its pops' turn after
            # the row before: the last few kept, the row's last the same as the others'.
            before = last_pop
            for i in range(max(0, len(groups) - recent.maxlen), len(groups)):
                written = start + groups[i] * wins + wins - 1 + latency
                last_pop = max(written + 2, before + (i + 1) * per_word_out)
                recent.append(last_pop)
        else:
            # Output-bound rows: follow each word; a group issues once its credit is back.
            t = start
            g_at = 0
            for gi in groups:
                t = max(t + (gi - g_at) * wins, 0)
                g_at = gi
                if len(pops) >= depth:
                    t = max(t, pops[-depth] + 1)
                written = t + wins - 1 + latency
                last_pop = max(written + 2, last_pop + per_word_out)
                pops.append(last_pop)
                recent.append(last_pop)
            end = max(t + (out_w * co - g_at) * wins, start + issue)
            wait_out += end - start - issue
        r_start.append(start)
        r_end.append(end)
        j += 1

    # (a fused run's last window into the array is its pointwise half's)
    last_issue = (pw_ends[-1] if fused else r_end[-1]) - 1
    # the last entry's beats leave the packer a beat a cycle, whatever the sink's pace
    out_end = last_pop + 1 + max(1, entry_bytes // beat)
    if writer is not None and beat_entries is not None:
        image_words = sum(len(_produced(oy, out_w, out_h, co, pool)) for oy in range(out_h))
        out_end = max(out_end, _last_beat_taken(config, writer, contract, desc, recent,
                                                image_words // entry_words, beat_entries) + 1)
    done = max(out_end, last_issue + drain + 1, w_end[-1])
    # (a fused run's pointwise issues a slot of two pixels of the image's raster order)
    compute = batch * -(-out_h * out_w // 2) * co * wins if fused else orows * issue
    tail = done - r_end[-1]
    fill = r_start[0] - t0
    total = done
    # What each resource needs on its own; the largest bounds the run.
    n_words = batch * sum(len(_produced(oy, out_w, out_h, co, pool)) for oy in range(out_h))
    input_cycles = batch * sum(row_cycles)
    if pace is not None:  # the reader's commands, a cycle each, where they are more
        input_cycles = max(input_cycles, sum(pace.commands))
    out_cycles = n_words // entry_words * per_entry_out
    # A fused run's depthwise unit issues every window pair of every output row
    # (the line buffer's pairs, not the pair buffer's raster slots), a pair's ci
    # windows at its pace, an odd row's one-pixel pair at a cycle a window
    # (_fused_row); 0 without the unit. It comes first: on a tie with the
    # pointwise issuer it is the unit that binds, as the issuer only takes
    # slots the unit has filled.
    dw_pace = depthwise_issue_cycles(config) if fused else 0
    dw_pairs, dw_singles = (batch * out_h * (out_w // 2), batch * out_h * (out_w % 2)) \
        if fused else (0, 0)
    dw_cycles = (dw_pairs * dw_pace + dw_singles) * ci
    demand = {"depthwise": dw_cycles, "compute": compute, "input": input_cycles,
              "output": out_cycles, "weights": load}
    bound = max(demand, key=demand.get)
    if bound == "depthwise":
        singles = f" and {dw_singles} one-pixel pairs x {ci} at 1 cycle" if dw_singles else ""
        reason = (f"the depthwise unit: {dw_pairs} window pairs x {ci} channel tiles at "
                  f"{dw_pace} cycle(s) each{singles} ({dw_cycles} cycles) against the "
                  f"pointwise's {compute} compute cycles")
    elif bound == "compute" and fused:
        reason = (f"the array (the pointwise half): {batch * -(-out_h * out_w // 2)} pixel "
                  f"pairs x {co} output tiles x {wins} windows, one window per cycle "
                  f"({compute} cycles) against the depthwise unit's {dw_cycles}")
    elif bound == "compute":
        reason = (f"the array: {orows} output rows x {out_w} px x {co} output tiles x "
                  f"{wins} input tiles, one window per cycle ({compute} cycles)")
    elif bound == "input":
        per = (f"{per_word_in} cycle(s) per {pin}-byte word" if config.writer_words == 1
               else f"two {pin}-byte words of a row per cycle")
        reason = (f"input bandwidth: {rows} input rows of {in_w} px x {ci} tiles at "
                  f"{per} ({input_cycles} cycles) against {compute} compute cycles")
    elif bound == "output":
        per = (f"{per_word_out} beats each" if entry_words == 1
               else "a beat of two a cycle")
        reason = (f"output bandwidth: {n_words} words of {pout} bytes at {per} "
                  f"({out_cycles} cycles) against {compute} compute cycles")
    else:
        reason = (f"weight loading: {load} beats of parameters and weights against "
                  f"{compute} compute cycles")
    ties = [_DEMAND_NAMES[d] for d in demand if d != bound and demand[d] == demand[bound]]
    if ties:  # (the first of a tie is named: the others bind as much)
        reason += f"; as many for {', '.join(ties[:-1])}{' and ' if ties[1:] else ''}{ties[-1]}"
    return CycleEstimate(
        cycles=int(total), macs=int(macs), peak_macs_per_cycle=peak, load_cycles=load,
        compute_cycles=compute, input_wait_cycles=int(wait_in), output_wait_cycles=int(wait_out),
        tail_cycles=int(tail), bound=bound, reason=reason,
        detail={"fill": fill, "first_issue": r_start[0], "last_issue": last_issue,
                "latency": latency, "demand": demand})


def _pair_row(start, out_w, co, wins, latency, depth, entry_words, per_entry_out, pops,
              last_pop, recent):
    """One output row of a pixel-pair run, entry by entry: returns ``(last_pop, end)``.

    Group ``(p, c)`` (pixels ``2p`` and ``2p + 1``, output tile ``c``) issues
    its first window once the group before is issued and, if it starts an
    entry (every group, or the even tiles' when an entry is a beat of
    ``entry_words`` = 2), it holds a place in the FIFO of each pixel it writes
    (a place frees the cycle after its entry's pop); an entry is written
    ``wins - 1 + latency`` cycles after its last group issues. The packer pops
    pixel ``2p``'s entries from the first FIFO, then pixel ``2p + 1``'s from
    the second, one every ``per_entry_out`` cycles, each two cycles after its
    write at the earliest. ``pops`` (the two FIFOs' pop cycles, from earlier
    rows on) grows, and ``recent`` takes the pops in stream order. A group's
    places are those of entries at least a pixel's earlier (``depth`` is
    more), so the pops of the pairs before decide every group of a pair.
    """
    t = start - wins
    for p in range(-(-out_w // 2)):
        second = 2 * p + 1 < out_w
        written = []
        for c in range(co):
            t += wins
            if c % entry_words == 0:
                for fifo, needed in zip(pops, (True, second)):
                    reserved = len(fifo) + c // entry_words
                    if needed and reserved >= depth:
                        t = max(t, fifo[reserved - depth] + 1)
            if c % entry_words == entry_words - 1:
                written.append(t + wins - 1 + latency)
        for fifo, needed in zip(pops, (True, second)):
            if needed:
                for w in written:
                    last_pop = max(w + 2, last_pop + per_entry_out)
                    fifo.append(last_pop)
                    recent.append(last_pop)
    return last_pop, t + wins


def _fused_row(config, start, n, oy, out_w, out_h, ci, co, group, latency, depth, entry_words,
               per_entry_out, pops, last_pop, recent, pw_ends):
    """Output row ``oy`` of image ``n`` of a fused block run (docs/engine.md, "Step 3",
    "Pairs across rows"), window pair by window pair: returns ``(last_pop, end,
    next)``, ``end`` the cycle after the line buffer's last window of the row (the
    row bookkeeping's), ``next`` the first cycle the next window may issue (``end``
    but after a pair of two pixels on the half-rate unit), and appends the pointwise end of each slot the row fills to
    ``pw_ends`` (slot ``k`` of the run: ``pw_ends[k]``).

    The pair buffer's slots pair the image's pixels in raster order: pixel ``p``
    in slot ``p div 2`` of the image's ``ceil(pixels / 2)``. Window pair ``(p,
    p + 1)`` (or ``p`` alone at the end of an odd row) takes the slot of its last
    pixel unless that is the slot of the pixel before (the single last pixel of a
    row starting on an odd ``p``); its ``ci`` depthwise windows issue one every
    :func:`~fpgacnn.core.fused_block.depthwise_issue_cycles` cycles (1, 2 with the
    half-rate unit but 1 for a pair of one pixel; the pace holds across rows too)
    after the pair before's, and one that takes slot ``k`` not before slot ``k -
    slots`` is released (the pair buffer's ``slots``,
    :func:`~fpgacnn.core.fused_block.pair_buffer_shape`): its last pointwise window
    plus the line buffer's latency less one (the release travels with the reads;
    its credit is back the cycle after). Its last word is in the pair buffer the line
    buffer's, the depthwise unit's and the depthwise requantization's latencies after
    its last window (``Latencies.depthwise_requant``, on any top). A window pair fills
    at most one slot (the one its pixel ``p`` or ``p + 1`` completes, or an image's
    odd last pixel alone); the pointwise issuer begins it the cycle after, or after
    the slot before: its ``co`` groups of ``group`` windows as a pixel-pair position
    (:func:`_pair_row`, output FIFO credits included).
    """
    lat = engine_contract(config).latency
    slots = engine_contract(config).fused.pair_buffer.slots
    pace = depthwise_issue_cycles(config)
    pixels = out_h * out_w
    per_image = -(-pixels // 2)
    base = n * per_image
    t = start  # the first cycle the next window pair may issue
    for x in range(0, out_w, 2):
        p = oy * out_w + x
        npx = min(2, out_w - x)
        # the slot of its last pixel, and whether the pair before took it already
        taken = base + (p + npx - 1) // 2
        takes = p % 2 == 0 or npx == 2
        if takes and taken >= slots:
            t = max(t, pw_ends[taken - slots] + lat.line_buffer - 1)
        # (a pair of one pixel takes the half-rate unit a cycle)
        each = pace if npx == 2 else 1
        t += ci * each
        written = t - each + lat.line_buffer + lat.depthwise_unit + lat.depthwise_requant
        # slots complete before and after the pair (an image's odd last alone completes)
        after = (p + npx) // 2 if p + npx < pixels else per_image
        if after > p // 2:
            k = p // 2
            begin = written + 1 if not pw_ends else max(written + 1, pw_ends[-1])
            last_pop, pw_end = _pair_row(begin, 2 if 2 * k + 1 < pixels else 1, co, group,
                                         latency, depth, entry_words, per_entry_out, pops,
                                         last_pop, recent)
            pw_ends.append(pw_end)
    return last_pop, t - each + 1, t


def _last_beat_taken(config, writer, contract, desc, recent, image_entries, beat_entries):
    """The cycle in which the pixel writer takes the run's last beat.

    The packer sends a beat the cycle after the pop of its last entry
    (``recent``: the last pops, in stream order), so the last beat of an
    image, which ends early with the image's last entry, can come before the
    writer is done with the beat before it: it takes it in the cycle that
    beat's last unit leaves (:func:`~fpgacnn.core.pixel_writer_fields.
    writer_beat_cycles` cycles after it took that beat). The beat before is
    taken the cycle it is sent: a beat of ``beat_entries`` entries is popped
    in at least as many cycles as the writer spends on the one before it,
    and an image of one beat (in a batch) in at least as many as the writer
    spends on the image before.
    """
    beats = contract.output_image_beats(*contract.pooled_shape(desc), int(desc["co_tiles"]))
    in_last = image_entries - (beats - 1) * beat_entries  # entries of the run's last beat
    if beats == 1 and int(desc["batch"]) == 1:
        return recent[-1] + 1
    before = writer_beat_cycles(config, writer, beats - 2 if beats > 1 else beats - 1)
    return max(recent[-1] + 1, recent[-1 - in_last] + 1 + before)


class _ReaderPace:
    """Input rows written as the program engine's pixel reader gives their beats.

    The reader's output side pops a command a cycle into its packer, which
    holds one beat: a beat of ``c`` commands is offered ``c`` cycles after
    the pops begin, and they begin in the cycle the loader takes the beat
    before (the packer pops while its beat leaves). The loader takes a beat
    in the cycle of its last transfer to the line buffer's writer: a word,
    or with ``writer_words`` 2 two words of one input row (a beat spanning
    two rows is two transfers, the docs/engine.md pair writer); with
    ``deep_pipeline`` through a register slice of two places, which delays a
    transfer a cycle and takes one while fewer than two wait for the writer.
    The writer stores a transfer a cycle, a row's first once its slot is
    free. The first beat's pops begin the cycle the loader takes the last
    beat of the constants (``t0 - 1``); with no constants the engine starts
    on the reader's first beat, so that beat is there at ``t0``. The reader
    issues its reads ahead of its pops (``outstanding``, the sequencer's
    start), so the memory never holds a pop back.
    """

    def __init__(self, config, desc, commands, t0, constants, held):
        in_h, in_w = int(desc["in_h"]), int(desc["in_w"])
        self.commands = commands
        self.per_beat = config.stream_bytes // config.pin
        self.pairs = config.writer_words == 2
        self.in_h, self.row_words = in_h, in_w * int(desc["ci_tiles"])
        self.image_words = in_h * self.row_words
        self.image_beats = -(-self.image_words // self.per_beat)
        if len(commands) != int(desc["batch"]) * self.image_beats:
            raise ValueError(f"the reader's {len(commands)} beats are not the run's "
                             f"{int(desc['batch']) * self.image_beats}")
        self.held = bool(held)
        self.beat = -1               # the beat whose transfers are under way
        self.offered = None          # the cycle that beat is offered
        self.taken = t0 - 1 if constants else t0 - commands[0]  # the beat before's
        self.loaded = -(1 << 60)     # the loader's last transfer
        self.written = deque([-(1 << 60)] * 2, maxlen=2)  # the writer's last two

    def row(self, g, freed):
        """The cycle from which input row ``g`` (of the batch) counts as written, its
        first word stored no sooner than ``freed``."""
        image, r = divmod(g, self.in_h)
        w, end = r * self.row_words, (r + 1) * self.row_words
        first = True
        while w < end:
            words = 2 if self.pairs and w % 2 == 0 and w + 1 < end else 1
            last = w + words - 1
            beat = image * self.image_beats + last // self.per_beat
            if beat != self.beat:
                self.beat, self.offered = beat, self.taken + self.commands[beat]
            loaded = max(self.offered, self.loaded + 1)
            if self.held:  # a place in the slice: two wait at most
                loaded = max(loaded, self.written[0] + 1)
            written = max(loaded + self.held, self.written[1] + 1, freed if first else 0)
            if (last + 1) % self.per_beat == 0 or last == self.image_words - 1:
                self.taken = loaded
            self.loaded = loaded
            self.written.append(written)
            first = False
            w += words
        return self.written[1] + 1


def _pair_row_cycles(offset, words):
    """Cycles the pair writer takes for a row of ``words`` words from word ``offset`` of
    its image (every image starts on a beat): the beat's second word alone when the row
    starts there, then a pair a cycle, the last word alone when one is left."""
    lone = offset % 2
    return lone + -(-(words - lone) // 2)


def _need(j, in_h, out_h, s, pt):
    n, oy = divmod(j, out_h)
    return n * in_h + max(0, oy * s - pt)


def conv_cycles(config, x_shape, w_shape, *, stride=1, pads=(0, 0, 0, 0), pool=False,
                remap=None, load_weights=True, name="layer"):
    """Cycle count of a convolution given by its shapes (mapped as :func:`pack_layer` does).

    Parameters
    ----------
    config : fpgacnn.core.config.EngineConfig
    x_shape, w_shape : tuple of int
        ``(N, Cin, H, W)`` and ``(Cout, Cin, KH, KW)``.
    stride, pads, pool, remap, load_weights, name
        As for :func:`fpgacnn.host.packing.pack_layer`.

    Returns
    -------
    CycleEstimate
        ``macs`` are the layer's real MACs, so the utilization counts padding
        lanes and embedded kernel taps as waste.

    Raises
    ------
    fpgacnn.core.errors.MappingError
        The layer does not fit the engine.
    """
    geo = map_layer(config, x_shape, w_shape, stride=stride, pads=pads, pool=pool, remap=remap,
                    name=name)
    desc = dict(geo, load_weights=int(bool(load_weights)))
    return layer_cycles(config, desc, macs=geo["macs"])


def sequenced_run_cycles(config, desc, *, writer, reader):
    """Busy cycles of a run that the program sequencer makes from board memory.

    The run as :func:`layer_cycles` predicts it from the DMA: the sequencer
    starts the pixel reader as it decodes the record and the engine once the
    reader offers its first beat, so the run's input streams from its start,
    and the reader's latency (``latency + 4`` cycles,
    :class:`~fpgacnn.hdl.program.pixel_reader.PixelReader`) is the
    sequencer's time, not the run's: the descriptor's writes hide all of it
    but ``latency + 4`` less their cycles. The pixels' reads follow the
    constants' two cycles behind (the reader's next section, started the
    cycle after the constants' reads are all issued), which the words the
    reader holds by the run's start absorb. The reader gives a command a
    cycle: a beat a cycle where its words are wide or pair into beats, less
    on an engine whose word is narrower than its beat where it issues narrow
    words (``layer_cycles``' ``reader``: the input rows then follow its
    beats). It holds while the memory's bandwidth never holds a read back
    and the reader keeps enough reads in flight to stream a command a cycle
    (the program engine's ``outstanding`` of 64, at the simulated board's
    latency of 40 cycles, a Zynq-7000 HP port's; tested at latencies 1, 7
    and 40). Its output goes to the pixel writer, a unit of its mode a
    cycle, where the DMA takes a beat: the run ends when the writer takes
    its last beat, which on a narrow writer can wait for the beat before it
    (``layer_cycles``' ``writer``).

    Parameters
    ----------
    config : EngineConfig
    desc : mapping
        The run's descriptor.
    writer : mapping
        The run's pixel-writer fields
        (:data:`~fpgacnn.core.pixel_writer_fields.WRITER_FIELDS`, in the
        record's mode: the run table's,
        :meth:`~fpgacnn.host.sequencer_table.SequencerProgram.table_writer_fields`).
    reader : mapping
        The run's pixel-reader fields of its pixel section
        (:data:`~fpgacnn.core.pixel_reader_fields.READER_FIELDS`, in the
        record's mode: the run table's,
        :meth:`~fpgacnn.host.sequencer_table.SequencerProgram.table_reader_fields`).
    """
    return layer_cycles(config, desc, writer=writer, reader=reader).cycles


#: The share of a fused run's cycles its memory reads may take for the run to keep
#: its own cycles (:func:`fused_run_cycles`), as a fraction: measured, not derived.
#: Of 184 fused runs on the k3 and pairs test engines (residual blocks of 4 to 16
#: channels at 4 to 16 pixels square, random CNNs, batches 1 and 3, latencies 1 and
#: 40), every one whose reads were at most 0.86 of its cycles took exactly them;
#: the fewest reads of one that did not were 0.865 (commit 411ffc6, when a run's
#: cycles still held the reader's latency; since 4fd6436 they do not, and
#: tests/test_sequencer_rtl.py holds every run this share models to its cycles).
FUSED_PORT_SHARE = (3, 4)


def fused_run_cycles(config, desc, *, reads, writer, reader):
    """Busy cycles of a sequenced run with a fused Add (:mod:`fpgacnn.core.fused_add_fields`),
    or None where the read port bounds it.

    The fused Add reads b beside the run's input on the one read port, the
    pixel reader first, and holds ``outstanding`` writes while their reads
    are owed: the run keeps :func:`sequenced_run_cycles` while its ``reads``
    (the input's, the constants' and b's, at most:
    :func:`fpgacnn.host.fused_add.run_reads`) take at most
    :data:`FUSED_PORT_SHARE` of those cycles (ResNet-8's three on the PYNQ-Z2
    engine take about half). Past it the run may be port-bound (the writer
    held back once the Add's pending writes fill while the reader streams)
    and is not modelled: it takes at least :func:`sequenced_run_cycles` and at
    most one cycle more for each of b's reads. The Add's last writes
    come the memory's latency plus
    :data:`~fpgacnn.hdl.program.fused_add.FUSED_ADD_STAGES` and a few cycles
    after the engine's busy cycles end; the sequencer waits for them (its own
    cycles).

    Parameters
    ----------
    config, desc, writer, reader
        As :func:`sequenced_run_cycles`.
    reads : int
        The run's memory reads, at most.
    """
    cycles = sequenced_run_cycles(config, desc, writer=writer, reader=reader)
    share_num, share_den = FUSED_PORT_SHARE
    return cycles if reads * share_den <= cycles * share_num else None


def vector_run_cycles(config, fields, latency=0):
    """Busy cycles of a vector unit run (an Add, a pool, a copy) from board memory.

    The unit issues one tap of its counter nest a cycle (a read, or a tap in
    the padding, which it skips in the same cycle), ``kernel_rows *
    kernel_cols`` taps an output word and an Add's ``b`` one more, and
    writes an output word in ``P`` writes, one a cycle, overlapping the
    reads. Output word ``j`` (of ``N``) is ready after the slot of its last
    read, ``j * taps + last_j + 1``, and the writes take the words in order:
    the run ends with ``max_j(ready_j + (N - j) * P)``, plus the memory's
    latency once and :data:`~fpgacnn.core.vector_fields.VECTOR_RUN_OVERHEAD`.
    Without padding after a window's last read (every Add, copy and global
    pool) that is ``max(N * taps + P, taps + N * P)``. It holds while the
    memory takes every access at once (no bandwidth limit, no pauses).

    Parameters
    ----------
    config : EngineConfig
    fields : mapping
        The unit's fields (:func:`fpgacnn.host.vector_mapping.vector_fields`).
    latency : int
        The memory's read latency in cycles.
    """
    words, images = fields["words"], fields["images"]
    out_rows, out_cols = fields["out_rows"], fields["out_cols"]
    kernel_cols = fields["kernel_cols"]
    taps = fields["kernel_rows"] * kernel_cols + fields["has_b"]
    n = images * out_rows * out_cols * words
    per_word = vector_accesses(config, fields)[1] // n  # writes of an output word
    d = taps - per_word
    # max over j = ((image * out_rows + oy) * out_cols + ox) * words + w of j * d + last_j,
    # last_j = ry(oy) * kernel_cols + rx(ox) + has_b: each term's max on its own.
    rows, cols = (window_taps(fields, axis) for axis in ("rows", "cols"))
    best = max((images - 1) * out_rows * out_cols * words * d, 0) \
        + max(oy * out_cols * words * d + last * kernel_cols
              for oy, (_, last) in enumerate(rows)) \
        + max(ox * words * d + last for ox, (_, last) in enumerate(cols)) \
        + max((words - 1) * d, 0) + fields["has_b"]
    return best + 1 + n * per_word + int(latency) + VECTOR_RUN_OVERHEAD
