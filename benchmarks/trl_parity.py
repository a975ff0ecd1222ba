"""prmkit's trainer on exactly the work of TRL's PRMTrainer, step for step.

`run_trl` trains with TRL's PRMTrainer (`trl.experimental.prm`) and records what prmkit
needs to redo that work: the initial trainable weights (the LoRA adapters and the new
classification head), the sequences of each step in TRL's order, and each step's loss.
`run_prmkit` trains prmkit's RewardTrainer on the same rows in TRL's format (BOS, the
prompt, each step followed by the separator, its label on the separator's last token),
with the head formulation started from TRL's initial weights, every label weighted 1
(`label_weighting: count`) and TRL's batches in TRL's order. In fp32 its per-step
losses then equal TRL's within float tolerance (`TOLERANCE`).

TRL runs in a child process with TRL 1.13 first on its path (`TRL_PATH`; the TRL this
venv pins for GRPO, 1.16, ships no PRMTrainer), beside this venv's torch, transformers
and peft, so both sides run the same kernels:

    python benchmarks/trl_parity.py install   # TRL 1.13 into .venv/trl-prm (make test does it)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRL_VERSION = "1.13.0"
TRL_PATH = Path(sys.prefix) / "trl-prm"
# Largest per-step loss difference accepted in fp32 (float summation order, and the
# 6 decimals of prmkit's log). Under bf16 autocast the two sides round different
# tensors (0.05 apart after 3 steps on the test's tiny model): there the losses are
# shown side by side, not compared.
TOLERANCE = 1e-5
# every linear layer of the decoder (what "all-linear" selects on a causal LM); named
# explicitly because "all-linear" on a token-classification model also hits its head
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


@dataclass
class Settings:
    backbone: str  # a model folder
    batch_size: int = 4
    max_length: int = 1024
    lr: float = 1e-4
    r: int = 16
    alpha: int = 32
    targets: list[str] = field(default_factory=lambda: list(LORA_TARGETS))
    threads: int = 2
    bf16: bool = False

    @property
    def dtype(self) -> str:
        return "bf16" if self.bf16 else "fp32"


def install(target: Path = TRL_PATH) -> Path:
    """TRL 1.13 without its dependencies (this venv has them) into `target`."""
    if not (target / "trl" / "experimental" / "prm").is_dir():
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                        "--disable-pip-version-check", "--target", str(target),
                        f"trl=={TRL_VERSION}"], check=True)
    return target


# ---- TRL side (runs in the child: imports nothing of prmkit) ------------------------------
def trl_child(rows: list[dict], s: Settings, out: Path) -> dict:
    """PRMTrainer on `rows`; writes the initial trainable weights to out/initial.pt."""
    import torch

    torch.set_num_threads(s.threads)
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForTokenClassification, AutoTokenizer, TrainerCallback
    from trl.experimental.prm import PRMConfig, PRMTrainer

    tok = AutoTokenizer.from_pretrained(s.backbone)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    torch.manual_seed(0)
    model = AutoModelForTokenClassification.from_pretrained(s.backbone, num_labels=2,
                                                            dtype=torch.float32)
    model.config.pad_token_id = tok.pad_token_id
    args = PRMConfig(output_dir=str(out / "trl"), use_cpu=True, bf16=s.bf16,
                     per_device_train_batch_size=s.batch_size, num_train_epochs=1,
                     learning_rate=s.lr, lr_scheduler_type="constant", max_length=s.max_length,
                     step_separator="\n\n", gradient_checkpointing=False, report_to="none",
                     save_strategy="no", logging_steps=10, dataloader_num_workers=0, seed=0,
                     disable_tqdm=True)
    lora = LoraConfig(task_type="TOKEN_CLS", r=s.r, lora_alpha=s.alpha, lora_dropout=0.0,
                      target_modules=s.targets)
    seen: dict = {"losses": [], "batches": [], "ends": []}

    class Recorded(PRMTrainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            result = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            loss = result[0] if return_outputs else result
            seen["losses"].append(loss.item())
            mask = inputs["attention_mask"].bool()
            seen["batches"].append([ids[m].tolist() for ids, m in zip(inputs["input_ids"], mask)])
            return result

    class Clock(TrainerCallback):
        def on_train_begin(self, args, state, control, model=None, **kw):
            torch.save({n: p.detach().clone() for n, p in model.named_parameters()
                        if p.requires_grad}, out / "initial.pt")
            seen["begin"] = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            seen["ends"].append(time.perf_counter())

    trainer = Recorded(model=model, args=args, train_dataset=Dataset.from_list(rows),
                       processing_class=tok, peft_config=lora, callbacks=[Clock()])
    data = trainer.train_dataset
    trainer.train()
    return {"losses": seen["losses"], "batches": seen["batches"], "examples": len(rows),
            "steps": len(seen["ends"]), "seconds": round(seen["ends"][-1] - seen["begin"], 2),
            "first_step_s": round(seen["ends"][0] - seen["begin"], 2),
            "tokens": sum(len(x) for x in data["input_ids"]),
            "labels": sum(sum(v != -100 for v in x) for x in data["labels"])}


def run_trl(rows: list[dict], s: Settings, out: Path) -> dict:
    """`trl_child` in a child process with TRL 1.13 first on its path."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "rows.json").write_text(json.dumps(rows))
    (out / "settings.json").write_text(json.dumps(asdict(s)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TRL_PATH), str(ROOT / "benchmarks")]),
           "OMP_NUM_THREADS": str(s.threads), "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "TRL_EXPERIMENTAL_SILENCE": "1"}
    proc = subprocess.run([sys.executable, __file__, "trl", str(out)], capture_output=True,
                          text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"TRL run failed:\n{proc.stderr[-4000:]}")
    return json.loads((out / "trl.json").read_text())


# ---- prmkit side -------------------------------------------------------------------------
def trl_format(tokenizer, max_length: int):
    """TRL's sequence: BOS (where the tokenizer has one), the prompt as it is, then each
    step followed by the separator."""
    from prmkit.models.formatting import SegmentEncoder, StepFormat

    fmt = StepFormat(step_separator="\n\n", prompt_template="{problem}", max_length=max_length)
    bos = tokenizer.bos_token_id
    if bos is not None and SegmentEncoder(tokenizer, fmt).prompt_ids("x")[:1] != (bos,):
        fmt = StepFormat(step_separator="\n\n", prompt_template=tokenizer.bos_token + "{problem}",
                         max_length=max_length)
    return fmt


def step_examples(rows: list[dict]) -> list:
    """TRL rows (prompt, completions, boolean labels) as prmkit StepExamples."""
    from prmkit.data.records import StepExample

    return [StepExample(problem=r["prompt"], steps=tuple(r["completions"]),
                        labels=tuple(1.0 if v else 0.0 for v in r["labels"])) for r in rows]


def load_trl_weights(model, initial: dict) -> None:
    """TRL's initial LoRA adapters and head into prmkit's model. TRL's class 1 is
    "correct", prmkit's class 0: the head's rows swap."""
    import torch

    params = dict(model.named_parameters())
    done = set()
    with torch.no_grad():
        for name, value in initial.items():
            if ".score." in name:
                target = "head." + name.rsplit(".", 1)[1]
                value = value[[1, 0]]
            else:
                target = "backbone.model." + name[name.index("layers."):]
            params[target].copy_(value)
            done.add(target)
    missing = {n for n, p in params.items() if p.requires_grad} - done
    if missing:
        raise RuntimeError(f"TRL's initial weights lack {sorted(missing)[:3]}")


def trl_order_trainer(config, batches: list[list[list[int]]], initial: dict):
    """A RewardTrainer that starts from TRL's initial weights and trains TRL's batches
    (token ids of each sequence), in TRL's order."""
    from prmkit.training.reward_trainer import RewardTrainer

    class TrlOrder(RewardTrainer):
        def build_model(self):
            model = super().build_model()
            load_trl_weights(model, initial)
            return model

        def batch_plan(self, rows):
            index: dict[tuple, list[int]] = {}
            for i, row in enumerate(rows):
                index.setdefault(tuple(row.input_ids), []).append(i)
            try:
                return [[index[tuple(seq)].pop() for seq in batch] for batch in batches]
            except (KeyError, IndexError):
                raise RuntimeError("a TRL sequence has no identical prmkit row") from None

        def _epoch_order(self, epoch, n):
            return list(range(n))

    return TrlOrder(config)


def run_prmkit(rows: list[dict], s: Settings, trl: dict, initial: dict, out: Path) -> dict:
    """RewardTrainer on TRL's work; the per-step losses from its metrics log."""
    import torch
    from transformers import AutoTokenizer

    from prmkit.training import RewardTrainingConfig

    fmt = trl_format(AutoTokenizer.from_pretrained(s.backbone), s.max_length)
    cfg = RewardTrainingConfig.from_dict({
        "backbone": s.backbone,
        # each TRL row is a whole sequence, labelled and weighted on its own
        "data": {"examples": step_examples(rows), "eval_fraction": 0.0,
                 "policy": {"alternatives": "all"}},
        "model": {"formulation": "head", "step_format": fmt.to_dict()},
        "lora": {"r": s.r, "alpha": s.alpha, "dropout": 0.0, "target_modules": s.targets},
        "lr": s.lr, "schedule": "constant", "warmup_ratio": 0.0, "weight_decay": 0.0,
        "max_grad_norm": 1.0, "epochs": 1, "packing": "none", "label_weighting": "count",
        "batch_tokens": s.batch_size * s.max_length, "max_rows": s.batch_size,
        "bf16": s.bf16, "torch_dtype": "fp32", "log_every": 1, "output_dir": str(out),
        "save_merged": False, "progress": False, "num_threads": s.threads, "seed": 0,
    })
    torch.set_num_threads(s.threads)
    res = trl_order_trainer(cfg, trl["batches"], initial).train()
    logs = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in logs if m.get("type") == "train"]
    d = res.data
    return {"losses": [m["loss"] for m in steps], "examples": d["train_examples"],
            "steps": res.steps, "seconds": steps[-1]["elapsed_s"],
            "first_step_s": steps[0]["elapsed_s"], "tokens": d["train_tokens"],
            "labels": d["train_label_sources"]}


def parity(rows: list[dict], s: Settings, out: Path) -> dict:
    """Both sides on the same work; the per-step losses side by side and, in fp32, whether
    their largest difference is within `TOLERANCE` (None under bf16)."""
    import torch

    trl = run_trl(rows, s, out / "trl-side")
    initial = torch.load(out / "trl-side" / "initial.pt")
    mine = run_prmkit(rows, s, trl, initial, out / "prmkit-side")
    diff = max(abs(a - b) for a, b in zip(trl["losses"], mine["losses"], strict=True))
    return {"dtype": s.dtype, "max_loss_difference": diff,
            "equal": None if s.bf16 else diff <= TOLERANCE,
            "losses": [{"step": i + 1, "trl": round(a, 6), "prmkit": round(b, 6)}
                       for i, (a, b) in enumerate(zip(trl["losses"], mine["losses"]))],
            "trl": {k: v for k, v in trl.items() if k not in ("batches", "losses")},
            "prmkit": {k: v for k, v in mine.items() if k != "losses"}}


if __name__ == "__main__":
    if sys.argv[1:] == ["install"]:
        print(install())
    elif sys.argv[1] == "trl":
        folder = Path(sys.argv[2])
        result = trl_child(json.loads((folder / "rows.json").read_text()),
                           Settings(**json.loads((folder / "settings.json").read_text())), folder)
        (folder / "trl.json").write_text(json.dumps(result))
