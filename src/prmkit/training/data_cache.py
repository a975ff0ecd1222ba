"""Data preparation once: examples read from files, and the rows tokenised and packed from
them, cached on disk and shared by every process of a run and by later runs.

Two entries, each under a key that changes whenever its result could:
- examples: the digests of every file read (train, eval, gold answers, the policy's
  holdout file), the data options, the objective and the split seed;
- rows: a digest of the examples, the tokenizer (its full serialisation and chat
  template), the step format and the packing settings.

Under a multi-process launch the main process builds a missing entry while the others
wait (accelerate's main_process_first), then they read it. Entries are msgpack files
written atomically, so a killed run never leaves a half-written entry behind.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from prmkit.data.digest_cache import file_sha256
from prmkit.data.io import atomic_write
from prmkit.data.records import StepExample

log = logging.getLogger("prmkit.training")
CACHE_VERSION = 1
ROWS = "rows"  # the cache's folder under $PRMKIT_CACHE
T = TypeVar("T")


def cache_root(cache_dir: str | None) -> Path:
    from prmkit.data.io import cache_dir as prmkit_cache

    return Path(cache_dir) if cache_dir else prmkit_cache() / ROWS


def tokenizer_digest(tokenizer) -> str:
    """Everything of a tokenizer that changes its ids: the fast tokenizer's serialisation
    (vocabulary, merges, normalisers, special tokens) or the slow one's vocabulary, plus
    the chat template and BOS/EOS handling."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    body = backend.to_str() if backend is not None else json.dumps(
        sorted(tokenizer.get_vocab().items()))
    extra = json.dumps([type(tokenizer).__name__, getattr(tokenizer, "chat_template", None),
                        getattr(tokenizer, "add_bos_token", None),
                        getattr(tokenizer, "add_eos_token", None),
                        tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token])
    return hashlib.sha256((body + extra).encode()).hexdigest()


def digest(obj: Any) -> str:
    return hashlib.sha256(msgspec.msgpack.encode(obj, enc_hook=_encode)).hexdigest()


def _encode(obj):
    if dataclasses.is_dataclass(obj):
        return dataclasses.asdict(obj)
    raise NotImplementedError(type(obj))


def cached(folder: Path, key: Any, kind: type[T], build: Callable[[], T]) -> T:
    """The entry under digest(key) in `folder`, built by `build` (on the main process
    first under a launch) when it is missing."""
    from accelerate import PartialState

    path = folder / f"{digest(key)}.msgpack"
    state = PartialState()
    with state.main_process_first():
        value = _read_entry(path, kind)
        if value is not None:
            return value
        value = build()
        if state.is_main_process:
            folder.mkdir(parents=True, exist_ok=True)
            with atomic_write(path, "wb") as f:
                f.write(msgspec.msgpack.encode(value, enc_hook=_encode))
        return value


def _read_entry(path: Path, kind: type[T]) -> T | None:
    """The entry at `path` (None when absent or unreadable), its mtime refreshed so that
    `prmkit cache prune` removes the least recently used first. The file is read whole in
    one go: one removed meanwhile by a prune is either read in full (POSIX keeps an open
    file) or found missing and rebuilt."""
    try:
        value = msgspec.msgpack.decode(path.read_bytes(), type=kind)
    except FileNotFoundError:
        return None
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        log.warning("%s: unreadable cache entry (%s); rebuilding it", path, e)
        return None
    with contextlib.suppress(OSError):  # removed meanwhile, or a read-only cache
        os.utime(path)
    log.info("read cached data from %s", path)
    return value


@dataclasses.dataclass
class PreparedData:
    train: list[StepExample]
    eval: list[StepExample]
    stats: dict[str, int]


def prepared_key(cfg, objective: str, seed: int) -> dict:
    """What the examples of a run depend on (cfg: a DataConfig reading files or Hub
    dataset names, prmkit.data.hub)."""
    from prmkit.data.hub import dataset_path

    options = {k: v for k, v in dataclasses.asdict(cfg).items()
               if k not in ("examples", "eval_examples", "cache", "cache_dir")}
    files = [*cfg.train, *cfg.eval, *cfg.gold_answers]
    holdout = cfg.policy.get("holdout_path")
    if holdout:
        files.append(holdout)
    return {"v": CACHE_VERSION, "kind": "examples", "options": options,
            "files": {str(p): file_sha256(dataset_path(p, single=True)[0]) for p in files},
            "objective": objective,
            "seed": seed}


def cached_prepare(cfg, objective: str, seed: int, build: Callable[[], PreparedData]
                   ) -> PreparedData:
    return cached(cache_root(cfg.cache_dir), prepared_key(cfg, objective, seed), PreparedData,
                  build)


def rows_key(examples, encoder, packing: str, row_tokens: int, num_classes: int,
             objective: str, weighting: str) -> dict:
    """What the rows built from examples depend on."""
    return {"v": CACHE_VERSION, "kind": "rows", "examples": digest(examples),
            "tokenizer": tokenizer_digest(encoder.tokenizer), "format": encoder.fmt,
            "packing": packing, "row_tokens": row_tokens, "num_classes": num_classes,
            "objective": objective, "weighting": weighting}


def rows_for(examples, encoder, packing: str, row_tokens: int, num_classes: int,
               objective: str, weighting: str, cache: bool = False,
               cache_dir: str | None = None) -> list:
    """Packed ("tree") or plain ("none") rows of examples, through the cache when asked."""
    from prmkit.training.packing import PackedRow, pack_examples, unpacked_rows

    def build():
        if packing == "tree":
            return pack_examples(examples, encoder, row_tokens, num_classes, objective,
                                 weighting)
        return unpacked_rows(examples, encoder, num_classes, objective, weighting)

    if not cache:
        return build()
    key = rows_key(examples, encoder, packing, row_tokens, num_classes, objective, weighting)
    return cached(cache_root(cache_dir), key, list[PackedRow], build)
