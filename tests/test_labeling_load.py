# ruff: noqa: F811  (pytest fixtures imported from labeling_support)
"""20 labellers at once against `prmkit label serve` on 127.0.0.1 (over SQLite and over
PostgreSQL), the server SIGKILLed and restarted mid-session, double-submitted forms, two
labellers on each solution: every submitted label is in the export exactly once."""

from __future__ import annotations

from collections import Counter

from labeling_support import db_url, postgres_cluster, run_load  # noqa: F401

from prmkit.data import read_records


def test_twenty_labellers_and_a_killed_server_lose_and_duplicate_no_label(tmp_path, db_url):
    result = run_load(tmp_path, labellers=20, items=20, overlap=2, kill_after=30, db=db_url)
    submitted = Counter(result["submitted"])
    exported = Counter(result["exported"])
    assert result["labels_submitted"] == 20 * 2 * 3  # every solution, two labellers, 3 steps
    active = {n for n, *_ in result["submitted"]}  # a slow client may find nothing left
    assert result["restart_s"] > 0 and result["double_submitted_forms"] == len(active) > 1
    assert exported == submitted and max(exported.values()) == 1
    # Two labellers on each solution, and the export reads back with prmkit.
    per_problem = Counter(p for n, p, pos, r in result["exported"] if pos == 0)
    assert set(per_problem.values()) == {2}
    assert len(list(read_records(result["export_path"]))) == 40
