"""Where the real-MindSpeed layer finds MindSpeed's source (tests/mindspeed_source.py), on made-up trees: no MindSpeed.

Held here, in the unit layer, so that the lookup is checked on every run, with or without the real archives.
"""

from __future__ import annotations

import io
import shutil
import tarfile
from pathlib import Path

import mindspeed_source
import pytest

LINE = "core_r0.16.0"
PIN = mindspeed_source.PINS[LINE]


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(mindspeed_source, "CACHE", tmp_path / "cache")
    return tmp_path / "cache"


def write_archive(directory: Path, top: str, marker: str = "from an archive") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    archive = directory / f"{PIN.stem}.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        data = marker.encode()
        info = tarfile.TarInfo(f"{top}/mindspeed/__init__.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return archive


def test_every_line_is_pinned_once_with_its_archive_name():
    for line, pin in mindspeed_source.PINS.items():
        assert pin.line == line and len(pin.commit) == 12 and pin.commit in pin.stem


def test_without_the_source_it_says_what_did_not_run_and_how_to_give_it(tmp_path, monkeypatch, cache):
    monkeypatch.setenv(mindspeed_source.SOURCE_VARIABLE, str(tmp_path / "nowhere"))
    assert not mindspeed_source.available(LINE)
    with pytest.raises(mindspeed_source.SourceMissing) as missing:
        mindspeed_source.prepare(LINE)
    message = str(missing.value)
    assert message.startswith("NOT RUN:") and "\n" not in message
    for named in (mindspeed_source.SOURCE_VARIABLE, f"{PIN.stem}.tar.gz", PIN.commit, str(tmp_path / "nowhere")):
        assert named in message, named
    assert not cache.exists()


def test_an_archive_is_extracted_once_into_the_cache(tmp_path, monkeypatch, cache):
    monkeypatch.setenv(mindspeed_source.SOURCE_VARIABLE, str(tmp_path / "archives"))
    archive = write_archive(tmp_path / "archives", PIN.stem)
    assert mindspeed_source.available(LINE)
    extract = mindspeed_source.prepare(LINE)
    assert extract == cache / f"{LINE}-{PIN.commit}"
    assert (extract / "mindspeed" / "__init__.py").read_text() == "from an archive"
    archive.unlink()
    write_archive(tmp_path / "archives", PIN.stem, "a newer archive")
    assert (mindspeed_source.prepare(LINE) / "mindspeed" / "__init__.py").read_text() == "from an archive"
    assert [path.name for path in cache.iterdir()] == [extract.name]  # no scratch left behind


def test_an_archive_of_something_else_is_refused(tmp_path, monkeypatch, cache):
    monkeypatch.setenv(mindspeed_source.SOURCE_VARIABLE, str(tmp_path / "archives"))
    write_archive(tmp_path / "archives", "not-mindspeed")
    with pytest.raises(mindspeed_source.SourceMissing, match="not a git archive of MindSpeed"):
        mindspeed_source.prepare(LINE)
    assert not (cache / f"{LINE}-{PIN.commit}").exists()


def test_an_unpacked_tree_is_used_where_it_lies(tmp_path, monkeypatch, cache):
    tree = tmp_path / "checkouts" / PIN.stem
    (tree / "mindspeed").mkdir(parents=True)
    (tree / "mindspeed" / "__init__.py").write_text("")
    monkeypatch.setenv(mindspeed_source.SOURCE_VARIABLE, str(tmp_path / "checkouts"))
    assert mindspeed_source.prepare(LINE) == tree
    assert not cache.exists()


def test_master_needs_megatron_lms_source_beside_it_and_says_so(tmp_path, monkeypatch, cache):
    """MindSpeed master patches Megatron-LM's megatron.training: without that archive it is not available, and the
    one line says which archive and which variable; with it, the archive is extracted once, as MindSpeed's are."""
    master = mindspeed_source.PINS["master"]
    monkeypatch.setattr(mindspeed_source, "MEGATRON_LM_CACHE", tmp_path / "megatron-cache")
    monkeypatch.setenv(mindspeed_source.SOURCE_VARIABLE, str(tmp_path / "archives"))
    monkeypatch.setenv(mindspeed_source.MEGATRON_LM_VARIABLE, str(tmp_path / "megatron"))
    write_archive(tmp_path / "archives", master.stem).rename(tmp_path / "archives" / f"{master.stem}.tar.gz")
    assert mindspeed_source.megatron_lm_archive(LINE) is None and mindspeed_source.prepare_megatron_lm(LINE) is None
    assert not mindspeed_source.available("master")
    message = mindspeed_source.missing_message("master")
    pin = mindspeed_source.MEGATRON_LM["master"]
    for named in (mindspeed_source.MEGATRON_LM_VARIABLE, f"{pin.stem}.tar.gz", "megatron.training"):
        assert named in message, named
    (tmp_path / "megatron").mkdir()
    with tarfile.open(tmp_path / "megatron" / f"{pin.stem}.tar.gz", "w:gz") as tar:
        info = tarfile.TarInfo(f"Megatron-LM-{pin.line}/megatron/training/__init__.py")
        tar.addfile(info, io.BytesIO(b""))
    assert mindspeed_source.available("master")
    extract = mindspeed_source.prepare_megatron_lm("master")
    assert extract == tmp_path / "megatron-cache" / f"{pin.line}-{pin.commit}"
    assert (extract / "megatron" / "training" / "__init__.py").is_file()


def test_the_default_is_shared_mindspeed_beside_the_project(monkeypatch):
    monkeypatch.delenv(mindspeed_source.SOURCE_VARIABLE, raising=False)
    assert mindspeed_source.source_dir() == mindspeed_source.ROOT.parent / "shared" / "mindspeed"


def git(directory: Path, *arguments: str) -> str:
    import subprocess

    identity = ["-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    done = subprocess.run(
        ["git", *identity, "-C", str(directory), *arguments], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not on PATH")
def test_a_git_checkout_is_taken_only_at_the_pinned_commit(tmp_path, monkeypatch, cache):
    checkout = tmp_path / "checkouts" / "MindSpeed"
    (checkout / "mindspeed").mkdir(parents=True)
    (checkout / "mindspeed" / "__init__.py").write_text("")
    git(checkout, "init", "-q")
    git(checkout, "add", ".")
    git(checkout, "commit", "-q", "-m", "a made-up MindSpeed")
    head = git(checkout, "rev-parse", "HEAD")
    monkeypatch.setenv(mindspeed_source.SOURCE_VARIABLE, str(tmp_path / "checkouts"))
    assert not mindspeed_source.available(LINE)  # the real pin: another commit
    monkeypatch.setitem(mindspeed_source.PINS, LINE, mindspeed_source.Pin(LINE, head[:12], PIN.stem))
    assert mindspeed_source.prepare(LINE) == checkout
    assert not cache.exists()


@pytest.mark.parametrize(
    ("value", "required"),
    [(None, False), ("", False), ("0", False), ("false", False), ("true", True), ("True", True), ("1", True)],
)
def test_under_ci_a_missing_source_is_required_not_skipped(monkeypatch, value, required):
    if value is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", value)
    assert mindspeed_source.required() is required
