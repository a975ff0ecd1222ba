"""The regime indicator: the share of step results a language model computes exactly.

For every step `a op b = c` of held-out solutions whose arithmetic is exact, the model reads
the problem and the solution up to `a op b = ` (in context, as a reward model reads it) and
decodes greedily; the step counts when it writes exactly `c` and then ends the line. With
teacher forcing on the written result this is one forward pass per solution: greedy decoding
gives `c` and the newline exactly when every one of those tokens is the model's argmax.
"""

from __future__ import annotations

import torch

from prmkit.demo.lm.mathmix import step_facts
from prmkit.demo.world.trees import OPS, apply_op


def _targets(problem_text: str, steps, exact_only: bool = True,
             ) -> tuple[str, list[tuple[int, int, str]]]:
    """The text as the reward models read it and, per exact step (every computation step
    with exact_only=False: (start, end, op, index of the step)), the characters of its
    result, the newline at `end`."""
    text = problem_text + "\n" + "\n".join(steps)
    spans, pos = [], len(problem_text) + 1
    for k, s in enumerate(steps):
        facts = step_facts([s])
        if facts and k < len(steps) - 1:
            op, a, b = facts[0]
            written = s.rsplit("=", 1)[1].strip()
            if s.endswith(written) and (written == str(apply_op(op, a, b)) or not exact_only):
                end = pos + len(s)
                spans.append((end - len(written), end, op) if exact_only
                             else (end - len(written), end, op, k))
        pos += len(s) + 1
    return text, spans


def _forward(model, tokenizer, texts: list[str], device):
    """One right-padded forward of `texts` after a BOS: (encodings with offsets, the token
    sequences, the logits on the CPU)."""
    enc = [tokenizer(t, add_special_tokens=False, return_offsets_mapping=True) for t in texts]
    seqs = [[tokenizer.bos_token_id] + e["input_ids"] for e in enc]
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for r, seq in enumerate(seqs):
        ids[r, : len(seq)] = torch.tensor(seq)
        mask[r, : len(seq)] = 1
    logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits
    return enc, seqs, logits.cpu()


def _step_spans(problem_text: str, steps) -> tuple[str, list[tuple[int, int, int]]]:
    """The text as the reward models read it and, per step (the answer line too), (start of
    the step's line, its end, index of the step)."""
    text = problem_text + "\n" + "\n".join(steps)
    spans, pos = [], len(problem_text) + 1
    for k, s in enumerate(steps):
        spans.append((pos, pos + len(s), k))
        pos += len(s) + 1
    return text, spans


CHECKS = ("result", "step")


@torch.no_grad()
def written_probs(model, tokenizer, problems, pools, check: str = "step", batch_size: int = 32,
                  device: str | torch.device | None = None) -> list:
    """Per problem, solution and step: the model's probability of what the step writes, with
    no reward training (a base's own check of each step).

    check="step": the whole line (operands, operation, result and the end of the line; the
    answer line too) after the problem and the steps before it: a check of the arithmetic,
    of each operand (a quantity of the problem or a result written before: miscopies, steps
    done in the head), of the operation (misreadings) and of when to answer (a forgotten
    step). check="result": the result as written (its digits and the end of the line) after
    `a op b = `, 1.0 for a step with no computation: a check of the arithmetic only."""
    if check not in CHECKS:
        raise ValueError(f"check must be one of {CHECKS}, got {check!r}")
    device = torch.device(device) if device is not None else next(model.parameters()).device
    model.eval()
    out = [[[1.0] * len(steps) for steps in pool] for pool in pools]
    items, firsts, copies = [], {}, []  # a repeated solution is read once, its scores copied
    for i, (prob, pool) in enumerate(zip(problems, pools)):
        for j, steps in enumerate(pool):
            first = firsts.setdefault((i, tuple(steps)), j)
            if first != j:
                copies.append((i, j, first))
                continue
            if check == "step":
                text, spans = _step_spans(prob.text, list(steps))
            else:
                text, spans = _targets(prob.text, list(steps), exact_only=False)
                spans = [(start, end, k) for start, end, _, k in spans]
            items.append((i, j, text, spans))
    for k in range(0, len(items), batch_size):
        chunk = items[k: k + batch_size]
        enc, seqs, logits = _forward(model, tokenizer, [t for _, _, t, _ in chunk], device)
        logp = logits.float().log_softmax(-1)
        for r, ((i, j, _, spans), e) in enumerate(zip(chunk, enc)):
            starts = [a for a, _ in e["offset_mapping"]]
            for start, end, step in spans:
                toks = [t + 1 for t, a in enumerate(starts) if start <= a <= end]
                out[i][j][step] = float(sum(logp[r, t - 1, seqs[r][t]] for t in toks).exp())
    for i, j, first in copies:
        out[i][j] = list(out[i][first])
    return out


def written_result_probs(model, tokenizer, problems, pools, batch_size: int = 32,
                         device: str | torch.device | None = None) -> list:
    """`written_probs` with check="result"."""
    return written_probs(model, tokenizer, problems, pools, "result", batch_size, device)


@torch.no_grad()
def step_result_skill(model, tokenizer, problems, pools, batch_size: int = 32,
                      device: str | torch.device | None = None) -> dict:
    """Per operation and in all: {"steps": how many exact steps were read, "exact": the share
    whose result the model decodes greedily}."""
    device = torch.device(device) if device is not None else next(model.parameters()).device
    model.eval()
    items = []
    for prob, pool in zip(problems, pools):
        for steps in pool:
            text, spans = _targets(prob.text, list(steps))
            if spans:
                items.append((text, spans))
    right = {op: 0 for op in OPS}
    total = {op: 0 for op in OPS}
    for k in range(0, len(items), batch_size):
        chunk = items[k: k + batch_size]
        enc, seqs, logits = _forward(model, tokenizer, [t for t, _ in chunk], device)
        pred = logits.argmax(-1)
        for i, ((_, spans), e) in enumerate(zip(chunk, enc)):
            starts = [a for a, _ in e["offset_mapping"]]
            for start, end, op in spans:
                # tokens of the result's digits and of the newline after it (+1: the bos)
                toks = [j + 1 for j, a in enumerate(starts) if start <= a <= end]
                ok = bool(toks) and all(int(pred[i, j - 1]) == seqs[i][j] for j in toks)
                right[op] += ok
                total[op] += 1
    out = {op: {"steps": total[op], "exact": right[op] / total[op] if total[op] else None}
           for op in OPS}
    n = sum(total.values())
    out["all"] = {"steps": n, "exact": sum(right.values()) / n if n else None}
    return out


def heldout_text(seeds=(0,), test: int = 120, samples: int = 8, difficulty: str = "easy"):
    """The held-out text the indicator reads: the first `samples` of each test pool of the
    demo's seeds (problems no base model is trained on)."""
    from prmkit.demo.world.problems import make_splits
    from prmkit.demo.world.solver import sample_pools

    problems, pools = [], []
    for seed in seeds:
        split = make_splits(seed, test=test, train=0, pretrain=0, difficulty=difficulty).test
        problems += split
        pools += sample_pools(split, samples, seed=seed + 1)
    return problems, pools


def base_skill(folder, seeds=(0,), test: int = 120, samples: int = 8,
               difficulty: str = "easy") -> dict:
    """`step_result_skill` of the saved model `folder` on `heldout_text`."""
    from prmkit.models.backbones import load_backbone

    model, tokenizer = load_backbone(str(folder))
    return step_result_skill(model, tokenizer, *heldout_text(seeds, test, samples, difficulty))


def base_indicators(folder) -> dict:
    """What `make check-base` compares between a rebuilt base and a shipped one: the share of
    held-out step results computed exactly (`base_skill`: "exact", and per operation
    "exact_per_op") and each error kind's step AUROC of the base's own whole-step check on 64
    samples of each held-out problem ("step_auroc")."""
    from prmkit.models.backbones import load_backbone

    model, tokenizer = load_backbone(str(folder))
    skill = step_result_skill(model.eval(), tokenizer, *heldout_text())
    return {"exact": skill["all"]["exact"],
            "exact_per_op": {op: v["exact"] for op, v in skill.items() if op != "all"},
            "step_auroc": check_aurocs(model, tokenizer, *heldout_text(samples=64))}


def check_aurocs(model, tokenizer, problems, pools) -> dict:
    """Per kind of first error, the step AUROC of the model's own whole-step check
    (`written_probs`, check="step") on these pools."""
    from prmkit.demo.world.error_kinds import kind_report

    scores = written_probs(model, tokenizer, problems, pools, check="step")
    return kind_report(problems, pools, scores, [0] * len(pools))["step_auroc"]


def format_skill(skill: dict) -> str:
    parts = [f"{op} {100 * v['exact']:.1f}% of {v['steps']}" for op, v in skill.items()
             if v["exact"] is not None]
    return "step results computed exactly: " + ", ".join(parts)


def table_coverage(table, problems, pools) -> dict:
    """Per operation: the share of the held-out exact steps whose operand pair is a fact of
    `table` (what the base saw, against what it must generalise to)."""
    seen = {op: 0 for op in OPS}
    total = {op: 0 for op in OPS}
    for prob, pool in zip(problems, pools):
        for steps in pool:
            text, spans = _targets(prob.text, list(steps))
            for start, _, op in spans:
                a, _, b = text[text.rfind("\n", 0, start) + 1: start].rstrip(" =").split()
                total[op] += 1
                seen[op] += (op, int(a), int(b)) in table
    n = sum(total.values())
    out = {op: seen[op] / total[op] if total[op] else None for op in OPS}
    out["all"] = sum(seen.values()) / n if n else None
    return out
