"""The requantizer: int accumulators + bias -> int8, by multiplier, rounding shift, zero point and clamp."""

from amaranth.hdl import Const, Module, Signal, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from .config import require_config
from .mac_array import _check_tag_width
from .sat_shift import double, round_half_up, saturate, shift_levels

__all__ = ["Requantizer"]

#: Width of the per-lane shift: shifts 0..63 (:data:`fpgacnn.host.requant.MAX_SHIFT`).
SHIFT_WIDTH = 6


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
    :attr:`latency` = 5 cycles from ``i_valid`` to ``o_valid``, one per stage:
    add bias, multiply, the upper shift levels, the lower shift levels and
    rounding (:mod:`~fpgacnn.hdl.sat_shift`), add zero point and clamp.
    One result per cycle.
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

    @property
    def config(self):
        return self._config

    @property
    def latency(self):
        """Cycles from ``i_valid`` to the matching ``o_valid``."""
        return 5

    def elaborate(self, platform):
        m = Module()
        cfg = self._config

        # Exact widths of each stage's result.
        sum_w = max(cfg.acc_width, 32) + 1
        prod_w = sum_w + cfg.mult_width  # signed * unsigned, |mult| < 2**mult_width
        # Shifted and saturated: [-512, 512] covers every result that a zero
        # point and clamp in int8 do not saturate alike.
        narrow = 11

        # Side band: valid and tag through all stages.
        valid, tag = self.i_valid, self.i_tag
        for i in range(self.latency):
            nvalid = Signal(name=f"valid_d{i + 1}")
            ntag = Signal(self._tag_width, name=f"tag_d{i + 1}")
            m.d.sync += [nvalid.eq(valid), ntag.eq(tag)]
            valid, tag = nvalid, ntag
        m.d.comb += [self.o_valid.eq(valid), self.o_tag.eq(tag)]

        for lane in range(cfg.pout):
            # Data registers need no reset (valid travels beside them); without
            # one, yosys can merge them into the iCE40 DSPs' own registers.
            def reg(shape, name):
                return Signal(shape, name=f"{name}{lane}", reset_less=True)

            # 1: add bias.
            s_sum, s1_mult, s1_shift = reg(signed(sum_w), "sum"), reg(cfg.mult_width, "mult"), reg(SHIFT_WIDTH, "shift_s1_")
            m.d.sync += [
                s_sum.eq(self.i_acc[lane] + self.i_bias[lane]),
                s1_mult.eq(self.i_mult[lane]),
                s1_shift.eq(self.i_shift[lane]),
            ]
            # 2: multiply (the multiplier is unsigned, so the product keeps the sign of the sum).
            s_prod, s2_shift = reg(signed(prod_w), "prod"), reg(SHIFT_WIDTH, "shift_s2_")
            m.d.sync += [s_prod.eq(s_sum * s1_mult), s2_shift.eq(s1_shift)]
            # 3-4: rounding shift, saturated to `narrow` bits (sat_shift: the result
            # is clamped to int8, so a full-width shifter and rounding add would be waste).
            x = double(s_prod)
            y3, ovf3 = shift_levels(x, Const(0, 1), s2_shift, (5, 4, 3), narrow)
            s_y3, s_ovf3, s_sign3 = reg(signed(len(y3)), "shift_part"), reg(1, "ovf"), reg(1, "sign")
            s3_shift = reg(3, "shift_s3_")
            m.d.sync += [s_y3.eq(y3), s_ovf3.eq(ovf3), s_sign3.eq(x[-1]), s3_shift.eq(s2_shift[:3])]
            y4, ovf4 = shift_levels(s_y3, s_ovf3, s3_shift, (2, 1, 0), narrow)
            s_shifted = reg(signed(narrow), "shifted")
            m.d.sync += s_shifted.eq(round_half_up(saturate(y4, ovf4, s_sign3, narrow)))
            # 5: zero point, then clamp as numpy.clip does (max with lo, then min with hi).
            v = s_shifted + self.y_zp
            v_lo = Signal(signed(narrow + 1), name=f"clamped_lo{lane}")
            m.d.comb += v_lo.eq(v)
            with m.If(v < self.clamp_lo):
                m.d.comb += v_lo.eq(self.clamp_lo)
            with m.If(v_lo > self.clamp_hi):
                m.d.sync += self.o_data[lane].eq(self.clamp_hi)
            with m.Else():
                m.d.sync += self.o_data[lane].eq(v_lo)
        return m
