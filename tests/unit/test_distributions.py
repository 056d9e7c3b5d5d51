"""Two distributions from one checkout: the shim (``npu-shim``) and its test kit (``simulated-npu``, ``kit/``).

The shim's wheel holds the shim alone (it runs beside a real torch_npu and MindSpeed); the kit's builds on its own and
says in its metadata which torch its compute mode is tested on.
"""

from __future__ import annotations

import ast
import email
import email.message
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import ROOT, clean_env, lacking
from pip._vendor.packaging.specifiers import SpecifierSet  # the unit environment has no packaging of its own

KIT = ROOT / "kit"
STAND_INS = {"torch_npu", "torchair", "mindspeed", "megatron_adaptor", "transformer_engine"}


def test_the_shims_wheel_holds_no_kit_file(installed_shim):
    _, site = installed_shim
    shipped = {path.relative_to(site).parts[0] for path in site.rglob("*")}
    assert "npu_shim" in shipped, "the installed shim is read"
    assert shipped & (STAND_INS | {"simulated_npu"}) == set()
    assert [path for path in (site / "npu_shim").rglob("*") if "simulated" in path.name] == []


def _metadata(dist_info: Path) -> email.message.Message:
    return email.message_from_bytes((dist_info / "METADATA").read_bytes())


def _version() -> str:
    """The package's version, as npu_shim/settings.py writes it."""
    source = (ROOT / "npu_shim" / "settings.py").read_text(encoding="utf-8")
    (version,) = re.findall(r'^VERSION = "(.+)"', source, re.M)
    return version


def test_the_shims_distribution_declares_its_licence_and_the_packages_version(installed_shim):
    _, site = installed_shim
    (dist_info,) = site.glob("npu_shim-*.dist-info")
    metadata = _metadata(dist_info)
    assert metadata["Version"] == _version()  # pyproject.toml reads the package's __version__: one place
    assert "License :: OSI Approved :: Apache Software License" in metadata.get_all("Classifier")
    assert metadata["License"] == "Apache-2.0" or metadata["License-Expression"] == "Apache-2.0"
    shipped_licence = [path for path in dist_info.rglob("LICENSE*") if path.is_file()]
    assert [path.read_bytes() for path in shipped_licence] == [(ROOT / "LICENSE").read_bytes()]


def _checkout_files() -> list[str]:
    """The checkout's files: those git tracks or would (not what it ignores); where there is no git, every file of a
    copy that holds those alone (scripts/mutations.py runs the tests in one)."""
    if not (ROOT / ".git").exists():
        return [path.relative_to(ROOT).as_posix() for path in ROOT.rglob("*") if path.is_file() or path.is_symlink()]
    if shutil.which("git") is None:
        lacking("no git on PATH to list the checkout's files")
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=60,
    ).stdout.decode()
    # a tracked file deleted in the worktree is not there to copy
    return [name for name in listed.split("\0") if name and os.path.lexists(ROOT / name)]


@pytest.fixture
def read_only_checkout(tmp_path: Path) -> Iterator[Path]:
    """The checkout's files copied and made read-only (chmod -R a-w), as Docker's ``RUN --mount=type=bind`` gives a
    checkout to ``pip install``; writable again afterwards."""
    checkout = tmp_path / "checkout"
    for name in _checkout_files():
        (checkout / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, checkout / name, follow_symlinks=False)  # the root's sitecustomize.py stays a link
    paths = [path for path in [checkout, *checkout.rglob("*")] if not path.is_symlink()]
    for path in paths:
        path.chmod(path.stat().st_mode & ~0o222)
    yield checkout
    for path in paths:
        path.chmod(path.stat().st_mode | 0o200)


def _state(tree: Path) -> dict[str, tuple[int, int]]:
    """Every path in ``tree`` with its size and modification time: what any write there (a folder's too) changes."""
    return {
        path.relative_to(tree).as_posix(): (path.lstat().st_size, path.lstat().st_mtime_ns) for path in tree.rglob("*")
    }


def test_an_offline_pip_install_from_a_read_only_checkout_writes_nothing_into_it(read_only_checkout, tmp_path):
    """``pip install --no-build-isolation --no-index <checkout>`` (the build backend, build_backend/out_of_tree.py,
    builds from a copy) works, leaves the checkout as it was, and installs a shim that runs. Root writes through
    ``a-w``: the comparison of the checkout before and after is what holds there, with Python's bytecode of the build
    backend kept out (PYTHONDONTWRITEBYTECODE), as a truly read-only checkout gets none."""
    before = _state(read_only_checkout)
    target = tmp_path / "target"
    offline = ["--no-build-isolation", "--no-index", "--no-deps"]
    built = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", *offline, "--target", str(target), str(read_only_checkout)],
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    after = _state(read_only_checkout)
    assert sorted(path for path in before.keys() | after.keys() if before.get(path) != after.get(path)) == []
    # the console script pip wrote (its first line names this interpreter), reading the package from the install
    installed = subprocess.run(
        [str(target / "bin" / "npu-shim"), "--version"],
        env=clean_env([target]),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert (installed.returncode, installed.stdout, installed.stderr) == (0, f"npu-shim {_version()}\n", "")
    assert (target / "npu_shim" / "known_code.json").is_file() and (target / "npu_shim_bootstrap").is_dir()


@pytest.fixture(scope="module")
def kit_wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    """The kit's wheel, built once from a copy of kit/ alone (so that it can need nothing else of the checkout)."""
    directory = tmp_path_factory.mktemp("kit-wheel")
    source = directory / "simulated-npu-source"
    shutil.copytree(KIT, source, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
    command = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(directory)]
    subprocess.run([*command, str(source)], check=True, capture_output=True, text=True, timeout=300)
    (wheel,) = directory.glob("simulated_npu-*.whl")
    return zipfile.ZipFile(wheel)


def supported_torch() -> tuple[tuple[int, int], ...]:
    """The torch releases compute mode is tested on, read from the stand-in's source (the unit layer has no torch)."""
    source = (KIT / "simulated_npu" / "simulated" / "torch_npu" / "_torch_version.py").read_text("utf-8")
    (value,) = [
        node.value
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Assign) and [getattr(target, "id", None) for target in node.targets] == ["SUPPORTED"]
    ]
    return ast.literal_eval(value)


def test_the_kits_wheel_builds_alone_with_its_stand_ins_and_their_metadata(kit_wheel):
    wheel = kit_wheel
    names = set(wheel.namelist())
    assert {name.split("/")[0] for name in names} == {"simulated_npu", "simulated_npu-0.1.0.dist-info"}
    for stand_in in (
        "simulated/torch_npu/__init__.py",
        "simulated/torch_npu/contrib/transfer_to_npu.py",
        "simulated/torchair/__init__.py",
        "simulated/mindspeed/megatron_adaptor.py",
        "simulated/torch_npu-0.0.0+simulated.dist-info/entry_points.txt",  # `import torch` loads the stand-in
        "simulated_megatron_adaptor/megatron_adaptor/__init__.py",
        "simulated_transformer_engine_npu/transformer_engine/pytorch/module.py",
        "simulated_transformer_engine_npu/transformer_engine-2.9.0+simulated.dist-info/METADATA",
        "pytest_plugin.py",
    ):
        assert f"simulated_npu/{stand_in}" in names
    in_checkout = {path.relative_to(KIT).as_posix() for path in (KIT / "simulated_npu").rglob("*.py")}
    assert in_checkout <= names, "every module of the kit ships"


def test_the_kits_metadata_states_the_torch_it_supports(kit_wheel):
    wheel = kit_wheel
    metadata = email.message_from_bytes(wheel.read("simulated_npu-0.1.0.dist-info/METADATA"))
    (torch,) = [line for line in metadata.get_all("Requires-Dist") if line.startswith("torch")]
    admitted = SpecifierSet(torch.removeprefix("torch"))
    supported = supported_torch()
    assert supported == ((2, 10), (2, 13)), "the releases the kit's tests run on (noxfile)"
    for major, minor in supported:
        assert admitted.contains(f"{major}.{minor}.0") and admitted.contains(f"{major}.{minor}.9")
        assert admitted.contains(f"{major}.{minor}.0+cpu", prereleases=False)
    for untested in ("2.9.1", "2.11.0", "2.12.0", "2.14.0", "3.0.0"):
        assert not admitted.contains(untested), untested
    for patch in ("2.11.1", "2.11.3", "2.11.9", "2.12.1", "2.12.9"):  # every one, as a real torch_npu refuses them
        assert not admitted.contains(patch) and not admitted.contains(f"{patch}+cpu", prereleases=False), patch
    assert metadata["Name"] == "simulated-npu"
    assert "npu-shim" not in " ".join(metadata.get_all("Requires-Dist")), "the kit needs nothing of the shim"
    assert "License :: OSI Approved :: Apache Software License" in metadata.get_all("Classifier")
    assert metadata["License"] == "Apache-2.0" or metadata["License-Expression"] == "Apache-2.0"
    licences = [
        name for name in wheel.namelist() if name.startswith("simulated_npu-0.1.0.dist-info/") and "LICENSE" in name
    ]
    assert [wheel.read(name) for name in licences] == [(ROOT / "LICENSE").read_bytes()], "the kit's wheel carries it"
