"""``python -m inductor_addmm_fix --version`` names the git revision of the code that runs:
the checkout the package runs from, or the checkout it was built from, recorded by the
build step (``setup.py`` calls ``revision.record``) in ``BUILD_REVISION``; a tree with
changes is marked dirty.  The wheel built from a git checkout: tests/test_activation.py
(slow)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from inductor_addmm_fix.cli import revision

PACKAGE = "inductor_addmm_fix"


def git(root: Path, *args: str) -> str:
    command = ["git", "-C", str(root), "-c", "user.name=test", "-c", "user.email=test@example.com",
               "-c", "commit.gpgsign=false", *args]
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def checkout(tmp_path) -> Path:
    """A git checkout with the package's directory and one commit."""
    root = tmp_path / "checkout"
    (root / PACKAGE).mkdir(parents=True)
    (root / PACKAGE / "version.py").write_text('__version__ = "0.0.0"\n')
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "one commit")
    return root


def recorded(package_dir: Path) -> str:
    return (package_dir / revision.BUILD_REVISION).read_text().strip()


def test_a_build_from_a_checkout_records_its_commit(checkout, tmp_path):
    package_dir = tmp_path / "build" / PACKAGE
    assert revision.record(str(checkout), str(package_dir)) == str(package_dir / revision.BUILD_REVISION)
    assert recorded(package_dir) == git(checkout, "rev-parse", "HEAD")[:10]


def test_a_build_from_a_checkout_with_changes_is_marked_dirty(checkout, tmp_path):
    (checkout / PACKAGE / "version.py").write_text('__version__ = "0.0.1"\n')
    package_dir = tmp_path / "build" / PACKAGE
    revision.record(str(checkout), str(package_dir))
    assert recorded(package_dir) == git(checkout, "rev-parse", "HEAD")[:10] + "-dirty"


def test_a_build_from_a_tagged_commit_names_the_tag(checkout, tmp_path):
    git(checkout, "tag", "-a", "v9.9.9", "-m", "a release")
    package_dir = tmp_path / "build" / PACKAGE
    revision.record(str(checkout), str(package_dir))
    assert recorded(package_dir) == "v9.9.9"


def test_a_build_from_an_sdist_keeps_the_revision_it_carries(tmp_path):
    unpacked = tmp_path / "inductor_addmm_fix-0.0.0"  # no .git: an unpacked sdist
    (unpacked / PACKAGE).mkdir(parents=True)
    (unpacked / PACKAGE / revision.BUILD_REVISION).write_text("838dfc2a1b\n")
    package_dir = tmp_path / "build" / PACKAGE
    revision.record(str(unpacked), str(package_dir))
    assert recorded(package_dir) == "838dfc2a1b"


def test_a_build_from_outside_a_checkout_records_nothing_and_drops_a_stale_record(tmp_path):
    source = tmp_path / "source"
    (source / PACKAGE).mkdir(parents=True)
    package_dir = tmp_path / "build" / PACKAGE
    package_dir.mkdir(parents=True)
    (package_dir / revision.BUILD_REVISION).write_text("838dfc2a1b\n")  # an earlier build's
    assert revision.record(str(source), str(package_dir)) is None
    assert not (package_dir / revision.BUILD_REVISION).exists()


def test_an_installed_copy_reports_the_revision_it_was_built_from(tmp_path):
    package_dir = tmp_path / "site-packages" / PACKAGE
    package_dir.mkdir(parents=True)
    assert revision.git_revision(str(package_dir)) is None
    (package_dir / revision.BUILD_REVISION).write_text("838dfc2a1b-dirty\n")
    assert revision.git_revision(str(package_dir)) == "838dfc2a1b-dirty"


def test_a_copy_in_a_checkout_reports_the_checkouts_revision(checkout):
    (checkout / PACKAGE / revision.BUILD_REVISION).write_text("0000000000\n")  # ignored: the checkout decides
    assert revision.git_revision(str(checkout / PACKAGE)) == git(checkout, "rev-parse", "HEAD")[:10]
