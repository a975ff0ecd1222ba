"""prmkit.search: test-time search guided by a process reward model.

    from prmkit.search import SearchConfig, run_search
    config = SearchConfig(approach="beam_search", n=16, beam_width=4, aggregation="min")
    results = run_search([("p0", problem_text)], sampler, step_scorer, prompts, config)
    results[0].answer, results[0].generated_tokens, results[0].prm_tokens

Approaches: best_of_n, weighted_best_of_n, beam_search, dvts (docs/search.md). The sampler
is any `prmkit.generation.Sampler`; the step scorer anything with `score(problem,
steps_list)` and `tokens_scored` (`RescoringScorer` wraps the plain `Scorer`); the prompt
builder anything with `render(problem)` and `render_partial(problem, steps)`.
"""

from prmkit.search.config import APPROACHES, Approach, SearchConfig
from prmkit.search.core import (
    Candidate,
    PromptBuilder,
    RescoringScorer,
    SearchResult,
    StepScorer,
)
from prmkit.search.methods import METHODS, beam_search, best_of_n, dvts, run_search

__all__ = ["APPROACHES", "METHODS", "Approach", "Candidate", "PromptBuilder",
           "RescoringScorer", "SearchConfig", "SearchResult", "StepScorer", "beam_search",
           "best_of_n", "dvts", "run_search"]
