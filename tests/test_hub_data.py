"""Datasets and models by Hub name: a Hub cache laid out in the test (no network), a
local copy, offline mode, a missing name and a wrong split."""

import json

import huggingface_hub.constants
import pytest

from prmkit.cli import main
from prmkit.data.hub import dataset_path, resolve_dataset, resolve_model_folder
from prmkit.errors import PrmkitError

COMMIT = "0123456789abcdef0123456789abcdef01234567"
ITEMS = {
    "gsm8k": [{"id": "gsm8k-0", "generator": "g", "problem": "1 + 1?", "steps": ["2"],
               "final_answer_correct": True, "label": -1},
              {"id": "gsm8k-1", "generator": "g", "problem": "2 + 2?", "steps": ["5", "done"],
               "final_answer_correct": False, "label": 0}],
    "math": [{"id": "math-0", "generator": "g", "problem": "3 + 3?", "steps": ["6"],
              "final_answer_correct": True, "label": -1}],
}


def cached_repo(cache, repo: str, files: dict[str, str | bytes], kind: str = "datasets",
                commit: str = COMMIT):
    """huggingface_hub's cache layout: <kind>--owner--name/{refs/main, snapshots/<commit>/}."""
    root = cache / f"{kind}--{repo.replace('/', '--')}"
    (root / "refs").mkdir(parents=True, exist_ok=True)
    (root / "refs" / "main").write_text(commit)
    for name, content in files.items():
        path = root / "snapshots" / commit / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return root / "snapshots" / commit


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("PRMKIT_CACHE", str(tmp_path / "prmkit-cache"))
    monkeypatch.delenv("PRMKIT_DATA", raising=False)
    cached_repo(cache, "Qwen/ProcessBench",
                {f"{k}.json": json.dumps(v) for k, v in ITEMS.items()})
    return cache


def test_processbench_by_hub_name_records_its_revision(hub_cache, tmp_path):
    preds = tmp_path / "preds.jsonl"
    preds.write_text("".join(json.dumps({"id": it["id"], "step_scores": [0.9] * len(it["steps"])})
                             + "\n" for v in ITEMS.values() for it in v))
    out = tmp_path / "pb.json"
    assert main(["eval", "processbench", "--predictions", str(preds), "--data",
                 "Qwen/ProcessBench", "--json", "-o", str(out)]) == 0
    result = json.loads(out.read_text())
    assert set(result) >= {"gsm8k", "math"}
    data = result["data"][0]
    assert (data["dataset"], data["revision"], data["found_in"]) == (
        "Qwen/ProcessBench", COMMIT, "hub cache")
    assert set(data["files"]) == {"gsm8k.json", "math.json"}


def test_data_stats_takes_a_split_by_name(hub_cache, capsys):
    assert main(["data", "stats", "Qwen/ProcessBench:gsm8k", "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["data"]["split"] == "gsm8k" and stats["data"]["revision"] == COMMIT


def test_wrong_split_lists_the_splits(hub_cache):
    with pytest.raises(PrmkitError, match="no split 'gsm9k'; its splits: gsm8k, math"):
        resolve_dataset("Qwen/ProcessBench:gsm9k")


def test_several_files_without_a_split_ask_for_one_where_one_file_is_read(hub_cache):
    with pytest.raises(PrmkitError, match=r"name one split as Qwen/ProcessBench:SPLIT"):
        dataset_path("Qwen/ProcessBench", single=True)


def test_missing_name_fails_fast_saying_what_was_tried(hub_cache, tmp_path, monkeypatch):
    monkeypatch.setenv("PRMKIT_DATA", str(tmp_path / "copies"))
    with pytest.raises(PrmkitError) as e:
        dataset_path("nobody/nothing")
    message = str(e.value)
    assert message.startswith("dataset 'nobody/nothing' is not in the local Hub cache and the "
                              "Hub cannot be reached (HF_HUB_OFFLINE is set); tried: a path")
    for tried in (f"a local copy at {tmp_path / 'copies' / 'nobody/nothing'}",
                  f"the Hub cache {hub_cache}", "`hf download nobody/nothing --repo-type dataset`"):
        assert tried in message


def test_local_copy_is_used_before_the_hub_cache(hub_cache, tmp_path, monkeypatch):
    copy = tmp_path / "copies" / "Qwen" / "ProcessBench"
    copy.mkdir(parents=True)
    (copy / "gsm8k.json").write_text(json.dumps(ITEMS["gsm8k"][:1]))
    monkeypatch.setenv("PRMKIT_DATA", str(tmp_path / "copies"))
    path, record = dataset_path("Qwen/ProcessBench:gsm8k")
    assert path == copy / "gsm8k.json" and record["found_in"] == "local copy"
    assert record["revision"] is None


def test_parquet_split_is_read_through_datasets(hub_cache):
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"problem": ["What is 1+1?"], "solution": ["\\boxed{2}"], "answer": ["2"],
                      "subject": ["Algebra"], "level": [1], "unique_id": ["test/algebra/1.json"]})
    buf = pa.BufferOutputStream()
    pq.write_table(table, buf)
    cached_repo(hub_cache, "HuggingFaceH4/MATH-500",
                {"data/test-00000-of-00001.parquet": buf.getvalue().to_pybytes()}, commit="e" * 40)
    from prmkit.cli.search import read_problems
    from prmkit.data.math_problems import read_math
    from prmkit.generation.files import read_problems as generation_problems

    problems = read_problems("HuggingFaceH4/MATH-500:test")
    assert [(p.text, p.answer) for p in problems] == [("What is 1+1?", "2")]
    assert generation_problems("HuggingFaceH4/MATH-500:test") == problems
    assert list(read_math("HuggingFaceH4/MATH-500:test")) == problems
    with pytest.raises(PrmkitError, match="no split 'train'; its splits: test"):
        read_problems("HuggingFaceH4/MATH-500:train")


def test_model_by_hub_id_from_the_cache(hub_cache, tmp_path):
    from published_replicas import PROBLEM, STEPS, math_shepherd

    from prmkit.scoring import Scorer

    snapshot = cached_repo(hub_cache, "peiyi9979/math-shepherd-mistral-7b-prm", {}, "models")
    math_shepherd(snapshot)
    assert resolve_model_folder("peiyi9979/math-shepherd-mistral-7b-prm") == snapshot
    by_id = Scorer.from_pretrained("peiyi9979/math-shepherd-mistral-7b-prm", device="cpu",
                                   format="math-shepherd")
    by_path = Scorer.from_pretrained(snapshot, device="cpu", format="math-shepherd")
    assert by_id.score([(PROBLEM, STEPS)]) == by_path.score([(PROBLEM, STEPS)])
    with pytest.raises(PrmkitError, match="model 'nobody/prm' is not in the local Hub cache "
                                          "and the Hub cannot be reached"):
        resolve_model_folder("nobody/prm")


def fake_hub(monkeypatch, online_error: Exception):
    """A Hub cache without the repository and a Hub that answers with `online_error`."""
    import huggingface_hub
    from huggingface_hub.errors import LocalEntryNotFoundError

    def snapshot_download(local_files_only=False, **kw):
        raise LocalEntryNotFoundError("not in the cache") if local_files_only else online_error

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)


def no_connection() -> Exception:
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        try:
            raise ConnectionError("[Errno -2] Name or service not known")
        except ConnectionError as e:
            raise LocalEntryNotFoundError("An error happened while trying to locate the files "
                                          "on the Hub") from e
    except LocalEntryNotFoundError as e:
        return e


def test_model_not_fetched_without_network_is_not_reported_as_not_found(hub_cache, monkeypatch):
    """Offline (HF_HUB_OFFLINE) or with no connection, a model that is not cached was
    reported as "not found": it says the Hub cannot be reached and how to get the model."""
    fixes = ("`hf download Qwen/Qwen2.5-Math-7B` into this HF_HUB_CACHE), or pass a local "
             "folder")
    with pytest.raises(PrmkitError) as offline:
        resolve_model_folder("Qwen/Qwen2.5-Math-7B")
    fake_hub(monkeypatch, no_connection())
    with pytest.raises(PrmkitError) as unplugged:
        resolve_model_folder("Qwen/Qwen2.5-Math-7B")
    for e, why in ((offline, "HF_HUB_OFFLINE is set"), (unplugged, "no connection")):
        message = str(e.value)
        assert message.startswith("model 'Qwen/Qwen2.5-Math-7B' is not in the local Hub cache "
                                  f"and the Hub cannot be reached ({why}"), message
        assert "not found" not in message and fixes in message
    fake_hub(monkeypatch, ValueError("404 Client Error: Repository Not Found"))
    with pytest.raises(PrmkitError, match="'nobody/prm' was not found; tried: .*Repository Not"):
        resolve_model_folder("nobody/prm")


def test_backbone_not_fetched_without_network_says_the_hub_cannot_be_reached(hub_cache,
                                                                            monkeypatch):
    import transformers

    from prmkit.models.backbones import load_backbone

    with pytest.raises(PrmkitError, match=r"cannot be reached \(HF_HUB_OFFLINE is set\)"):
        load_backbone("HuggingFaceTB/SmolLM2-135M")
    cause = no_connection()

    def unplugged(*args, **kw):
        raise OSError("We couldn't connect to 'https://huggingface.co' to load the files") \
            from cause

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", unplugged)
    with pytest.raises(PrmkitError, match=r"'HuggingFaceTB/SmolLM2-135M' is not in the local "
                                          r"Hub cache and the Hub cannot be reached \(no "
                                          r"connection\).*pass a local folder"):
        load_backbone("HuggingFaceTB/SmolLM2-135M")


def test_training_recipe_reads_a_hub_name_and_keys_its_cache_by_the_file(hub_cache):
    from prmkit.data.digest_cache import file_sha256
    from prmkit.training.data_cache import prepared_key
    from prmkit.training.dataset import load_examples
    from prmkit.training.reward_config import DataConfig

    cfg = DataConfig(train=["Qwen/ProcessBench:gsm8k"], policy={"holdout_path": None})
    examples = load_examples(cfg.train, cfg, "prm")
    assert [ex.problem for ex in examples] == ["1 + 1?", "2 + 2?"]
    key = prepared_key(cfg, "prm", seed=0)
    path, _ = dataset_path("Qwen/ProcessBench:gsm8k")
    assert key["files"] == {"Qwen/ProcessBench:gsm8k": file_sha256(path)}


def test_missing_file_path_is_not_looked_up_on_the_hub(hub_cache):
    from prmkit.data.readers import read_records

    with pytest.raises(PrmkitError, match="data/missing.jsonl: no such file"):
        read_records("data/missing.jsonl", format="processbench")
