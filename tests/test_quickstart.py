"""docs/quickstart.md, run as written: every `prmkit` command of its bash blocks, in order,
with the tiny models in place of SmolLM2 (too slow here) and a temporary folder in place
of runs/first-hour; the outputs are checked against what the page says to expect."""

import json
import re
import shlex
from pathlib import Path

from prmkit.cli import main
from prmkit.evaluation.plots import read_axes

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "quickstart.md"


def page_commands() -> list[list[str]]:
    """The `prmkit ...` commands of the page's bash blocks (continuations joined)."""
    blocks = re.findall(r"```bash\n(.*?)```", PAGE.read_text(), flags=re.S)
    text = "\n".join(blocks).replace("\\\n", " ")
    return [shlex.split(line, comments=True)[1:] for line in text.splitlines()
            if line.strip().startswith("prmkit ")]


def test_the_page_walks_the_whole_first_hour():
    names = [" ".join(c[:2]) if c[0] == "eval" else c[0] for c in page_commands()]
    assert names == ["train", "eval processbench", "generate", "score", "eval bon", "search",
                     "eval search"]
    train = page_commands()[0]
    assert "eval_max_examples=30" in train and "max_steps=5" in train


def test_quickstart_runs_as_written_with_tiny_models(tmp_path, tiny_lm, capsys, monkeypatch,
                                                     shared_data):
    monkeypatch.chdir(ROOT)
    run = tmp_path / "first-hour"
    tiny = {"smollm2-135m": str(tiny_lm), "runs/first-hour": str(run)}
    outputs = []
    for argv in page_commands():
        argv = [re.sub("|".join(map(re.escape, tiny)), lambda m: tiny[m.group(0)], a)
                for a in argv]
        if argv[0] == "train":  # a tiny PRM: no 2,048-token rows, LoRA on its few layers
            argv += ["backbone=tiny-random", "lora.top_k_layers=null", "batch_tokens=4096",
                     "row_tokens=512", "model.step_format.max_length=512", "bf16=false",
                     "num_threads=1"]
        if argv[0] in ("generate", "search"):
            argv += ["--no-progress"]
        assert main(argv) == 0, argv
        outputs.append(capsys.readouterr())

    train, processbench, generate, score, bon, *_ = (o.out for o in outputs)
    assert json.loads(train)["model"] == str(run / "model")
    assert "model saved to" in outputs[0].err and "final evaluation on 30 of " \
        in outputs[0].err
    stats = json.loads((run / "data_stats.json").read_text())
    assert stats["eval_examples_used"] == 30 and stats["eval_examples_available"] > 30
    assert processbench.startswith("ProcessBench average F1 ")
    assert "on 16 of 3400 items (stratified, seed 0)" in processbench.splitlines()[0]
    kinds = re.findall(r"of (\d+), correct kept .* of (\d+)\)", processbench)
    assert len(kinds) == 4 and all(int(a) > 0 and int(b) > 0 for a, b in kinds)
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 8  # 2 problems x 4 samples
    scored = [json.loads(line) for line in (run / "scored.jsonl").read_text().splitlines()]
    assert len(scored) == 8 and all("score" in s for s in scored)
    assert bon.startswith("best-of-N on 2 problems (score, exact estimator):")
    (ax,) = read_axes(run / "bon.png")
    assert [t["label"] for t in ax["xticks"]] == ["1", "2", "4"]
    assert all(t["label"].endswith("%") for t in ax["yticks"])
    assert len((run / "beam4.jsonl").read_text().splitlines()) == 2
    assert outputs[-1].out.startswith("search results on 2 problems:")
    by_tokens, by_n = read_axes(run / "search-report" / "search_curves.png")
    assert by_n["ylabel"] == "% problems solved" and [t["label"] for t in by_n["xticks"]] == ["4"]
    assert "points[0].method | beam_search" in (run / "search-report" / "report.md").read_text()
