"""Emit an engine: Verilog, register map (JSON, C header) and a configuration summary.

Everything written is derived from one :class:`~fpgacnn.core.config.EngineConfig`;
:func:`write_engine` is what ``fpgacnn generate`` and the simulation builds call.
"""

from pathlib import Path

from amaranth.back import verilog

from ..core.config import require_config
from ..core.contract import PARAM_RECORD_BYTES, engine_contract
from ..core.regmap import build_regmap

__all__ = ["TOP_NAME", "PROGRAM_TOP_NAME", "ZYNQ_TOP_NAME", "UART_TOP_NAME", "engine_verilog",
           "uart_top_verilog", "config_summary", "write_engine"]

#: Verilog module name of the generated top.
TOP_NAME = "fpgacnn_engine"
#: Verilog module name of the engine with its program sequencer and memory port.
PROGRAM_TOP_NAME = "fpgacnn_program_engine"
#: Verilog module name of the Zynq boards' top: the program engine with an AXI4 memory master.
ZYNQ_TOP_NAME = "fpgacnn_zynq_engine"
#: Verilog module name of the engine behind the UART bridge (open boards, serial-link simulation).
UART_TOP_NAME = "fpgacnn_uart_top"


def engine_verilog(config, *, name=TOP_NAME):
    """Verilog text of :class:`~fpgacnn.hdl.engine.ConvEngine` for ``config``.

    Source locations are left out so the text depends only on the
    configuration and the generator sources.
    """
    from .engine import ConvEngine
    require_config(config)
    return verilog.convert(ConvEngine(config), name=name, emit_src=False)


def uart_top_verilog(config, *, clocks_per_bit, fifo_depth=None, name=UART_TOP_NAME):
    """Verilog text of :class:`~fpgacnn.hdl.link.uart_top.UartEngineTop` for ``config``.

    Ports: ``clk``, ``rst`` (active high), ``uart_rx``, ``uart_tx``; the
    protocol is docs/host_link.md. ``fifo_depth=None`` takes the bridge's
    default (:data:`~fpgacnn.hdl.link.host_bridge.DEFAULT_FIFO_DEPTH`).
    """
    from .link.host_bridge import DEFAULT_FIFO_DEPTH
    from .link.uart_top import UartEngineTop
    require_config(config)
    top = UartEngineTop(config, clocks_per_bit=clocks_per_bit,
                        fifo_depth=DEFAULT_FIFO_DEPTH if fifo_depth is None else fifo_depth)
    return verilog.convert(top, name=name, emit_src=False)


def _bytes(n):
    if n >= 1 << 20:
        return f"{n:,} B ({n / (1 << 20):.2f} MiB)"
    if n >= 1 << 10:
        return f"{n:,} B ({n / (1 << 10):.1f} KiB)"
    return f"{n:,} B"


def config_summary(config):
    """A human-readable summary: parameters, peak throughput, buffer sizes."""
    c = config
    k = engine_contract(c)
    lat = k.latency
    regs = build_regmap(c)
    rows = [("parameter", "value")]
    rows += [(k, str(v)) for k, v in c.as_dict().items()]
    lines = [f"fpgacnn engine: {TOP_NAME}", ""]
    width = max(len(k) for k, _ in rows)
    lines += [f"  {k:<{width}}  {v}" for k, v in rows[1:]]
    lines += [
        "",
        f"  peak MACs/cycle         {c.peak_macs_per_cycle:,}  "
        f"({c.kmax}x{c.kmax} window x pin {c.pin} x pout {c.pout})",
        f"  stream                  {c.stream_bytes} bytes/beat",
        f"  line buffer             {k.row_slots} row slots x {c.kmax} banks x "
        f"{k.line_buffer.words} words x {c.pin} B = {_bytes(k.line_buffer.total_bytes)}",
        f"  weight buffer           {k.weights.words} words x {k.weights.word_bytes} B = "
        f"{_bytes(k.weights.total_bytes)}",
        f"  parameter buffer        {k.params.words} words x {c.pout} lanes x "
        f"{PARAM_RECORD_BYTES} B = {_bytes(k.params.total_bytes)}",
        f"  max-pool row memory     {k.pool_row.words} words x {c.pout} B = "
        f"{_bytes(k.pool_row.total_bytes)}",
        f"  limits                  width <= {c.max_width}, channels <= {c.max_channels}, "
        f"output channels per run <= {c.max_out_channels}, stride <= {k.ranges['stride'][1]}",
        f"  pipeline                {'deep' if c.deep_pipeline else 'compact'}: "
        f"{lat.pipeline(False)} cycles from a window to its result "
        f"({lat.pipeline(True)} pooled), {lat.line_buffer_setup} setup cycles",
        f"  registers               {len(regs)} (AXI4-Lite, {1 << regs.addr_width} B window)",
        "",
    ]
    return "\n".join(lines)


def write_engine(config, out_dir, *, name=TOP_NAME, verilog_text=None):
    """Write ``<name>.v``, ``<name>_regs.json``, ``<name>_regs.h`` and ``<name>_summary.txt``.

    Parameters
    ----------
    config : EngineConfig
    out_dir : path-like
        Created if missing.
    name : str
        Verilog module name and file stem.
    verilog_text : str, optional
        The top's Verilog, module ``name`` (default: the
        :class:`~fpgacnn.hdl.engine.ConvEngine`'s, :func:`engine_verilog`).

    Returns
    -------
    dict
        ``{"verilog", "regmap_json", "c_header", "summary"}`` -> :class:`~pathlib.Path`.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    regs = build_regmap(config)
    paths = {
        "verilog": out_dir / f"{name}.v",
        "regmap_json": out_dir / f"{name}_regs.json",
        "c_header": out_dir / f"{name}_regs.h",
        "summary": out_dir / f"{name}_summary.txt",
    }
    paths["verilog"].write_text(engine_verilog(config, name=name) if verilog_text is None
                                else verilog_text)
    paths["regmap_json"].write_text(regs.to_json())
    paths["c_header"].write_text(regs.c_header())
    paths["summary"].write_text(config_summary(config))
    return paths
