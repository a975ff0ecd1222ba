"""Models and datasets by Hugging Face Hub name, wherever a path is accepted.

    NAME[@REVISION][:SPLIT]      e.g. Qwen/ProcessBench:gsm8k, HuggingFaceH4/MATH-500:test

A name that is an existing path is that path. Otherwise it is looked up, in order: a
local copy under $PRMKIT_DATA/<owner>/<name> (a folder of the repository's files), the
Hub cache (huggingface_hub's usual cache, $HF_HUB_CACHE), then the Hub itself unless
HF_HUB_OFFLINE is set. When nothing is found, the error says what was tried, and when
the Hub could not be asked (offline, or no network) says so and how to get the files. A
model folder that is a training run's (`prmkit train`'s output_dir) is refused with the
path of its model. A split is
one of the repository's data files, named by its stem (gsm8k.json -> gsm8k,
data/test-00000-of-00001.parquet -> test); parquet files are read with `datasets`.
The resolved `HubSource` records the repository, revision (commit) and files, written
into outputs beside the model's record.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from prmkit.errors import PrmkitError

ENV_VAR = "PRMKIT_DATA"
DATA_SUFFIXES = (".jsonl", ".json", ".parquet")
_NAME = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[\w.-]+)(@(?P<rev>[\w.-]+))?(:(?P<split>[\w.-]+))?$")


@dataclass
class HubSource:
    """Where a Hub name was found: the folder of its files and what identifies them."""

    repo: str
    folder: Path
    revision: str | None  # the snapshot's commit, or None for a local copy
    found_in: str  # "local copy", "hub cache" or "hub"
    split: str | None = None
    files: list[Path] = field(default_factory=list)  # the split's files (all data files if none)

    def record(self) -> dict:
        """What outputs record about the data (as `scored_by` records the model)."""
        from prmkit.data.digest_cache import file_sha256

        return {"dataset": self.repo, "revision": self.revision, "split": self.split,
                "found_in": self.found_in,
                "files": {f.relative_to(self.folder).as_posix(): file_sha256(f)[:16]
                          for f in self.files}}


def parse_hub_name(name: str) -> tuple[str, str | None, str | None] | None:
    """(repo, revision, split) of NAME[@REV][:SPLIT], or None when it is not one."""
    m = _NAME.match(str(name))
    if m is None or m["repo"].endswith(DATA_SUFFIXES):  # data/x.jsonl is a missing file
        return None
    return m["repo"], m["rev"], m["split"]


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


class _Lookup:
    """Where a Hub name was looked for, and whether the Hub itself could be asked."""

    def __init__(self, what: str, name: str, tried: list[str]):
        self.what, self.name, self.tried = what, name, tried
        self.unreachable: str | None = None  # why the Hub could not be asked

    def error(self, repo: str) -> PrmkitError:
        tried = "; ".join(self.tried)
        if self.unreachable is None:
            return PrmkitError(f"{self.what} {self.name!r} was not found; tried: {tried}")
        dataset = self.what == "dataset"
        return PrmkitError(
            f"{self.what} {self.name!r} is not in the local Hub cache and the Hub cannot be "
            f"reached ({self.unreachable}); tried: {tried}. Download it where the Hub can "
            f"be reached (`hf download {repo}{' --repo-type dataset' if dataset else ''}` "
            "into this HF_HUB_CACHE), or pass a local "
            + ("file or folder (or a copy under $PRMKIT_DATA)" if dataset else "folder"))


def hub_unreachable(error: BaseException | None) -> bool:
    """Whether an error of huggingface_hub (or of transformers over it) says the Hub could
    not be reached (no network, or offline mode), rather than that a repository is not
    there."""
    from huggingface_hub.errors import LocalEntryNotFoundError, OfflineModeIsEnabled

    while error is not None:
        if isinstance(error, LocalEntryNotFoundError | OfflineModeIsEnabled):
            return True
        error = error.__cause__ or error.__context__
    return False


def unreachable_model(name: str, why: str) -> PrmkitError:
    """The error for a model id that is neither a folder nor in the Hub cache, where the
    Hub cannot be reached (`why`)."""
    from huggingface_hub.constants import HF_HUB_CACHE

    lookup = _Lookup("model", name, [f"a folder {name}", f"the Hub cache {HF_HUB_CACHE}"])
    lookup.unreachable = why
    return lookup.error(parse_hub_name(name)[0])


def _snapshot(repo: str, revision: str | None, repo_type: str, lookup: _Lookup
              ) -> tuple[Path, str | None, str] | None:
    from huggingface_hub import snapshot_download
    from huggingface_hub.constants import HF_HUB_CACHE

    tried = lookup.tried
    local = os.environ.get(ENV_VAR)
    if local and repo_type == "dataset":
        copy = Path(local, repo)
        if copy.is_dir():
            return copy, None, "local copy"
        tried.append(f"a local copy at {copy} (${ENV_VAR})")
    kw = {"repo_id": repo, "repo_type": repo_type, "revision": revision}
    try:
        folder = Path(snapshot_download(local_files_only=True, **kw))
        return folder, folder.name, "hub cache"
    except Exception as e:  # not cached (or an incomplete snapshot)
        tried.append(f"the Hub cache {HF_HUB_CACHE} ({type(e).__name__})")
    if offline():
        lookup.unreachable = "HF_HUB_OFFLINE is set"
        return None
    try:
        folder = Path(snapshot_download(**kw))
        return folder, folder.name, "hub"
    except Exception as e:
        first = str(e).splitlines()[0][:200] if str(e) else ""
        if hub_unreachable(e):
            lookup.unreachable = f"no connection: {first}" if first else "no connection"
        else:
            tried.append(f"the Hub ({type(e).__name__}: {first})")
    return None


def resolve_model_folder(name: str | Path) -> Path:
    """A model folder: the path itself, or the Hub snapshot of a model id."""
    path = Path(name)
    if path.exists() or parse_hub_name(str(name)) is None:
        if not path.is_dir():
            raise PrmkitError(f"{name}: no such model folder")
        check_not_a_run(path)
        return path
    repo, revision, _ = parse_hub_name(str(name))
    lookup = _Lookup("model", str(name), [f"a folder {path}"])
    found = _snapshot(repo, revision, "model", lookup)
    if found is None:
        raise lookup.error(repo)
    return found[0]


def check_not_a_run(folder: Path) -> None:
    """Refuse a training run's folder (`prmkit train` writes its recipe there as
    config.json, beside checkpoints and metrics, and the model in the model/ subfolder),
    naming the model."""
    # prmkit.models.config.CONFIG_NAME: a model folder of prmkit's (data sits below models)
    if (folder / "prmkit_config.json").is_file() or not _is_run(folder):
        return
    model = folder / "model"
    if model.is_dir():
        raise PrmkitError(f"{folder} is a training run; its model is in {model}")
    raise PrmkitError(f"{folder} is a training run that has saved no model yet ({model} is "
                      "missing: the run stopped before its end, or is still running)")


def _is_run(folder: Path) -> bool:
    """Whether config.json is a training recipe (a model's names its architecture)."""
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and {"output_dir", "backbone", "data"} <= config.keys()


def data_files(folder: Path) -> list[Path]:
    return sorted(f for f in folder.rglob("*") if f.is_file() and f.suffix in DATA_SUFFIXES
                  and not any(p.startswith(".") for p in f.relative_to(folder).parts))


def split_of(path: Path) -> str:
    """A data file's split: its stem without the shard suffix (test-00000-of-00001)."""
    return re.sub(r"-\d{5}-of-\d{5}$", "", path.name.split(".", 1)[0])


def resolve_dataset(name: str | Path) -> HubSource | None:
    """The files of a dataset Hub name (None when `name` is an existing path or not a
    Hub name: the caller reads it as a path)."""
    if Path(name).exists() or parse_hub_name(str(name)) is None:
        return None
    repo, revision, split = parse_hub_name(str(name))
    lookup = _Lookup("dataset", str(name), [f"a path {name}"])
    found = _snapshot(repo, revision, "dataset", lookup)
    if found is None:
        raise lookup.error(repo)
    folder, rev, where = found
    files = data_files(folder)
    if not files:
        raise PrmkitError(f"dataset {repo} ({where}, {folder}) has no data files "
                          f"({', '.join(DATA_SUFFIXES)})")
    if split is not None:
        chosen = [f for f in files if split_of(f) == split]
        if not chosen:
            splits = sorted({split_of(f) for f in files})
            raise PrmkitError(f"dataset {repo} has no split {split!r}; its splits: "
                              f"{', '.join(splits)} (name it as {repo}:SPLIT)")
        files = chosen
    return HubSource(repo, folder, rev, where, split, files)


def local_files(source: HubSource, workdir: Path) -> list[Path]:
    """The split's files as JSON/JSONL paths prmkit's readers take: parquet files are
    converted (with `datasets`) into `workdir` once."""
    out = []
    for f in source.files:
        if f.suffix != ".parquet":
            out.append(f)
            continue
        from datasets import Dataset

        target = workdir / (f.relative_to(source.folder).as_posix().replace("/", "__")
                            + ".jsonl")
        if not target.is_file():
            workdir.mkdir(parents=True, exist_ok=True)
            Dataset.from_parquet(str(f)).to_json(str(target), lines=True, force_ascii=False)
        out.append(target)
    return out


def _workdir(source: HubSource) -> Path:
    root = Path(os.environ.get("PRMKIT_CACHE", Path.home() / ".cache" / "prmkit"))
    return root / "hub-data" / source.repo.replace("/", "--") / (source.revision or "local")


def dataset_path(name: str | os.PathLike, single: bool = False) -> tuple[Path, dict | None]:
    """A local path for `name` and the record of where it came from: the path itself
    (record None) when it exists or is no Hub name; else the Hub dataset's split file,
    or with no split its folder (single=True: its one data file, else an error naming
    the splits)."""
    source = resolve_dataset(name)
    if source is None:
        return Path(name), None
    files = local_files(source, _workdir(source))
    if len(files) == 1:
        return files[0], source.record()
    if single or source.split is not None or any(f.suffix == ".parquet" for f in source.files):
        splits = sorted({split_of(f) for f in source.files})
        raise PrmkitError(f"dataset {source.repo} has {len(files)} data files here; name one "
                          f"split as {source.repo}:SPLIT ({', '.join(splits)})")
    return source.folder, source.record()
