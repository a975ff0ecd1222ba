import json

import pytest

from prmkit.active.labelers import (
    GraderLabeler,
    LabelItem,
    LargePRMLabeler,
    mc_step_labels,
    outcome_label_from_step_probs,
    process_labels_from_step_probs,
    write_examples,
)
from prmkit.active.montecarlo import MonteCarloLabeler
from prmkit.active.queue import label_record, read_label_queue, write_label_queue
from prmkit.data import read_prm800k, read_records
from prmkit.errors import PrmkitError
from prmkit.generation.base import Completion, RequestOutput, Sampler


def test_process_labels_stop_at_first_step_above_wrong_threshold():
    assert process_labels_from_step_probs([0.9, 0.81, 0.79, 0.1]) == [1, 1, -1]
    assert process_labels_from_step_probs([0.9, 0.8]) == [1, 1]  # P(wrong) 0.2 is not above
    assert process_labels_from_step_probs([0.9, 0.6], threshold=0.5) == [1, 1]


def test_outcome_from_step_probs_is_correct_only_if_every_step_is():
    assert outcome_label_from_step_probs([0.95, 0.9])
    assert not outcome_label_from_step_probs([0.95, 0.5, 0.99])


def test_step_probability_outside_unit_interval_is_an_error():
    with pytest.raises(PrmkitError, match="step 1"):
        process_labels_from_step_probs([0.5, 1.5])


def test_mc_hard_and_soft_estimation():
    rollouts = [[True, True], [False, True], [False, False]]
    assert mc_step_labels(rollouts, "hard") == [1.0, 1.0, 0.0]
    assert mc_step_labels(rollouts, "soft") == [1.0, 0.5, 0.0]
    with pytest.raises(PrmkitError, match="step 0: no rollouts"):
        mc_step_labels([[]], "hard")


ITEM = LabelItem("p1", "What is 2+3?", ("2+3 = 5.", "So it is 6.", "# Answer\n\n6"),
                 gold_answer="5", answer="6", sample_index=3, score=0.7)


def test_large_prm_process_and_outcome_labels_become_step_examples(tmp_path):
    probs = lambda pairs: [[0.9, 0.3, 0.8] for _ in pairs]  # noqa: E731
    ex = LargePRMLabeler(probs).label([ITEM])[0]
    assert ex.labels == (1.0, 0.0, None) and ex.group == "p1"
    out = LargePRMLabeler(probs, supervision="outcome").label([ITEM])[0]
    assert out.outcome == 0.0 and out.labels == (0.0, 0.0, 0.0)
    write_examples([ex, out], tmp_path / "l.jsonl")
    back = list(read_records(tmp_path / "l.jsonl"))
    assert [b.labels for b in back] == [(1.0, 0.0), (0.0, 0.0, 0.0)]


def test_grader_labels_final_answer_and_drops_items_without_gold():
    items = [ITEM, LabelItem("p2", "q", ("# Answer\n\n5",), gold_answer="5"),
             LabelItem("p3", "q", ("# Answer\n\n5",), gold_answer=None)]
    g = GraderLabeler()
    assert [e.outcome for e in g.label(items)] == [0.0, 1.0]
    assert g.report()["dropped"] == 1


class ScriptedRollouts(Sampler):
    """A continuation reaches the right answer "5" unless the prefix holds a "bad" step;
    after a "shaky" step only even-numbered samples do."""

    backend, model = "fake", "scripted"

    def __init__(self):
        self.prefixes: list[str] = []

    def generate(self, requests, params, progress=False):
        out = []
        for r in requests:
            solution = r.prompt.text.rsplit("Solution:\n", 1)[1]
            self.prefixes.append(solution)
            comps = []
            for i in range(r.n):
                ok = "bad" not in solution and ("shaky" not in solution or i % 2 == 0)
                comps.append(Completion(f"# Answer\n\n{5 if ok else 7}", 4, "stop"))
            out.append(RequestOutput(r.key, comps))
        return out


STEPS = ("one", "two", "bad", "three", "four", "five", "# Answer\n\n7")


def test_mc_all_prefixes_hard_labels_every_step():
    item = LabelItem("p", "q", STEPS, gold_answer="5", answer="7")
    lab = MonteCarloLabeler(ScriptedRollouts(), k=2, search="all")
    assert lab.label([item])[0].labels == (1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    rep = lab.report()
    assert rep["prefixes"] == 6 and rep["rollouts"] == 12 and rep["graded_whole"] == 1


def test_mc_binary_search_finds_first_error_with_fewer_rollouts():
    item = LabelItem("p", "q", STEPS, gold_answer="5", answer="7")
    lab = MonteCarloLabeler(ScriptedRollouts(), k=2, search="binary")
    assert lab.label([item])[0].labels == (1.0, 1.0, 0.0, None, None, None, None)
    assert lab.report()["prefixes"] == 3 and lab.report()["prefixes_exhaustive"] == 7


def test_mc_binary_search_on_a_correct_solution_rolls_out_nothing():
    item = LabelItem("p", "q", ("one", "# Answer\n\n5"), gold_answer="5", answer="5")
    sampler = ScriptedRollouts()
    assert MonteCarloLabeler(sampler, k=2).label([item])[0].labels == (1.0, 1.0)
    assert sampler.prefixes == []


def test_mc_soft_binary_labels_unmeasured_steps_with_next_measured_estimate():
    item = LabelItem("p", "q", ("one", "shaky", "two", "bad", "# Answer\n\n7"),
                     gold_answer="5", answer="7")
    lab = MonteCarloLabeler(ScriptedRollouts(), k=2, mode="soft", search="binary")
    # measured: prefix 2 ("two", 0.5) and 3 ("bad", 0.0); steps 0-1 take 0.5
    assert lab.label([item])[0].labels == (0.5, 0.5, 0.5, 0.0, None)


def test_label_queue_round_trips_through_the_prm800k_reader(tmp_path):
    path = tmp_path / "queue.jsonl"
    other = LabelItem("p2", "What is 1+1?", ("1+1 = 2.", "# Answer\n\n2"), "2", "2", 0, 0.9)
    write_label_queue([ITEM, other], path, generation=1)
    raw = json.loads(path.read_text().splitlines()[0])
    assert raw["question"]["pre_generated_steps"] == list(ITEM.steps)
    assert raw["question"]["pre_generated_answer"] == "6"
    assert raw["question"]["pre_generated_verifier_score"] == 0.7
    assert raw["generation"] == 1 and raw["label"]["finish_reason"] is None
    assert raw["sample"] == {"problem_id": "p1", "sample_index": 3}
    pending = read_label_queue(path)
    assert pending.pending == 2 and pending.examples == []
    recs = list(read_prm800k(path))
    done = [label_record(recs[0], [1, -1], labeler="alice"), recs[1]]
    from prmkit.data import write_prm800k
    write_prm800k(done, path)
    back = read_label_queue(path)
    assert back.labelled == 1 and back.pending == 1 and len(back.examples) == 1
    assert back.examples[0].steps == ITEM.steps[:2]
    assert back.examples[0].labels == (1.0, 0.0)
    assert list(read_prm800k(path))[0].extra["sample"]["sample_index"] == 3


def test_label_record_without_an_error_must_rate_every_step():
    from prmkit.active.queue import queue_record

    with pytest.raises(PrmkitError, match="without a -1"):
        label_record(queue_record(ITEM, 0), [1, 1])


def test_large_prm_step_cut_by_max_length_is_wrong_by_the_null_step_rule():
    probs = lambda pairs: [[0.9, None, 0.95] for _ in pairs]  # noqa: E731
    assert process_labels_from_step_probs([0.9, None, 0.95]) == [1, -1]
    assert not outcome_label_from_step_probs([0.9, None])
    assert LargePRMLabeler(probs).label([ITEM])[0].labels == (1.0, 0.0, None)
    assert LargePRMLabeler(probs, supervision="outcome").label([ITEM])[0].outcome == 0.0


def test_monte_carlo_chat_rollouts_continue_round_zeros_conversation():
    from prmkit.generation.prompts import PromptFormat

    class Recording(Sampler):
        backend, model = "fake", "recording"
        prompts: list = []

        def generate(self, requests, params, progress=False):
            self.prompts += [r.prompt for r in requests]
            return [RequestOutput(r.key, [Completion("# Answer\n\n5", 3, "stop")] * r.n)
                    for r in requests]

    fmt = PromptFormat(style="chat")
    sampler = Recording()
    item = LabelItem("p", "What is 2+3?", ("one", "two", "# Answer\n\n7"), gold_answer="5",
                     answer="7")
    MonteCarloLabeler(sampler, prompt_format=fmt, k=1, search="all").label([item])
    assert [p.continuation for p in sampler.prompts] == ["one\n\n", "one\n\ntwo\n\n"]
    assert all(p.messages == fmt.render(item.problem).messages and p.text is None
               for p in sampler.prompts)
