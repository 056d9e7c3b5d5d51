"""Where real MindSpeed's source comes from (``tests/real_mindspeed``): the pins, where to look, the cache.

Standard library only: ``noxfile.py`` loads this file too (to say in one line what it did not run), and the tests do.

MindSpeed is not on PyPI. Its source comes from a directory of unmodified ``git archive`` tarballs of
Ascend/MindSpeed (``MindSpeed-<line>-<commit>.tar.gz``, as ``../shared/mindspeed`` holds them) or of checkouts at the
pinned commits: ``$NPU_SHIM_MINDSPEED_SOURCE`` if set, else ``../shared/mindspeed`` beside the project. An archive
is extracted once into ``.cache/mindspeed/<line>-<commit>`` (git-ignored); a checkout is used where it lies. Nothing
of MindSpeed is ever copied into the project.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE_VARIABLE = "NPU_SHIM_MINDSPEED_SOURCE"
DEFAULT_SOURCE = ROOT.parent / "shared" / "mindspeed"
CACHE = ROOT / ".cache" / "mindspeed"


@dataclass(frozen=True)
class Pin:
    """One MindSpeed line at the commit the tests run: ``stem`` names its archive (and an unpacked folder)."""

    line: str
    commit: str
    stem: str


# The one place the pins live (../shared/mindspeed/README.md lists their dates and the images that pair them).
PINS = {
    pin.line: pin
    for pin in (
        Pin("f2b0977e", "f2b0977ec85f", "MindSpeed-f2b0977ec85f"),
        Pin("2.3.0_core_r0.12.1", "674226a15a82", "MindSpeed-2.3.0_core_r0.12.1-674226a15a82"),
        Pin("core_r0.16.0", "e4772499f7eb", "MindSpeed-core_r0.16.0-e4772499f7eb"),
        Pin("core_r0.18.0", "4213c91313fe", "MindSpeed-core_r0.18.0-4213c91313fe"),
        Pin("master", "0c6c0ceaa523", "MindSpeed-0c6c0ceaa523"),  # the A5 image's (verl 0.9.1); not run: noxfile.py
    )
}


class SourceMissing(LookupError):
    """No archive or checkout of a pinned line where the layer looks; the message says how to give one."""


def source_dir() -> Path:
    given = os.environ.get(SOURCE_VARIABLE, "").strip()
    return Path(given).expanduser().resolve() if given else DEFAULT_SOURCE


def _checkout_commit(directory: Path) -> str | None:
    if not (directory / ".git").exists() or shutil.which("git") is None:
        return None
    command = ["git", "-C", str(directory), "rev-parse", "HEAD"]
    head = subprocess.run(command, capture_output=True, text=True, check=False)
    return head.stdout.strip() if head.returncode == 0 else None


def _checkout(pin: Pin, source: Path) -> Path | None:
    """A MindSpeed tree at the pinned commit in ``source``: a folder named as the archive, or a git checkout."""
    unpacked = source / pin.stem
    if (unpacked / "mindspeed" / "__init__.py").is_file():
        return unpacked
    for directory in sorted(path for path in source.iterdir() if path.is_dir()):
        commit = _checkout_commit(directory)
        if commit is not None and commit.startswith(pin.commit) and (directory / "mindspeed").is_dir():
            return directory
    return None


def missing_message(line: str, what: str = "the real-MindSpeed layer") -> str:
    pin = PINS[line]
    return (
        f"NOT RUN: {what} for MindSpeed {line}: no {pin.stem}.tar.gz (nor a checkout at {pin.commit}) in "
        f"{source_dir()}; set {SOURCE_VARIABLE} to a directory of Ascend/MindSpeed archives (git archive) or "
        "checkouts at the commits pinned in tests/mindspeed_source.py"
    )


def required() -> bool:
    """Whether a missing source fails the layer instead of skipping it: under CI (``CI=true``, as ``.ci/run`` runs;
    the rule of ``helpers.lacking``), which must never pass without the layer in silence."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def available(line: str) -> bool:
    pin, source = PINS[line], source_dir()
    return source.is_dir() and ((source / f"{pin.stem}.tar.gz").is_file() or _checkout(pin, source) is not None)


def prepare(line: str) -> Path:
    """The directory to put on PYTHONPATH for ``line``'s real MindSpeed (the folder holding ``mindspeed/``)."""
    pin, source = PINS[line], source_dir()
    if not source.is_dir():
        raise SourceMissing(missing_message(line))
    archive = source / f"{pin.stem}.tar.gz"
    if not archive.is_file():
        checkout = _checkout(pin, source)
        if checkout is None:
            raise SourceMissing(missing_message(line))
        return checkout
    target = CACHE / f"{pin.line}-{pin.commit}"
    if (target / "mindspeed" / "__init__.py").is_file():
        return target
    CACHE.mkdir(parents=True, exist_ok=True)
    # extracted beside the target and renamed into place: a session that stops half way leaves no partial tree
    with tempfile.TemporaryDirectory(dir=CACHE) as scratch:
        with tarfile.open(archive) as tar:
            tar.extractall(scratch, filter="data")
        unpacked = Path(scratch) / pin.stem
        if not (unpacked / "mindspeed" / "__init__.py").is_file():
            raise SourceMissing(f"{archive} holds no {pin.stem}/mindspeed/: not a git archive of MindSpeed {line}")
        try:
            unpacked.rename(target)
        except OSError:  # another session put it there first
            if not (target / "mindspeed" / "__init__.py").is_file():
                raise
    return target
