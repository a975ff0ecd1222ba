"""What the engines' file entry points (verl, OpenRLHF) share: one cached PRM per process,
settings from keyword arguments or PRMKIT_* environment variables, and the version guard."""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import os
import threading

from prmkit.errors import PrmkitError

_lock = threading.Lock()


class EngineInterfaceError(PrmkitError):
    """The installed engine's interface differs from the one this adapter was tested on."""


def setting(kwargs: dict, name: str, default=None, cast=str):
    """kwargs[name], else $PRMKIT_<NAME>, else default (cast when read from the env)."""
    if kwargs.get(name) is not None:
        return kwargs[name]
    env = os.environ.get(f"PRMKIT_{name.upper()}")
    return default if env is None or env == "" else cast(env)


@functools.lru_cache(maxsize=4)
def _load(folder: str, token_budget: int, device: str, fmt: str | None):
    from prmkit.scoring import Scorer

    return Scorer.from_pretrained(folder, token_budget=token_budget, device=device, format=fmt)


def cached_scorer(kwargs: dict):
    """The process's Scorer for the PRM folder (or Hub id) in kwargs["model"] / $PRMKIT_MODEL,
    a published family's `format` / $PRMKIT_FORMAT if any (loaded once per process: engines
    call their reward functions once per sample)."""
    folder = setting(kwargs, "model")
    if not folder:
        raise PrmkitError("no PRM: pass model=<prmkit model folder> or set PRMKIT_MODEL")
    budget = int(setting(kwargs, "token_budget", 16384, int))
    device = setting(kwargs, "device", "auto")
    with _lock:
        return _load(str(folder), budget, device, setting(kwargs, "format"))


def check_engine_version(module_name: str, tested: tuple[str, ...]) -> str | None:
    """The engine's version when it is importable (None when it is not: the adapter is then
    called outside the engine, as in prmkit's tests); an untested major.minor raises."""
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return None
    try:  # OpenRLHF has no __version__: the installed distribution's version first
        version = importlib.metadata.version(module_name)
    except importlib.metadata.PackageNotFoundError:
        version = str(getattr(module, "__version__", "unknown"))
    if ".".join(version.split(".")[:2]) not in tested:
        raise EngineInterfaceError(
            f"{module_name} {version} is untested with prmkit.rewards (tested: "
            f"{', '.join(t + '.x' for t in tested)}); its reward interface may differ")
    return version
