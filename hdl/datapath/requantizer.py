"""The requantizer: int accumulators + bias -> int8, by multiplier, rounding shift, zero point and clamp."""

from amaranth.hdl import Const, Module, Signal, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ...core.config import require_config
from ...core.contract import (engine_contract, requant_product_parts, requant_sum_width,
                              requant_tree_levels)
from ...core.widths import SHIFT_BITS
from .mac_array import _check_tag_width
from .delay import delayed
from ..tech.dsp import PipelinedMultiplier
from .sat_shift import double, round_half_up, saturate, shift_levels

__all__ = ["Requantizer", "check_whole_multiplier"]


def check_whole_multiplier(whole_multiplier):
    """Raise TypeError unless ``whole_multiplier`` is a bool (:class:`Requantizer`'s)."""
    if not isinstance(whole_multiplier, bool):
        raise TypeError(f"whole_multiplier must be True or False, not {whole_multiplier!r}")

#: Width of the per-lane shift: shifts 0..MAX_SHIFT (the integer contract's).
SHIFT_WIDTH = SHIFT_BITS


class Requantizer(wiring.Component):
    """``pout`` lanes of ``clamp(((acc + bias) * mult + 2**(shift-1)) >> shift) + y_zp, lo, hi)``.

    Bit-exact with :func:`fpgacnn.host.requant.requantize` applied to
    ``acc + bias``: rounding half up (no rounding term when ``shift = 0``), an
    arithmetic right shift, and intermediates wide enough that nothing wraps
    before the clamp. The clamp is ``min(max(v, clamp_lo), clamp_hi)``, the
    order of :func:`numpy.clip`. The pipeline always flows (no back-pressure).

    The hardware is exact at every ``acc_width``; the int64 reference is too
    as long as ``|acc + bias| * mult + 2**62`` fits in int64, i.e. for
    ``acc_width <= 38`` with the 24-bit (``MULT_BITS``) multipliers of
    :func:`~fpgacnn.host.requant.requant_params` (tests/test_hdl_requantizer.py
    checks that widest case).

    Parameters
    ----------
    config : EngineConfig
        Uses ``pout``, ``acc_width`` and ``mult_width``.
    lanes : int or None
        Lanes (``pout`` by default); the fused block's depthwise half takes
        ``2 * pin``, a channel word of both pixels of a pair.
    tag_width : int
        Width of the tag carried from ``i_tag`` to ``o_tag`` (0 for none;
        inside a design only: Amaranth writes a zero-width top-level port as
        ``[-1:0]``, which Verilog tools read as two bits).
    whole_multiplier : bool
        With ``deep_pipeline``: multiply each 17-bit part of ``acc + bias`` by
        the whole multiplier, a 25 x 18 product (one DSP48 each, two a lane),
        instead of by its 17-bit parts (18 x 18, the ECP5's ``MULT18X18D``: four
        a lane) (:func:`~fpgacnn.core.contract.requant_product_parts`). The
        same results and latency either way.

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
    :attr:`latency` = 9 cycles from ``i_valid`` to ``o_valid`` with
    ``deep_pipeline``, one result per cycle: add bias; the product as partial
    products of 17-bit parts (or of the whole multiplier), each in a registered
    DSP block (:class:`~fpgacnn.hdl.tech.dsp.PipelinedMultiplier`, 2 cycles); their
    sum with the rounding term over a registered adder tree (3 levels, those of
    the 17-bit parts either way: :func:`~fpgacnn.core.contract.requant_tree_levels`);
    shift; saturate and
    add the zero point; clamp. Without it (small parts, a few DSPs, a slow
    clock) 5: add bias, multiply, the upper and the lower shift levels with
    rounding (:mod:`~fpgacnn.hdl.datapath.sat_shift`), zero point and clamp.
    """

    def __init__(self, config, *, tag_width, lanes=None, whole_multiplier=False):
        require_config(config)
        _check_tag_width(tag_width)
        check_whole_multiplier(whole_multiplier)
        self._whole = whole_multiplier
        lanes = config.pout if lanes is None else lanes
        if isinstance(lanes, bool) or not isinstance(lanes, int) or lanes < 1:
            raise TypeError(f"lanes must be a positive integer, not {lanes!r}")
        self._lanes = lanes
        self._config = config
        self._tag_width = tag_width
        super().__init__({
            "i_valid": In(1),
            "i_tag": In(tag_width),
            "i_acc": In(data.ArrayLayout(signed(config.acc_width), lanes)),
            "i_bias": In(data.ArrayLayout(signed(32), lanes)),
            "i_mult": In(data.ArrayLayout(unsigned(config.mult_width), lanes)),
            "i_shift": In(data.ArrayLayout(unsigned(SHIFT_WIDTH), lanes)),
            "y_zp": In(signed(8)),
            "clamp_lo": In(signed(8)),
            "clamp_hi": In(signed(8)),
            "o_valid": Out(1),
            "o_tag": Out(tag_width),
            "o_data": Out(data.ArrayLayout(signed(8), lanes)),
        })

    @property
    def config(self):
        return self._config

    @property
    def latency(self):
        """Cycles from ``i_valid`` to the matching ``o_valid``."""
        return engine_contract(self._config).latency.requantizer

    def _product_parts(self):
        """``((sum offset, width, signed), (mult offset, width))`` per DSP partial product."""
        return [(a, (b[0], b[1]))
                for a, b in requant_product_parts(self._config, whole_multiplier=self._whole)]

    @property
    def _sum_width(self):
        return requant_sum_width(self._config.acc_width)

    def elaborate(self, platform):
        m = Module()
        # Side band: valid and tag through all stages.
        m.d.comb += [self.o_valid.eq(delayed(m, self.i_valid, self.latency, "valid_d")),
                     self.o_tag.eq(delayed(m, self.i_tag, self.latency, "tag_d"))]
        lane = self._dsp_lane if self._config.deep_pipeline else self._compact_lane
        for i in range(self._lanes):
            lane(m, i)
        return m

    def _reg(self, shape, name, lane):
        # Data registers need no reset (valid travels beside them); without
        # one, yosys can merge them into the DSPs' own registers.
        return Signal(shape, name=f"{name}{lane}", reset_less=True)

    def _bias_stage(self, m, lane):
        """Stage 1: add bias; the multiplier and shift move along."""
        s_sum = self._reg(signed(self._sum_width), "sum", lane)
        s_mult = self._reg(self._config.mult_width, "mult", lane)
        s_shift = self._reg(SHIFT_WIDTH, "shift_s1_", lane)
        m.d.sync += [s_sum.eq(self.i_acc[lane] + self.i_bias[lane]),
                     s_mult.eq(self.i_mult[lane]), s_shift.eq(self.i_shift[lane])]
        return s_sum, s_mult, s_shift

    def _clip_stage(self, m, lane, v):
        """``v`` clamped as numpy.clip does, ``min(max(v, lo), hi)``, registered.

        Both compares in parallel: with ``lo > hi`` the result is ``hi``
        whatever ``v``, otherwise ``lo`` below, ``hi`` above, ``v`` between.
        """
        lo, hi = self.clamp_lo, self.clamp_hi
        out = self._reg(signed(8), "clamped", lane)
        with m.If((lo > hi) | (v > hi)):
            m.d.sync += out.eq(hi)
        with m.Elif(v < lo):
            m.d.sync += out.eq(lo)
        with m.Else():
            m.d.sync += out.eq(v)
        return out

    def _dsp_lane(self, m, lane):
        s_sum, s_mult, shift = self._bias_stage(m, lane)

        def delay(value, cycles):
            return delayed(m, value, cycles, f"shift{lane}_d", reset_less=True)

        # 2, 3: partial products, one registered DSP block each (the
        # multiplier is unsigned, so each keeps the sign of its part of the sum).
        terms = []
        for i, ((a_off, a_w, a_signed), (b_off, b_w)) in enumerate(self._product_parts()):
            mul = PipelinedMultiplier(signed(a_w) if a_signed else unsigned(a_w), unsigned(b_w))
            m.submodules[f"part{lane}_{i}"] = mul
            a_part = s_sum[a_off:a_off + a_w]
            m.d.comb += [mul.a.eq(a_part.as_signed() if a_signed else a_part),
                         mul.b.eq(s_mult[b_off:b_off + b_w])]
            terms.append(mul.p << (a_off + b_off))
        shift = delay(shift, PipelinedMultiplier.LATENCY)

        # 4..6: the parts and the rounding term 2**(shift-1) (none for shift
        # 0: (1 << shift) >> 1) summed two by two, a register per level; the
        # 17-bit parts' levels whichever parts there are (a single term is
        # registered on), so that the latency does not depend on the tiling.
        terms.append((Const(1, 1) << shift)[1:])
        for level in range(requant_tree_levels(self._config)):
            nxt = []
            for k in range(0, len(terms), 2):
                value = terms[k] + terms[k + 1] if k + 1 < len(terms) else terms[k]
                r = self._reg(value.shape(), f"round_l{level}_{k // 2}_", lane)
                m.d.sync += r.eq(value)
                nxt.append(r)
            terms = nxt
            shift = delay(shift, 1)
        s_round = terms[0]

        # 7: arithmetic shift right (Amaranth sign-extends signed operands).
        s_shifted = self._reg(s_round.shape(), "shifted", lane)
        m.d.sync += s_shifted.eq(s_round >> shift)

        # 8: saturate to SAT_WIDTH bits and add the zero point: in range when
        # the bits from SAT_WIDTH-1 up are all copies of the sign (two
        # reductions, shallower than a wide compare), and the three sums are
        # made in parallel with that test.
        hi_sat = 2**(SAT_WIDTH - 1) - 1
        s_zp = self._reg(signed(SAT_WIDTH + 1), "with_zp", lane)
        top = s_shifted.as_unsigned()[SAT_WIDTH - 1:]
        with m.If(top.all() | ~top.any()):
            m.d.sync += s_zp.eq(s_shifted[:SAT_WIDTH].as_signed() + self.y_zp)
        with m.Elif(s_shifted[-1]):
            m.d.sync += s_zp.eq(-hi_sat - 1 + self.y_zp)
        with m.Else():
            m.d.sync += s_zp.eq(hi_sat + self.y_zp)

        # 9: clamp.
        m.d.comb += self.o_data[lane].eq(self._clip_stage(m, lane, s_zp))

    def _compact_lane(self, m, lane):
        s_sum, s1_mult, s1_shift = self._bias_stage(m, lane)
        prod_w = self._sum_width + self._config.mult_width  # signed * unsigned
        # 2: multiply (the multiplier is unsigned, so the product keeps the sign of the sum).
        s_prod, s2_shift = self._reg(signed(prod_w), "prod", lane), self._reg(SHIFT_WIDTH, "shift_s2_", lane)
        m.d.sync += [s_prod.eq(s_sum * s1_mult), s2_shift.eq(s1_shift)]
        # 3-4: rounding shift, saturated to SAT_WIDTH + 1 bits (sat_shift: the
        # result is clamped to int8, so a full-width shifter and rounding add
        # would be waste).
        narrow = SAT_WIDTH + 1
        x = double(s_prod)
        y3, ovf3 = shift_levels(x, Const(0, 1), s2_shift, (5, 4, 3), narrow)
        s_y3, s_ovf3 = self._reg(signed(len(y3)), "shift_part", lane), self._reg(1, "ovf", lane)
        s_sign3, s3_shift = self._reg(1, "sign", lane), self._reg(3, "shift_s3_", lane)
        m.d.sync += [s_y3.eq(y3), s_ovf3.eq(ovf3), s_sign3.eq(x[-1]), s3_shift.eq(s2_shift[:3])]
        y4, ovf4 = shift_levels(s_y3, s_ovf3, s3_shift, (2, 1, 0), narrow)
        s_shifted = self._reg(signed(narrow), "shifted", lane)
        m.d.sync += s_shifted.eq(round_half_up(saturate(y4, ovf4, s_sign3, narrow)))
        # 5: zero point and clamp.
        v = Signal(signed(narrow + 1), name=f"with_zp{lane}")
        m.d.comb += v.eq(s_shifted + self.y_zp)
        m.d.comb += self.o_data[lane].eq(self._clip_stage(m, lane, v))


#: Saturated width after the shift: [-512, 511] covers every result that a
#: zero point and a clamp in int8 do not saturate alike.
SAT_WIDTH = 10
