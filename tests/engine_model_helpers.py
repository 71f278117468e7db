"""A numpy reading of docs/engine.md: what the engine computes from a descriptor and a stream.

Independent of :mod:`fpgacnn.host.packing` (it parses the stream as the
hardware does), so that ``pack -> emulate -> unpack == integer_ops`` checks the
packing against the reference without the RTL, and the RTL can be compared
against it byte for byte.
"""

import numpy as np

from fpgacnn.core.contract import PARAM_RECORD_BYTES, PARAM_RECORD_FIELDS, engine_contract
from fpgacnn.host.integer_ops import maxpool2d
from fpgacnn.host.requant import requantize


def _take(buf, pos, nbytes, beat):
    """``nbytes`` from ``buf`` at ``pos``; the section is padded to whole beats."""
    chunk = buf[pos:pos + nbytes]
    return chunk, pos + -(-nbytes // beat) * beat


def emulate_engine(config, desc, data, state=None):
    """Output stream bytes of one layer run; ``state`` keeps the weight buffer (a word
    per address, as the engine: a run writes its weights from ``weight_base`` and
    reads them from there) and the parameters between runs."""
    beat, pin, pout, k = config.stream_bytes, config.pin, config.pout, config.kmax
    data = np.asarray(data, np.uint8)
    co_t, ci_t = desc["co_tiles"], desc["ci_tiles"]
    base = desc.get("weight_base", 0)
    state = {} if state is None else state
    words = state.setdefault("words", {})
    pos = 0
    if desc["load_weights"] or desc.get("load_params", 0):
        recs = []
        for _ in range(co_t):
            chunk, pos = _take(data, pos, pout * PARAM_RECORD_BYTES, beat)
            recs.append(chunk.reshape(pout, PARAM_RECORD_BYTES))
        rec = np.concatenate(recs)
        for field, offset, size, signed in PARAM_RECORD_FIELDS:
            value = np.zeros(len(rec), np.int64)
            for b in range(size):
                value |= rec[:, offset + b].astype(np.int64) << (8 * b)
            if signed:
                value -= (value >> (8 * size - 1)) << (8 * size)
            state[field] = value
    dw = desc.get("depthwise", 0)  # one word per output tile, for its own input tile
    n_words = co_t if dw else co_t * ci_t
    if desc["load_weights"]:
        for i in range(n_words):
            chunk, pos = _take(data, pos, engine_contract(config).weights.word_bytes, beat)
            words[base + i] = chunk.view(np.int8).reshape(pout, k, k, pin)
    if dw:
        wt = np.zeros((co_t, ci_t, pout, k, k, pin), np.int8)
        for t in range(co_t):
            wt[t, t] = words[base + t]
    else:
        wt = np.stack([words[base + i] for i in range(n_words)]).reshape(co_t, ci_t, pout, k, k, pin)
    # -> OIHW over padded channels
    state["w"] = wt.transpose(0, 2, 1, 5, 3, 4).reshape(co_t * pout, ci_t * pin, k, k)
    h, w_, s = desc["in_h"], desc["in_w"], desc["stride"]
    oh, ow = desc["out_h"], desc["out_w"]
    out = []
    for _ in range(desc["batch"]):
        chunk, pos = _take(data, pos, h * w_ * ci_t * pin, beat)
        img = chunk.view(np.int8).reshape(h, w_, ci_t * pin).transpose(2, 0, 1).astype(np.int64)
        pt, pl = desc["pad_top"], desc["pad_left"]
        big = np.full((ci_t * pin, pt + (oh - 1) * s + k + h, pl + (ow - 1) * s + k + w_),
                      desc["x_zp"], np.int64)
        big[:, pt:pt + h, pl:pl + w_] = img
        acc = np.zeros((co_t * pout, oh, ow), np.int64)
        for ky in range(k):
            for kx in range(k):
                win = big[:, ky:ky + (oh - 1) * s + 1:s, kx:kx + (ow - 1) * s + 1:s]
                acc += np.einsum("chw,oc->ohw", win, state["w"][:, :, ky, kx].astype(np.int64))
        acc += state["bias"][:, None, None]
        y = requantize(acc, state["mult"][:, None, None], state["shift"][:, None, None],
                       desc["y_zp"], desc["clamp_lo"], desc["clamp_hi"])
        if desc["pool"]:
            y = maxpool2d(y[None])[0]
        raw = y.transpose(1, 2, 0).ravel().view(np.uint8)
        out.append(np.concatenate([raw, np.zeros(-raw.size % beat, np.uint8)]))
    if pos != data.size:
        raise ValueError(f"stream has {data.size} bytes, the descriptor reads {pos}")
    return np.concatenate(out)
