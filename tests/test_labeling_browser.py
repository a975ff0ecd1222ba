"""A whole labelling session in real Chromium (Playwright) against `prmkit label serve`:
sign in, rate every step with the keyboard (undoing one rating), finish, export as admin, read back with prmkit.

PRMKIT_DOCS_SCREENSHOTS=1 also copies the screenshots into docs/images/.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from labeling_support import (
    CHROMIUM,
    CHROMIUM_ARGS,
    PASSWORD,
    LiveServer,
    phase1_record,
    write_queue,
)
from playwright.sync_api import sync_playwright

from prmkit.cli import main
from prmkit.data import read_records
from prmkit.labeling import create_app, service

DOCS_IMAGES = Path(__file__).resolve().parents[1] / "docs" / "images"
KEYS = {1: "1", 0: "2", -1: "3"}


def _prepare(db: str, queue: Path) -> None:
    app = create_app(db)
    with app.state.sessionmaker() as s:
        service.create_user(s, "root", PASSWORD, "admin")
        service.create_user(s, "ann", PASSWORD)
    app.state.engine.dispose()
    assert main(["label", "import", str(queue), "--project", "phase1-test", "--db", db]) == 0
    assert main(["label", "members", "add", "ann", "--project", "phase1-test", "--db", db]) == 0


def _sign_in(page, url: str, name: str) -> None:
    page.goto(url + "/login")
    page.fill("input[name=username]", name)
    page.fill("input[name=password]", PASSWORD)
    with page.expect_navigation():
        page.click("button[type=submit]")


def _session(tmp_path: Path, queue: Path, ratings_for, shots: dict[str, Path],
             before_dashboard=None, undo_at: int | None = None) -> Path:
    """Label the queue's first solution in Chromium; returns the exported file. At position
    `undo_at` every candidate is first rated -1, submitted, and undone with the U key."""
    db = str(tmp_path / "labels.sqlite")
    _prepare(db, queue)
    server = LiveServer(db).start()
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1100, "height": 900})
            _sign_in(page, server.url, "ann")
            with page.expect_navigation():
                page.click("#next-1")
            position = 0
            while page.locator("#step-form").count():
                if position == undo_at:
                    undo_at = None
                    for _ in range(page.locator("fieldset.candidate").count()):
                        page.keyboard.press(KEYS[-1])
                    with page.expect_navigation():
                        page.keyboard.press("Enter")
                    with page.expect_navigation():
                        page.keyboard.press("u")
                    assert f"rating of step {position + 1} is undone" in page.inner_text("#undo-note")
                assert page.locator("#problem .katex").count() > 0  # maths rendered, offline
                n = page.locator("fieldset.candidate").count()
                for r in ratings_for(position, n):
                    page.keyboard.press(KEYS[r])
                if n > 1 and "task" in shots:
                    for _ in range(n - 1):
                        page.keyboard.press("k")  # back to the first alternative
                    page.keyboard.press("f")  # and flag it
                    page.screenshot(path=shots.pop("task"), full_page=True)
                with page.expect_navigation():
                    page.keyboard.press("Enter")
                position += 1
            with page.expect_navigation():
                page.keyboard.press("s")  # finish: solution
            assert "Finished: solution" in page.inner_text("#done")

            if before_dashboard:
                before_dashboard(db)
            admin = browser.new_page(viewport={"width": 1100, "height": 700})
            _sign_in(admin, server.url, "root")
            assert admin.url.endswith("/admin")
            admin.screenshot(path=shots.pop("dashboard"), full_page=True)
            export = admin.request.get(server.url + "/admin/projects/1/export")
            assert export.ok
            out = tmp_path / "export.jsonl"
            out.write_bytes(export.body())
            browser.close()
    finally:
        server.stop()
    return out


def _second_labeller(db: str) -> None:
    """bob labels beside ann (same solution, a gold question), for the dashboard."""
    app = create_app(db)
    with app.state.sessionmaker() as s:
        project = service.configure_project(s, "phase1-test", overlap=2, gold_rate=0.5)
        s.commit()
        service.import_queue(s, project, write_queue(Path(db).with_name("gold.jsonl"),
                                                     [phase1_record(9, rated=True, qc=True)]))
        bob = service.create_user(s, "bob", PASSWORD)
        service.add_members(s, project, ["bob"])
        for ratings in ([[1], [1, -1, -1], [1]], [[1], [1, 0, 0], [-1]], [[1], [-1, -1, 0], [1]]):
            task = service.next_task(s, bob, project)
            for pos, r in enumerate(ratings):
                service.submit_step(s, bob, task.id, pos, r, [False] * len(r), f"{task.id}-{pos}")
            service.finish_task(s, bob, task.id, "found_error")
    app.state.engine.dispose()


def _keep_screenshots(*paths: Path) -> None:
    for path in paths:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        if os.environ.get("PRMKIT_DOCS_SCREENSHOTS"):
            DOCS_IMAGES.mkdir(parents=True, exist_ok=True)
            shutil.copy(path, DOCS_IMAGES / path.name)


def test_a_phase1_solution_labelled_with_the_keyboard_in_chromium_exports_for_prmkit(tmp_path):
    queue = write_queue(tmp_path / "queue.jsonl", [phase1_record(3), phase1_record(4)])
    shots = {"task": tmp_path / "labeling-task.png", "dashboard": tmp_path / "labeling-dashboard.png"}
    wanted = {0: [1], 1: [1, -1, 0], 2: [1]}
    out = _session(tmp_path, queue, lambda pos, n: wanted[pos], dict(shots), _second_labeller,
                   undo_at=2)  # the last step: rated -1, undone with U, rated +1
    records = list(read_records(out))
    assert sorted(r.provenance.labeler for r in records) == ["ann", "bob", "bob", "bob"]
    (sol,) = [r for r in records if r.provenance.labeler == "ann"]
    assert sol.provenance.labeler == "ann" and sol.finish_reason == "solution"
    assert [[c.rating for c in s.completions] for s in sol.steps] == [[1], [1, -1, 0], [1]]
    assert [c.flagged for c in sol.steps[1].completions] == [True, False, False]
    assert sol.total_time > 0
    _keep_screenshots(*shots.values())


def test_real_phase1_test_problem_labelled_in_chromium_read_back_by_data_stats(
        tmp_path, shared_data, capsys):
    src = shared_data / "prm800k" / "raw-examples" / "phase1_test.concatenated.json"
    (original,) = read_records(src)
    # Rate each step as the original labeller did (unrated ones 0).
    ratings = [[c.rating if c.rating is not None else 0 for c in s.completions]
               for s in original.steps]
    shots = {"task": tmp_path / "real-task.png", "dashboard": tmp_path / "real-dashboard.png"}
    out = _session(tmp_path, src, lambda pos, n: ratings[pos], shots)
    assert main(["data", "stats", str(out), "--json"]) == 0
    stats = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert stats["solutions"] == 1 and stats["finish_reasons"] == {"solution": 1}
    assert sum(stats["ratings"].values()) == sum(len(r) for r in ratings) + 1  # + the human step
    (sol,) = read_records(out)
    assert [s.text for s in sol.trajectory()] == [s.text for s in original.trajectory()]
    assert [[c.rating for c in s.completions] for s in sol.steps] == ratings


pytestmark = pytest.mark.filterwarnings("ignore::ResourceWarning")
