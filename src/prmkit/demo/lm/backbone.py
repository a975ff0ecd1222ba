"""A small Llama backbone and tokenizer trained from scratch on the demo world's text."""

from __future__ import annotations

import math
import random
from pathlib import Path

import torch
from tqdm import tqdm

from prmkit.models.backbones import train_tokenizer


def build_backbone(documents: list[str], seed: int, hidden_size: int = 128, layers: int = 4,
                   heads: int = 4, vocab_size: int = 512):
    """A tokenizer (digits split, BPE over the rest) and a random Llama sized for CPU."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = train_tokenizer(documents, vocab_size=vocab_size, split_digits=True)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=hidden_size * 3,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
        max_position_embeddings=1024, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    config._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    return LlamaForCausalLM(config), tokenizer


def pretrain_lm(model, tokenizer, documents: list[str], steps: int, seed: int,
                block: int = 256, batch_size: int = 16, lr: float = 3e-3,
                progress: bool = True, device: str | torch.device | None = None,
                bf16: bool | str = "auto", stop_after: int | None = None) -> list[float]:
    """Next-token pretraining on `documents` packed into blocks; returns the loss curve.
    device: where to train (default: where the model is, the CPU for a new one). bf16:
    autocast; auto: where the device computes bf16 natively (prmkit.models.precision).
    stop_after: run only the first that many steps of the `steps`-step schedule (the same
    batches and learning rates as the whole run's first steps)."""
    from prmkit.models.precision import use_bf16

    if steps <= 0:  # an untrained base (the capacity experiment's budget 0)
        model.eval()
        return []
    rng = random.Random(seed)
    ids: list[int] = []
    docs = list(documents)
    rng.shuffle(docs)
    for d in docs:
        ids.append(tokenizer.bos_token_id)
        ids.extend(tokenizer(d, add_special_tokens=False)["input_ids"])
        ids.append(tokenizer.eos_token_id)
    n_blocks = len(ids) // block
    data = torch.tensor(ids[: n_blocks * block]).view(n_blocks, block)
    gen = torch.Generator().manual_seed(seed)
    device = torch.device(device) if device is not None else next(model.parameters()).device
    model.to(device)
    bf16 = use_bf16(bf16, device)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.98))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 20) * 0.5 * (1 + math.cos(math.pi * s / steps))
    )
    model.train()
    losses = []
    run = steps if stop_after is None else min(steps, stop_after)
    bar = tqdm(range(run), desc="pretraining backbone", disable=not progress, leave=False)
    for _ in bar:
        batch = data[torch.randint(0, n_blocks, (batch_size,), generator=gen)].to(device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        bar.set_postfix(loss=f"{loss.item():.3f}")
    model.eval()
    return losses


def save_backbone(model, tokenizer, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
