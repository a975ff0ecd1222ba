"""The demo's reward models read the base's probability of a whole step: the surprise window
(`DemoConfig.surprise_window`) covers the longest step line, its end of line included, of
held-out and out-of-distribution samples in the shipped base's tokenizer. A window of 8
missed the first operand of 57% of steps, where a miscopied quantity is written."""

from transformers import AutoTokenizer

from prmkit.demo import world
from prmkit.demo.core.config import DemoConfig
from prmkit.demo.lm.base import SHIPPED_BASE
from prmkit.demo.lm.skill import _step_spans, heldout_text
from prmkit.demo.world.solver import sample_pools


def _step_token_counts(tokenizer, problems, pools) -> list[int]:
    counts = []
    for prob, pool in zip(problems, pools, strict=True):
        for steps in pool:
            text, spans = _step_spans(prob.text, list(steps))
            starts = [a for a, _ in tokenizer(text, return_offsets_mapping=True)["offset_mapping"]]
            counts += [sum(start <= a <= end for a in starts) for start, end, _ in spans]
    return counts


def test_window_covers_every_step_in_and_out_of_distribution():
    tokenizer = AutoTokenizer.from_pretrained(str(SHIPPED_BASE))
    ood = world.ood_problems(40, seed=0)
    counts = (_step_token_counts(tokenizer, *heldout_text(test=40, samples=8))
              + _step_token_counts(tokenizer, ood, sample_pools(ood, 8, seed=1)))
    assert len(counts) > 1000
    assert sum(c > 8 for c in counts) > 0.3 * len(counts)  # why 8 was too short
    assert max(counts) <= DemoConfig().surprise_window
