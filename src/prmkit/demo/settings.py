"""Settings of the demo: one `FIELD=VALUE` override parser and one key of a configuration.

Every demo configuration is a dataclass; `with_overrides` reads `--set` items for all of
them (the demo's settings, each experiment's, a base's), and `settings_key` names what a
configuration produces (trained models, cached results) by a hash of its settings.
"""

from __future__ import annotations

import hashlib
import json
import typing
from dataclasses import asdict, fields, is_dataclass, replace
from typing import Any

RUN_ONLY = ("seeds", "progress", "workers")  # settings that change no model and no figure of a seed


def config_key(settings: dict, length: int = 12) -> str:
    """A short hash of JSON-able `settings`."""
    blob = json.dumps(settings, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:length]


def _drop(value: Any, names: tuple[str, ...]) -> Any:
    if isinstance(value, dict):
        return {k: _drop(v, names) for k, v in value.items() if k not in names}
    return value


def settings_key(cfg, leave_out: tuple[str, ...] = ()) -> str:
    """The key of the dataclass `cfg`: every setting but `RUN_ONLY` ones (at any depth) and
    the top-level `leave_out`."""
    settings = {k: v for k, v in asdict(cfg).items() if k not in leave_out}
    return config_key(_drop(settings, RUN_ONLY))


def _convert(value: str, kind: Any, current: Any) -> Any:
    """`value` as the type `kind` (a field's annotation), else as `current`'s type; for an
    optional field (`float | None`), `none` or the value as its other type."""
    args = typing.get_args(kind)
    if type(None) in args:
        if value.strip().lower() in ("none", "null"):
            return None
        kind = next((a for a in args if a is not type(None)), str)
    if kind is bool or isinstance(current, bool):
        choices = {"true": True, "false": False}
        if value.lower() not in choices:
            raise ValueError(f"expected true or false, got {value!r}")
        return choices[value.lower()]
    if typing.get_origin(kind) is tuple or isinstance(current, tuple):
        args = typing.get_args(kind)
        item = args[0] if args else type(current[0]) if current else str
        return tuple(_convert(v.strip(), item, None) for v in value.split(",") if v.strip())
    return (kind if isinstance(kind, type) else type(current))(value)


def _target(cfg, key: str):
    """(outer name or "", the dataclass that holds setting `key`, its field name):
    `OUTER.FIELD` names a nested dataclass's field; a bare name that `cfg` lacks is its
    `demo`'s, where it has one."""
    outer, _, name = key.rpartition(".")
    demo = getattr(cfg, "demo", None)
    if not outer and name not in _names(cfg) and is_dataclass(demo) and name in _names(demo):
        outer = "demo"
    target = getattr(cfg, outer, None) if outer else cfg
    if not is_dataclass(target) or name not in _names(target):
        owner = type(target if is_dataclass(target) else cfg).__name__
        raise ValueError(f"--set {key}: {owner} has no field {name!r}")
    if is_dataclass(getattr(target, name)):
        raise ValueError(f"--set {key}: a group of settings; set its fields as {key}.FIELD")
    return outer, target, name


def _names(cfg) -> set[str]:
    return {f.name for f in fields(cfg)}


def _hints(cls) -> dict:
    try:
        return typing.get_type_hints(cls)
    except (NameError, TypeError):  # an annotation that does not resolve: typed by value
        return {}


def with_overrides(cfg, items: list[str]):
    """A copy of the dataclass `cfg` with `FIELD=VALUE` overrides, each typed as its field
    (true/false for a bool, comma-separated for a tuple); a nested dataclass's fields as
    `OUTER.FIELD`, and the fields of a nested `demo` also by their bare name."""
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--set {item}: expected FIELD=VALUE")
        outer, target, name = _target(cfg, key.strip())
        kind = _hints(type(target)).get(name)
        try:
            new = _convert(value, kind, getattr(target, name))
        except (ValueError, TypeError) as e:
            raise ValueError(f"--set {item}: {e}") from None
        target = replace(target, **{name: new})
        cfg = replace(cfg, **{outer: target}) if outer else target
    return cfg
