"""prmkit.rewards.serving: a PRM as a reward service (`prmkit serve`, docs/rl.md).

    import uvicorn
    from prmkit.rewards.serving import (EngineSettings, RewardEngine, ScorerBackend,
                                        create_app, uvicorn_config)
    backend = ScorerBackend.from_pretrained("runs/prm/model")
    engine = RewardEngine(backend.score, backend.token_bounds, EngineSettings(max_wait_ms=5))
    app = create_app(engine, api_key="...")
    uvicorn.Server(uvicorn_config(app, "127.0.0.1", 8000)).run()

`engine`: the batching engine (bounded queue, token budgets, large requests split into
batches served in turn, backpressure), `batching` its queue; `backend`: the contract's
`compute_step_rewards` on a loaded Scorer, and token bounds from bytes; `protocol`: the
request and response bodies (OpenRLHF's remote protocol and the step contract), parsed a
piece at a time by `jsonbody`; `app`: the FastAPI routes; `connections`: read deadlines
and a connection cap under uvicorn; `memory`: freed memory back to the system;
`metrics`: Prometheus metrics. Needs the `serve` extra (FastAPI, uvicorn,
prometheus-client).
"""

from prmkit.rewards.serving.app import create_app
from prmkit.rewards.serving.backend import ScorerBackend
from prmkit.rewards.serving.connections import ConnectionLimits, uvicorn_config
from prmkit.rewards.serving.engine import EngineSettings, Item, RewardEngine

__all__ = ["ConnectionLimits", "EngineSettings", "Item", "RewardEngine", "ScorerBackend",
           "create_app", "uvicorn_config"]
