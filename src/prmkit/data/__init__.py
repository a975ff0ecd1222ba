"""prmkit.data: readers, writers, supervision policies and dataset tools.

    from prmkit.data import read_records, apply_policy, PolicyOptions
    for example in apply_policy(read_records("phase2_train.jsonl")):
        ...

Names are imported lazily so that `import prmkit.data.records` stays cheap.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "read_records": "readers",
    "detect_format": "readers",
    "SUPPORTED": "readers",
    "FORMATS": "readers",
    "read_prm800k": "prm800k",
    "write_prm800k": "prm800k",
    "read_stepwise_critic": "stepwise_critic",
    "read_processbench": "processbench",
    "write_processbench": "processbench",
    "read_prmbench": "prmbench",
    "PRMBenchItem": "prmbench",
    "read_math_shepherd": "stepwise",
    "read_trl": "stepwise",
    "write_trl": "stepwise",
    "read_math": "math_problems",
    "read_scored": "scored",
    "PolicyOptions": "policies",
    "PolicyReport": "policies",
    "apply_policy": "policies",
    "solution_examples": "policies",
    "normalize_problem": "policies",
    "load_holdout": "policies",
    "compute_stats": "stats",
    "file_stats": "stats",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        module = importlib.import_module(f"prmkit.data.{_EXPORTS[name]}")
        return getattr(module, name)
    raise AttributeError(f"module 'prmkit.data' has no attribute {name!r}")
