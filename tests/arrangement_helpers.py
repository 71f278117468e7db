"""The two pipeline arrangements of the engine, for tests that run both.

``EngineConfig.deep_pipeline`` chooses where the registers go (docs/engine.md,
"Pipelining for the clock"): 1 for 100 MHz parts, 0 for small slow ones.
The blocks' results must not depend on it, only their latencies.
"""

import dataclasses

#: Test id -> deep_pipeline.
ARRANGEMENTS = {"deep": 1, "compact": 0}


def arranged(config, arrangement):
    """``config`` with the arrangement named ``arrangement`` (a key of :data:`ARRANGEMENTS`)."""
    return dataclasses.replace(config, deep_pipeline=ARRANGEMENTS[arrangement])
