"""Test environments and sessions for npu_shim.

Each verl release under test gets its own virtualenv in ``.cache/envs/``, named
after a hash of its pins: change a pin and a new environment is built (the old
one is removed), leave them alone and the cached one is reused as is.  Sessions
run with ``venv_backend="none"`` and call those environments' interpreters, so
the demo and the tests share one verl 0.7.1 environment instead of two.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nox

ROOT = Path(__file__).parent
# This machine kind sets PYTHONDONTWRITEBYTECODE=1 for every process, and the tests start hundreds of interpreters that
# import torch, Megatron and verl, most with the test's own environment: without bytecode each compiles them again
# (`import verl.workers.engine`: 14.9 s of CPU instead of 6.8, docs/costs.md). A test that wants no bytecode sets it.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
ENVS = ROOT / ".cache" / "envs"
# uv installs every environment from one cache on the same disk, hard-linking each file from it: the environments
# share torch, Ray, pyarrow and transformers (one copy of each per Python), and pip's 75 s of unpacking per
# environment becomes a few seconds after the first.
UV_CACHE = ROOT / ".cache" / "uv"
# Every environment resolves against PyPI as it stood on this date (uv's --exclude-newer), so an upload after it
# cannot change what a fresh clone installs. Without it, packaging 26.4 (after this date) made uv keep it and
# backtrack verl 0.8.0's datasets to 2.14.4, which dies on import beside pyarrow 25 (stop 51's CI). Moving the date is
# a change like any pin's: every environment is rebuilt and `make test` says whether the newer set still works.
RESOLVED_AS_OF = "2026-11-29T00:00:00Z"
# The simulated NPU every verl environment runs on: a distribution of its own (kit/pyproject.toml), built into a wheel
# once per content of kit/ and installed into each environment where that content is not installed yet.
KIT_SOURCE = ROOT / "kit"
KIT_DISTRIBUTION = "simulated-npu"
KIT_WHEELS = ROOT / ".cache" / "kit"
KIT_BUILD_LEFTOVERS = ("build", "*.egg-info", "__pycache__", "*.pyc")  # what a build or a run leaves in kit/
# `make test` runs sessions side by side (nox --parallel): whatever two sessions may build or install into (an
# environment, the kit's wheel, the MindSpeed extras) is done under a lock of that name, held by one session at a time.
LOCKS = ROOT / ".cache" / "locks"
PYENV_ROOT = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))

# Python 3.11, as verl's Ascend images up to v0.8.0 run: the CPU build of torch 2.13.0 that lies on this machine
# kind's disk (an open torch requirement would pull a CUDA build of several GB instead).
TORCH = "torch==2.13.0"
LOCAL_WHEELS = Path("/opt/wheels")  # where that build lies (this machine kind's pip find-links; uv reads no pip config)
# Python 3.12 with torch 2.10.0 and torchvision 0.25.0, as verl's newest Ascend images (Dockerfile.ascend_9.1.0_*)
# pin them. No CPU build of it is reachable here: PyPI's is a CUDA build (3.9 GiB of downloads with its nvidia
# libraries, fetched once into uv's cache, docs/costs.md); it imports and computes on a CPU.
TORCH_PY312 = ["torch==2.10.0", "torchvision==0.25.0"]
MEGATRON = "megatron-core==0.16.1"
MEGATRON_0_12 = "megatron-core==0.12.1"  # what MindSpeed 2.3.0_core_r0.12.1 patches
# What verl's Ascend images run since verl #7604 (core_v0.18.0, with MindSpeed core_r0.18.0): megatron-core >= 0.17
# says Requires-Python >= 3.12 and ships cp312 wheels.
MEGATRON_0_18 = "megatron-core==0.18.2"
# verl 0.9.1's A5 (Ascend 950) image, Dockerfile.ascend_9.1.0_a5_v0.9.1: Megatron core_v0.12.0 (with MindSpeed master
# 0c6c0ce) and verl's requirements-npu.txt installed first. That file's numpy<2 wins over verl 0.9.1's wheel's
# numpy>=2 in the image, hence an override (uv's --override), not a pin; on Python 3.12, numpy<2 takes scipy<1.16 and
# pandas<3 with it. megatron-core 0.12.0 has no cp312 wheel: uv builds it from its sdist.
MEGATRON_0_12_0 = "megatron-core==0.12.0"
REQUIREMENTS_NPU = ["pyarrow>=15.0.0,<=24.0.0", "tensordict>=0.8.0,<=0.10.0,!=0.9.0"]
NUMPY_BELOW_2 = ("numpy<2.0.0",)
# An override hides every package's own numpy requirement from uv, so it would take the newest zarr, numcodecs and
# ml_dtypes (megatron-core's and tensorstore's), which need numpy 2 (zarr's pytest plugin then fails every session):
# the newest that take numpy 1.26, as a resolution without the override beside numpy<2 picks them.
BESIDE_NUMPY_1 = ["zarr==3.1.5", "numcodecs==0.16.6", "ml-dtypes==0.5.4"]
# Beside megatron-core 0.12.1 uv's resolver keeps the newest fsspec and packaging and backtracks datasets (to 2.14)
# and tensordict (to 0.8) instead; pip's resolution, on which the tests were measured, has these, as beside 0.16.1.
AS_BESIDE_MEGATRON_0_16 = ["datasets==5.0.1", "tensordict==0.10.0"]
TEST_TOOLS = ["pytest==9.2.0", "wrapt==2.5.2"]
# An offline `pip install --no-build-isolation .` builds with the environment's own setuptools: a
# Python 3.11 venv's 65.5 (the unit environment keeps it) needs the wheel package to build a wheel.
UNIT_TOOLS = [*TEST_TOOLS, "wheel==0.45.1"]

# The smallest pip sets that work, per environment (see ../shared/verl-facts.md), named
# "<verl release>" or "<verl release>-<what differs>":
# 0.6-0.8 need numpy<2 and pyarrow 26 needs numpy>=2. On an NPU, verl 0.6.1's role workers
# import pad_input from transformers' NPU flash-attention module, gone in transformers 4.55,
# which imports einops there. verl 0.8.0's workers and trainer import uvicorn, fastapi and
# cachetools without requiring them (an inference engine usually brings them).
# To train (tests/matrix/test_training.py), verl's Megatron engines build the model through mbridge
# (0.7-0.8's default; `vanilla_mbridge=True` on 0.9.x, whose default Megatron-Bridge is tested where the images
# pair it, below) and import einops: `verl==X` requires neither. mbridge 0.15.1 fails with
# transformers 5 on 0.7.1 and 0.8.0 (`rope_theta`), hence transformers<5 there; 0.9.x pins its own 5.x.
TRAIN = ["mbridge==0.15.1", "einops==0.8.2"]
MEGATRON_BRIDGE_NEEDS = ["nvidia-modelopt==0.47.0", "megatron-energon==7.4.1", "omegaconf", "hydra-core"]
VERL_0_8_EXTRAS = ["pyarrow<26", "uvicorn", "fastapi", "cachetools", "transformers<5", *TRAIN]


@dataclass(frozen=True)
class Environment:
    """One verl environment of the matrix: what it installs, on which Python, and what runs in it.

    ``paths``: the test paths it runs (None: all of tests/matrix, and what ``KIT_ENVS``, ``E2E_VERL`` and
    ``DEMO_VERL`` add); ``mindspeed_line``: the line the MindSpeed stand-in simulates there, the one verl's Ascend
    images pair with that Megatron."""

    pins: tuple[str, ...]
    python: str = "3.11"
    mindspeed_line: str = "core_r0.16.0"
    paths: tuple[str, ...] | None = None
    no_deps: tuple[str, ...] = ()  # installed without their dependencies, after the pins, as the images install them
    bridge: str = "mbridge"  # the bridge the training probe builds verl's models through (train_probe.py --bridge)
    overrides: tuple[str, ...] = ()  # uv's --override: requirements that win over every package's own, as an image's

    @property
    def release(self) -> str:
        (pin,) = [pin for pin in self.pins if pin.startswith("verl==")]
        return pin.removeprefix("verl==")


# The tests whose outcome depends on Megatron (and its MindSpeed line), for the second Megatron of a release.
MEGATRON_DEPENDENT = (
    "tests/matrix/test_matrix.py",
    "tests/matrix/test_context_parallel.py",
    "tests/matrix/test_upstream_fixes.py",
    "tests/matrix/test_training.py",
    "tests/matrix/test_megatron_adaptor_first.py",  # on Megatron 0.18 beside MindSpeed core_r0.18.0, its MA line
)
# What a release whose engines another environment builds and trains must still show: the table's fingerprints (per
# Python), the upstream fixes it lacks, the doctor's verdicts. (The engines under each activation, test_matrix, are
# 0.9.1's on Megatron 0.18; docs/costs.md.)
VERDICTS = tuple(f"tests/matrix/{name}.py" for name in ("test_recognition", "test_upstream_fixes", "test_doctor"))
# verl's plugin route (a pip install into a directory, then verl in a fresh interpreter and a Ray worker, ~95 s): on
# 0.9.1 it turns the shim on (0.9.0 loads the group with the same lines), on 0.7.1 it shows that a verl before 0.9.0
# never reads it; the other full environments leave it out.
PLUGIN_ROUTE = "tests/matrix/test_plugin_route.py"
PLUGIN_ROUTE_INERT = "0.7.1"
# The kit's own tests hardly depend on verl but do on Megatron (what the MindSpeed stand-in patches) and torch (what
# compute mode builds on): once per Megatron, on torch 2.13 (Python 3.11) and 2.10 (3.12).
KIT = ("tests/kit",)
# Beside a release's second Megatron (0.12.1, same torch): the kit's files whose outcome depends on Megatron, not
# those on torch alone (its version check, its device rules), which the first Megatron's environment runs.
KIT_BESIDE_SECOND_MEGATRON = tuple(
    f"tests/kit/{name}.py"
    for name in ("test_compute_mode", "test_mindspeed_standin", "test_parallel_kit", "test_testing_kit")
)
ENVIRONMENTS: dict[str, Environment] = {
    "0.6.1": Environment(("verl==0.6.1", TORCH, MEGATRON, "pyarrow<26", "transformers<4.55", *TRAIN)),
    # verl 0.6.x's Megatron engines build their optimizer through megatron-core 0.12's API: to train, 0.12.1
    # (MindSpeed 2.x's); megatron-core 0.16.1 rejects `no_weight_decay_cond` (tests/matrix/test_training.py).
    "0.6.1-mcore0.12": Environment(
        ("verl==0.6.1", TORCH, MEGATRON_0_12, *AS_BESIDE_MEGATRON_0_16, "pyarrow<26", "transformers<4.55", *TRAIN),
        mindspeed_line="2.3.0_core_r0.12.1",
        paths=("tests/matrix/test_training.py",),
    ),
    "0.7.1": Environment(("verl==0.7.1", TORCH, MEGATRON, "pyarrow<26", "transformers<5", *TRAIN)),
    # verl's own v0.7.1 Ascend image pairs it with MindSpeed 2.3.0_core_r0.12.1, hence Megatron 0.12.1.
    "0.7.1-mcore0.12": Environment(
        ("verl==0.7.1", TORCH, MEGATRON_0_12, *AS_BESIDE_MEGATRON_0_16, "pyarrow<26", "transformers<5", *TRAIN),
        mindspeed_line="2.3.0_core_r0.12.1",
        paths=(*MEGATRON_DEPENDENT, *KIT_BESIDE_SECOND_MEGATRON),
    ),
    "0.8.0": Environment(("verl==0.8.0", TORCH, MEGATRON, *VERL_0_8_EXTRAS)),
    # verl's generic Ascend images shipped with 0.8.0 pair it with MindSpeed 2.3.0_core_r0.12.1 too.
    "0.8.0-mcore0.12": Environment(
        ("verl==0.8.0", TORCH, MEGATRON_0_12, *AS_BESIDE_MEGATRON_0_16, *VERL_0_8_EXTRAS),
        mindspeed_line="2.3.0_core_r0.12.1",
        paths=MEGATRON_DEPENDENT,
    ),
    # 0.9.0's Megatron engines are 0.9.1's but for the upstream fixes it lacks (test_upstream_fixes): 0.9.1 builds
    # and trains them.
    "0.9.0": Environment(("verl==0.9.0", TORCH, MEGATRON, *TRAIN), paths=VERDICTS),
    # verl 0.9.1 on the newest Ascend images' Python 3.12 and torch 2.10 (it is no image's release on 3.11). First as
    # the 9.1.0 Dockerfile paired them before verl #7604: Megatron 0.16.1 with MindSpeed core_r0.16.0, its verdicts;
    # real MindSpeed core_r0.16.0 trains both roles there (REAL_MINDSPEED), the stand-in trains 0.9.1 in the next
    # environment at every parallel size (docs/costs.md).
    # It also runs verl #7507's Ray test: 0.9.x's Worker._setup_env_cuda_visible_devices is not 0.6-0.8's.
    "0.9.1-py312": Environment(
        ("verl==0.9.1", *TORCH_PY312, MEGATRON, *TRAIN),
        python="3.12",
        paths=(*VERDICTS, "tests/ray/test_ray_npu_device_index.py", "tests/matrix/test_npu_smi_card.py"),
    ),
    # Then the images' stack since #7604: Megatron 0.18 with MindSpeed core_r0.18.0 (the kit's MegatronAdaptor and
    # TransformerEngineNPU stand-ins), the kit's own tests on torch 2.10 beside it.
    # verl 0.9.x builds its models through Megatron-Bridge there, its default: 0.5.0, the newest that runs on
    # megatron-core 0.18 (0.6.x imports a module of 0.19's), installed --no-deps as the images install it, with what
    # it imports that verl does not bring. mbridge too, for real MindSpeed core_r0.18.0 (tests/real_mindspeed).
    # With the A2/A3 images' own pins (Dockerfile.ascend_9.1.0_{a2,a3}_v0.9.1 install verl's requirements-npu.txt
    # first): numpy<2 over verl's numpy>=2, pyarrow<=24, transformers 5.10.4.
    "0.9.1-py312-mcore0.18": Environment(
        (
            "verl==0.9.1",
            *TORCH_PY312,
            MEGATRON_0_18,
            *TRAIN,
            *MEGATRON_BRIDGE_NEEDS,
            "transformers==5.10.4",
            *REQUIREMENTS_NPU,
            "scipy<1.16",
            "pandas<3",
            *BESIDE_NUMPY_1,
        ),
        python="3.12",
        mindspeed_line="core_r0.18.0",
        # its context parallelism is TransformerEngineNPU's, trained at CP = 2 (test_training) rather than probed
        paths=(
            *(path for path in MEGATRON_DEPENDENT if "context_parallel" not in path),
            "tests/matrix/test_cp_options.py",  # MindSpeed 0.18's double-ring options, refused before the mesh
            "tests/matrix/test_doctor.py",
            PLUGIN_ROUTE,
            *KIT,
        ),
        no_deps=("megatron-bridge==0.5.0",),
        bridge="megatron-bridge",
        overrides=NUMPY_BELOW_2,
    ),
    # verl 0.9.1's A5 (Ascend 950) image: Python 3.12, torch 2.10, Megatron 0.12.0 with MindSpeed master (no
    # MegatronAdaptor, no TransformerEngineNPU), vanilla mbridge (Megatron-Bridge does not import beside megatron-core
    # 0.12), transformers 5.10.4, requirements-npu.txt's numpy<2 over verl's own numpy>=2. What only it shows: verl
    # 0.9.x training, saving and resuming on Megatron 0.12, the upstream fixes and the doctor's verdicts there.
    "0.9.1-a5": Environment(
        (
            "verl==0.9.1",
            *TORCH_PY312,
            MEGATRON_0_12_0,
            *TRAIN,
            "transformers==5.10.4",
            *REQUIREMENTS_NPU,
            "scipy<1.16",
            "pandas<3",
            *BESIDE_NUMPY_1,
        ),
        python="3.12",
        mindspeed_line="master",
        paths=(
            "tests/matrix/test_training.py",
            "tests/matrix/test_upstream_fixes.py",
            "tests/matrix/test_doctor.py",
            "tests/matrix/test_recognition.py",
        ),
        overrides=NUMPY_BELOW_2,
    ),
}
KIT_ENVS = ("0.7.1",)  # the full environments that run the kit too (the others list it in their paths)
AFFECTED = ("0.6.1", "0.7.1")
DEMO_VERL = "0.7.1"
# verl's own workers in Ray actors (tests/e2e, 2-4 min a release): where the error is met (0.7.1's TrainingWorker),
# and 0.8.0's colocated roles (docs/costs.md: 0.6.1's role workers left to tests/matrix, for make test's budget)
E2E_VERL = ("0.7.1", "0.8.0")

# A matrix test mostly waits on child interpreters, one core at a time: two workers (CI's machines
# have two cores) take a release's files in turn. A file stays on one worker, so its module-scoped
# fixtures (a distributed run, a Ray cluster) are still built once.
# Files are handed out longest first (tests/conftest.py), not by xdist's count of tests.
PARALLEL = ["--numprocesses=2", "--dist=loadfile", "--no-loadscope-reorder"]
MATRIX_TOOLS = [*TEST_TOOLS, "pytest-xdist==3.8.0"]

# Real MindSpeed's source on the kit, against the stand-in (tests/real_mindspeed): each line with the verl environment
# its images pair it with. The source's pins and where it is looked for: tests/mindspeed_source.py.
REAL_MINDSPEED = [
    ("core_r0.16.0", "0.7.1"),
    ("2.3.0_core_r0.12.1", "0.7.1-mcore0.12"),
    ("f2b0977e", "0.7.1-mcore0.12"),
    ("core_r0.16.0", "0.9.1-py312"),  # the 9.1.0 image's own pairing
    ("core_r0.18.0", "0.9.1-py312-mcore0.18"),  # the images' stack since verl #7604
    # The A5 image's MindSpeed master (pinned in tests/mindspeed_source.py): importing its megatron_adaptor imports and
    # patches Megatron-LM's megatron.training, which the image has from its `pip install -e` of Megatron-LM
    # core_v0.12.0 and PyPI's megatron-core does not ship: that source's archive goes on PYTHONPATH after MindSpeed's
    # (../shared/megatron-lm or $NPU_SHIM_MEGATRON_LM_SOURCE; the session needs both archives, as it needs one).
    ("master", "0.9.1-a5"),
]
# Left to `nox -s real_mindspeed_by_hand` for make test's budget (docs/costs.md): 0.8.0's engines on core_r0.16.0.
REAL_MINDSPEED_BY_HAND = [("core_r0.16.0", "0.8.0")]
# What real MindSpeed imports that no environment above has (its ops import triton; scipy as the by-hand runs had
# it): --no-deps into a folder of their own, put on PYTHONPATH after MindSpeed's source. scipy 1.15 takes numpy 1.26
# (verl 0.7.1, 0.8.0) and 2.x alike. PyPI's torch 2.10 brings its own triton (3.6.0): on Python 3.12 that one stays.
MINDSPEED_EXTRAS = {"3.11": ["scipy==1.15.3", "triton==3.7.1"], "3.12": ["scipy==1.15.3"]}

# The kit's torch_npu against the images' own torch_npu wheels, read as data (tests/conformance): in verl 0.7.1's
# environment, which has torch (for the meta functions' meta tensors), pytest and the kit already.
CONFORMANCE_VERL = "0.7.1"

# What `make test` runs, side by side on every core (`nox --parallel auto`): a session starts as soon as a core is
# free, in this order, longest first, so that the short ones fill the last gaps (list scheduling, longest first). The
# seconds are each session's pytest time in the sequential fresh-clone run of 2026-12-07 (docs/costs.md), rounded, and
# the estimate of a session added since; a session without a figure counts as the longest.
SECONDS = {
    "lint": 5,
    "unit": 40,
    "matrix(verl='0.6.1')": 150,
    "matrix(verl='0.6.1-mcore0.12')": 50,
    "matrix(verl='0.7.1')": 500,
    "matrix(verl='0.7.1-mcore0.12')": 230,
    "matrix(verl='0.8.0')": 300,
    "matrix(verl='0.8.0-mcore0.12')": 85,
    "matrix(verl='0.9.0')": 80,
    "matrix(verl='0.9.1-py312')": 130,
    "matrix(verl='0.9.1-py312-mcore0.18')": 370,
    "matrix(verl='0.9.1-a5')": 130,
    "real_mindspeed(line='core_r0.16.0', verl='0.7.1')": 70,
    "real_mindspeed(line='2.3.0_core_r0.12.1', verl='0.7.1-mcore0.12')": 25,
    "real_mindspeed(line='f2b0977e', verl='0.7.1-mcore0.12')": 25,
    "real_mindspeed(line='core_r0.16.0', verl='0.9.1-py312')": 25,
    "real_mindspeed(line='core_r0.18.0', verl='0.9.1-py312-mcore0.18')": 80,
    "real_mindspeed(line='master', verl='0.9.1-a5')": 70,
    "conformance": 30,
}
SUITE = [
    "lint",
    "unit",
    *(f"matrix(verl={name!r})" for name in ENVIRONMENTS),
    *(f"real_mindspeed(line={line!r}, verl={verl!r})" for line, verl in REAL_MINDSPEED),
    "conformance",
]
nox.options.sessions = sorted(SUITE, key=lambda name: -SECONDS.get(name, float("inf")))
# Each session may run beside any other: what two could share is built under a lock (held), and each pytest run
# keeps its own files (tmp_path, free ports).
nox.options.allow_parallel = True
nox.options.error_on_missing_interpreters = True


def interpreter(session: nox.Session, python: str) -> str:
    """The interpreter environments of ``python`` (``"3.11"``, ``"3.12"``) are built from: nox's own for its Python,
    else pyenv's (every machine of this project's kind has pyenv's 3.12.1, docs/testing.md)."""
    if python == f"{sys.version_info[0]}.{sys.version_info[1]}":
        return sys.executable
    found = sorted(PYENV_ROOT.glob(f"versions/{python}.*/bin/python{python}"))
    if not found:
        session.error(f"no Python {python} here: pyenv ({PYENV_ROOT}) has no versions/{python}.*")
    return str(found[-1])


def cache_slot(session: nox.Session, name: str, requirements: list[str], python: str) -> tuple[Path, Path]:
    """Where the cached build of ``requirements`` named ``name`` lives (for ``python``), and the marker a complete
    build leaves there. Until that marker exists every build of ``name`` is removed, this one's partial build too."""
    lines = [f"python {python}", f"resolved as of {RESOLVED_AS_OF}", *requirements]
    digest = hashlib.sha256("\n".join(lines).encode()).hexdigest()[:12]
    directory = ENVS / f"{name}-{digest}"
    ready = directory / ".complete"
    if not ready.exists():
        for stale in ENVS.glob(f"{name}-{'?' * len(digest)}"):  # not "verl-0.7.1-mcore0.12-..." for "verl-0.7.1"
            session.log(f"removing stale environment {stale.name}")
            shutil.rmtree(stale)
    return directory, ready


def uv(session: nox.Session, *arguments: str) -> None:
    """uv (installed beside nox) with the one cache every environment hard-links from, as of ``RESOLVED_AS_OF``."""
    variables = {"UV_CACHE_DIR": str(UV_CACHE), "UV_EXCLUDE_NEWER": RESOLVED_AS_OF}
    session.run(str(Path(sys.executable).with_name("uv")), *arguments, env=variables, external=True)


def uv_install(session: nox.Session, *arguments: str) -> None:
    uv(session, "pip", "install", "--quiet", *arguments)


def cached_env(
    session: nox.Session,
    name: str,
    requirements: list[str],
    python: str = "3.11",
    *,
    no_deps: list[str] | None = None,
    overrides: list[str] | None = None,
) -> Path:
    """Return the python of a cached virtualenv holding ``requirements`` (and ``no_deps`` without their dependencies)
    on ``python``, with ``overrides`` winning over every package's own requirements (uv's ``--override``), building
    it if needed."""
    no_deps, overrides = no_deps or [], overrides or []
    described = [*requirements, *(f"{pin} --no-deps" for pin in no_deps), *(f"--override {pin}" for pin in overrides)]
    with held(name):
        env, ready = cache_slot(session, name, described, python)
        if not ready.exists():
            build_env(session, env, requirements, python=python, no_deps=no_deps, overrides=overrides)
            ready.touch()
    return env / "bin" / "python"


def build_env(
    session: nox.Session, env: Path, requirements: list[str], *, python: str, no_deps: list[str], overrides: list[str]
) -> None:
    """Build the virtualenv ``env`` (see :func:`cached_env`)."""
    executable = env / "bin" / "python"
    session.log(f"building {env.name} (Python {python}): {' '.join(requirements)}")
    # venv's own pip and setuptools stay: the unit tests pip-install the shim with them.
    session.run(interpreter(session, python), "-m", "venv", str(env), external=True)
    if TORCH in requirements:
        # From this disk or not at all: an index would offer a CUDA build of several GB under the same version.
        if not any(LOCAL_WHEELS.glob("torch-2.13.0+cpu-*.whl")):
            session.error(f"no CPU build of {TORCH} in {LOCAL_WHEELS}: not letting an index pick a CUDA build")
        local = ["--no-index", "--no-deps", "--find-links", str(LOCAL_WHEELS)]  # its dependencies come next
        uv_install(session, "--python", str(executable), *local, TORCH)
    override = []
    if overrides:
        (env / "overrides.txt").write_text("".join(f"{pin}\n" for pin in overrides))
        override = ["--override", str(env / "overrides.txt")]
    uv_install(session, "--python", str(executable), *override, *requirements)
    if no_deps:
        uv_install(session, "--python", str(executable), "--no-deps", *no_deps)


def mindspeed_extras(session: nox.Session, environment: Environment, python: Path) -> Path:
    """A cached folder holding what real MindSpeed imports beside ``environment`` alone (no dependencies), for
    PYTHONPATH beside ``python``'s env."""
    requirements = MINDSPEED_EXTRAS[environment.python]
    name = f"mindspeed-extras-{environment.python}"  # one slot per Python: building one must not remove the other
    with held(name):
        target, ready = cache_slot(session, name, requirements, environment.python)
        if not ready.exists():
            uv_install(session, "--no-deps", "--python", str(python), "--target", str(target), *requirements)
            ready.touch()
    return target


def source_pins() -> Any:
    """tests/mindspeed_source.py (standard library only): MindSpeed's pins and where its source is looked for."""
    return load_test_module("mindspeed_source", ROOT / "tests" / "mindspeed_source.py")


def load_test_module(name: str, path: Path) -> Any:
    """A standard-library-only module of tests/ (it is not importable from nox's own interpreter by name)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)  # where dataclasses look it up
    spec.loader.exec_module(module)
    return module


def verl_env(session: nox.Session, name: str) -> Path:
    """The environment ``name``, with the kit installed afresh from ``kit/`` as a user installs it."""
    environment = ENVIRONMENTS[name]
    pins = [*environment.pins, *MATRIX_TOOLS]
    python = cached_env(
        session,
        f"verl-{name}",
        pins,
        environment.python,
        no_deps=list(environment.no_deps),
        overrides=list(environment.overrides),
    )
    wheel = kit_wheel(session)
    installed = python.parent.parent / f".kit-{wheel.parent.name}"  # the content of kit/ installed there
    with held(f"verl-{name}"):
        if not installed.exists():
            # With its dependencies: the kit's torch range must admit the environment's torch (else uv would
            # replace it).
            uv_install(session, "--python", str(python), "--reinstall-package", KIT_DISTRIBUTION, str(wheel))
            for other in python.parent.parent.glob(".kit-*"):
                other.unlink()
            installed.touch()
    return python


def kit_wheel(session: nox.Session) -> Path:
    """The kit's wheel for the content of ``kit/`` now, built once per content, from a copy: setuptools writes
    ``build/`` and ``*.egg-info`` beside the source it builds (a module deleted from the kit would live on there),
    and two sessions side by side would build in one folder."""
    ignored = shutil.ignore_patterns(*KIT_BUILD_LEFTOVERS)
    digest = hashlib.sha256()
    for path in sorted(KIT_SOURCE.rglob("*")):
        relative = path.relative_to(KIT_SOURCE)
        if path.is_file() and not any(ignored(str(path.parent), [part]) for part in relative.parts):
            digest.update(f"{relative.as_posix()}\0".encode() + path.read_bytes() + b"\0")
    folder = KIT_WHEELS / digest.hexdigest()[:12]
    with held("kit"):
        if not any(folder.glob("*.whl")):
            for stale in KIT_WHEELS.glob("*"):
                shutil.rmtree(stale)
            with tempfile.TemporaryDirectory() as scratch:
                copy = Path(scratch) / "kit"
                shutil.copytree(KIT_SOURCE, copy, ignore=ignored)
                uv(session, "build", "--quiet", "--wheel", "--out-dir", str(folder), str(copy))
    (wheel,) = folder.glob("*.whl")
    return wheel


@contextlib.contextmanager
def held(name: str) -> Iterator[None]:
    """Hold the lock ``name`` (see ``LOCKS``) while the block runs. An ``flock``: the kernel lets it go when the
    session holding it dies, so a killed run leaves no stale lock behind. Not re-entrant: never nest one name."""
    LOCKS.mkdir(parents=True, exist_ok=True)
    with open(LOCKS / f"{name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def matrix_paths(name: str) -> list[str]:
    """What environment ``name`` runs: its own list, or all of tests/matrix and what the release adds."""
    environment = ENVIRONMENTS[name]
    if environment.paths is not None:
        return list(environment.paths)
    return [
        "tests/matrix",
        *([] if name == PLUGIN_ROUTE_INERT else [f"--ignore={PLUGIN_ROUTE}"]),
        *(KIT if name in KIT_ENVS else ()),
        *(["tests/ray"] if name == DEMO_VERL else []),  # a local Ray cluster (~1 min): once
        *(["tests/e2e"] if name in E2E_VERL else []),
    ]


def test_variables(name: str, mindspeed_line: str | None = None) -> dict[str, str]:
    """What the tests read of the environment they run in: verl's release and the MindSpeed line simulated."""
    environment = ENVIRONMENTS[name]
    return {
        "NPU_SHIM_TEST_VERL": environment.release,
        "NPU_SHIM_SIM_MINDSPEED": mindspeed_line or environment.mindspeed_line,
        "NPU_SHIM_TEST_BRIDGE": environment.bridge,
    }


@nox.session(venv_backend="none")
def lint(session: nox.Session) -> None:
    """ruff over the whole tree."""
    ruff = str(Path(sys.executable).parent / "ruff")  # installed beside nox by the Makefile
    session.run(ruff, "check", ".", external=True)
    session.run(ruff, "format", "--check", ".", external=True)


@nox.session(venv_backend="none")
def unit(session: nox.Session) -> None:
    """Synthetic verl layouts, bootstrap and start-up tests: no torch, no verl."""
    python = cached_env(session, "unit", UNIT_TOOLS)
    session.run(str(python), "-m", "pytest", "tests/unit", *session.posargs, external=True)


@nox.session(venv_backend="none")
@nox.parametrize("verl", list(ENVIRONMENTS))
def matrix(session: nox.Session, verl: str) -> None:
    """Real verl, real megatron-core, real torch.distributed, simulated NPU."""
    python = verl_env(session, verl)
    session.run(
        str(python),
        "-m",
        "pytest",
        *matrix_paths(verl),
        *PARALLEL,
        *session.posargs,
        env=test_variables(verl),
        external=True,
    )


@nox.session(venv_backend="none")
@nox.parametrize("line, verl", REAL_MINDSPEED)
def real_mindspeed(session: nox.Session, line: str, verl: str) -> None:
    """Real MindSpeed's source (unmodified archives, ../shared/mindspeed or $NPU_SHIM_MINDSPEED_SOURCE) on the kit.

    Without the source: one line saying what did not run and how to give it, and the session is reported skipped
    (nox's summary lists it so, never as successful): it judges the kit's stand-in, not the shim, and a developer's
    machine without ../shared should not lose the whole run's result for want of an archive. Under CI (``CI`` set,
    as CI sets it) the same line fails the session: CI never skips the layer in silence."""
    run_real_mindspeed(session, line, verl)


@nox.session(venv_backend="none")
@nox.parametrize("line, verl", REAL_MINDSPEED_BY_HAND)
def real_mindspeed_by_hand(session: nox.Session, line: str, verl: str) -> None:
    """The pairings real_mindspeed leaves out of make test, the same way."""
    run_real_mindspeed(session, line, verl)


def run_real_mindspeed(session: nox.Session, line: str, verl: str) -> None:
    pins = source_pins()
    if not pins.available(line):
        message = pins.missing_message(line, f"nox -s real_mindspeed (verl {verl})")
        if pins.required():
            session.error(f"{message} (CI is set: CI never passes without this layer)")
        session.skip(message)
    python = verl_env(session, verl)
    extras = mindspeed_extras(session, ENVIRONMENTS[verl], python)
    session.run(
        str(python),
        "-m",
        "pytest",
        "tests/real_mindspeed",
        *session.posargs,
        env={**test_variables(verl, line), "NPU_SHIM_TEST_MINDSPEED_EXTRAS": str(extras)},
        external=True,
    )


@nox.session(venv_backend="none")
def conformance(session: nox.Session) -> None:
    """The kit's torch_npu against the images' torch_npu wheels and the calls verl and MindSpeed make (data only)."""
    wheels = load_test_module("conformance_wheels", ROOT / "tests" / "conformance" / "wheels.py")
    with held("conformance-wheels"):
        folder, ready = cache_slot(session, "conformance-wheels", [*wheels.PLATFORM, *wheels.requirements()], "3.11")
        if not ready.exists():
            # one requirement a call: pip refuses two versions of one distribution in one download, even --no-deps
            for requirement in wheels.requirements():
                pip = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", *wheels.PLATFORM]
                session.run(*pip, "--dest", str(folder), requirement, external=True)
            ready.touch()
    python = verl_env(session, CONFORMANCE_VERL)
    variables = {wheels.WHEELS_VARIABLE: str(folder)}
    session.run(str(python), "-m", "pytest", "tests/conformance", *session.posargs, env=variables, external=True)


@nox.session(venv_backend="none")
def build_envs(session: nox.Session) -> None:
    """Build (or confirm) every cached environment without running tests."""
    cached_env(session, "unit", UNIT_TOOLS)
    for name in ENVIRONMENTS:
        verl_env(session, name)


@nox.session(venv_backend="none")
def mutations(session: nox.Session) -> None:
    """Deliberate bugs, one at a time, against the unit layer (scripts/mutations.py)."""
    python = cached_env(session, "unit", UNIT_TOOLS)
    session.run(str(python), str(ROOT / "scripts" / "mutations.py"), *session.posargs, external=True)


@nox.session(venv_backend="none")
def bench(session: nox.Session) -> None:
    """Start-up and import-time benchmark: paired runs, medians and ratios."""
    python = verl_env(session, DEMO_VERL)
    session.run(str(python), str(ROOT / "benchmarks" / "startup.py"), *session.posargs, external=True)


@nox.session(venv_backend="none")
def bench_kit(session: nox.Session) -> None:
    """The simulated NPU's dispatch: a training step on npu tensors against the same on CPU tensors, paired ratios."""
    python = verl_env(session, DEMO_VERL)
    session.run(str(python), str(ROOT / "benchmarks" / "kit_dispatch.py"), *session.posargs, external=True)


@nox.session(venv_backend="none")
def demo(session: nox.Session) -> None:
    """The before/after demonstration on verl 0.7.1 and a simulated NPU."""
    python = verl_env(session, DEMO_VERL)
    session.run(str(python), str(ROOT / "demo.py"), external=True)
