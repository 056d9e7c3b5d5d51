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
        Pin("master", "0c6c0ceaa523", "MindSpeed-0c6c0ceaa523"),  # the A5 image's (verl 0.9.1)
    )
}
# Megatron-LM's own source, which a line imports and patches (``megatron.training``) and PyPI's megatron-core does not
# ship: the A5 image installs Megatron-LM core_v0.12.0 from source (``pip install -e``) for master. An unmodified
# ``git archive`` (its top folder names no commit) in $NPU_SHIM_MEGATRON_LM_SOURCE, else ../shared/megatron-lm.
MEGATRON_LM = {"master": Pin("core_v0.12.0", "d580efc68a9f", "Megatron-LM-core_v0.12.0-d580efc68a9f")}
MEGATRON_LM_VARIABLE = "NPU_SHIM_MEGATRON_LM_SOURCE"
MEGATRON_LM_DEFAULT = ROOT.parent / "shared" / "megatron-lm"
MEGATRON_LM_CACHE = ROOT / ".cache" / "megatron-lm"


class SourceMissing(LookupError):
    """No archive or checkout of a pinned line where the layer looks; the message says how to give one."""


def source_dir(variable: str = SOURCE_VARIABLE, default: Path = DEFAULT_SOURCE) -> Path:
    given = os.environ.get(variable, "").strip()
    return Path(given).expanduser().resolve() if given else default


def megatron_lm_archive(line: str) -> Path | None:
    """The Megatron-LM archive ``line`` needs beside it (None: the line needs none)."""
    pin = MEGATRON_LM.get(line)
    return None if pin is None else source_dir(MEGATRON_LM_VARIABLE, MEGATRON_LM_DEFAULT) / f"{pin.stem}.tar.gz"


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
    pin, megatron = PINS[line], megatron_lm_archive(line)
    if megatron is not None and not megatron.is_file() and _has_mindspeed(line):
        return (
            f"NOT RUN: {what} for MindSpeed {line}: no {megatron.name} in {megatron.parent} (Megatron-LM's source, "
            f"whose megatron.training MindSpeed {line} patches); set {MEGATRON_LM_VARIABLE} to a directory holding "
            "that git archive of NVIDIA/Megatron-LM"
        )
    return (
        f"NOT RUN: {what} for MindSpeed {line}: no {pin.stem}.tar.gz (nor a checkout at {pin.commit}) in "
        f"{source_dir()}; set {SOURCE_VARIABLE} to a directory of Ascend/MindSpeed archives (git archive) or "
        "checkouts at the commits pinned in tests/mindspeed_source.py"
    )


def required() -> bool:
    """Whether a missing source fails the layer instead of skipping it: under CI (``CI=true``, as ``.ci/run`` runs;
    the rule of ``helpers.lacking``), which must never pass without the layer in silence."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def _has_mindspeed(line: str) -> bool:
    pin, source = PINS[line], source_dir()
    return source.is_dir() and ((source / f"{pin.stem}.tar.gz").is_file() or _checkout(pin, source) is not None)


def available(line: str) -> bool:
    megatron = megatron_lm_archive(line)
    return _has_mindspeed(line) and (megatron is None or megatron.is_file())


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
    return _extracted(archive, pin.stem, target, Path("mindspeed", "__init__.py"), f"MindSpeed {line}")


def prepare_megatron_lm(line: str) -> Path | None:
    """The directory to put on PYTHONPATH after ``line``'s MindSpeed for Megatron-LM's source (None: not needed)."""
    archive = megatron_lm_archive(line)
    if archive is None:
        return None
    if not archive.is_file():
        raise SourceMissing(missing_message(line))
    pin = MEGATRON_LM[line]
    target = MEGATRON_LM_CACHE / f"{pin.line}-{pin.commit}"
    # the archive's top folder is the tag's name alone (git archive --prefix), no commit in it
    marker = Path("megatron", "training", "__init__.py")
    return _extracted(archive, f"Megatron-LM-{pin.line}", target, marker, f"Megatron-LM {pin.line}")


def _extracted(archive: Path, top: str, target: Path, marker: Path, what: str) -> Path:
    """``archive``'s folder ``top``, extracted once to ``target`` (which holds ``marker`` when complete)."""
    if (target / marker).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # extracted beside the target and renamed into place: a session that stops half way leaves no partial tree
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        with tarfile.open(archive) as tar:
            tar.extractall(scratch, filter="data")
        unpacked = Path(scratch) / top
        if not (unpacked / marker).is_file():
            raise SourceMissing(f"{archive} holds no {top}/{marker.as_posix()}: not a git archive of {what}")
        try:
            unpacked.rename(target)
        except OSError:  # another session put it there first
            if not (target / marker).is_file():
                raise
    return target
