import dataclasses
import json
import logging
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from prmkit.cli import main as cli_main
from prmkit.data import read_records
from prmkit.data.records import StepExample
from prmkit.errors import PrmkitError
from prmkit.models.reward_model import StepRewardModel
from prmkit.training import checkpointing as ckpt
from prmkit.training.batching import collate
from prmkit.training.checkpointing import list_checkpoints
from prmkit.training.packing import pack_examples, unpacked_rows
from prmkit.training.reward_config import RewardTrainingConfig
from prmkit.training.reward_trainer import RewardTrainer, train

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "training" / "good_bad.jsonl"


@pytest.fixture(scope="module")
def examples() -> list[StepExample]:
    from prmkit.data.policies import soft_example

    return [soft_example(ex) for ex in read_records(FIXTURE)]


def _config(tmp_path, examples, **kw) -> RewardTrainingConfig:
    base = {
        "backbone": "tiny-random",
        "lr": 0.01,
        "schedule": "constant",
        "warmup_ratio": 0.0,
        "batch_tokens": 512,
        "bf16": False,
        "progress": False,
        "log_every": 1,
        "output_dir": str(tmp_path / "run"),
    }
    base.update(kw)
    base["data"] = {"examples": examples, "eval_fraction": 0.2, **base.get("data", {})}
    model = base.setdefault("model", {})
    model["step_format"] = {"max_length": 128}
    return RewardTrainingConfig.from_dict(base)


def _metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_loss_falls_on_learnable_fixture(tmp_path, examples):
    cfg = _config(tmp_path, examples, epochs=3)
    result = train(cfg)
    logs = [m for m in _metrics(result.output_dir) if m["type"] == "train"]
    assert logs[-1]["loss"] < 0.6 * logs[0]["loss"]
    assert result.metrics["eval"]["eval_accuracy"] >= 0.9
    assert result.metrics["eval"]["eval_auroc"] >= 0.9
    assert result.data["packing"] == "tree"
    assert result.data["train_label_sources"] > result.data["train_labels"]  # shared prefixes


def _final_weights(run: Path) -> dict[str, torch.Tensor]:
    return load_file(str(run / "model" / "model.safetensors"))


def test_resume_ends_where_an_uninterrupted_run_ends(tmp_path, examples):
    full = train(_config(tmp_path / "a", examples, max_steps=6, lr=0.005, schedule="cosine"))

    class Crash(Exception):
        pass

    def crash(step, _):
        if step == 5:
            raise Crash

    cfg = _config(tmp_path / "b", examples, max_steps=6, lr=0.005, schedule="cosine",
                  save_every=2)
    with pytest.raises(Crash):
        RewardTrainer(cfg, step_callback=crash).train()
    assert [p.name for p in list_checkpoints(cfg.output_dir)] == ["step-0000002", "step-0000004"]
    with pytest.raises(PrmkitError, match="resume"):
        train(cfg)  # refuses to start over a run with checkpoints
    cfg.resume = True
    resumed = train(cfg)
    assert resumed.steps == 6
    a, b = _final_weights(full.output_dir), _final_weights(resumed.output_dir)
    assert a.keys() == b.keys()
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-6
    # the replayed steps are logged once
    steps = [m["step"] for m in _metrics(resumed.output_dir) if m["type"] == "train"]
    assert steps == sorted(set(steps)) and steps[-1] == 6


def test_training_run_folder_given_as_a_model_names_its_model_folder(tmp_path, examples,
                                                                     capsys):
    """A run folder (what `prmkit train` writes: config.json of the recipe, metrics,
    model/) given where a model is expected said ``config.json: expected one entry in
    `architectures`, got []``."""
    from prmkit.scoring import Scorer

    class Crash(Exception):
        pass

    def crash(step, _):
        raise Crash

    stopped = _config(tmp_path / "stopped", examples, max_steps=2)
    with pytest.raises(Crash):
        RewardTrainer(stopped, step_callback=crash).train()
    run = train(_config(tmp_path, examples, max_steps=1, final_eval=False)).output_dir
    with pytest.raises(PrmkitError, match=f"^{run} is a training run; its model is in "
                                          f"{run / 'model'}$"):
        Scorer.from_pretrained(run, device="cpu")
    with pytest.raises(PrmkitError, match="is a training run that has saved no model yet"):
        StepRewardModel.from_pretrained(stopped.output_dir)
    solutions = tmp_path / "in.jsonl"
    solutions.write_text(json.dumps({"problem": "1 + 1?", "steps": ["2"]}) + "\n")
    for argv in (["score", "--model", str(run), "--input", str(solutions), "-o",
                  str(tmp_path / "out.jsonl")],
                 ["export", "vllm", "--model", str(run), "-o", str(tmp_path / "export")],
                 ["generate", "--model", str(run), "--problems", str(solutions), "-o",
                  str(tmp_path / "gen.jsonl")]):
        capsys.readouterr()
        assert cli_main(argv) == 2, argv
        err = capsys.readouterr().err
        assert f"{run} is a training run; its model is in {run / 'model'}" in err, argv
    assert Scorer.from_pretrained(run / "model", device="cpu").score([("1 + 1?", ["2"])])


def test_failed_train_on_bad_data_leaves_no_run_folder(tmp_path, capsys):
    """Bad JSON on line 3 of the training data: the error names the file and line, and no
    run folder is left behind (a run folder with only its config.json looked like a run
    that had stopped)."""
    lines = FIXTURE.read_text().splitlines(keepends=True)
    bad = tmp_path / "data.jsonl"
    bad.write_text(lines[0] + lines[1] + '{"prompt": \n' + "".join(lines[3:]))
    run = tmp_path / "run"
    recipe = ROOT / "recipes" / "tiny_ci.yaml"
    argv = ["train", "--config", str(recipe), f"data.train=[{bad}]", f"output_dir={run}",
            "max_steps=1", "data.cache=false", "progress=false"]
    assert cli_main(argv) == 2
    assert f"{bad}:3: invalid JSON" in capsys.readouterr().err
    assert not run.exists()


def test_save_load_round_trip_gives_identical_scores(tmp_path, examples):
    cfg = _config(tmp_path, examples, max_steps=2, model={"formulation": "head"})
    trainer = RewardTrainer(cfg)
    result = trainer.train()
    loaded = StepRewardModel.from_pretrained(result.model_dir)
    trained = trainer.accelerator.unwrap_model(trainer._trained_model).eval()
    ex = examples[1]
    enc = loaded.encoder.encode(ex.problem, ex.steps)
    ids = torch.tensor([enc.input_ids])
    pos = torch.tensor([[0, p] for p in enc.label_positions])
    with torch.no_grad():
        a = trained(ids, pos)
        b = loaded(ids, pos)
    assert torch.allclose(a, b, atol=1e-5)
    assert loaded.config.formulation == "head" and loaded.head is not None


def test_model_is_saved_before_the_final_evaluation(tmp_path, examples, monkeypatch):
    # A long final eval that is stopped (here: raises) must not lose the trained model.
    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(RewardTrainer, "evaluate", stopped)
    cfg = _config(tmp_path, examples, max_steps=1)
    with pytest.raises(KeyboardInterrupt):
        train(cfg)
    model_dir = Path(cfg.output_dir) / "model"
    assert StepRewardModel.from_pretrained(model_dir).config.objective == "prm"


def _rows_loss(model, rows) -> float:
    batch = collate(rows, model.tokenizer.pad_token_id)
    with torch.no_grad():
        logits = model(batch.input_ids, batch.label_positions, batch.attention_mask,
                       batch.position_ids)
    return model.loss(logits, batch.targets, batch.weights).item()


@pytest.mark.parametrize("packing", ["tree", "none"])
def test_orm_trains_on_outcomes_only(tmp_path, examples, packing):
    orm = [StepExample(e.problem, e.steps, labels=e.labels, outcome=float(e.labels[-1]),
                       group=e.group) for e in examples]
    cfg = _config(tmp_path, orm, packing=packing, model={"objective": "orm"})
    trainer = RewardTrainer(cfg)
    model = trainer.build_model().eval()
    rows = trainer.build_rows(orm, model.encoder)
    # only the final step of each solution carries a label (no label on other steps)
    sources = [src for r in rows for srcs in r.sources for src in srcs]
    assert sorted(sources) == [(i, len(ex.steps) - 1) for i, ex in enumerate(orm)]
    for r in rows:
        for srcs, target in zip(r.sources, r.targets):
            outcomes = [orm[i].outcome for i, _ in srcs]
            assert target[0] == pytest.approx(sum(outcomes) / len(outcomes))
    base = _rows_loss(model, rows)

    # an intermediate step label changes: same rows, same loss
    flipped_steps = [dataclasses.replace(e, labels=tuple(1.0 - v for v in e.labels[:-1])
                                         + e.labels[-1:]) for e in orm]
    assert any(len(e.steps) > 1 for e in orm)
    assert _rows_loss(model, trainer.build_rows(flipped_steps, model.encoder)) == base
    # only the outcome changes: the loss changes
    flipped_outcome = [dataclasses.replace(e, outcome=1.0 - e.outcome) for e in orm]
    assert _rows_loss(model, trainer.build_rows(flipped_outcome, model.encoder)) != \
        pytest.approx(base, abs=1e-6)
    # an example without an outcome gives no row in training
    no_outcome = StepExample("no outcome", ("x",), (1.0,))
    result = train(_config(tmp_path / "run2", [*orm, no_outcome], packing=packing,
                           max_steps=1, model={"objective": "orm"}))
    assert result.data["train_label_sources"] == result.data["train_examples"]


def test_top_k_lora_only_adapts_top_layers(tmp_path, examples):
    cfg = _config(tmp_path, examples, max_steps=1, lora={"top_k_layers": 1})
    trainer = RewardTrainer(cfg)
    model = trainer.build_model()
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    assert names and all(".layers.1." in n for n in names)
    with pytest.raises(PrmkitError, match="top_k_layers=5"):
        RewardTrainer(_config(tmp_path, examples, lora={"top_k_layers": 5})).build_model()


def test_config_errors_name_the_key(tmp_path):
    with pytest.raises(PrmkitError, match=r"unknown config key 'lora\.rank'.*lora\.r"):
        RewardTrainingConfig.from_dict({"lora": {"rank": 4}, "data": {"train": ["x"]}})
    with pytest.raises(PrmkitError, match="'lr' must be a number .*got 'fast'"):
        RewardTrainingConfig.from_dict({"lr": "fast", "data": {"train": ["x"]}})
    with pytest.raises(PrmkitError, match="'packing' must be one of"):
        RewardTrainingConfig.from_dict({"packing": "yes", "data": {"train": ["x"]}})
    with pytest.raises(PrmkitError, match="model.step_format.max_len"):
        RewardTrainingConfig.from_dict({"model": {"step_format": {"max_len": 3}},
                                        "data": {"train": ["x"]}})
    with pytest.raises(PrmkitError, match="data.train"):
        RewardTrainingConfig.from_dict({})
    with pytest.raises(PrmkitError, match="row_tokens"):
        RewardTrainingConfig.from_dict({"row_tokens": 16, "data": {"train": ["x"]}})


@pytest.mark.parametrize("key, value, suggested", [
    ("learning_rate", 1e-4, "'lr'"),
    ("num_train_epochs", 2, "'epochs'"),
    ("num_epochs", 2, "'epochs'"),
    ("per_device_train_batch_size", 4, "'batch_tokens' (tokens per micro-batch) or 'max_rows'"),
    ("gradient_accumulation_steps", 2, "'grad_accum'"),
    ("max_seq_length", 512, "'model.step_format.max_length'"),
    ("lora_r", 8, "'lora.r'"),
])
def test_recipe_key_learning_rate_suggests_lr_by_meaning(key, value, suggested):
    """Other trainers' names of a setting are answered with prmkit's (by spelling alone,
    `learning_rate` came out as `warmup_ratio`)."""
    with pytest.raises(PrmkitError) as err:
        RewardTrainingConfig.from_dict({key: value, "data": {"train": ["x"]}})
    assert f"unknown config key '{key}' (did you mean {suggested}" in str(err.value)
    with pytest.raises(PrmkitError, match=r"'lora\.lora_alpha' \(did you mean 'lora\.alpha'"):
        RewardTrainingConfig.from_dict({"lora": {"lora_alpha": 8}, "data": {"train": ["x"]}})


def test_cli_overrides_and_unknown_keys(tmp_path, capsys):
    recipe = ROOT / "recipes" / "tiny_ci.yaml"
    assert cli_main(["train", "--config", str(recipe), "--print-config", "lora.r=4",
                     "model.step_format.max_length=64", "data.policy.neutral=negative"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["lora"]["r"] == 4 and printed["model"]["step_format"]["max_length"] == 64
    assert cli_main(["train", "--config", str(recipe), "epochz=3"]) == 2
    assert "unknown config key 'epochz'" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("lr: [1\n")
    assert cli_main(["train", "--config", str(bad)]) == 2
    assert "not valid YAML" in capsys.readouterr().err


def test_unknown_policy_option_is_reported(tmp_path):
    cfg = RewardTrainingConfig.from_dict({
        "data": {"train": [str(FIXTURE)], "policy": {"neutrals": "positive"}},
        "output_dir": str(tmp_path), "progress": False})
    with pytest.raises(PrmkitError, match="data.policy.neutrals"):
        train(cfg)


def test_eval_files_keep_problems_of_the_training_holdout(tmp_path):
    """Regression: the MATH500 holdout emptied the eval set, as every phase-1 test problem
    is a MATH500 problem; the holdout is for training data only."""
    from collections import Counter

    from prmkit.training.dataset import prepare
    from prmkit.training.reward_config import DataConfig

    holdout = tmp_path / "holdout.jsonl"
    holdout.write_text(json.dumps({"problem": "Problem 0: add 14 and 15.", "answer": "29"}) + "\n")
    cfg = DataConfig(train=[str(FIXTURE)], eval=[str(FIXTURE)],
                     policy={"holdout_path": str(holdout)})
    train_ex, eval_ex = prepare(cfg, "prm", seed=0, stats=Counter())
    assert not any(ex.problem == "Problem 0: add 14 and 15." for ex in train_ex)
    assert any(ex.problem == "Problem 0: add 14 and 15." for ex in eval_ex)


# ---- typed config values --------------------------------------------------------------
def test_lr_scientific_notation_from_cli_is_a_float(tmp_path, capsys):
    recipe = ROOT / "recipes" / "tiny_ci.yaml"
    assert cli_main(["train", "--config", str(recipe), "--print-config", "lr=1e-4"]) == 0
    lr = json.loads(capsys.readouterr().out)["lr"]
    assert isinstance(lr, float) and lr == 1e-4
    written = tmp_path / "r.yaml"
    written.write_text(recipe.read_text().replace("lr: 0.01", "lr: 2e-5"))
    assert RewardTrainingConfig.from_yaml(written).lr == 2e-5


@pytest.mark.parametrize("override,key,expected", [
    ("lr=null", "lr", "a number"),
    ("bf16=null", "bf16", "true or false"),
    ("lora.r=eight", "lora.r", "an integer"),
])
def test_null_or_wrong_type_override_is_a_clear_error(capsys, override, key, expected):
    recipe = ROOT / "recipes" / "tiny_ci.yaml"
    assert cli_main(["train", "--config", str(recipe), override]) == 2
    err = capsys.readouterr().err
    assert f"override '{override}'" in err and f"'{key}' must be {expected}" in err
    assert "Traceback" not in err


def test_null_in_a_recipe_names_file_line_and_key(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("data:\n  train: [x.jsonl]\nbf16: null\n")
    with pytest.raises(PrmkitError, match=r"r\.yaml:3: 'bf16' must be true or false or one of 'auto', got null"):
        RewardTrainingConfig.from_yaml(recipe)
    assert RewardTrainingConfig.from_yaml(recipe, ["bf16=false"]).bf16 is False
    from prmkit.training.reward_config import DataConfig

    with pytest.raises(PrmkitError, match="'bf16' must be true or false or one of 'auto', got null"):
        RewardTrainingConfig(bf16=None, data=DataConfig(train=["x"]))  # Python API too
    assert RewardTrainingConfig(lr="1e-4", data=DataConfig(train=["x"])).lr == 1e-4
    # null stays valid where the annotation allows None
    assert RewardTrainingConfig.from_yaml(recipe, ["bf16=false", "max_steps=null"]).max_steps is None


# ---- prompt template -------------------------------------------------------------------
def test_prompt_template_with_literal_braces_passes_them_through():
    from prmkit.models.formatting import SegmentEncoder, StepFormat, render_prompt
    from prmkit.models.reward_model import StepRewardModel

    template = "Solve, answer in \\boxed{}: {problem}\n\n"
    assert render_prompt(template, "1+1?") == "Solve, answer in \\boxed{}: 1+1?\n\n"
    assert render_prompt("{{literal}} {problem}", "p") == "{literal} p"  # str.format escapes
    with pytest.raises(PrmkitError, match="no {problem} placeholder"):
        render_prompt("\\boxed{}", "p")
    tok = StepRewardModel.from_backbone("tiny-random").tokenizer
    enc = SegmentEncoder(tok, StepFormat(prompt_template=template))
    ids = enc.prompt_ids("1+1?")
    assert "\\boxed{}: 1+1?" in tok.decode(ids)


# ---- over-long prompts -----------------------------------------------------------------
def test_over_long_prompt_is_skipped_and_counted_not_fatal(tmp_path, examples, caplog):
    long_one = StepExample("word " * 300, ("a good step",), (1.0,), group="long")
    cfg = _config(tmp_path, [*examples, long_one], max_steps=1,
                  data={"eval_examples": examples[:4]})
    with caplog.at_level(logging.WARNING, logger="prmkit.training"):
        result = train(cfg)
    assert result.data["train_skipped_long_prompts"] == 1
    stats = json.loads((result.output_dir / "data_stats.json").read_text())
    assert stats["train_skipped_long_prompts"] == 1
    assert "1 of" in caplog.text and "max_length=128" in caplog.text
    only_long = _config(tmp_path / "b", [long_one, long_one], max_steps=1,
                        data={"eval_fraction": 0})
    with pytest.raises(PrmkitError, match="all 2 train examples have a prompt longer"):
        train(only_long)


# ---- label weighting -------------------------------------------------------------------
def _per_step(rows, examples):
    """{(problem, step prefix): (total weight, weighted mean P(correct))} from rows."""
    total: dict = {}
    for r in rows:
        for srcs, t, w in zip(r.sources, r.targets, r.weights):
            ei, si = srcs[0]
            key = (examples[ei].problem, examples[ei].steps[:si + 1])
            w0, p0 = total.get(key, (0.0, 0.0))
            total[key] = (w0 + w, p0 + w * t[0])
    return {k: (round(w, 9), round(p / w, 9)) for k, (w, p) in total.items()}


@pytest.mark.parametrize("weighting", ["count", "unique"])
def test_packed_and_unpacked_rows_give_the_same_label_weights(examples, weighting):
    from prmkit.models.reward_model import StepRewardModel

    model = StepRewardModel.from_backbone("tiny-random").eval()
    packed = pack_examples(examples, model.encoder, 2048, label_weighting=weighting)
    plain = unpacked_rows(examples, model.encoder, label_weighting=weighting)
    assert _per_step(packed, examples) == _per_step(plain, examples)
    weights = _per_step(plain, examples)
    if weighting == "unique":  # every distinct labelled step weighs 1
        assert {w for w, _ in weights.values()} == {1.0}
    else:
        assert max(w for w, _ in weights.values()) > 1  # shared prefix steps repeat
    assert _rows_loss(model, packed) == pytest.approx(_rows_loss(model, plain), abs=1e-5)


def test_default_label_weighting_with_prefixes_is_not_count(tmp_path, examples, caplog):
    cfg = RewardTrainingConfig.from_dict({"data": {"train": ["x"]}})
    assert cfg.label_weighting == "auto" and cfg.alternatives == "prefixes"
    assert cfg.effective_label_weighting == "unique"
    chosen = RewardTrainingConfig.from_dict(
        {"data": {"train": ["x"], "policy": {"alternatives": "chosen"}}})
    assert chosen.effective_label_weighting == "count"
    result = train(_config(tmp_path / "a", examples, max_steps=1))
    assert result.data["label_weighting"] == "unique"
    assert not any("label_weighting=count" in r.message for r in caplog.records)
    with caplog.at_level(logging.WARNING, logger="prmkit.training"):
        explicit = train(_config(tmp_path / "b", examples, max_steps=1, label_weighting="count"))
    assert explicit.data["label_weighting"] == "count"
    assert "label_weighting=count with data.policy.alternatives=prefixes" in caplog.text


# ---- resuming ----------------------------------------------------------------------------
def _interrupted_run(tmp_path, examples, **kw):
    cfg = _config(tmp_path, examples, max_steps=3, save_every=1, eval_every=0, **kw)

    def stop(step, _):
        if step == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        RewardTrainer(cfg, step_callback=stop).train()
    return Path(cfg.output_dir)


def test_resume_with_changed_batch_tokens_is_refused_and_names_the_key(tmp_path, examples):
    run = _interrupted_run(tmp_path, examples)
    cfg = _config(tmp_path, examples, max_steps=3, save_every=1, eval_every=0,
                  batch_tokens=256, resume=True)
    with pytest.raises(PrmkitError, match=r"config\.batch_tokens: 512 -> 256.*force=true"):
        train(cfg)
    changed = [*examples[:-1], dataclasses.replace(examples[-1], labels=(0.5,))]
    cfg = _config(tmp_path, changed, max_steps=3, save_every=1, eval_every=0, resume=True)
    with pytest.raises(PrmkitError, match=r"data_files\.examples"):
        train(cfg)
    assert list_checkpoints(run)[-1].name == "step-0000002"


def test_forced_resume_proceeds_and_keeps_the_original_config_json(tmp_path, examples, caplog):
    run = _interrupted_run(tmp_path, examples)
    original = (run / "config.json").read_bytes()
    cfg = _config(tmp_path, examples, max_steps=3, save_every=1, eval_every=0,
                  batch_tokens=256, resume=True, force=True)
    with caplog.at_level(logging.WARNING, logger="prmkit.training"):
        result = train(cfg)
    assert result.steps == 3
    assert "config.batch_tokens: 512 -> 256" in caplog.text
    assert (run / "config.json").read_bytes() == original
    assert json.loads((run / "config.resumed-2.json").read_text())["batch_tokens"] == 256


def test_unchanged_resume_keeps_config_json(tmp_path, examples):
    run = _interrupted_run(tmp_path, examples)
    original = (run / "config.json").read_bytes()
    cfg = _config(tmp_path, examples, max_steps=3, save_every=1, eval_every=0, resume=True,
                  progress=True)  # operational keys may change
    assert train(cfg).steps == 3
    assert (run / "config.json").read_bytes() == original
    assert not list(run.glob("config.resumed-*"))


def test_rng_state_is_saved_and_restored_per_rank(tmp_path):
    import random

    import numpy as np

    states = []
    for rank in range(2):  # two processes, seeded differently
        random.seed(rank)
        np.random.seed(rank)
        torch.manual_seed(rank)
        states.append(ckpt.rng_state())
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    path = ckpt.save_checkpoint(tmp_path, 7, model, opt, sched, {}, rng_states=states)
    assert sorted(p.name for p in path.glob("rng_state_rank*.pt")) == [
        "rng_state_rank0.pt", "rng_state_rank1.pt"]
    for rank in range(2):
        random.seed(99)
        torch.manual_seed(99)
        assert ckpt.load_checkpoint(path, model, opt, sched, rank=rank) == 7
        now = ckpt.rng_state()
        assert now["python"] == states[rank]["python"]
        assert torch.equal(now["torch"], states[rank]["torch"])
        assert all(np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b
                   for a, b in zip(now["numpy"], states[rank]["numpy"]))
        if "cuda" in states[rank]:
            assert all(torch.equal(a, b) for a, b in zip(now["cuda"], states[rank]["cuda"]))
    assert not torch.equal(states[0]["torch"], states[1]["torch"])
    with pytest.raises(PrmkitError, match="rng_state_rank2.pt is missing"):
        ckpt.load_checkpoint(path, model, opt, sched, rank=2)


def test_config_dict_leaves_in_memory_examples_out_without_copying_them(monkeypatch):
    # regression: asdict converted every example (1.6 s per call for the demo's 20k) only for
    # to_dict to drop them; the dict is the same and the config keeps its examples
    from prmkit.training import reward_config
    from prmkit.training.reward_config import DataConfig

    examples = [StepExample(f"p{i}", ("a", "b"), (1, 0), (1, -1), False, str(i)) for i in range(50)]
    cfg = RewardTrainingConfig(data=DataConfig(examples=examples, eval_examples=examples[:5]))
    held = cfg.data.examples, cfg.data.eval_examples
    expected = dataclasses.asdict(cfg)
    for key in ("examples", "eval_examples"):
        expected["data"].pop(key)
    expected["model"]["label_tokens"] = list(cfg.model.label_tokens)
    passed = []
    real = reward_config.asdict
    monkeypatch.setattr(reward_config, "asdict",
                        lambda obj: passed.append((obj.data.examples, obj.data.eval_examples))
                        or real(obj))
    assert cfg.to_dict() == expected
    assert passed == [(None, None)]  # asdict never saw the examples
    assert cfg.data.examples is held[0] and cfg.data.eval_examples is held[1]
