"""The requantizer: int accumulators + bias -> int8, by multiplier, rounding shift, zero point and clamp."""

from amaranth.hdl import Const, Module, Signal, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from .config import require_config
from .mac_array import _MULT_LATENCY, _check_tag_width
from .multiplier import PipelinedMultiplier

__all__ = ["Requantizer"]

#: Width of the per-lane shift: shifts 0..63 (:data:`fpgacnn.host.requant.MAX_SHIFT`).
SHIFT_WIDTH = 6

#: Bits per multiplier part: an unsigned part must fit the DSP's 18-bit signed operand.
PART_BITS = 17

#: Width the shifted value is saturated to before the zero point and the clamp.
#: Exact because every bound is int8: a value at or beyond +-(2**(SAT_WIDTH-1) - 1)
#: stays beyond [-128, 127] after adding any int8 zero point (|v| >= 511 - 128),
#: so the clamp gives the same result as for the unsaturated value.
SAT_WIDTH = 10


def _parts(width, is_signed):
    """Split an operand into ``(offset, width, signed)`` parts of :data:`PART_BITS`.

    The low parts are unsigned; the top part keeps the operand's sign and may
    be one bit wider (an 18-bit signed part still fits the DSP).
    """
    parts, offset = [], 0
    while True:
        rest = width - offset
        top_fits = rest <= PART_BITS + (1 if is_signed else 0)
        if top_fits:
            parts.append((offset, rest, is_signed))
            return parts
        parts.append((offset, PART_BITS, False))
        offset += PART_BITS


def _tree_levels(count):
    return (count - 1).bit_length()


class Requantizer(wiring.Component):
    """``pout`` lanes of ``clamp(((acc + bias) * mult + 2**(shift-1)) >> shift) + y_zp, lo, hi)``.

    Bit-exact with :func:`fpgacnn.host.requant.requantize` applied to
    ``acc + bias``: rounding half up (no rounding term when ``shift = 0``), an
    arithmetic right shift, and intermediates wide enough that nothing wraps
    before the clamp. The clamp is ``min(max(v, clamp_lo), clamp_hi)``, the
    order of :func:`numpy.clip`. The pipeline always flows (no back-pressure).

    The hardware is exact at every ``acc_width``; the int64 reference is too
    as long as ``|acc + bias| * mult + 2**62`` fits in int64, i.e. for
    ``acc_width <= 46`` with the 16-bit multipliers of
    :func:`~fpgacnn.host.requant.requant_params`.

    Parameters
    ----------
    config : EngineConfig
        Uses ``pout``, ``acc_width`` and ``mult_width``.
    tag_width : int
        Width of the tag carried from ``i_tag`` to ``o_tag`` (0 for none;
        inside a design only: Amaranth writes a zero-width top-level port as
        ``[-1:0]``, which Verilog tools read as two bits).

    Members
    -------
    i_valid : In(1)
    i_tag : In(tag_width)
    i_acc : In(data.ArrayLayout(signed(acc_width), pout))
        Accumulators (without bias), e.g. :attr:`MacArray.o_acc`.
    i_bias : In(data.ArrayLayout(signed(32), pout))
        Folded bias per lane, aligned with ``i_valid``.
    i_mult : In(data.ArrayLayout(unsigned(mult_width), pout))
        Multiplier per lane, aligned with ``i_valid``.
    i_shift : In(data.ArrayLayout(unsigned(6), pout))
        Right shift per lane (0..63), aligned with ``i_valid``.
    y_zp, clamp_lo, clamp_hi : In(signed(8))
        Output zero point and clamp bounds; static during a layer (they are
        sampled by the last stage).
    o_valid : Out(1)
    o_tag : Out(tag_width)
    o_data : Out(data.ArrayLayout(signed(8), pout))

    Raises
    ------
    TypeError
        If ``config`` is not an :class:`EngineConfig` or ``tag_width`` is not an integer.
    ValueError
        If ``tag_width`` is negative.

    Latency
    -------
    :attr:`latency` cycles from ``i_valid`` to ``o_valid`` (9 for the usual
    ``acc_width`` 32), one result per cycle. The stages: add the bias;
    multiply, in 17-bit parts, each part a
    :class:`~fpgacnn.hdl.multiplier.PipelinedMultiplier` (two cycles, one
    registered ECP5 DSP block); add the shifted parts and the rounding term
    in a registered adder tree; shift; saturate to a few bits; add the zero
    point and clamp. The stages are short so that the engine clock is not
    limited here.
    """

    def __init__(self, config, *, tag_width):
        require_config(config)
        _check_tag_width(tag_width)
        self._config = config
        self._tag_width = tag_width
        super().__init__({
            "i_valid": In(1),
            "i_tag": In(tag_width),
            "i_acc": In(data.ArrayLayout(signed(config.acc_width), config.pout)),
            "i_bias": In(data.ArrayLayout(signed(32), config.pout)),
            "i_mult": In(data.ArrayLayout(unsigned(config.mult_width), config.pout)),
            "i_shift": In(data.ArrayLayout(unsigned(SHIFT_WIDTH), config.pout)),
            "y_zp": In(signed(8)),
            "clamp_lo": In(signed(8)),
            "clamp_hi": In(signed(8)),
            "o_valid": Out(1),
            "o_tag": Out(tag_width),
            "o_data": Out(data.ArrayLayout(signed(8), config.pout)),
        })
        # (acc + bias) x mult, split into parts that each fit one DSP block.
        self._sum_w = max(config.acc_width, 32) + 1
        self._sum_parts = _parts(self._sum_w, True)
        self._mult_parts = _parts(config.mult_width, False)

    @property
    def config(self):
        return self._config

    @property
    def product_terms(self):
        """Partial products per lane (DSP blocks per lane)."""
        return len(self._sum_parts) * len(self._mult_parts)

    @property
    def latency(self):
        """Cycles from ``i_valid`` to the matching ``o_valid``."""
        # bias, multiplier, adder tree over the parts and the rounding term,
        # shift, saturate, zero point and clamp
        return 1 + _MULT_LATENCY + _tree_levels(self.product_terms + 1) + 3

    def elaborate(self, platform):
        m = Module()
        cfg = self._config

        # Side band: valid and tag through all stages.
        valid, tag = self.i_valid, self.i_tag
        for i in range(self.latency):
            nvalid = Signal(name=f"valid_d{i + 1}")
            ntag = Signal(self._tag_width, name=f"tag_d{i + 1}")
            m.d.sync += [nvalid.eq(valid), ntag.eq(tag)]
            valid, tag = nvalid, ntag
        m.d.comb += [self.o_valid.eq(valid), self.o_tag.eq(tag)]

        for lane in range(cfg.pout):
            self._lane(m, lane)
        return m

    def _lane(self, m, lane):
        cfg = self._config

        def reg(shape, name):
            # Data registers need no reset: o_valid says when they matter.
            return Signal(shape, name=f"{name}{lane}", reset_less=True)

        def delay(value, cycles, name):
            for i in range(cycles):
                nxt = reg(len(value), f"{name}_d{i + 1}_")
                m.d.sync += nxt.eq(value)
                value = nxt
            return value

        # 1: add bias.
        s_sum = reg(signed(self._sum_w), "sum")
        s_mult = reg(cfg.mult_width, "mult")
        m.d.sync += [
            s_sum.eq(self.i_acc[lane] + self.i_bias[lane]),
            s_mult.eq(self.i_mult[lane]),
        ]
        shift = delay(self.i_shift[lane], 1, "shift")

        # 2, 3: partial products (the multiplier is unsigned, so each keeps the
        # sign of its part of the sum), one DSP block each.
        terms = []
        for i, (a_off, a_w, a_signed) in enumerate(self._sum_parts):
            for j, (b_off, b_w, _) in enumerate(self._mult_parts):
                mul = PipelinedMultiplier(signed(a_w) if a_signed else unsigned(a_w), unsigned(b_w))
                assert mul.latency == _MULT_LATENCY
                m.submodules[f"mul{lane}_{i}_{j}"] = mul
                a_part = s_sum[a_off:a_off + a_w]
                m.d.comb += [mul.a.eq(a_part.as_signed() if a_signed else a_part),
                             mul.b.eq(s_mult[b_off:b_off + b_w])]
                terms.append(mul.p << (a_off + b_off))
        shift = delay(shift, _MULT_LATENCY, "shift")

        # 4..: sum of the parts and the rounding term 2**(shift-1) (none for
        # shift 0: (1 << shift) >> 1), two terms per adder, one register per
        # level; widths follow the exact sums.
        terms.append((Const(1, 1) << shift)[1:])
        for level in range(_tree_levels(len(terms))):
            nxt = []
            for k in range(0, len(terms), 2):
                value = terms[k] + terms[k + 1] if k + 1 < len(terms) else terms[k]
                r = reg(value.shape(), f"round_l{level}_{k // 2}_")
                m.d.sync += r.eq(value)
                nxt.append(r)
            terms = nxt
            shift = delay(shift, 1, "shift")
        s_round = terms[0]

        # Arithmetic shift right (Amaranth sign-extends signed operands).
        s_shifted = reg(s_round.shape(), "shifted")
        m.d.sync += s_shifted.eq(s_round >> shift)

        # Saturate to SAT_WIDTH bits (see SAT_WIDTH: exact for int8 bounds).
        # In range means the bits from SAT_WIDTH-1 up are all copies of the
        # sign: two AND/OR reductions, shallower than a wide compare.
        hi_sat = 2**(SAT_WIDTH - 1) - 1
        s_sat = reg(signed(SAT_WIDTH), "sat")
        top = s_shifted.as_unsigned()[SAT_WIDTH - 1:]
        with m.If(top.all() | ~top.any()):
            m.d.sync += s_sat.eq(s_shifted[:SAT_WIDTH])
        with m.Elif(s_shifted[-1]):
            m.d.sync += s_sat.eq(-hi_sat - 1)
        with m.Else():
            m.d.sync += s_sat.eq(hi_sat)

        # Zero point, then clamp as numpy.clip does (max with lo, then min with hi).
        v = s_sat + self.y_zp
        v_lo = Signal(signed(SAT_WIDTH + 1), name=f"clamped_lo{lane}")
        m.d.comb += v_lo.eq(v)
        with m.If(v < self.clamp_lo):
            m.d.comb += v_lo.eq(self.clamp_lo)
        with m.If(v_lo > self.clamp_hi):
            m.d.sync += self.o_data[lane].eq(self.clamp_hi)
        with m.Else():
            m.d.sync += self.o_data[lane].eq(v_lo)
