"""Published PRM families through prmkit's one formatting module and one Scorer: tiny
random replicas (tests/published_replicas.py) scored by prmkit and by each model card's
own procedure, and the same solution through `prmkit score`, the Scorer API, search and
the ProcessBench evaluator."""

import itertools
import json
import math
import re
from pathlib import Path

import pytest
import torch
from published_replicas import (
    PROBLEM,
    QWEN_SYSTEM,
    STEPS,
    implicit_card_rewards,
    implicit_prm,
    implicit_processbench_rewards,
    math_shepherd,
    qwen_card_scores,
    qwen_prm,
    rlhflow,
    rlhflow_card_scores,
    shepherd_card_scores,
    skywork_card_scores,
    skywork_prm,
)
from search_fakes import FakePrompts, TreeSampler
from transformers import AutoTokenizer

from prmkit.cli import main
from prmkit.errors import PrmkitError
from prmkit.models.family import builtin_specs, load_spec
from prmkit.models.formatting import StepFormat
from prmkit.models.loading import load_reward_model
from prmkit.models.reward_model import StepRewardModel
from prmkit.scoring import Scorer

IMPLICIT_BETA = 0.5


def eurus_replica(folder):
    """The implicit family's built-in spec with the replica's reference and a larger beta."""
    policy, reference = implicit_prm(folder)
    spec = folder / "eurus.yaml"
    spec.write_text(f"base: eurus-prm\nlabel: {{reference: {reference}, beta: {IMPLICIT_BETA}}}\n")
    FAMILIES["eurus-prm"] = (eurus_replica, {"format": str(spec)})
    CLI_FLAGS["eurus-prm"] = ["--format", str(spec)]
    return policy


FAMILIES = {  # name -> (builder, load options)
    "qwen2.5-math-prm": (qwen_prm, {"trust_remote_code": True}),
    "math-shepherd": (math_shepherd, {"format": "math-shepherd"}),
    "rlhflow": (rlhflow, {"format": "rlhflow"}),
    "eurus-prm": (eurus_replica, None),  # the spec file is written with the replica
    "skywork-prm": (skywork_prm, {}),  # detected from config.json (Qwen2ForPrmModel)
}
CLI_FLAGS = {"qwen2.5-math-prm": ["--trust-remote-code"], "math-shepherd": ["--format",
             "math-shepherd"], "rlhflow": ["--format", "rlhflow"], "skywork-prm": []}


@pytest.fixture(scope="module")
def replicas(tmp_path_factory):
    root = tmp_path_factory.mktemp("published")
    return {name: build(root / name) for name, (build, _) in list(FAMILIES.items())}


def fp32_scorer(folder, **load):
    return Scorer.from_pretrained(folder, dtype=None, device="cpu", **load)


def test_builtin_families_are_specs_shipped_with_the_package():
    assert set(builtin_specs()) >= {"qwen2.5-math-prm", "math-shepherd", "rlhflow",
                                    "token-classification"}
    qwen = load_spec("qwen2.5-math-prm")
    assert (qwen.layout.marker, qwen.read, qwen.correct_class) == ("<extra_0>", "classes", 1)
    assert qwen.source.endswith("qwen2.5-math-prm.yaml")


def test_qwen_labels_sit_on_every_extra_0_and_p_correct_is_softmax_class_1(replicas):
    folder = replicas["qwen2.5-math-prm"]
    want, positions = qwen_card_scores(folder, PROBLEM, STEPS)
    scorer = fp32_scorer(folder, trust_remote_code=True)
    enc = scorer.encode(PROBLEM, STEPS)
    extra_0 = scorer.model.tokenizer.convert_tokens_to_ids("<extra_0>")
    assert enc.label_positions == positions and len(positions) == len(STEPS)
    assert all(enc.input_ids[p] == extra_0 for p in enc.label_positions)
    assert scorer.score([(PROBLEM, STEPS)])[0] == pytest.approx(want, abs=1e-5)
    assert scorer.record("min")["format"] == "qwen2.5-math-prm"


def test_math_shepherd_labels_sit_on_the_step_tag_and_read_plus_over_minus(replicas):
    folder = replicas["math-shepherd"]
    want, positions = shepherd_card_scores(folder, PROBLEM, STEPS)
    scorer = fp32_scorer(folder, format="math-shepherd")
    enc = scorer.encode(PROBLEM, STEPS)
    tok = scorer.model.tokenizer
    assert enc.label_positions == positions and len(positions) == len(STEPS)
    assert {tok.convert_ids_to_tokens(enc.input_ids[p]) for p in positions} == {"▁ки"}
    assert enc.input_ids[0] == tok.bos_token_id
    assert scorer.score([(PROBLEM, STEPS)])[0] == pytest.approx(want, abs=1e-5)


def test_rlhflow_label_is_read_before_each_assistant_plus(replicas):
    folder = replicas["rlhflow"]
    want = rlhflow_card_scores(folder, PROBLEM, STEPS)
    scorer = fp32_scorer(folder, format="rlhflow")
    enc = scorer.encode(PROBLEM, STEPS)
    tok = scorer.model.tokenizer
    plus = tok.convert_tokens_to_ids("+")
    # the token after each label is the assistant's "+", after the assistant header
    text = tok.decode(enc.input_ids[: enc.label_positions[0] + 1])
    assert text.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")
    assert [enc.input_ids[p + 1] for p in enc.label_positions[:-1]] == [plus] * (len(STEPS) - 1)
    assert scorer.score([(PROBLEM, STEPS)])[0] == pytest.approx(want, abs=1e-5)


def sigmoid(values):
    return [1 / (1 + math.exp(-v)) for v in values]


def at_step_ends(values, steps, inside):
    """Per step, the authors' value at the marker that ends it: their code reads one at
    every marker, also at the `inside(step)` markers a step's own text holds."""
    ends = list(itertools.accumulate(inside(s) + 1 for s in steps))
    return [values[e - 1] for e in ends]


def authors_scores(family, folder, problem, steps):
    """P(correct) per step as each family's authors' code computes it (published_replicas)."""
    if family == "qwen2.5-math-prm":
        return at_step_ends(qwen_card_scores(folder, problem, steps)[0], steps,
                            lambda s: s.count("<extra_0>"))
    if family == "math-shepherd":
        return at_step_ends(shepherd_card_scores(folder, problem, steps)[0], steps,
                            lambda s: s.count(" ки"))
    if family == "rlhflow":
        return rlhflow_card_scores(folder, problem, steps)
    if family == "eurus-prm":
        reference = load_spec(FAMILIES[family][1]["format"]).reference
        return sigmoid(implicit_card_rewards(folder, reference, problem, steps, IMPLICIT_BETA))
    return at_step_ends(skywork_card_scores(folder, problem, steps), steps,
                        lambda s: s.count("\n"))


MARKER_INSIDE = {  # a step holding the family's separator or label marker
    "qwen2.5-math-prm": "Compute 3 * 4<extra_0> = 12.",
    "math-shepherd": "Compute 3 * 4 ки = 12.",
    "rlhflow": "+ Compute 3 * 4 = 12. +",
    "eurus-prm": "Compute 3 * 4\n\nStep 9: = 12.",
    "skywork-prm": "Compute 3 * 4\n= 12.\n\nThen 12 - 5 = 7.",
}
CHAT = ("qwen2.5-math-prm", "rlhflow", "eurus-prm")
SYSTEM_TEXT = {"rlhflow": "Cutting Knowledge Date: December 2023"}
CASES = {
    "ordinary_solution": lambda f: (PROBLEM, STEPS),
    "steps_and_problem_with_surrounding_whitespace": lambda f: (
        "  " + PROBLEM + " \n", ["  " + STEPS[0] + "  ", "\t" + STEPS[1] + "\n", STEPS[2]]),
    "steps_with_surrounding_spaces": lambda f: (PROBLEM, [f" {s}  " for s in STEPS]),
    "braces_and_placeholders_in_the_problem": lambda f: (
        "Find {steps}, {problem}, {step} {n} {bos} {{x}} and \\boxed{7}.", STEPS),
    "marker_or_separator_inside_a_step": lambda f: (PROBLEM, [MARKER_INSIDE[f], *STEPS[1:]]),
    "empty_step": lambda f: (PROBLEM, [STEPS[0], "", STEPS[2]]),
    "problem_repeated_in_the_system_prompt": lambda f: (
        SYSTEM_TEXT.get(f, QWEN_SYSTEM), [SYSTEM_TEXT.get(f, QWEN_SYSTEM), *STEPS[1:]]),
}


@pytest.fixture(scope="module")
def scorers(replicas):
    return {family: fp32_scorer(replicas[family], **FAMILIES[family][1]) for family in FAMILIES}


@pytest.mark.parametrize("family, case", [
    (f, c) for f in FAMILIES for c in CASES
    if f in CHAT or c != "problem_repeated_in_the_system_prompt"])  # text formats have none
def test_family_reads_as_its_authors_code(replicas, scorers, family, case):
    """prmkit's step probabilities against each family's authors' code (written from it,
    line by line, in published_replicas, not from prmkit's formatting), fp32, case by case."""
    problem, steps = CASES[case](family)
    want = authors_scores(family, replicas[family], problem, steps)
    assert len(want) == len(steps)
    assert scorers[family].score([(problem, steps)])[0] == pytest.approx(want, abs=1e-5)


@pytest.mark.parametrize("beta", [0.001, 0.05])
def test_eurus_first_step_sum_includes_newline_after_assistant_header(replicas, tmp_path, beta):
    """The EurusPRM card's label mask starts at step_last_tokens[0], the "\\n" after the
    assistant header, and is applied to the log-probs shifted by one, so that token's
    log-ratio is in every step's sum: prmkit's rewards (the logit of P(correct)) are the
    card's in every case, at the card's beta and at 0.05. ImplicitPRM's processbench.py
    sums from the next token; `label.sum_from: after_boundary` reads as it does."""
    policy = replicas["eurus-prm"]
    reference = load_spec(FAMILIES["eurus-prm"][1]["format"]).reference
    readings = {}
    for sum_from, authors in (("boundary", implicit_card_rewards),
                              ("after_boundary", implicit_processbench_rewards)):
        spec = tmp_path / f"{sum_from}.yaml"
        spec.write_text(f"base: eurus-prm\nlabel: {{reference: {reference}, beta: {beta}, "
                        f"sum_from: {sum_from}}}\n")
        scorer = fp32_scorer(policy, format=str(spec))
        for case, solution in CASES.items():
            want = authors(policy, reference, *solution("eurus-prm"), beta)
            got = [math.log(p / (1 - p)) for p in scorer.score([solution("eurus-prm")])[0]]
            assert got == pytest.approx(want, abs=2e-6), (sum_from, case)
            readings[sum_from, case] = want
    enc = fp32_scorer(policy, format=FAMILIES["eurus-prm"][1]["format"]).encode(PROBLEM, STEPS)
    tok = AutoTokenizer.from_pretrained(policy)
    first = enc.label_positions[0] + 1  # the first token summed, after the anchor
    assert tok.decode(enc.input_ids[:first + 1]).endswith("<|im_start|>assistant\n")
    assert tok.decode(enc.input_ids[first + 1:]).startswith("Step 1: ")
    for case in CASES:  # the two scripts differ by that one token, in every step's sum
        gap = [a - b for a, b in zip(readings["boundary", case],
                                     readings["after_boundary", case], strict=True)]
        assert max(gap) - min(gap) < 1e-6 and abs(gap[0]) > 1e-3 * beta, case


def test_rlhflow_steps_trimmed_as_llama3_template(replicas, scorers, tmp_path):
    """RLHFlow's prm_evaluate.py strips every step (line 50) before the first turn's
    `prompt + " " + step`, and the checkpoint's Llama 3.1 template trims every message: a
    step's surrounding whitespace never reaches the model. The rlhflow spec strips the
    steps (`prompt.strip_steps`); kept, the first turn would read other text."""
    folder = replicas["rlhflow"]
    padded = ["   " + STEPS[0] + "  ", "\t" + STEPS[1] + " \n", " " + STEPS[2]]
    want = rlhflow_card_scores(folder, PROBLEM, padded)
    assert want == pytest.approx(rlhflow_card_scores(folder, PROBLEM, STEPS), abs=1e-6)
    assert scorers["rlhflow"].score([(PROBLEM, padded)])[0] == pytest.approx(want, abs=1e-5)
    text = AutoTokenizer.from_pretrained(folder).decode(
        scorers["rlhflow"].encode(PROBLEM, padded).input_ids)
    assert f"{PROBLEM} {STEPS[0]}<|eot_id|>" in text and f">\n\n{STEPS[1]}<|eot_id|>" in text
    kept = tmp_path / "kept.yaml"
    kept.write_text("base: rlhflow\nprompt: {strip_steps: false}\n")
    unstripped = fp32_scorer(folder, format=str(kept)).score([(PROBLEM, padded)])[0]
    assert abs(unstripped[0] - want[0]) > 1e-3


@pytest.mark.parametrize("family", list(FAMILIES))
def test_family_input_beyond_the_maximum_length_scores_the_steps_that_fit(replicas, family):
    """A step whose label falls past max_length scores None; the steps before it keep the
    authors' values on the whole input (causal attention)."""
    scorer = fp32_scorer(replicas[family], **FAMILIES[family][1])
    positions = scorer.encode(PROBLEM, STEPS).label_positions
    scorer.encoder.fmt = StepFormat(max_length=positions[-2] + 1)
    got = scorer.score([(PROBLEM, STEPS)])[0]
    want = authors_scores(family, replicas[family], PROBLEM, STEPS)
    assert got[:2] == pytest.approx(want[:2], abs=1e-4) and got[2] is None


def test_eurus_prm_is_the_cumulative_reward_and_eurus_prm_step_its_increments(replicas):
    """EurusPRM's authors read sigmoid of the running sum from the response's start; PRIME's
    dense RL reward (eurus-prm-step) is each step's own increment between the same
    boundaries. The two order the steps differently, hence other first errors."""
    folder, spec = replicas["eurus-prm"], FAMILIES["eurus-prm"][1]["format"]
    running = implicit_card_rewards(folder, load_spec(spec).reference, PROBLEM, STEPS,
                                    IMPLICIT_BETA)
    step_spec = Path(spec).with_name("eurus-step.yaml")
    step_spec.write_text(Path(spec).read_text().replace("base: eurus-prm", "base: eurus-prm-step"))
    increments = fp32_scorer(folder, format=str(step_spec)).score([(PROBLEM, STEPS)])[0]
    steps = [b - a for a, b in zip([0.0, *running], running)]
    assert increments == pytest.approx(sigmoid(steps), abs=1e-5)
    cumulative = fp32_scorer(folder, format=spec)
    assert cumulative.score([(PROBLEM, STEPS)])[0] == pytest.approx(sigmoid(running), abs=1e-5)
    assert cumulative.encode(PROBLEM, STEPS).slots == [-1, 0, 1, 2]  # the anchor scores nothing
    assert load_spec("eurus-prm-step").reward == "step"
    assert load_spec("eurus-prm").layout.step == "Step {n}: {step}"


def test_step_reward_model_from_pretrained_refuses_a_published_prm_naming_its_loader(replicas):
    """StepRewardModel.from_pretrained loads prmkit's own folders; a published PRM, found
    by its folder or named by `format`, is refused with the call that loads it."""
    folder = replicas["skywork-prm"]
    with pytest.raises(PrmkitError, match=rf"^{re.escape(str(folder))} has no prmkit_config.json, so it is no "
                                          r"model prmkit saved: .*load_reward_model\("):
        StepRewardModel.from_pretrained(folder)
    with pytest.raises(PrmkitError, match=r"^format 'math-shepherd' names a published PRM: .*"
                                          r"load_reward_model\('.*', format='math-shepherd'\) "
                                          r"or Scorer.from_pretrained"):
        StepRewardModel.from_pretrained(replicas["math-shepherd"], format="math-shepherd")
    assert load_reward_model(folder).config.family == "skywork-prm"


def test_qwen_remote_code_runs_only_when_the_user_says_so(replicas):
    with pytest.raises(PrmkitError, match="remote code.*--trust-remote-code"):
        load_reward_model(replicas["qwen2.5-math-prm"])


def test_skywork_prm_loads_from_its_folder_without_running_its_code(replicas):
    """Qwen2ForPrmModel is detected from config.json and read without its remote code (the
    replica's modeling file raises if run): the base model and the v_head from the
    checkpoint, a step of several lines read at its last line's "\n"."""
    model = load_reward_model(replicas["skywork-prm"])
    assert model.config.family == "skywork-prm" and type(model.backbone).__name__ == "Qwen2Model"
    enc = model.encoder.encode(PROBLEM, ["a\nb", "c"])
    newline = model.tokenizer.encode("\n")[-1]
    assert enc.input_ids[0] == model.tokenizer.bos_token_id
    assert [enc.input_ids[p] for p in enc.label_positions] == [newline, newline]
    assert enc.input_ids.count(newline) == PROBLEM.count("\n") + 4  # problem, a, b, c


def test_skywork_prm_by_hub_id_from_the_cache(replicas, tmp_path, monkeypatch):
    import shutil

    import huggingface_hub.constants
    from test_hub_data import cached_repo

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    repo = "Skywork/Skywork-o1-Open-PRM-Qwen-2.5-1.5B"
    snapshot = cached_repo(tmp_path / "hub", repo, {}, "models")
    shutil.copytree(replicas["skywork-prm"], snapshot, dirs_exist_ok=True)
    by_id = fp32_scorer(repo)
    assert by_id.record("min")["format"] == "skywork-prm"
    assert by_id.score([(PROBLEM, STEPS)]) == fp32_scorer(replicas["skywork-prm"]).score(
        [(PROBLEM, STEPS)])


def test_skywork_prm_with_a_misnamed_value_head_is_refused(replicas, tmp_path):
    """The authors' loader takes the head with strict=False, so a head saved under another
    name stays random there; prmkit refuses the folder, naming the keys it found."""
    import shutil

    folder = tmp_path / "skywork"
    shutil.copytree(replicas["skywork-prm"], folder)
    state = torch.load(folder / "pytorch_model.bin", weights_only=True)
    state["score.weight"] = state.pop("v_head.summary.weight")
    torch.save(state, folder / "pytorch_model.bin")
    with pytest.raises(PrmkitError, match=r"format 'skywork-prm' reads its value head from "
                                          r"v_head.summary.weight \[1, 32\], but it has no "
                                          r"v_head.summary.weight \(keys outside the base "
                                          r"model: score.weight, v_head.summary.bias\)"):
        load_reward_model(folder)


def test_qwen_is_detected_from_config_json(replicas):
    model = load_reward_model(replicas["qwen2.5-math-prm"], trust_remote_code=True)
    assert model.config.family == "qwen2.5-math-prm"


def test_plain_causal_lm_without_format_asks_for_one(replicas):
    with pytest.raises(PrmkitError, match=r"not a reward model prmkit knows.*MistralForCausalLM"
                                          r".*--format \(eurus-prm, eurus-prm-step, math-shepherd, "
                                          r"rlhflow\)"):
        load_reward_model(replicas["math-shepherd"])


def test_score_plain_base_lm_says_first_that_it_is_not_a_reward_model(tmp_path, capsys):
    from prmkit.models.backbones import tiny_random

    base, tok = tiny_random(seed=0)
    base.save_pretrained(tmp_path / "base")
    tok.save_pretrained(tmp_path / "base")
    capsys.readouterr()
    solutions = tmp_path / "in.jsonl"
    solutions.write_text(json.dumps({"problem": PROBLEM, "steps": STEPS}) + "\n")
    assert main(["score", "--model", str(tmp_path / "base"), "--input", str(solutions),
                 "-o", str(tmp_path / "out.jsonl"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"prmkit: error: {tmp_path / 'base'} is not a reward model prmkit "
                          "knows: prmkit_config.json is missing"), err
    assert "base models included" in err and "prmkit train" in err


def test_published_prm_in_the_hub_cache_is_named_with_its_family(replicas, tmp_path):
    import shutil

    snapshot = tmp_path / "models--peiyi9979--math-shepherd-mistral-7b-prm" / "snapshots" / "c0"
    shutil.copytree(replicas["math-shepherd"], snapshot)
    with pytest.raises(PrmkitError, match="is peiyi9979/math-shepherd-mistral-7b-prm, a "
                                          "published PRM of the math-shepherd family.*pass "
                                          "--format math-shepherd$"):
        load_reward_model(snapshot)


def emitting_labels(folder, out):
    """The replica changed so that it answers every label position of its format with "+":
    the blocks add nothing to the residual stream (the hidden state at a label is the
    marker token's embedding, normalised), and the LM head's "+" row points along it."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from prmkit.models.published import PROBE

    lm = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    with torch.no_grad():
        for layer in lm.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
    lm.save_pretrained(out)
    AutoTokenizer.from_pretrained(folder).save_pretrained(out)
    model = load_reward_model(out, format="math-shepherd")
    enc = model.encoder.encode(*PROBE)
    with torch.no_grad():
        h = model.hidden_states(torch.tensor([enc.input_ids]))[0, enc.label_positions[0]]
        plus = model.label_token_ids[0]
        lm.lm_head.weight[plus] = 30 * h / h.pow(2).sum()
    lm.save_pretrained(out)
    return out


def test_base_lm_read_as_math_shepherd_is_warned_about(replicas, tmp_path, caplog):
    """A model read in a format whose label tokens it was not trained to emit (here a
    random one: the +/- tokens get a sliver of its next-token probability) scores
    noise: loading it says so; a model that answers its label positions with them loads
    without a word."""
    from prmkit.models.published import label_token_mass

    with caplog.at_level("WARNING", logger="prmkit.models"):
        base = load_reward_model(replicas["math-shepherd"], format="math-shepherd")
    assert label_token_mass(base) < 0.1
    assert "does not look trained for format 'math-shepherd'" in caplog.text
    assert "Is it a base LM rather than a math-shepherd PRM?" in caplog.text
    trained = emitting_labels(replicas["math-shepherd"], tmp_path / "trained")
    caplog.clear()
    with caplog.at_level("WARNING", logger="prmkit.models"):
        model = load_reward_model(trained, format="math-shepherd")
    assert label_token_mass(model) > 0.9
    assert "does not look trained" not in caplog.text


def test_mismatched_format_names_the_expected_architecture(replicas):
    with pytest.raises(PrmkitError, match="MistralForCausalLM, but format 'qwen2.5-math-prm' "
                                          "expects Qwen2ForProcessRewardModel"):
        load_reward_model(replicas["math-shepherd"], format="qwen2.5-math-prm")
    with pytest.raises(PrmkitError, match="unknown format 'shepherd': expected one of"):
        load_reward_model(replicas["math-shepherd"], format="shepherd")


def test_format_whose_tokens_the_tokenizer_lacks_is_refused(replicas, tmp_path):
    spec = tmp_path / "qwen_on_llama.yaml"
    spec.write_text((load_spec("qwen2.5-math-prm").source and
                     open(load_spec("qwen2.5-math-prm").source).read())
                    .replace("name: qwen2.5-math-prm", "name: q")
                    .replace("[Qwen2ForProcessRewardModel]", '["*ForCausalLM"]')
                    .replace("remote_code: true", "remote_code: false"))
    with pytest.raises(PrmkitError, match="reads labels at the token '<extra_0>', which this "
                                          "tokenizer does not have"):
        load_reward_model(replicas["rlhflow"], format=str(spec))


def test_chat_template_that_rewrites_the_steps_is_an_error_not_a_misplaced_label(replicas,
                                                                                tmp_path):
    """Labels are placed by construction: the steps start where the conversation before
    them (with the generation prompt) ends. Llama 3.1's template trims each content, so
    steps with leading spaces in its assistant turn are not where prmkit put them."""
    spec = tmp_path / "llama-chat.yaml"
    spec.write_text("base: rlhflow\nname: llama-chat\nprompt: {kind: chat, messages: [{role: "
                    "user, content: '{problem}'}, {role: assistant, content: '{steps}'}], "
                    "step: '{step} +', step_join: \"\\n\", strip_steps: false}\n"
                    "label: {at: marker}\n")
    scorer = fp32_scorer(replicas["rlhflow"], format=str(spec))
    assert len(scorer.score([(PROBLEM, STEPS)])[0]) == len(STEPS)
    with pytest.raises(PrmkitError, match="the chat template does not render the assistant "
                                          "turn as the conversation so far followed by the "
                                          "text given"):
        scorer.score([(PROBLEM, ["  " + STEPS[0], *STEPS[1:]])])


def test_a_spec_file_adds_a_family_without_code(replicas, tmp_path):
    text = open(load_spec("math-shepherd").source).read().replace(
        "name: math-shepherd", "name: my-shepherd")
    (tmp_path / "mine.yaml").write_text(text)
    mine = fp32_scorer(replicas["math-shepherd"], format=str(tmp_path / "mine.yaml"))
    builtin = fp32_scorer(replicas["math-shepherd"], format="math-shepherd")
    assert mine.score([(PROBLEM, STEPS)]) == builtin.score([(PROBLEM, STEPS)])
    assert mine.record("min")["format"] == "my-shepherd"


@pytest.mark.parametrize("text, message", [
    ("name: x\nprompt: {kind: html}\n", "prompt.kind must be one of"),
    ("name: x\nprompt: {step: '{step}'}\nlabel: {marker: ки}\n", "prompt.step needs {step} "
     "followed by label.marker"),
    ('name: x\nlabel: {marker: "\\n\\n", read: lm_tokens}\n', "label.tokens: 2 or 3"),
    ("name: [x\n", "not a valid spec file"),
    ("base: eurus\nname: x\n", "base 'eurus' is neither a built-in family nor a spec file"),
    ("base: bad.yaml\nname: x\n", "base 'bad.yaml' is neither .* names this spec again"),
    ("base: eurus-prm\nname: x\nlabel: {reward: total}\n", "label.reward must be one of"),
    ("base: eurus-prm\nname: x\nlabel: {sum_from: response}\n", "label.sum_from must be one of"),
    ("name: x\nprompt: {kind: chat, messages: [{role: user, content: '{problem} {steps}'}, "
     "{role: assistant, content: ok}]}\nlabel: {marker: ok}\n", "{steps} once, in the last "
     "message's content"),
])
def test_bad_spec_file_names_the_file_and_the_field(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(PrmkitError, match=f"{path}: .*{message}"):
        load_spec(str(path))


@pytest.mark.parametrize("family", list(FAMILIES))
def test_score_cli_scorer_search_and_processbench_agree(replicas, family, tmp_path):
    from prmkit.data.processbench import write_processbench
    from prmkit.data.records import ProcessBenchItem
    from prmkit.search import RescoringScorer, SearchConfig, run_search

    folder, load = replicas[family], FAMILIES[family][1]
    solutions = [STEPS, STEPS[:2], ["Next, 12 - 5 = 7.", "The answer is \\boxed{4}."]]
    scorer = Scorer.from_pretrained(folder, device="cpu", **load)  # bf16, as the CLI
    api = scorer.score([(PROBLEM, s) for s in solutions])

    inp, out = tmp_path / "in.jsonl", tmp_path / "scored.jsonl"
    inp.write_text("".join(json.dumps({"id": str(i), "problem": PROBLEM, "steps": s}) + "\n"
                           for i, s in enumerate(solutions)))
    assert main(["score", "--model", str(folder), "--input", str(inp), "-o", str(out),
                 "--device", "cpu", "--no-progress", *CLI_FLAGS[family]]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["step_scores"] for line in lines] == api
    assert lines[0]["scored_by"]["format"] == family

    results = run_search([("p", PROBLEM)], TreeSampler(depth=3), RescoringScorer(scorer),
                         FakePrompts(), SearchConfig(approach="beam_search", n=4,
                                                     beam_width=2, max_steps=3),
                         progress=False)
    candidates = [c for c in results[0].candidates if c.steps]
    assert candidates
    for c in candidates:  # alone or beside others: equal up to the rounding of padded rows
        assert c.step_scores == pytest.approx(scorer.score([(PROBLEM, c.steps)])[0], abs=1e-6)

    bench = tmp_path / "pb"
    bench.mkdir()
    write_processbench([ProcessBenchItem(str(i), PROBLEM, s, label=-1 if i else 1)
                        for i, s in enumerate(solutions)], bench / "gsm8k.json")
    threshold = str(float(torch.tensor([p for ps in api for p in ps]).median()))
    common = ["--data", str(bench), "--threshold", threshold, "--json"]
    for argv in (["--model", str(folder), "--device", "cpu", *CLI_FLAGS[family]],
                 ["--predictions", str(out)]):
        assert main(["eval", "processbench", *argv, *common,
                     "-o", str(tmp_path / f"{argv[0][2:]}.json")]) == 0
    by_model = json.loads((tmp_path / "model.json").read_text())
    by_scores = json.loads((tmp_path / "predictions.json").read_text())
    assert by_model == by_scores and by_model["gsm8k"]["n_error"] == 1


def test_search_with_a_published_prm_is_refused_by_the_prefix_cache(replicas):
    from prmkit.scoring.incremental import IncrementalScorer

    with pytest.raises(PrmkitError, match="tokenised whole.*--no-incremental"):
        IncrementalScorer(fp32_scorer(replicas["rlhflow"], format="rlhflow"))


def test_eval_steps_scores_a_published_prm_with_the_scorer(replicas, tmp_path, monkeypatch):
    """`eval steps --model` (no prefix packing for a published PRM) gives the metrics of
    `eval steps --predictions` over the Scorer's step probabilities. In fp32 on every CPU:
    where bf16 is native (AVX512_BF16, AMX) "auto" would score in bf16, whose rounding
    differs with the batches' shapes (ECE 0.26414 against 0.26425 on an AMD EPYC with
    avx512_bf16)."""
    from prmkit.data.processbench import write_processbench
    from prmkit.data.records import ProcessBenchItem
    from prmkit.models import precision

    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset())

    folder, load = replicas["math-shepherd"], FAMILIES["math-shepherd"][1]
    solutions = [(STEPS, -1), (STEPS[:2], 1), (["Next, 12 - 5 = 7.", "Then 2x + 3 = 11."], 0)]
    data = tmp_path / "labelled.json"
    write_processbench([ProcessBenchItem(f"p{i}", f"{PROBLEM} ({i})", s, label=y)
                        for i, (s, y) in enumerate(solutions)], data)
    scorer = Scorer(load_reward_model(folder, **load), dtype="auto")  # as eval
    scores = scorer.score([(f"{PROBLEM} ({i})", s) for i, (s, _) in enumerate(solutions)])
    preds = tmp_path / "preds.jsonl"
    with preds.open("w") as f:
        for (steps, first_wrong), probs in zip(solutions, scores, strict=True):
            cut = len(steps) if first_wrong < 0 else first_wrong + 1
            labels = [int(first_wrong < 0 or i < first_wrong) for i in range(cut)]
            f.write(json.dumps({"step_scores": probs[:cut], "labels": labels}) + "\n")
    out_model, out_preds = tmp_path / "m.json", tmp_path / "p.json"
    assert main(["eval", "steps", "--model", str(folder), "--prm-format", "math-shepherd",
                 "--data", str(data), "--device", "cpu", "--json", "-o", str(out_model)]) == 0
    assert main(["eval", "steps", "--predictions", str(preds), "--json",
                 "-o", str(out_preds)]) == 0
    by_model, by_preds = (json.loads(p.read_text()) for p in (out_model, out_preds))
    assert by_model["n_steps"] == by_preds["n_steps"] == 6
    for key in ("auroc", "accuracy", "ece"):
        assert by_model[key] == pytest.approx(by_preds[key], abs=1e-6)


def test_search_cli_takes_a_published_prm_and_records_its_format(replicas, tmp_path):
    from prmkit.models.backbones import tiny_random

    gen, tok = tiny_random(seed=0)
    gen.save_pretrained(tmp_path / "gen")
    tok.save_pretrained(tmp_path / "gen")
    problems = tmp_path / "problems.jsonl"
    problems.write_text(json.dumps({"problem": PROBLEM, "answer": "7", "unique_id": "a"}) + "\n")
    out = tmp_path / "bon.jsonl"
    assert main(["search", "--model", str(tmp_path / "gen"), "--prm", str(replicas["rlhflow"]),
                 "--format", "rlhflow", "--problems", str(problems), "--approach",
                 "best_of_n", "--n", "2", "--max-tokens", "12", "--prm-dtype", "fp32",
                 "--prm-device", "cpu", "--no-progress", "-o", str(out)]) == 0
    rec = json.loads(out.read_text())
    assert rec["search"]["prm"]["format"] == "rlhflow"
    scorer = fp32_scorer(replicas["rlhflow"], format="rlhflow")
    scored = [c for c in rec["candidates"] if c["steps"]]
    assert scored
    for c in scored:
        assert c["step_scores"] == pytest.approx(scorer.score([(PROBLEM, c["steps"])])[0],
                                                 abs=1e-6)
