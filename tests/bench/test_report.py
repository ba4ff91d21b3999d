"""bench.report: the tree a benchmark's results name is the one it measured."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bench import report


def test_results_name_the_tree_the_benchmark_started_from(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(report, "TREE_AT_START", "abc1234")
    monkeypatch.setattr(report, "describe_tree", lambda: "def5678")
    versions = report.environment()
    assert versions["commit"] == "abc1234"
    assert versions["commit_when_written"] == "def5678"


def test_a_tree_that_did_not_move_is_named_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(report, "TREE_AT_START", "abc1234-dirty")
    monkeypatch.setattr(report, "describe_tree", lambda: "abc1234-dirty")
    versions = report.environment()
    assert versions["commit"] == "abc1234-dirty"
    assert "commit_when_written" not in versions


def test_a_tree_is_described_by_its_commit_and_marked_dirty_when_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=tmp_path, capture_output=True, text=True, check=True)
        return done.stdout.strip()

    git("init", "-q")
    (tmp_path / "a.txt").write_text("one\n")
    git("add", "a.txt")
    git("-c", "user.name=bench", "-c", "user.email=bench@example.invalid", "commit", "-q", "-m", "one")
    head = git("rev-parse", "--short", "HEAD")
    monkeypatch.chdir(tmp_path)
    assert report.describe_tree() == head
    (tmp_path / "a.txt").write_text("two\n")
    assert report.describe_tree() == f"{head}-dirty"
