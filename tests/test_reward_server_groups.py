"""The reward server with prefix sharing: GRPO-style requests (several completions of one
prompt each) batched together come back in each request's own order, equal to offline
scoring on padded rows."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from test_reward_server import AUTH, PROBLEMS, STEPS, LiveServer, as_json, assert_same_rewards
from test_scoring import make_model

from prmkit.rewards import compute_step_rewards
from prmkit.rewards.serving import Item, ScorerBackend
from prmkit.scoring import Scorer

CLIENTS, GROUP = 6, 4


def group_request(c: int) -> tuple[list[str], list[str]]:
    """One prompt, GROUP different completions of 1 to 4 steps (one without any step)."""
    prompt = PROBLEMS[c % len(PROBLEMS)]
    completions = ["\n\n".join(STEPS[(c + k + j) % len(STEPS)] for j in range(1 + (c + k) % 4))
                   for k in range(GROUP)]
    if c == 1:
        completions[2] = "  "
    return [prompt] * GROUP, completions


@pytest.fixture(scope="module")
def prm_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("prm")
    make_model().save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def shared_scorer(prm_dir):
    scorer = Scorer.from_pretrained(prm_dir, dtype="fp32", device="cpu", share_prefixes=True)
    scorer.min_shared_tokens = 0  # every prompt of 2+ completions shared (short test prompts)
    return scorer


@pytest.fixture(scope="module")
def padded_scorer(prm_dir):
    return Scorer.from_pretrained(prm_dir, dtype="fp32", device="cpu")


def test_grouped_requests_batched_together_get_their_own_rewards_in_order(shared_scorer,
                                                                          padded_scorer):
    shared = []
    run_batch = shared_scorer.run_batch

    def spy(batch):
        shared.append(batch.shared is not None)
        return run_batch(batch)

    shared_scorer.run_batch = spy
    barrier = threading.Barrier(CLIENTS)

    def client(c: int) -> tuple[int, dict]:
        prompts, completions = group_request(c)
        with httpx.Client(base_url=server.url, headers=AUTH, timeout=60) as http:
            barrier.wait(30)
            r = http.post("/v1/step_rewards", json={"prompts": prompts,
                                                    "completions": completions})
        assert r.status_code == 200, r.text
        return c, r.json()

    try:
        with LiveServer(shared_scorer, max_wait_ms=200.0) as server, \
                ThreadPoolExecutor(CLIENTS) as pool:
            answers = dict(pool.map(client, range(CLIENTS)))
            batches = server.metric("prmkit_reward_batch_requests_count")
    finally:
        del shared_scorer.run_batch
    assert batches < CLIENTS and any(shared)  # requests shared batches, prompts their cache
    for c, body in answers.items():
        # offline on padded rows (the module's scorer does not share prefixes)
        want = as_json(compute_step_rewards(padded_scorer, *group_request(c)))
        assert_same_rewards(body["results"], want)
    assert answers[1]["results"][2]["score"] is None


def test_a_prompt_repeated_in_a_request_counts_once_toward_the_batch_budget(shared_scorer,
                                                                            padded_scorer):
    prompt = PROBLEMS[0] * 5
    items = [Item(prompt, STEPS[k]) for k in range(3)] + [Item(PROBLEMS[1], STEPS[0])]
    shared, padded = ScorerBackend(shared_scorer), ScorerBackend(padded_scorer)
    full = padded.token_bounds(items)
    got = shared.token_bounds(items)
    assert got[0] == full[0] and got[3] == full[3]
    assert got[1] == full[1] - len(prompt) and got[2] == full[2] - len(prompt)
    # each a bound on what the PRM reads of the item
    for it, bound in zip(items, full, strict=True):
        assert len(padded_scorer.encode(it.prompt, [it.completion]).input_ids) <= bound
