"""verl #7507 (``ray_npu_device_index``): Ray's physical NPU id as its index among the visible devices.

No Ray, torch or verl: the translation itself, when it is asked for, and the fix on a synthetic worker module whose
``Worker._setup_env_cuda_visible_devices`` does what verl's does with Ray's id (it becomes ``LOCAL_RANK`` and the
device set). The table of fingerprints is made to name that stand-in as a release's code, as
test_fixes_by_release.py does. verl's own workers, in Ray: tests/ray/test_ray_npu_device_index.py.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from npu_shim.fingerprint import function_fingerprint
from npu_shim.fixes import ray_npu_device_index as fix
from npu_shim.patcher import APPLIED, NOT_APPLICABLE, Writer, is_ours
from npu_shim.recognition import known_code

NOSET, VISIBLE = fix.NOSET, fix.VISIBLE


@pytest.mark.parametrize(
    "accelerator_id, listed, index",
    [
        ("5", "4,5,6,7", "1"),  # the issue's: device 5 of 4,5,6,7 is the second visible one
        ("4", "4,5,6,7", "0"),
        ("4", "6,4,7,5", "1"),  # by place, not by order: the list need not be sorted
        ("2", "0,2", "1"),  # an id below the count would set another NPU: still the place
        ("5", " 4, 5 ", "1"),  # spaces around an entry
        ("3", "4,5,6,7", "3"),  # not in the list: left as Ray gave it
        ("0", "0,1,2,3", "0"),  # the list is every device in order: the same id
    ],
)
def test_an_id_becomes_its_place_among_the_visible_devices(accelerator_id, listed, index):
    assert fix.device_index(accelerator_id, fix.visible_devices({NOSET: "1", VISIBLE: listed})) == index


@pytest.mark.parametrize(
    "environ, visible",
    [
        ({NOSET: "1", VISIBLE: "4,5,6,7"}, ["4", "5", "6", "7"]),
        ({NOSET: "0", VISIBLE: "4,5"}, ["4", "5"]),  # verl enters its branch for any value but ""
        ({VISIBLE: "4,5,6,7"}, None),  # Ray sets each worker's own list, and verl never reads the id
        ({NOSET: "", VISIBLE: "4,5,6,7"}, None),
        ({NOSET: "1"}, None),  # every device visible: Ray's ids are the indices
        ({NOSET: "1", VISIBLE: ""}, None),
    ],
)
def test_the_translation_is_asked_for_only_where_both_variables_are_set(environ, visible):
    assert fix.visible_devices(environ) == visible


# What verl's method does with Ray's id (all releases): LOCAL_RANK and the device set, both the id Ray gives.
WORKER_MODULE = """
class Worker:
    def _setup_env_cuda_visible_devices(self):
        if os.environ.get("RAY_EXPERIMENTAL_NOSET_ASCEND_RT_VISIBLE_DEVICES"):
            given = ray.get_runtime_context().get_accelerator_ids()[resource][0]
            os.environ["LOCAL_RANK"] = given
            get_torch_device().set_device(int(given))
"""


class Device:
    def __init__(self) -> None:
        self.set: list[int] = []

    def set_device(self, index: int) -> None:
        self.set.append(index)


def fake_ray(npu: list[str], gpu: list[str] = ()) -> Any:
    ids = {"NPU": list(npu), "GPU": list(gpu)}
    context = SimpleNamespace(get_accelerator_ids=lambda: {key: list(value) for key, value in ids.items()}, job="j")
    return SimpleNamespace(get_runtime_context=lambda: context, util="ray.util")


@pytest.fixture
def worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """verl's worker module as a release ships it, imported: its ``ray`` reports NPU id 5."""
    module = ModuleType(fix.WATCHES)
    path = tmp_path / "worker.py"
    path.write_text(WORKER_MODULE)
    module.__file__ = str(path)
    module.__dict__.update(os=__import__("os"), ray=fake_ray(["5"]), resource="NPU", device=Device())
    module.get_torch_device = lambda: module.device
    exec(compile(WORKER_MODULE, str(path), "exec"), module.__dict__)  # from a file: the fix reads its source
    table = dict(known_code())
    ours = function_fingerprint(vars(module.Worker)[fix.METHOD])
    table[fix.SETUP.source] = dict.fromkeys(fix.SETUP.missing_in, ours)  # the stand-in is every release's code
    monkeypatch.setattr("npu_shim.recognition.known_code", lambda: table)
    monkeypatch.setitem(sys.modules, "verl", SimpleNamespace(__version__="0.7.1"))
    monkeypatch.setitem(sys.modules, fix.WATCHES, module)
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    return module


def applied(worker: ModuleType, monkeypatch: pytest.MonkeyPatch, changes: Writer, **environ: str) -> str:
    for name in (NOSET, VISIBLE):
        monkeypatch.delenv(name, raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    return fix.FIX.apply(worker, changes).verdict


def test_with_both_variables_the_worker_sets_the_place_of_its_id(worker, monkeypatch):
    shipped = vars(worker.Worker)[fix.METHOD]
    changes = Writer()
    try:
        assert applied(worker, monkeypatch, changes, **{NOSET: "1", VISIBLE: "4,5,6,7"}) == APPLIED
        assert is_ours(vars(worker.Worker)[fix.METHOD])
        ray = worker.ray
        worker.Worker()._setup_env_cuda_visible_devices()
        assert worker.device.set == [1]
        assert __import__("os").environ["LOCAL_RANK"] == "1"
        assert worker.ray is ray, "the module's ray is untouched: only the call saw the translated ids"
        assert ray.get_runtime_context().get_accelerator_ids()["NPU"] == ["5"]
    finally:
        changes.revert()
    assert vars(worker.Worker)[fix.METHOD] is shipped


def test_once_applied_a_call_without_the_variables_is_verls_own(worker, monkeypatch):
    changes = Writer()
    try:
        assert applied(worker, monkeypatch, changes, **{NOSET: "1", VISIBLE: "4,5,6,7"}) == APPLIED
        monkeypatch.delenv(VISIBLE)
        worker.Worker()._setup_env_cuda_visible_devices()
        assert worker.device.set == [5], "every device visible: Ray's id is the index"
        assert __import__("os").environ["LOCAL_RANK"] == "5"
    finally:
        changes.revert()


def test_an_id_the_list_lacks_and_other_devices_ids_are_left_as_ray_gives_them(worker, monkeypatch):
    changes = Writer()
    try:
        assert applied(worker, monkeypatch, changes, **{NOSET: "1", VISIBLE: "0,1,2,3"}) == APPLIED
        worker.Worker()._setup_env_cuda_visible_devices()
        assert worker.device.set == [5], "not in the list: verl's own (torch_npu refuses it, as without the shim)"
        monkeypatch.setenv(VISIBLE, "4,5,6,7")
        worker.ray, worker.resource = fake_ray(["5"], gpu=["5"]), "GPU"
        worker.Worker()._setup_env_cuda_visible_devices()
        assert worker.device.set == [5, 5], "a GPU's id is never an NPU's"
    finally:
        changes.revert()


@pytest.mark.parametrize(
    "environ",
    [{VISIBLE: "4,5,6,7"}, {NOSET: "1"}, {}],
    ids=["ray-sets-each-workers-list", "every-device-visible", "neither"],
)
def test_without_both_variables_verls_method_stays_as_it_ships(worker, monkeypatch, environ):
    shipped = vars(worker.Worker)[fix.METHOD]
    changes = Writer()
    try:
        assert applied(worker, monkeypatch, changes, **environ) == NOT_APPLICABLE
        assert vars(worker.Worker)[fix.METHOD] is shipped
    finally:
        changes.revert()


def test_the_fix_recognises_every_released_method_as_lacking_the_change():
    table = known_code()[fix.SETUP.source]
    assert set(table) == set(fix.SETUP.missing_in) and all(table.values()), table
    assert len(set(table.values())) == 2, "0.6.0 to 0.8.0 share one code, 0.9.x another"
