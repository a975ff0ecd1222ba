"""The demo's reward models read the base's probability of a whole step: the surprise window
(`DemoConfig.surprise_window`) covers the longest held-out step, its separator included, as
the reward models' encoder tokenises it (`STEP_FORMAT`, the shipped base's tokenizer), and
all but a few out-of-distribution steps (larger numbers: 1 of 8,656 takes 17 tokens). A
window of 8 missed the first operand of most steps, where a miscopied quantity is written.
`pytest -s` prints the counts."""

import json
from collections import Counter

from transformers import AutoTokenizer

from prmkit.demo import world
from prmkit.demo.core.config import DemoConfig
from prmkit.demo.core.seed import STEP_FORMAT
from prmkit.demo.lm.base import SHIPPED_BASE
from prmkit.demo.lm.skill import heldout_text
from prmkit.demo.world.solver import sample_pools
from prmkit.models.formatting import SegmentEncoder


def _step_token_counts(encoder: SegmentEncoder, pools) -> list[int]:
    return [len(encoder.step_ids(step)) for pool in pools for steps in pool for step in steps]


def test_window_covers_every_held_out_step_and_nearly_every_ood_one():
    encoder = SegmentEncoder(AutoTokenizer.from_pretrained(str(SHIPPED_BASE)), STEP_FORMAT)
    ood = world.ood_problems(120, seed=0)
    counts = {"in": _step_token_counts(encoder, heldout_text(samples=8)[1]),
              "ood": _step_token_counts(encoder, sample_pools(ood, 8, seed=1))}
    print(json.dumps({k: {"steps": len(c), "over_8": round(sum(n > 8 for n in c) / len(c), 3),
                          "longest": max(c), "counts": sorted(Counter(c).items())}
                      for k, c in counts.items()}))
    window = DemoConfig().surprise_window
    every = counts["in"] + counts["ood"]
    assert len(counts["in"]) > 1000
    assert sum(n > 8 for n in every) > 0.3 * len(every)  # why 8 was too short
    assert max(counts["in"]) <= window
    assert sum(n <= window for n in counts["ood"]) >= 0.999 * len(counts["ood"])
