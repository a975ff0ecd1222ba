"""The active-learning loop: for generation g = 0 .. G-1, sample a pool per problem, score
it with the selector PRM, select, label, merge with the earlier generations' labels and
retrain the reward model.

Everything lands under `output_dir`: `gen_<g>/` holds problems.jsonl, samples.jsonl,
scored.jsonl, selected.jsonl, queue.jsonl (the selected samples as a raw PRM800K labelling
queue, whatever the source), labels.jsonl (TRL stepwise), merged.jsonl (all labels so far)
and train/ (the retrained model in train/model). `manifest.json` records the config, and
per generation and step: done, seconds, sha256 of its files and its counts. A step is
marked done only after its files are written, so a killed loop resumes at the step where
it stopped (a half-written samples file or a training run with checkpoints is continued).
`loop_status(output_dir)` reads the manifest back: where a run stands, without running it.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable
from pathlib import Path

import orjson

from prmkit import __version__
from prmkit.active.labelers import GraderLabeler, LabelItem, LargePRMLabeler, write_examples
from prmkit.active.loop_config import LoopConfig
from prmkit.active.queue import read_label_queue, write_label_queue
from prmkit.active.selection import (
    Candidate,
    SelectionConfig,
    dedupe_key,
    pool_diversity,
    select_convincing,
)
from prmkit.data.digest_cache import file_sha256
from prmkit.data.io import atomic_write, dumps_line
from prmkit.errors import PrmkitError

STEPS = ("sample", "score", "select", "label", "merge", "train")
MANIFEST = "manifest.json"


class LabelsPending(PrmkitError):
    """The queue source is waiting for human labels; rerun once they are saved."""


def read_jsonl(path: Path) -> list[dict]:
    with open(path, "rb") as f:
        return [orjson.loads(line) for line in f if line.strip()]


def file_state(path: Path, sha256: str) -> str:
    """"ok" when the file still has the recorded sha256, else "changed" or "missing"."""
    if not path.is_file():
        return "missing"
    return "ok" if file_sha256(path) == sha256 else "changed"


def read_manifest(output_dir: str | Path) -> dict:
    """`output_dir/manifest.json`; a PrmkitError naming the file (and line) when it is missing,
    not JSON or not a loop manifest."""
    path = Path(output_dir) / MANIFEST
    if not path.is_file():
        raise PrmkitError(f"{path}: no loop manifest (not the output_dir of `prmkit active "
                          "run`, or the loop has not started)")
    try:
        manifest = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise PrmkitError(f"{path}:{e.lineno}:{e.colno}: not valid JSON ({e.msg}); "
                          "the loop manifest is damaged") from None
    except UnicodeDecodeError as e:
        raise PrmkitError(f"{path}: not valid UTF-8 ({e.reason}); the loop manifest is damaged") from None
    if not (isinstance(manifest, dict) and isinstance(manifest.get("config"), dict)
            and isinstance(manifest.get("generations"), dict)):
        raise PrmkitError(f"{path}: not a loop manifest (needs \"config\" and \"generations\")")
    return manifest


def write_jsonl(path: Path, rows) -> int:
    n = 0
    with atomic_write(path) as f:
        for r in rows:
            f.write(dumps_line(r))
            n += 1
    return n


class ActiveLoop:
    def __init__(self, config: LoopConfig,
                 after_step: Callable[[int, str], None] | None = None):
        self.config = config
        self.out = Path(config.output_dir)
        self.after_step = after_step  # called after each step is recorded (tests interrupt here)
        self._sampler = None
        self.manifest = self._load_manifest()

    # ---- manifest ------------------------------------------------------------------------
    def _load_manifest(self) -> dict:
        path = self.out / MANIFEST
        digest = self.config.digest()
        if not path.is_file():
            return {"prmkit_version": __version__, "config": self.config.to_dict(),
                    "config_sha256": digest, "generations": {}, "created": time.time()}
        manifest = read_manifest(self.out)
        if manifest.get("config_sha256") != digest and not self.config.force:
            old = manifest.get("config", {})
            changed = sorted(k for k in set(old) | set(self.config.to_dict())
                             if k != "force" and old.get(k) != self.config.to_dict().get(k))
            raise PrmkitError(f"{path}: the loop config changed since this run started "
                              f"({', '.join(changed)}); use another output_dir, or force=true")
        for g, gen in manifest["generations"].items():
            for step, rec in gen["steps"].items():
                for name, digest_ in rec.get("files", {}).items():
                    f = self._gen_dir(int(g)) / name
                    if file_state(f, digest_) != "ok":
                        raise PrmkitError(f"{f}: changed or missing since step {step!r} of "
                                          f"generation {g} was done; delete {self.out} to redo")
        return manifest

    def _save_manifest(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        with atomic_write(self.out / MANIFEST, "w") as f:
            f.write(json.dumps(self.manifest, indent=2))

    def _gen(self, g: int) -> dict:
        return self.manifest["generations"].setdefault(str(g), {"steps": {}})

    def _gen_dir(self, g: int) -> Path:
        return self.out / f"gen_{g}"

    def done(self, g: int, step: str) -> bool:
        return self._gen(g)["steps"].get(step, {}).get("done", False)

    # ---- run -----------------------------------------------------------------------------
    def run(self) -> dict:
        self._save_manifest()
        try:
            for g in range(self.config.generations):
                self._gen_dir(g).mkdir(parents=True, exist_ok=True)
                for step in STEPS:
                    if self.done(g, step):
                        continue
                    start = time.perf_counter()
                    files, counts = getattr(self, f"_{step}")(g)
                    if step == "label":
                        self._close_sampler()  # free the generator's memory for training
                    self._gen(g)["steps"][step] = {
                        "done": True, "seconds": round(time.perf_counter() - start, 3),
                        "finished_at": time.time(),
                        "files": {name: file_sha256(self._gen_dir(g) / name) for name in files},
                        "counts": counts}
                    self._save_manifest()
                    if self.after_step is not None:
                        self.after_step(g, step)
        finally:
            self._close_sampler()
        self.manifest["finished"] = True
        self.manifest["seconds"] = round(sum(
            s["seconds"] for gen in self.manifest["generations"].values()
            for s in gen["steps"].values()), 3)
        self._save_manifest()
        return self.manifest

    # ---- the generator -------------------------------------------------------------------
    def _prompt_format(self):
        from prmkit.generation.prompts import PromptFormat

        c = self.config.generator
        return PromptFormat(style=c.prompt_format, step_separator=c.step_separator)

    def _sampler_(self):
        if self._sampler is None:
            from prmkit.generation import get_sampler

            c = self.config.generator
            self._sampler = get_sampler(c.backend, c.model, **c.options)
        return self._sampler

    def _close_sampler(self) -> None:
        if self._sampler is not None:
            self._sampler.close()
            self._sampler = None

    # ---- steps: each returns (files written in gen_<g>/, counts) --------------------------
    def _sample(self, g: int):
        from prmkit.data.math_problems import problem_key, read_problems
        from prmkit.generation import SamplingParams
        from prmkit.generation.files import generate_file

        c, d = self.config, self._gen_dir(g)
        problems = read_problems(c.problems, c.problem_limit)
        if c.problems_per_generation is not None:
            k = c.problems_per_generation
            problems = [problems[(g * k + i) % len(problems)] for i in range(min(k, len(problems)))]
        write_jsonl(d / "problems.jsonl", (
            {"problem": p.text, "answer": p.answer, "unique_id": problem_key(p),
             "subject": p.subject, "level": p.level} for p in problems))
        gen = c.generator
        params = SamplingParams(temperature=gen.temperature, top_p=gen.top_p,
                                max_tokens=gen.max_tokens)
        report = generate_file(self._sampler_(), d / "problems.jsonl", d / "samples.jsonl",
                               gen.samples_per_problem, params, seed=gen.seed + g,
                               prompt_format=self._prompt_format(), resume=True, progress=False,
                               force=True)
        return ["problems.jsonl", "samples.jsonl"], {
            "problems": len(problems), "samples": report.samples + report.skipped,
            "tokens": report.tokens, "length_cut": report.length_cut, "correct": report.correct,
            "graded": report.graded, "tokens_per_s": round(report.tokens_per_s, 2)}

    def _selector_model(self, g: int) -> str | None:
        s = self.config.selector
        if g > 0 and s.update:
            return self._gen(g - 1)["steps"]["train"]["counts"]["model_dir"]
        return s.model

    def _score(self, g: int):
        from prmkit.scoring import Scorer, aggregate

        d, s = self._gen_dir(g), self.config.selector
        rows = read_jsonl(d / "samples.jsonl")
        for r in rows:  # rows without steps (an empty completion) stay unscored
            r["score"] = None
        folder = self._selector_model(g)
        if folder is None:
            counts = {"selector": None}
        else:
            scorer = Scorer.from_pretrained(folder, token_budget=s.token_budget, dtype=s.dtype)
            scored = [r for r in rows if r["steps"]]
            probs = scorer.score([(r["problem"], r["steps"]) for r in scored])
            for r, p in zip(scored, probs, strict=True):
                r["step_scores"], r["score"] = p, float(aggregate(p, s.aggregation))
                r["scored_by"] = scorer.record(s.aggregation)
            counts = {"selector": folder, "fingerprint": scorer.fingerprint}
            del scorer
        write_jsonl(d / "scored.jsonl", rows)
        return ["scored.jsonl"], {**counts, "scored": sum(r["score"] is not None for r in rows)}

    def _labelled_before(self, g: int) -> set[tuple[str, str]]:
        seen = set()
        for h in range(g):
            for r in read_jsonl(self._gen_dir(h) / "selected.jsonl"):
                seen.add((r["unique_id"], dedupe_key(r["steps"])))
        return seen

    def _select(self, g: int):
        c, d = self.config.select, self._gen_dir(g)
        rows = [r for r in read_jsonl(d / "scored.jsonl") if r["steps"]]
        seen = self._labelled_before(g)
        fresh = [r for r in rows if (r["unique_id"], dedupe_key(r["steps"])) not in seen]
        uniform = c.method == "uniform" or any(r["score"] is None for r in fresh)
        rng = random.Random(f"{c.seed}:{g}")
        pool = [Candidate(r["unique_id"], r["sample_index"], dedupe_key(r["steps"]),
                          rng.random() if uniform else r["score"], r["is_correct"])
                for r in fresh]
        config = SelectionConfig(per_problem=c.per_problem, scope=c.scope,
                                 global_top_k=c.global_top_k,
                                 convincing_wrong_share=0.0 if uniform else c.convincing_wrong_share)
        chosen = select_convincing(pool, config)
        by_id = {(r["unique_id"], r["sample_index"]): r for r in fresh}
        picked = [by_id[(x.problem_id, x.sample_index)] for x in chosen]
        write_jsonl(d / "selected.jsonl", picked)
        return ["selected.jsonl"], {
            "method": "uniform" if uniform else "convincing", "pool": len(rows),
            "already_labelled": len(rows) - len(fresh), "selected": len(picked),
            "selected_wrong": sum(r["is_correct"] is False for r in picked),
            "selected_ungraded": sum(r["is_correct"] is None for r in picked),
            "diversity": pool_diversity(pool, chosen)}

    def _labeler(self, g: int):
        lab = self.config.label
        if lab.source == "grader":
            return GraderLabeler()
        if lab.source == "large_prm":
            from prmkit.scoring import Scorer

            scorer = Scorer.from_pretrained(lab.large_prm, dtype=self.config.selector.dtype,
                                            format=lab.large_prm_format,
                                            trust_remote_code=lab.large_prm_trust_remote_code)
            return LargePRMLabeler(scorer.score, supervision=lab.supervision,
                                   threshold=lab.threshold)
        from prmkit.active.montecarlo import MonteCarloLabeler
        from prmkit.generation import SamplingParams

        gen = self.config.generator
        sampler = self._sampler_()
        return MonteCarloLabeler(
            sampler, SamplingParams(temperature=lab.rollout_temperature, top_p=gen.top_p,
                                    max_tokens=lab.rollout_max_tokens),
            self._prompt_format(), k=lab.rollouts, mode=lab.mode, search=lab.search,
            seed=gen.seed + g)

    def _label(self, g: int):
        d, lab = self._gen_dir(g), self.config.label
        items = [LabelItem(r["unique_id"], r["problem"], tuple(r["steps"]),
                           r["ground_truth_answer"], r["answer"], r["sample_index"], r["score"])
                 for r in read_jsonl(d / "selected.jsonl")]
        files = ["queue.jsonl", "labels.jsonl"]
        if not self.done(g, "label") and not (d / "queue.jsonl").is_file():
            write_label_queue(items, d / "queue.jsonl", generation=g)
        if lab.source == "queue":
            labelled = d / "queue_labelled.jsonl"
            hint = (f"label {d / 'queue.jsonl'} (raw PRM800K; e.g. in the labelling app), save "
                    f"it as {labelled} and rerun the same command")
            if not labelled.is_file():
                raise LabelsPending(f"generation {g}: waiting for labels: {hint}")
            back = read_label_queue(labelled)
            if back.pending and not lab.allow_pending:
                raise LabelsPending(f"generation {g}: {back.pending} of {back.pending + back.labelled}"
                                    f" samples not labelled yet: {hint} (or label.allow_pending=true)")
            examples = back.examples
            report = {"source": "queue", "labelled": back.labelled, "pending": back.pending,
                      "policy": back.policy.to_dict()}
            files.append("queue_labelled.jsonl")
        else:
            labeler = self._labeler(g)
            examples = labeler.label(items)
            report = labeler.report()
        written, unlabelled = write_examples(examples, d / "labels.jsonl")
        steps = [v for ex in examples for v in ex.labels if v is not None]
        return files, {"items": len(items), "examples": written, "unlabelled": unlabelled,
                       "labelled_steps": len(steps),
                       "positive_share": round(sum(steps) / len(steps), 4) if steps else None,
                       "labeler": report}

    def _merge(self, g: int):
        d = self._gen_dir(g)
        per_gen = []
        with atomic_write(d / "merged.jsonl") as f:
            for h in range(g + 1):
                data = (self._gen_dir(h) / "labels.jsonl").read_bytes()
                f.write(data)
                per_gen.append(data.count(b"\n"))
        return ["merged.jsonl"], {"examples": sum(per_gen), "per_generation": per_gen,
                                  "initial_data": list(self.config.initial_data)}

    def _train(self, g: int):
        from prmkit.training import RewardTrainingConfig, train
        from prmkit.training.checkpointing import latest_checkpoint

        d = self._gen_dir(g)
        out = d / "train"
        cfg = RewardTrainingConfig.from_yaml(
            self.config.train_recipe, [*self.config.train_overrides, f"output_dir={out}"])
        cfg.data.train = [*self.config.initial_data, str(d / "merged.jsonl")]
        cfg.data.format = None
        cfg.resume = latest_checkpoint(out) is not None
        cfg.progress = False
        cfg.validate()
        result = train(cfg)
        model_files = [str(f.relative_to(d)) for f in sorted(result.model_dir.iterdir())
                       if f.is_file()]  # the model the next generation selects with
        return model_files, {"model_dir": str(result.model_dir), "steps": result.steps,
                             "resumed": cfg.resume, "metrics": result.metrics}


def run_loop(config: LoopConfig, after_step: Callable[[int, str], None] | None = None) -> dict:
    """Run (or resume) the loop; returns the manifest."""
    return ActiveLoop(config, after_step).run()


def loop_status(output_dir: str | Path) -> dict:
    """Where the loop run in `output_dir` stands, read from its manifest (nothing is run).

    Returns `generations` (per generation: the steps done with their seconds, counts and the
    state of each recorded file: ok, changed or missing), `next` ({generation, step}, or
    None once every step is done), `finished`, `seconds` (all done steps), `changed_files`
    (files of done steps that no longer match their sha256, the retrained models' included)
    and `waiting_for_labels` (the queue and labels files when the next step is a queue
    source's label step, else None). A missing or damaged manifest is a PrmkitError.
    """
    out = Path(output_dir)
    manifest = read_manifest(out)
    config = manifest["config"]
    planned = int(config.get("generations", len(manifest["generations"])))
    generations, changed, next_step = [], [], None
    for g in range(planned):
        recorded = manifest["generations"].get(str(g), {}).get("steps", {})
        steps = {}
        for step in STEPS:
            rec = recorded.get(step, {})
            if not rec.get("done"):
                if next_step is None:
                    next_step = {"generation": g, "step": step}
                continue
            counts = rec.get("counts", {})
            files = {}
            for name, digest in rec.get("files", {}).items():
                path = out / f"gen_{g}" / name
                state = file_state(path, digest)
                files[name] = state
                if state != "ok":
                    changed.append({"generation": g, "step": step, "path": str(path),
                                    "state": state})
            steps[step] = {"seconds": rec.get("seconds", 0.0),
                           "finished_at": rec.get("finished_at"),
                           "counts": counts, "files": files}
        generations.append({"generation": g, "done": list(steps),
                            "seconds": round(sum(s["seconds"] for s in steps.values()), 3),
                            "steps": steps})
    label = config.get("label", {})
    waiting = None
    if next_step is not None and next_step["step"] == "label" and label.get("source") == "queue":
        waiting = _queue_wait(out / f"gen_{next_step['generation']}", next_step["generation"],
                              bool(label.get("allow_pending", False)))
    return {"output_dir": str(out), "manifest": str(out / MANIFEST),
            "config_sha256": manifest.get("config_sha256"),
            "prmkit_version": manifest.get("prmkit_version"),
            "label_source": label.get("source"), "generations_planned": planned,
            "generations": generations, "next": next_step, "finished": next_step is None,
            "seconds": round(sum(gen["seconds"] for gen in generations), 3),
            "intact": not changed, "changed_files": changed, "waiting_for_labels": waiting}


def _queue_wait(gen_dir: Path, g: int, allow_pending: bool) -> dict:
    """What the queue source's label step waits for: `queue_labelled.jsonl`, every record of
    `queue.jsonl` labelled (or some, with label.allow_pending)."""
    queue, labels = gen_dir / "queue.jsonl", gen_dir / "queue_labelled.jsonl"
    wait = {"generation": g, "queue": str(queue), "labels": str(labels),
            "queue_written": queue.is_file(), "labels_present": labels.is_file(),
            "labelled": None, "pending": None, "allow_pending": allow_pending, "error": None}
    if labels.is_file():
        try:
            back = read_label_queue(labels)
            wait["labelled"], wait["pending"] = back.labelled, back.pending
        except PrmkitError as e:
            wait["error"] = str(e)
    wait["waiting"] = (not labels.is_file() or wait["error"] is not None
                       or (wait["pending"] > 0 and not allow_pending))
    return wait
