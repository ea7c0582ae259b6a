"""The code revision every record names: the package's git commit (+dirty with uncommitted changes
under it) in a checkout, else a short hash of its Python sources."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from rpevit.lab import revision


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A copy of a tiny package at tmp_path/pkg standing in for rpevit (the cache cleared around it)."""
    root = tmp_path / "repo"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("x = 1\n")
    (root / "pkg" / "mod.py").write_text("y = 2\n")
    monkeypatch.setattr(revision, "PACKAGE", root / "pkg")
    revision.code_revision.cache_clear()
    yield root
    revision.code_revision.cache_clear()


def git(root, *args) -> str:
    command = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@example.org", *args]
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip()


def test_outside_a_checkout_the_sources_are_hashed(package):
    first = revision.code_revision()
    assert first == revision.source_hash(package / "pkg") and first.startswith("sha256:") and len(first) == 19
    assert revision.code_revision() == first  # cached per process
    (package / "pkg" / "mod.py").write_text("y = 3\n")
    edited = revision.source_hash()
    assert edited != first  # a changed source is another revision
    (package / "pkg" / "mod.py").rename(package / "pkg" / "other.py")
    assert revision.source_hash() not in (first, edited)  # so is a renamed one


def test_in_a_checkout_the_commit_and_dirty_when_the_package_changed(package):
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    git(package, "init", "-q")
    git(package, "add", "pkg")
    git(package, "commit", "-q", "-m", "first")
    head = git(package, "rev-parse", "HEAD")
    assert revision.code_revision() == head and len(head) == 40
    (package / "notes.txt").write_text("outside the package: still clean\n")
    revision.code_revision.cache_clear()
    assert revision.code_revision() == head
    (package / "pkg" / "mod.py").write_text("y = 3\n")
    revision.code_revision.cache_clear()
    assert revision.code_revision() == head + "+dirty"
    assert revision.short_revision(head + "+dirty") == head[:12] + "+dirty"
    assert revision.short_revision("sha256:0123456789ab") == "sha256:0123456789ab"


def test_a_declared_result_revision_retires_the_records_it_concerns(monkeypatch):
    """A component's `result_revision` above 1 changes the keys of that component's runs only (an old record
    stops matching and its run is trained again); CORE_RESULT_REVISION changes every key; at 1 nothing does."""
    from rpevit.core.attention.linear import FavorAttention
    from rpevit.lab.params import load_params
    from rpevit.lab.store import run as run_module
    from rpevit.lab.store.run import Run

    params = load_params("smoke")
    favor, softmax = (Run(params, params.datasets[0], variant, 0) for variant in ("favor+ape", "softmax+ape"))
    before = {"favor": favor.key, "softmax": softmax.key, "record": {"key": favor.key}}
    monkeypatch.setattr(FavorAttention, "result_revision", 2, raising=False)
    assert favor.key != before["favor"] and not favor.matches(before["record"])
    assert softmax.key == before["softmax"]
    monkeypatch.setattr(run_module, "CORE_RESULT_REVISION", 2)
    assert softmax.key != before["softmax"]
    assert run_module.result_revisions(["favor", "ape"]) == {"core": 2, "favor": 2}
    monkeypatch.undo()
    assert (favor.key, softmax.key) == (before["favor"], before["softmax"])
