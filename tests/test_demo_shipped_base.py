"""The base shipped with prmkit is the default settings' base, and its command rebuilds it."""

import hashlib
import json
import os
import subprocess
import sys

import pytest
from test_demo_base import counted_pretraining  # noqa: F401 (a fixture)

from prmkit.demo.lm.base import SHIPPED_BASE, BaseConfig, base_folder, base_info
from prmkit.demo.lm.skill import heldout_text, step_result_skill
from prmkit.models.backbones import load_backbone

# The regime indicator of a rebuilt base may differ from the shipped one's by this much (in
# share of step results computed exactly) where a CPU's float arithmetic differs from the one
# that built it; on the same kind of machine the weights are identical.
SKILL_TOLERANCE = 0.01


def _sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_default_settings_read_the_shipped_base_without_pretraining(counted_pretraining):  # noqa: F811
    assert base_info(SHIPPED_BASE)["key"] == BaseConfig().key()
    assert base_folder(BaseConfig(), progress=False) == SHIPPED_BASE
    assert counted_pretraining == []


@pytest.mark.rebuild
def test_build_command_reproduces_the_shipped_base(tmp_path):
    """`make check-base` (CI's second step): the rebuild's progress bar shows with -s. The
    rebuild runs in the dtype this CPU computes natively (bf16 with AVX512_BF16 or AMX,
    else fp32), whichever the shipped base was built in."""
    out = tmp_path / "base"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PRMKIT_CACHE": str(tmp_path / "cache"),
           "TQDM_MININTERVAL": "30"}  # a line every 30 s in a log
    subprocess.run([sys.executable, "-m", "prmkit.demo.lm.base", "--out", str(out)], check=True,
                   env=env, stdout=subprocess.DEVNULL, timeout=4800)
    rebuilt, shipped = base_info(out), base_info(SHIPPED_BASE)
    assert rebuilt["key"] == shipped["key"] and rebuilt["config"] == shipped["config"]
    assert (out / "tokenizer.json").read_text() == (SHIPPED_BASE / "tokenizer.json").read_text()
    same_weights = _sha256(out / "model.safetensors") == _sha256(SHIPPED_BASE / "model.safetensors")
    text = heldout_text()
    skills = {}
    for name, folder in (("rebuilt", out), ("shipped", SHIPPED_BASE)):
        model, tokenizer = load_backbone(str(folder))
        skills[name] = step_result_skill(model.eval(), tokenizer, *text)["all"]["exact"]
    print(json.dumps({"same_weights": same_weights, "rebuilt_bf16": base_info(out)["bf16"],
                      **skills}))
    assert skills["shipped"] >= 0.95  # the paper's regime: it computes nearly every result
    assert abs(skills["rebuilt"] - skills["shipped"]) <= SKILL_TOLERANCE
