import numpy as np
import pytest
from numpy.testing import assert_array_equal

from amaranth.sim import Simulator

from fpgacnn.core.config import EngineConfig
from fpgacnn.core.descriptor import descriptor_layout
from fpgacnn.hdl.datapath.stream_loader import StreamLoader
from fpgacnn.host.packing import pack_layer

from arrangement_helpers import ARRANGEMENTS, arranged
from conv_core_helpers import beats_of
from test_hdl_line_buffer import pixel_words
from test_packing import random_layer, set_weights


def run_loader(cfg, desc, data, *, seed=0, pause=0.3):
    dut = StreamLoader(cfg)
    rng = np.random.default_rng(seed)
    beats = beats_of(cfg, data)
    words = []
    got = {}

    async def source(ctx):
        ctx.set(dut.desc, descriptor_layout().const(desc))
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        for beat in beats:
            while rng.random() < pause:
                ctx.set(dut.i_stream.valid, 0)
                await ctx.tick()
            ctx.set(dut.i_stream.valid, 1)
            ctx.set(dut.i_stream.payload, beat)
            await ctx.tick().until(dut.i_stream.ready)
        ctx.set(dut.i_stream.valid, 0)

    async def sink(ctx):
        while not (ctx.get(dut.done) and len(words) and ctx.get(dut.i_stream.valid) == 0):
            ctx.set(dut.o_pixels.ready, int(rng.random() >= pause))
            _, _, valid, ready, word = await ctx.tick().sample(
                dut.o_pixels.valid, dut.o_pixels.ready, dut.o_pixels.payload)
            if valid and ready:
                words.append(word)
        # read the buffers back through their read ports, one address per
        # cycle, the data read_latency (weight_read_latency) cycles later
        p_lat, w_lat = dut.read_latency, dut.weight_read_latency
        params, weights = [], []
        n_params, n_weights = desc["co_tiles"], desc["co_tiles"] * desc["ci_tiles"]
        for i in range(max(n_params, n_weights) + max(p_lat, w_lat) - 1):
            ctx.set(dut.param_addr, min(i, n_params - 1))
            ctx.set(dut.weight_addr, min(i, n_weights - 1))
            await ctx.tick()
            if i >= p_lat - 1:
                params.append(ctx.get(dut.param_data))
            if i >= w_lat - 1:
                weights.append(ctx.get(dut.weight_data))
        params, weights = params[:n_params], weights[:n_weights]
        got.update(params=params, weights=weights)

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(source, background=True)
    sim.add_testbench(sink)
    sim.run()
    return words, got


@pytest.mark.parametrize("cfg", [
    EngineConfig(pin=2, pout=2, kmax=3, stream_width=64, max_width=8, max_channels=8,
                 max_out_channels=8),   # 4 pixel words per beat, padded images
    EngineConfig(pin=16, pout=4, kmax=2, stream_width=32, max_width=8, max_channels=32,
                 max_out_channels=8),   # a pixel word spans 4 beats
    EngineConfig(pin=2, pout=2, kmax=3, stream_width=64, max_width=8, max_channels=64,
                 max_out_channels=64),  # weights two block RAMs deep: part select registered
], ids=["words-per-beat", "beats-per-word", "weights-two-parts"])
@pytest.mark.parametrize("arrangement", ARRANGEMENTS)
def test_sections_land_where_they_belong(cfg, arrangement):
    cfg = arranged(cfg, arrangement)
    rng = np.random.default_rng(cfg.pin)
    layer = random_layer(rng, cfg, k=cfg.kmax, stride=1, pool=False, batch=2)
    layer["x"] = rng.integers(-128, 128, (2, 3, 3, 3), dtype=np.int8)  # odd byte counts
    set_weights(rng, layer, rng.integers(-128, 128, (5, 3, cfg.kmax, cfg.kmax), dtype=np.int8))
    desc, data = pack_layer(cfg, **layer)
    words, got = run_loader(cfg, desc, data)

    x = np.zeros((2, desc["ci_tiles"] * cfg.pin, 3, 3), np.int8)
    x[:, :3] = layer["x"]
    assert [int(w) for w in words] == [int(w) for w in pixel_words(cfg, x)]
    folded = layer["bias"] - layer["x_zp"] * layer["w"].astype(np.int64).sum(axis=(1, 2, 3))
    for c in range(5):
        rec = got["params"][c // cfg.pout][c % cfg.pout]
        assert (int(rec.bias), int(rec.mult), int(rec.shift)) == \
            (folded[c], layer["mult"][c], layer["shift"][c])
    k = cfg.kmax
    for co in range(desc["co_tiles"]):
        for ci in range(desc["ci_tiles"]):
            word = got["weights"][co * desc["ci_tiles"] + ci]
            for lane in range(cfg.pout):
                c = co * cfg.pout + lane
                taps = np.array([int(v) for v in word[lane]]).reshape(k, k, cfg.pin)
                expect = np.zeros((k, k, cfg.pin), np.int64)
                if c < 5:
                    for p in range(cfg.pin):
                        if ci * cfg.pin + p < 3:
                            expect[:, :, p] = layer["w"][c, ci * cfg.pin + p]
                assert_array_equal(taps, expect)


def test_without_weights_the_stream_is_pixels_only():
    cfg = EngineConfig(pin=4, pout=4, kmax=3, stream_width=32, max_width=8, max_channels=8,
                       max_out_channels=8)
    rng = np.random.default_rng(1)
    layer = random_layer(rng, cfg, k=3, stride=1, pool=False, batch=1)
    desc, data = pack_layer(cfg, **layer, load_weights=False)
    words, _ = run_loader(cfg, desc, data)
    x = np.zeros((1, desc["ci_tiles"] * cfg.pin) + layer["x"].shape[2:], np.int8)
    x[:, :layer["x"].shape[1]] = layer["x"]
    assert [int(w) for w in words] == [int(w) for w in pixel_words(cfg, x)]
