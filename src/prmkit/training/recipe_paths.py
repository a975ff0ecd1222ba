"""Paths of a training run: where a recipe's relative paths point, and the data files
checked before any work.

The rule, as for most config files: a relative path written in a recipe file is read
relative to the recipe's folder (so a recipe runs the same from any working directory);
a path given on the command line (a `key=value` override) or in Python is read relative
to the working directory. `prmkit.training.reward_config.load_recipe` rewrites the
recipe's relative paths (the keys of RECIPE_PATH_KEYS, and `backbone` when it names a
folder there) before the overrides are
applied, normalised and relative to the working directory when the recipe's own path is
(`recipes/../runs/x` is `runs/x`). A relative path that is a Hub dataset name
(`NAME[@REV]:SPLIT`, prmkit.data.hub) and not a file beside the recipe stays a name.

`check_data_files` checks every data file of a run (train, eval, gold answers, holdout):
a missing one or a directory is an error naming the config key, the path and what it
was read relative to, instead of a traceback from the first reader that opens it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from prmkit.errors import PrmkitError

# dotted keys whose values (a path or a list of paths) a recipe gives relative to itself
RECIPE_PATH_KEYS = ("data.train", "data.eval", "data.gold_answers", "data.policy.holdout_path",
                    "data.cache_dir", "output_dir", "logging_dir")


def _is_hub_name(value: str, folder: str) -> bool:
    from prmkit.data.hub import parse_hub_name

    return parse_hub_name(value) is not None and not os.path.exists(os.path.join(folder, value))


@dataclass
class RecipePaths:
    """The relative paths a recipe file gave, and what they were read as."""

    recipe: Path
    written: dict[str, tuple[str, str]] = field(default_factory=dict)  # read as -> (key, as written)

    @property
    def folder(self) -> str:
        return os.path.dirname(str(self.recipe))

    def _resolve(self, key: str, value):
        if not isinstance(value, str) or not value or os.path.isabs(value) \
                or _is_hub_name(value, self.folder):
            return value
        read_as = os.path.normpath(os.path.join(self.folder, value))
        self.written[read_as] = (key, value)
        return read_as

    def resolve(self, d: dict) -> None:
        """Rewrite the relative paths of a recipe's mapping `d` in place."""
        for key in RECIPE_PATH_KEYS:
            *parents, last = key.split(".")
            node = d
            for part in parents:
                node = node.get(part) if isinstance(node, dict) else None
            if not isinstance(node, dict) or node.get(last) is None:
                continue
            value = node[last]
            if isinstance(value, list):
                node[last] = [self._resolve(f"{key}[{i}]", v) for i, v in enumerate(value)]
            else:
                node[last] = self._resolve(key, value)
        backbone = d.get("backbone")
        if isinstance(backbone, str) and not os.path.isabs(backbone) and (
                backbone.startswith(("./", "../"))
                or os.path.isdir(os.path.join(self.folder, backbone))):
            d["backbone"] = self._resolve("backbone", backbone)

    def origin(self, path: str) -> str:
        """Where a relative path was read from, for an error about it."""
        if path in self.written:
            key, value = self.written[path]
            return (f"{self.recipe} gives {key} as {value!r}; a recipe's relative paths are "
                    f"read relative to its folder, {Path(self.folder or '.').resolve()}")
        return _working_directory_note()


def _working_directory_note() -> str:
    return (f"read relative to the working directory {Path.cwd()}; in a recipe file, "
            "relative paths are read relative to the recipe's folder")


def data_files(data) -> list[tuple[str, str]]:
    """(config key, path) of every data file a run reads (`data`: a DataConfig)."""
    out = [] if data.examples is not None else [
        (f"data.train[{i}]", p) for i, p in enumerate(data.train)]
    out += [(f"data.eval[{i}]", p) for i, p in enumerate(data.eval)]
    out += [(f"data.gold_answers[{i}]", p) for i, p in enumerate(data.gold_answers)]
    holdout = data.policy.get("holdout_path")
    if holdout:
        out.append(("data.policy.holdout_path", holdout))
    return out


def check_data_files(data, paths: RecipePaths | None = None) -> None:
    """Every data file of `data` (a DataConfig) exists and is a file; a Hub dataset name
    is left to its lookup. `paths`: the recipe's, to say where a path came from."""
    from prmkit.data.hub import parse_hub_name

    for key, path in data_files(data):
        path = str(path)
        p = Path(path)
        if p.is_file() or (not p.exists() and parse_hub_name(path) is not None):
            continue
        if p.is_dir():
            raise PrmkitError(f"{key}: {path} is a directory, not a data file (name the "
                              "files in it)")
        where = "" if p.is_absolute() and path not in getattr(paths, "written", {}) else (
            f" ({paths.origin(path) if paths is not None else _working_directory_note()})")
        raise PrmkitError(f"{key}: {path}: no such file{where}")
