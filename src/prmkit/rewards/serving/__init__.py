"""prmkit.rewards.serving: a PRM as a reward service (`prmkit serve`, docs/rl.md).

    from prmkit.rewards.serving import EngineSettings, RewardEngine, ScorerBackend, create_app
    backend = ScorerBackend.from_pretrained("runs/prm/model")
    engine = RewardEngine(backend.score, backend.count_tokens, EngineSettings(max_wait_ms=5))
    app = create_app(engine, api_key="...")   # run with uvicorn

`engine`: the batching engine (bounded queue, token-budgeted batches, backpressure);
`backend`: the contract's `compute_step_rewards` on a loaded Scorer; `protocol`: the request
and response bodies (OpenRLHF's remote protocol and the step contract); `app`: the FastAPI
routes; `metrics`: Prometheus metrics. Needs the `serve` extra (FastAPI, uvicorn,
prometheus-client).
"""

from prmkit.rewards.serving.app import create_app
from prmkit.rewards.serving.backend import ScorerBackend
from prmkit.rewards.serving.engine import EngineSettings, Item, RewardEngine

__all__ = ["EngineSettings", "Item", "RewardEngine", "ScorerBackend", "create_app"]
