"""The bases shipped with prmkit are the default settings' two stages, and the build command
rebuilds each: the first from nothing, the second from the shipped first."""

import hashlib
import json
import os
import subprocess
import sys

import pytest
from test_demo_base import counted_pretraining  # noqa: F401 (a fixture)

from prmkit.demo.lm.base import (
    SHIPPED_BASE,
    SHIPPED_FIRST_STAGE,
    BaseConfig,
    base_folder,
    base_info,
)
from prmkit.demo.lm.skill import heldout_text, step_result_skill, written_probs
from prmkit.demo.world.error_kinds import KINDS, kind_report
from prmkit.models.backbones import load_backbone

# A rebuilt base's indicators may differ from the shipped one's by this much where a CPU's
# float arithmetic (or thread count) differs from the one that built it: the share of step
# results computed exactly, and (below the shipped one's) each kind's step AUROC of the
# base's own check, on 120 held-out problems x 64 samples (skipped steps: about 40 first
# errors, so an AUROC's own standard error is about 0.02).
SKILL_TOLERANCE = 0.01
AUROC_TOLERANCE = 0.03


def _sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_default_settings_read_the_shipped_bases_without_pretraining(counted_pretraining):  # noqa: F811
    cfg = BaseConfig()
    assert base_info(SHIPPED_BASE)["key"] == cfg.key()
    assert base_info(SHIPPED_FIRST_STAGE)["key"] == cfg.first_stage().key()
    assert base_info(SHIPPED_BASE)["first_stage"] == cfg.first_stage().key()
    # what a rebuild writes into base.json: a one-stage base's settings name no reading stage
    for folder, settings in ((SHIPPED_BASE, cfg.settings()),
                             (SHIPPED_FIRST_STAGE, cfg.first_stage().settings())):
        assert base_info(folder)["config"] == json.loads(json.dumps(settings))
    assert "reading" not in cfg.first_stage().settings()
    assert base_folder(cfg, progress=False) == SHIPPED_BASE
    assert base_folder(cfg.first_stage(), progress=False) == SHIPPED_FIRST_STAGE
    assert counted_pretraining == []


def _rebuild(tmp_path, name: str, *items: str):
    out = tmp_path / name
    env = {**os.environ, "OMP_NUM_THREADS": "2", "PRMKIT_CACHE": str(tmp_path / "cache"),
           "TQDM_MININTERVAL": "30"}  # a line every 30 s in a log
    sets = [a for item in items for a in ("--set", item)]
    subprocess.run([sys.executable, "-m", "prmkit.demo.lm.base", "--out", str(out),
                    "--threads", "2", *sets], check=True, env=env, stdout=subprocess.DEVNULL,
                   timeout=4800)
    return out


def _same_build(out, shipped) -> bool:
    rebuilt, info = base_info(out), base_info(shipped)
    assert rebuilt["key"] == info["key"] and rebuilt["config"] == info["config"]
    assert (out / "tokenizer.json").read_text() == (shipped / "tokenizer.json").read_text()
    return _sha256(out / "model.safetensors") == _sha256(shipped / "model.safetensors")


@pytest.mark.rebuild
def test_build_command_reproduces_the_shipped_first_stage(tmp_path):
    """`make check-base` (CI's second step): the rebuild's progress bar shows with -s. It
    runs in the dtype this CPU computes natively (bf16 with AVX512_BF16 or AMX, else fp32),
    whichever the shipped base was built in."""
    out = _rebuild(tmp_path, "first", "reading.steps=0")
    same = _same_build(out, SHIPPED_FIRST_STAGE)
    text = heldout_text()
    skills = {}
    for name, folder in (("rebuilt", out), ("shipped", SHIPPED_FIRST_STAGE)):
        model, tokenizer = load_backbone(str(folder))
        skills[name] = step_result_skill(model.eval(), tokenizer, *text)["all"]["exact"]
    print(json.dumps({"same_weights": same, "rebuilt_bf16": base_info(out)["bf16"], **skills}))
    assert skills["shipped"] >= 0.95  # the paper's regime: it computes nearly every result
    assert abs(skills["rebuilt"] - skills["shipped"]) <= SKILL_TOLERANCE


@pytest.mark.rebuild
def test_build_command_reproduces_the_shipped_base_from_its_first_stage(tmp_path):
    """The second stage, read on from the shipped first stage: each kind's step AUROC of the
    base's own check on held-out samples as the shipped base's."""
    out = _rebuild(tmp_path, "base")
    same = _same_build(out, SHIPPED_BASE)
    problems, pools = heldout_text(samples=64)
    aurocs = {}
    for name, folder in (("rebuilt", out), ("shipped", SHIPPED_BASE)):
        model, tokenizer = load_backbone(str(folder))
        scores = written_probs(model.eval(), tokenizer, problems, pools, check="step")
        aurocs[name] = kind_report(problems, pools, scores, [0] * len(pools))["step_auroc"]
    print(json.dumps({"same_weights": same, **aurocs}))
    assert min(aurocs["shipped"].values()) >= 0.95  # the regime indicator, every kind
    for kind in KINDS:
        assert aurocs["rebuilt"][kind] >= aurocs["shipped"][kind] - AUROC_TOLERANCE, kind
