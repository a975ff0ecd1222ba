"""Recipes leave the compute dtype to `auto` (prmkit.models.precision: bf16 only where the
CPU or GPU computes it natively). A recipe pinned `bf16: true`, and on an AVX2-only CPU
the quickstart's first command trained about 9x slower than it needed to. A recipe that
means to measure bf16 says so on the line that pins it: `# pinned: <why>`."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

from prmkit.models import precision

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ROOT / "recipes"
DTYPE_KEYS = {"bf16", "torch_dtype", "dtype", "mixed_precision"}
BF16 = {"bf16", "bfloat16", "torch.bfloat16"}
PINNED = re.compile(r"#\s*pinned:\s*\S")


def dtype_settings(path: Path):
    """(key, value, line number, line) of every dtype key in a YAML file, nested ones
    (e.g. a generator's options) included."""
    lines = path.read_text().splitlines()
    found = []

    def walk(node):
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if (isinstance(key, yaml.ScalarNode) and key.value in DTYPE_KEYS
                        and isinstance(value, yaml.ScalarNode)):
                    line = value.start_mark.line
                    found.append((key.value, value.value, line + 1, lines[line]))
                walk(value)
        elif isinstance(node, yaml.SequenceNode):
            for item in node.value:
                walk(item)

    for document in yaml.compose_all(path.read_text()):
        walk(document)
    return found


def asks_for_bf16(key: str, value: str) -> bool:
    value = value.strip().lower()
    return value in ("true", "yes", "on") if key == "bf16" else value in BF16


def test_recipes_leave_dtype_to_auto():
    recipes = sorted(RECIPES.rglob("*.yaml")) + sorted(RECIPES.rglob("*.yml"))
    assert len(recipes) >= 5
    settings = {p: dtype_settings(p) for p in recipes}
    pinned = [f"{p.relative_to(ROOT)}:{n}: {k}: {v} (leave it to auto, or say why on the "
              "line: `# pinned: <why>`)"
              for p, found in settings.items() for k, v, n, line in found
              if asks_for_bf16(k, v) and not PINNED.search(line)]
    assert not pinned, "\n".join(pinned)
    # the CPU recipes' bf16 switch is there, and it is auto
    for name in ("prm800k_phase1_smollm2_prm.yaml", "prm800k_phase1_smollm2_orm.yaml"):
        assert ("bf16", "auto") in {(k, v) for k, v, _, _ in settings[RECIPES / name]}


def test_pinned_bf16_without_a_reason_is_found(tmp_path):
    """The check above can fail: a pinned bf16 is seen at the top level and nested."""
    recipe = tmp_path / "r.yaml"
    recipe.write_text("bf16: true\ngenerator:\n  options: {dtype: bfloat16, seed: 0}\n"
                      "torch_dtype: bf16   # pinned: measures bf16 weights\n"
                      "mixed_precision: \"no\"\n")
    found = [(k, v, n) for k, v, n, line in dtype_settings(recipe)
             if asks_for_bf16(k, v) and not PINNED.search(line)]
    assert found == [("bf16", "true", 1), ("dtype", "bfloat16", 3)]


@pytest.fixture
def cpu(monkeypatch):
    def use(flags):
        monkeypatch.setattr(precision, "cpu_flags", lambda: flags)
    return use


def quickstart_train_command() -> list[str]:
    text = (ROOT / "docs" / "quickstart.md").read_text()
    block = re.search(r"```bash\n(prmkit train .*?)```", text, re.S)
    assert block, "docs/quickstart.md has no prmkit train command"
    return shlex.split(block.group(1).replace("\\\n", " "))


@pytest.mark.parametrize("flags, native", [
    (frozenset({"avx", "avx2", "fma3"}), False),  # AMD EPYC family 25 model 1
    (frozenset({"avx2", "avx512_f", "avx512_bf16"}), True),
])
def test_quickstart_first_command_trains_at_the_cpu_native_dtype(cpu, flags, native):
    from prmkit.training.model_setup import training_bf16
    from prmkit.training.reward_config import RewardTrainingConfig

    words = quickstart_train_command()
    recipe = words[words.index("--config") + 1]
    overrides = [w for w in words[2:] if "=" in w]
    cfg = RewardTrainingConfig.from_yaml(str(ROOT / recipe), overrides)
    cpu(flags)
    assert training_bf16(cfg, "cpu") is native
