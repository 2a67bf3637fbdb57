"""What a new user reads first stays true: README's two commands (which CI runs), the
version against CHANGELOG, the license, no stale install instructions or machine paths
in the docs."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from packaging.version import Version

import inductor_addmm_fix as fix

ROOT = Path(__file__).resolve().parents[1]
USER_DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_readme_starts_with_the_two_commands_ci_runs():
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"^```bash\n(.*?)^```$", readme, re.M | re.S).group(1).splitlines()
    assert len(block) == 2
    setup, tests = block
    assert setup.startswith("python3 -m venv .venv && ") and setup.endswith(" -m inductor_addmm_fix check")
    assert tests == ".venv/bin/python -m pytest -q -n 2 tests"
    assert readme.index("```bash") < 400  # on the first screen
    # .ci/run reads the same block (awk); run its extraction here.
    awk = re.search(r"awk '([^']*)' README.md", (ROOT / ".ci/run").read_text()).group(1)
    extracted = subprocess.run(["awk", awk, "README.md"], cwd=ROOT, capture_output=True, text=True, check=True)
    assert extracted.stdout.splitlines() == block


def test_readme_says_how_to_install_verify_turn_off_and_remove_before_any_internals():
    readme = (ROOT / "README.md").read_text()
    first_screen = readme[: readme.index("## What it fixes")]
    for needle in ("not on PyPI", "pip install /path/to/", "python -m inductor_addmm_fix check",
                   "INDUCTOR_ADDMM_FIX=0", "pip uninstall inductor-addmm-fix", "Eager mode on the CPU has no kernel"):
        assert needle in first_screen, needle


def _sections(changelog: str) -> list[tuple[str, str]]:
    """(heading, body) of each ``## [...]`` section."""
    parts = re.split(r"^## \[([^\]]+)\][^\n]*\n", changelog, flags=re.M)
    return list(zip(parts[1::2], parts[2::2]))


def test_the_version_is_the_last_release_or_a_dev_version_after_it():
    """README, "Versions": each CHANGELOG section is a release and ``__version__`` names
    it; between releases the version is the next one with ``.devN``."""
    changelog = (ROOT / "CHANGELOG.md").read_text()
    sections = _sections(changelog)
    assert sections[0][0] == "Unreleased"
    releases = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})$", changelog, re.M)
    assert [name for name, _ in sections[1:]] == [version for version, _ in releases]  # every other one dated
    latest = Version(releases[0][0])
    assert [Version(v) for v, _ in releases] == sorted((Version(v) for v, _ in releases), reverse=True)
    version = Version(fix.__version__)
    unreleased = sections[0][1].strip()
    if version.is_devrelease:
        assert version.release > latest.release
    else:
        assert version == latest, f"__version__ {version} is not the last release {latest}"
        assert not unreleased, "changes after the release: make __version__ the next .dev0 version"


def test_the_license_ships_with_the_package():
    assert (ROOT / "LICENSE").read_text().startswith("BSD 3-Clause License")
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'license = "BSD-3-Clause"' in pyproject and 'license-files = ["LICENSE"]' in pyproject


@pytest.mark.parametrize("doc", USER_DOCS, ids=lambda p: p.name)
def test_no_stale_install_instructions_or_machine_paths(doc):
    text = doc.read_text()
    assert "pip install inductor-addmm-fix" not in text  # not on PyPI yet
    assert "/work/" not in text
    for phrase in (r"\bsessions?\b", r"device calls?", r"\blent\b"):
        assert not re.search(phrase, text, re.I), f"{doc.name}: {phrase}"
