"""The labelling quickstart (docs/labeling.md), run as written from a repository's root,
keeps its database and exports out of that root, in a folder git ignores; and git ignores
a SQLite database wherever one is made (`labels.sqlite` is the default --db)."""

from __future__ import annotations

import io
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from prmkit.cli import main

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "labeling.md"
SHARED = ROOT.parent / "shared"


def quickstart() -> list[list[str]]:
    """The quickstart's commands as words, shell variables filled in, comments dropped."""
    block = re.search(r"## Quickstart \(SQLite\)\n\n```bash\n(.*?)```", DOC.read_text(), re.S)
    assert block, "docs/labeling.md has no SQLite quickstart"
    variables: dict[str, str] = {}
    commands = []
    for line in block.group(1).replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        if not words:
            continue
        if len(words) == 1 and re.fullmatch(r"\w+=\S+", words[0]):
            name, value = words[0].split("=", 1)
            variables[name] = value
            continue
        commands.append([variables[w[1:]] if w.startswith("$") else w for w in words])
    return commands


def ignored_by_git(paths: list[str]) -> set[str]:
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    found = subprocess.run(["git", "check-ignore", "--no-index", *paths], cwd=ROOT,
                           capture_output=True, text=True, timeout=30)
    return set(found.stdout.split())


def test_labeling_docs_database_is_not_created_in_the_repository_root(tmp_path, monkeypatch):
    monkeypatch.setenv("PRMKIT_ARGON2", "1,1024,1")  # light hashing, as the other tests
    work = tmp_path / "repo"  # the repository root the docs run from
    work.mkdir()
    if SHARED.is_dir():
        (tmp_path / "shared").symlink_to(SHARED)
    monkeypatch.chdir(work)
    commands = quickstart()
    label = [c for c in commands if c[:2] == ["prmkit", "label"]]
    assert len(label) >= 6 and all("--db" in c for c in label)
    databases = {c[c.index("--db") + 1] for c in label}
    assert len(databases) == 1
    database = Path(databases.pop())
    outputs = [Path(c[c.index("-o") + 1]) for c in commands if "-o" in c]
    assert database.parent != Path(".") and outputs
    ran = []
    for words in commands:
        if words[0] == "mkdir":
            for folder in words[1:]:
                if folder != "-p":
                    Path(folder).mkdir(parents=True, exist_ok=True)
            continue
        if words[:3] in (["prmkit", "label", "serve"], ["prmkit", "data", "stats"]):
            continue  # a server that keeps running; a read of what export wrote
        if words[:3] == ["prmkit", "label", "import"] and not Path(words[3]).exists():
            continue  # the real data is not here
        if words[:4] == ["prmkit", "label", "users", "add"]:
            words = [*words, "--password-stdin"]
            monkeypatch.setattr("sys.stdin", io.StringIO("a long password\n"))
        assert main(words[1:]) == 0, words
        ran.append(words[2])
    assert {"users", "members", "export"} <= set(ran)
    assert database.is_file()  # made where the docs say, by their first command
    assert all(o.is_file() for o in outputs)
    assert not list(work.glob("*.sqlite*")) and not list(work.glob("*.jsonl"))
    # what the docs make, and a database at the default place, are ignored by git
    paths = [str(database), f"{database}-wal", *map(str, outputs), "labels.sqlite",
             "labels.sqlite-wal", "labels.sqlite-shm", "elsewhere/votes.sqlite"]
    assert ignored_by_git(paths) == set(paths)
