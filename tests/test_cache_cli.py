"""`prmkit cache list|prune` on a rows cache built by the real data-preparation code."""

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from prmkit.cli import main
from prmkit.errors import PrmkitError
from prmkit.training.cache_folder import cache_summary, parse_size, prune_cache

FIXTURE = Path(__file__).parent / "fixtures" / "training" / "good_bad.jsonl"
DAY = 86400
ROW_TOKENS = (256, 512, 1024)


def _rows(rows_dir: Path, row_tokens: int):
    """Prepare the fixture's examples and their rows through the cache in rows_dir."""
    from prmkit.models.backbones import tiny_random
    from prmkit.models.formatting import SegmentEncoder, StepFormat
    from prmkit.training.data_cache import rows_for
    from prmkit.training.dataset import prepare
    from prmkit.training.reward_config import DataConfig

    cfg = DataConfig(train=[str(FIXTURE)], eval_fraction=0.2, cache_dir=str(rows_dir))
    train, _ = prepare(cfg, "prm", 0)
    encoder = SegmentEncoder(tiny_random()[1], StepFormat(max_length=256))
    return rows_for(train, encoder, "tree", row_tokens, 2, "prm", "unique", cache=True,
                    cache_dir=str(rows_dir))


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """A cache folder whose rows/ holds one examples entry and one rows entry per
    row_tokens, built once."""
    root = tmp_path_factory.mktemp("built")
    for n in ROW_TOKENS:
        _rows(root / "rows", n)
    return root


@pytest.fixture
def cache(built, tmp_path, monkeypatch) -> Path:
    """A copy of the built cache, entries last used 1, 2, 3, 4 days ago (oldest first in
    the order of their names), plus a converted-backbone folder."""
    root = tmp_path / "prmkit-cache"
    shutil.copytree(built, root)
    monkeypatch.setenv("PRMKIT_CACHE", str(root))
    now = time.time()
    for age, p in enumerate(_entries(root)[::-1], start=1):
        os.utime(p, (now - age * DAY, now - age * DAY))
    backbone = root / "smollm2-135m"
    backbone.mkdir()
    (backbone / "config.json").write_text("{}")
    (backbone / "model.safetensors").write_bytes(b"\0" * 1000)
    return root


def _entries(root: Path) -> list[Path]:
    return sorted((root / "rows").glob("*.msgpack"))


def _cli(capsys, *argv) -> tuple[int, str]:
    code = main(["cache", *argv])
    return code, capsys.readouterr().out


def test_list_shows_rows_entries_backbones_and_digests(cache, capsys):
    code, out = _cli(capsys, "list", "--cache-dir", str(cache), "--json")
    summary = json.loads(out)
    assert code == 0
    assert summary["rows"]["entries"] == 1 + len(ROW_TOKENS)
    assert summary["rows"]["bytes"] == sum(p.stat().st_size for p in _entries(cache))
    assert summary["rows"]["newest_use"] - summary["rows"]["oldest_use"] == pytest.approx(
        3 * DAY, abs=5)
    assert summary["backbones"] == {"smollm2-135m": 1002}
    code, out = _cli(capsys, "list")  # $PRMKIT_CACHE
    assert code == 0 and "4 entries" in out and "smollm2-135m/" in out


def test_prune_older_than_removes_only_entries_unused_for_that_long(cache, capsys):
    entries = _entries(cache)
    ages = {p: time.time() - p.stat().st_mtime for p in entries}
    code, out = _cli(capsys, "prune", "--older-than", "2.5")
    assert code == 0
    assert {p for p in entries if p.exists()} == {p for p in entries if ages[p] < 2.5 * DAY}
    assert len(_entries(cache)) == 2 and "removed 2 files" in out


def test_prune_max_size_removes_least_recently_used_first_and_reading_counts_as_use(cache):
    _rows(cache / "rows", ROW_TOKENS[0])  # reads the examples entry and one rows entry
    read = [p for p in _entries(cache) if p.stat().st_mtime > time.time() - 3600]
    assert len(read) == 2
    for p in read:  # make them the least recently used, then read them again
        os.utime(p, (time.time() - 10 * DAY,) * 2)
    _rows(cache / "rows", ROW_TOKENS[0])
    keep = sum(p.stat().st_size for p in read)
    report = prune_cache(cache, max_bytes=keep)
    assert _entries(cache) == sorted(read)
    assert report.freed_bytes == sum(f.bytes for f in report.removed) > 0
    assert [f.last_use for f in report.removed] == sorted(f.last_use for f in report.removed)
    assert cache_summary(cache).rows.bytes <= keep


def test_dry_run_removes_nothing_and_says_what_would_go(cache, capsys):
    before = _entries(cache)
    code, out = _cli(capsys, "prune", "--max-size", "0", "--backbones", "--dry-run")
    assert code == 0 and out.count("would remove /") == len(before) + 1
    assert _entries(cache) == before and (cache / "smollm2-135m").is_dir()


def test_backbones_are_kept_unless_backbones_is_given(cache, capsys):
    assert _cli(capsys, "prune", "--max-size", "0")[0] == 0
    assert _entries(cache) == [] and (cache / "smollm2-135m" / "config.json").is_file()
    assert _cli(capsys, "prune", "--backbones")[0] == 0
    assert not (cache / "smollm2-135m").exists()


def test_temporary_files_of_writes_are_removed_only_after_a_day(cache):
    fresh = cache / "rows" / ".abc.msgpack.k2j4.tmp"
    stale = cache / "rows" / ".def.msgpack.9xq1.tmp"
    fresh.write_bytes(b"half")
    stale.write_bytes(b"half")
    os.utime(stale, (time.time() - 2 * DAY,) * 2)
    assert cache_summary(cache).rows.partial_files == 2
    prune_cache(cache, older_than=0, max_bytes=0)
    assert fresh.exists() and not stale.exists()


def test_file_digests_are_cached_under_prmkit_cache(cache, tmp_path):
    from prmkit.data.digest_cache import file_sha256

    kept, deleted = tmp_path / "kept.bin", tmp_path / "deleted.bin"
    kept.write_bytes(b"a")
    deleted.write_bytes(b"b")
    file_sha256(kept)
    file_sha256(deleted)
    assert cache_summary(cache).digest_entries == 2


def test_prune_drops_sha256_entries_of_deleted_files(cache, tmp_path, capsys):
    from prmkit.data.digest_cache import file_sha256

    kept, deleted = tmp_path / "kept.bin", tmp_path / "deleted.bin"
    kept.write_bytes(b"a")
    deleted.write_bytes(b"b")
    file_sha256(kept)
    file_sha256(deleted)
    deleted.unlink()
    assert prune_cache(cache, dry_run=True).dropped_digests == [str(deleted.resolve())]
    assert cache_summary(cache).digest_entries == 2
    code, out = _cli(capsys, "prune")
    assert code == 0 and str(deleted.resolve()) in out
    assert list(json.loads((cache / "sha256.json").read_text())) == [str(kept.resolve())]
    assert len(_entries(cache)) == 1 + len(ROW_TOKENS)  # no age or size given


def test_rows_entry_removed_between_listing_and_reading_is_rebuilt(cache, monkeypatch):
    # A prune may remove an entry after a run saw it exist and before it opens it.
    first = _rows(cache / "rows", ROW_TOKENS[0])
    read_bytes = Path.read_bytes

    def pruned_first(path):
        if path.suffix == ".msgpack":
            path.unlink(missing_ok=True)
        return read_bytes(path)

    monkeypatch.setattr(Path, "read_bytes", pruned_first)
    assert _rows(cache / "rows", ROW_TOKENS[0]) == first
    monkeypatch.undo()
    assert len(_entries(cache)) == 1 + len(ROW_TOKENS)  # rebuilt and written again


@pytest.mark.parametrize("argv, message", [
    (["prune", "--older-than", "-1"], "days >= 0"),
    (["prune", "--older-than", "nan"], "days >= 0"),
    (["prune", "--max-size", "5 gigs"], "5GB, 500MB"),
    (["list", "--cache-dir", "{missing}"], "no such cache folder"),
    (["prune", "--cache-dir", "{missing}", "--dry-run"], "no such cache folder"),
])
def test_bad_input_is_a_clear_error_with_exit_2(argv, message, tmp_path, capsys):
    argv = [a.format(missing=tmp_path / "missing") for a in argv]
    assert main(["cache", *argv, *([] if "--cache-dir" in argv else
                                   ["--cache-dir", str(tmp_path)])]) == 2
    assert message in capsys.readouterr().err


def test_sizes_are_parsed_in_decimal_and_binary_units():
    assert parse_size("5GB") == 5 * 10**9
    assert parse_size("1.5 GiB") == int(1.5 * 2**30)
    assert parse_size("500m") == 500 * 10**6
    assert parse_size("1024") == 1024
    with pytest.raises(PrmkitError, match="not understood"):
        parse_size("-5GB")
