"""Apply deliberate bugs to npu_shim, one at a time, and see whether the fast test layer (tests/unit) catches each.

Each mutation is one textual edit of one file (``MUTATIONS``), made in a copy of the checkout
(the working tree is never touched). A mutation is *killed* when ``pytest tests/unit -x``
fails with it, *survived* when the unit layer stays green, and *stale* when its text is no
longer in the file (the code moved on: update the list). Run with the unit environment that
``make test`` builds::

    .cache/envs/unit-*/bin/python scripts/mutations.py            # every mutation, about 30 s each
    .cache/envs/unit-*/bin/python scripts/mutations.py layout      # those whose name contains "layout"
    .cache/envs/unit-*/bin/python scripts/mutations.py chain: kit:  # ... "chain:" or "kit:"

Exit status 1 when a mutation survived or went stale, unless it is a known survivor: one the
unit layer cannot see, with the reason and the layer that kills it (also in docs/testing.md).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Mutation:
    name: str
    path: str
    old: str
    new: str
    survives_because: str = ""  # a known survivor of the unit layer: why, and which layer catches it


MUTATIONS = [
    Mutation(
        "hook: the fixes run under the hook's lock (a fix that imports a watched module waits for itself)",
        "npu_shim/hook.py",
        "        results = apply_module(module, ChangeSet())\n",
        "        with _lock:\n            results = apply_module(module, ChangeSet())\n",
    ),
    Mutation(
        "start-up: the common case decided without looking for a sitecustomize it hides",
        "npu_shim_bootstrap/sitecustomize.py",
        '(entry + "/sitecustomize.py")',
        '(entry + "/no_such_module.py")',
    ),
    Mutation(
        "start-up: a module imported that an empty sitecustomize does not import",
        "npu_shim_bootstrap/sitecustomize.py",
        "import os\nimport sys\n",
        "import json\nimport os\nimport sys\n",
    ),
    Mutation(
        "start-up: the common case taken with NPU_SHIM_DISABLE set",
        "npu_shim_bootstrap/sitecustomize.py",
        '        and "NPU_SHIM_DISABLE" not in os.environ\n',
        '        and "NPU_SHIM_DISABLE" not in ()\n',
    ),
    Mutation(
        "start-up: the common case taken in a Python npu_shim does not serve",
        "npu_shim_bootstrap/sitecustomize.py",
        "        sys.version_info >= (3, 10)\n",
        "        sys.version_info >= (2, 7)\n",
    ),
    Mutation(
        "first_import: the name it came for left waiting (MegatronAdaptor's own import of Megatron comes back)",
        "npu_shim/first_import.py",
        "    watcher[WAITING] = tuple(name for name in watcher[WAITING] if name != top)\n",
        "",
    ),
    Mutation(
        "first_import: a bad switch value never reported where start-up no longer reads the switches",
        "npu_shim/first_import.py",
        "            read_all()  # reports each bad value, once\n",
        "            pass\n",
    ),
    Mutation(
        "first_import: MegatronAdaptor imported again where it is already loaded",
        "npu_shim/first_import.py",
        "    elif top == MEGATRON and ADAPTOR not in sys.modules and _found(ADAPTOR):\n",
        "    elif top == MEGATRON and _found(ADAPTOR):\n",
    ),
    Mutation(
        "chain: a served interpreter with a hidden sitecustomize left without the watcher",
        "npu_shim_bootstrap/_npu_shim_chain.py",
        "            sys.meta_path.insert(0, bootstrap)\n",
        "            pass\n",
    ),
    Mutation(
        "shared_repatch: copy the user's config only for a string attention_backend",
        "npu_shim/fixes/shared_repatch.py",
        '    config = dict(engine_config.get("override_transformer_config", None) or {})  # never the user\'s dict\n'
        '    backend = config.get("attention_backend")\n'
        "    if isinstance(backend, str):\n",
        '    config = engine_config.get("override_transformer_config", None) or {}\n'
        '    backend = config.get("attention_backend")\n'
        "    if isinstance(backend, str):\n"
        "        config = dict(config)\n",
    ),
    Mutation(
        "shared_repatch: context_parallel_size passed at any size",
        "npu_shim/fixes/shared_repatch.py",
        "    if engine_config.context_parallel_size > 1:\n",
        "    if engine_config.context_parallel_size >= 1:\n",
    ),
    Mutation(
        "patching: a patch keeps verl's function but does not bind the replacement",
        "npu_shim/patching.py",
        "        changes.setattr(self.owner, self.attribute, self.value)\n",
        "",
    ),
    Mutation(
        "recognition: code no release has is 'not applicable' where the version says the change is missing",
        "npu_shim/recognition.py",
        "        if not (self.needed_on_any_version or verl_release() in self.missing_in):\n",
        "        if not self.needed_on_any_version:\n",
    ),
    Mutation(
        "recognition: a release with the change taken for one without it",
        "npu_shim/recognition.py",
        "        if releases and set(releases) & set(self.missing_in):\n",
        "        if releases and set(releases) & {*self.missing_in, *self.fixed_in}:\n",
    ),
    Mutation(
        "lm_engine_repatch: an LM engine's own _init_device_mesh not taken as the change (judged by its __init__)",
        "npu_shim/fixes/lm_engine_repatch.py",
        "    has_change=repatches_in_mesh_init,\n",
        "",
    ),
    Mutation(
        "lm_engine_repatch: keep verl's __init__ (two repatches, one after the mesh)",
        "npu_shim/fixes/lm_engine_repatch.py",
        '        Remove(engine_class, "__init__"),\n',
        "",
    ),
    Mutation(
        "value_engine: no export from verl.workers.engine",
        "npu_shim/fixes/value_engine.py",
        "        *(Export(package, CLASS_NAME, engine_class) for package in "
        "(engine_package, layout.mindspeed_package)),\n",
        "        *(Export(package, CLASS_NAME, engine_class) for package in (layout.mindspeed_package,)),\n",
    ),
    Mutation(
        "value_engine: the class repatches after the device mesh",
        "npu_shim/fixes/value_engine.py",
        "            mindspeed_repatch(self.engine_config)\n            super()._init_device_mesh()\n",
        "            super()._init_device_mesh()\n            mindspeed_repatch(self.engine_config)\n",
    ),
    Mutation(
        "layout: (device, vendor) registry keys not recognised",
        "npu_shim/layout.py",
        "            if key == device or (isinstance(key, tuple) and key[:1] == (device,)):\n",
        "            if key == device:\n",
    ),
    Mutation(
        "changes: revert in the order the edits were made",
        "npu_shim/changes.py",
        "        while self._undo:\n            self._undo.pop()()\n",
        "        for undo in self._undo:\n            undo()\n        self._undo.clear()\n",
    ),
    Mutation(
        "apply: a failure leaves the partial edits in place",
        "npu_shim/catalogue.py",
        "    except BaseException:\n        changes.revert()\n",
        "    except BaseException:\n",
    ),
    Mutation(
        "mindspeed_line: fusion attention off for the key on every line (upstream's flaw)",
        "npu_shim/mindspeed_line.py",
        "    if defaults is not None and not hasattr(defaults, BATCH_INVARIANT):\n        if requested:\n",
        "    if False:\n        if requested:\n",
    ),
    Mutation(
        "mindspeed_line: an inherited batch-invariant key ignored",
        "npu_shim/mindspeed_line.py",
        "    return False if requested or inherited else configured\n",
        "    return False if requested else configured\n",
    ),
    Mutation(
        "mindspeed_line: batch-invariant attention with context parallelism let through",
        "npu_shim/mindspeed_line.py",
        "    if batch_invariant and int(size) > 1:\n",
        "    if batch_invariant and int(size) > 2:\n",
    ),
    Mutation(
        "mindspeed_line: the refusal reads the new engine's CP size only, not the one MindSpeed kept",
        "npu_shim/mindspeed_line.py",
        '    size = config.get("context_parallel_size", getattr(current, "context_parallel_size", 1))\n',
        '    size = config.get("context_parallel_size", 1)\n',
    ),
    Mutation(
        "fingerprint: nested functions counted by their name alone",
        "npu_shim/fingerprint.py",
        "    if isinstance(value, ast.AST):\n",
        '    if isinstance(value, ast.FunctionDef) and value.name != "f":\n'
        "        return value.name\n"
        "    if isinstance(value, ast.AST):\n",
    ),
    Mutation(
        "fingerprint: 3.12's empty f-string parts kept (the table then depends on the Python)",
        "npu_shim/fingerprint.py",
        "        return [part for part in field if not _empty_string(part)]\n",
        "        return field\n",
    ),
    Mutation(
        "patching: a patch leaves npu_shim's value unmarked (a second activation cannot tell it from verl's)",
        "npu_shim/patching.py",
        "        mark_as_ours(self.value)\n",
        "",
    ),
    Mutation(
        "patching: a fix writes its edits whatever its judgement",
        "npu_shim/patching.py",
        "        if judged.missing:\n            for edit in self.edits(module):\n",
        "        if True:\n            for edit in self.edits(module):\n",
    ),
    Mutation(
        "patching: a reverted registration stays in verl's registry",
        "npu_shim/patching.py",
        "        changes.on_revert(lambda: slots.pop(device, None))\n",
        "",
    ),
    Mutation(
        "shared_repatch: its own earlier binding judged verl's (native) on a second activation",
        "npu_shim/fixes/shared_repatch.py",
        "    if originals.was_replaced(module, UPSTREAM_NAME):\n",
        "    if False:\n",
    ),
    Mutation(
        "recognition: a name a fix bound where verl had none judged already applied (not npu_shim's own)",
        "npu_shim/recognition.py",
        "        if originals.was_replaced(owner, self.attribute) and originals.get_original(owner, self.attribute) "
        "is not None:\n",
        "        if originals.was_replaced(owner, self.attribute):\n",
    ),
    Mutation(
        "plugin: the shim's distribution declares no verl.plugins entry point",
        "pyproject.toml",
        '[project.entry-points."verl.plugins"]\nnpu_shim = "npu_shim.verl_plugin"\n',
        "",
    ),
    Mutation(
        "distributions: the kit's wheel leaves out the dist-info that lets `import torch` load the stand-in",
        "kit/pyproject.toml",
        '    "simulated/*.dist-info/*",\n',
        "",
    ),
    Mutation(
        "distributions: the kit's metadata admits a torch its compute mode is not tested on",
        "kit/pyproject.toml",
        '"torch>=2.10,<2.14,!=2.11.*,!=2.12.*"',
        '"torch>=2.10,<2.14"',
    ),
    Mutation(
        "distributions: the doctor reads the kit's mark instead of torch_npu's version",
        "npu_shim/doctor/verl_state.py",
        'str(version) if (version := getattr(module, "__version__", None)) else None',
        'bool(getattr(module, "SIMULATED", False))',
    ),
    Mutation(
        "plugin: the entry point's module activates nothing",
        "npu_shim/verl_plugin.py",
        "activate(VERL_PLUGINS)\n",
        "VERL_PLUGINS  # noqa: B018\n",
    ),
    Mutation(
        "plugin: the doctor reads VERL_USE_EXTERNAL_PLUGINS set but empty as auto (verl loads none)",
        "npu_shim/doctor/routes.py",
        'policy = ("auto" if policy is None else policy).strip().lower()',
        'policy = (policy or "auto").strip().lower()',
    ),
    Mutation(
        "plugin: the doctor ignores a VERL_USE_EXTERNAL_PLUGINS list that leaves the shim out",
        "npu_shim/doctor/routes.py",
        'return policy == "auto" or (policy != "none" and PACKAGE in {name.strip() for name in policy.split(",")})',
        'return policy != "none"',
    ),
    Mutation(
        "doctor: a verl.workers.engine that fails to import left unjudged (status ok)",
        "npu_shim/doctor/verl_state.py",
        "    if breaks_critic or no_bridge or not lookup.resolves:\n",
        "    if breaks_critic or no_bridge or (findings.layout.id is not None and not lookup.resolves):\n",
    ),
    Mutation(
        "doctor: an unrecognised fix without which the critic fails left out of the status",
        "npu_shim/doctor/verl_state.py",
        "    breaks_critic = any(row.breaks_critic for row in [*findings.unrecognised, *findings.needed_but_off])\n",
        "    breaks_critic = any(row.breaks_critic for row in findings.needed_but_off)\n",
    ),
    Mutation(
        "doctor: a fix the critic needs, turned off, left out of the status",
        "npu_shim/doctor/verl_state.py",
        "    breaks_critic = any(row.breaks_critic for row in [*findings.unrecognised, *findings.needed_but_off])\n",
        "    breaks_critic = any(row.breaks_critic for row in findings.unrecognised)\n",
        survives_because="no synthetic layout has a fix a critic needs (megatron_critic is real 0.7.1's code): "
        "tests/matrix/test_doctor.py::test_a_fix_a_critic_needs_turned_off_is_a_problem_the_doctor_names kills it",
    ),
    Mutation(
        "megatron_checkpoint_metadata: the copy keeps declared fields only (megatron's mcore_data lost again)",
        "npu_shim/fixes/megatron_checkpoint_metadata.py",
        "    if not extras:\n",
        "    if True:\n",
        survives_because="the unit layer has no torch or Megatron: tests/matrix/test_upstream_fixes.py and "
        "test_training.py kill it in the 0.9.1-a5 environment (megatron-core 0.12.0, torch 2.10)",
    ),
    Mutation(
        "megatron_checkpoint_metadata: judged not applicable where torch's writer copies the metadata",
        "npu_shim/fixes/megatron_checkpoint_metadata.py",
        '    if not {"dataclasses", "replace"} <= _used_names(_code(FileSystemWriter.finish)):\n',
        "    if True:\n",
        survives_because="the unit layer has no torch or Megatron: tests/matrix/test_upstream_fixes.py kills it in "
        "the 0.9.1-a5 environment",
    ),
    Mutation(
        "doctor: Megatron-Bridge offered beside a megatron-core it cannot import on",
        "npu_shim/doctor/bridge_state.py",
        "    if megatron is not None and megatron < OLDEST_MEGATRON_FOR_BRIDGE:\n",
        "    if False:\n",
    ),
    Mutation(
        "log: the line that says where the shim changed verl written at DEBUG (nobody sees it)",
        "npu_shim/hook.py",
        "        logger.info(\n",
        "        logger.debug(\n",
    ),
    Mutation(
        "log: no handler of the shim's own (INFO lost where the application set up no logging)",
        "npu_shim/hook.py",
        "        logger.addHandler(StderrUntilConfigured())\n",
        "        pass\n",
    ),
    Mutation(
        "log: the shim's handler writes beside the application's (the line twice)",
        "npu_shim/hook.py",
        "        self.addFilter(lambda record: not logging.getLogger().handlers)\n",
        "        pass\n",
    ),
    Mutation(
        "log: NPU_SHIM_LOG_LEVEL not read",
        "npu_shim/hook.py",
        "        logger.setLevel(log_level())\n",
        "        logger.setLevel(logging.INFO)\n",
    ),
    Mutation(
        "log: a process where nothing changed says so anyway",
        "npu_shim/hook.py",
        "    if applied:  # a process where the shim changes nothing says nothing\n",
        "    if results:\n",
    ),
    Mutation(
        "switches: NPU_SHIM_DISABLED_FIXES not honoured",
        "npu_shim/catalogue.py",
        "            if fix.name in turned_off\n",
        "            if False\n",
    ),
    Mutation(
        "switches: an unknown fix name in NPU_SHIM_DISABLED_FIXES not reported",
        "npu_shim/switches.py",
        "    if unknown:\n",
        "    if False:\n",
    ),
    Mutation(
        "doctor: --device npu not passed to the probe",
        "npu_shim/doctor/__init__.py",
        '                [sys.executable, "-c", source, shim_parent(), device or ""],\n',
        '                [sys.executable, "-c", source, shim_parent(), ""],\n',
    ),
    Mutation(
        "doctor: the assumed device not used for the registry's lookup",
        "npu_shim/doctor/probe.py",
        "    module.get_device_name = lambda: device\n",
        "    pass\n",
    ),
    Mutation(
        "doctor: the lookup-only report ignores the assumed device in its status",
        "npu_shim/doctor/__init__.py",
        '(lookup.assumed_device or lookup.device) == "npu"',
        'lookup.device == "npu"',
    ),
    Mutation(
        "doctor: a hook that failed while patching reported as one that has not run",
        "npu_shim/doctor/verl_state.py",
        "    elif failure is not None:\n"
        '        module = getattr(hook, "failed_module", None) or "verl"\n'
        '        reason = f"the shim failed while patching {module} and left it as it shipped ({failure_text})"\n',
        "",
    ),
    Mutation(
        "chain: bytecode another Python wrote of an installed bootstrap kept (pip uninstall leaves it behind)",
        "npu_shim_bootstrap/_npu_shim_chain.py",
        "    for path in paths:\n        if path:\n",
        "    for path in ():\n        if path:\n",
    ),
    Mutation(
        "chain (2.7): the first entry without a sitecustomize ends the search",
        "npu_shim_bootstrap/_npu_shim_chain.py",
        '        found = imp.find_module("sitecustomize", [entry])\n    except ImportError:\n        return False\n',
        '        found = imp.find_module("sitecustomize", [entry])\n    except ImportError:\n        return True\n',
    ),
    Mutation(
        "chain (2.7): an ImportError of the user's own sitecustomize reported, which 2.7's site keeps silent",
        "npu_shim_bootstrap/_npu_shim_chain.py",
        "        except ImportError:  # 2.7's site swallows any ImportError of sitecustomize, silently\n"
        "            pass\n",
        "",
    ),
    Mutation(
        "chain (3.x): an ImportError that names sitecustomize reported, which 3.x's site keeps silent",
        "npu_shim_bootstrap/_npu_shim_chain.py",
        '        if not (isinstance(error, ImportError) and error.name == "sitecustomize"):\n'
        "            _report(error)\n",
        "        _report(error)\n",
    ),
    Mutation(
        "tests/conftest.py: the guard takes each test's 'before' after collection, as it used to",
        "tests/conftest.py",
        "    before = _shim_state()\n    assert before == _AT_START,",
        "    before = _AT_START = _shim_state()\n    assert before == _AT_START,",
    ),
    Mutation(
        "known_code.json: a release edited out of the table",
        "npu_shim/known_code.json",
        '      "0.8.0": "1b4192eb06727d55925cca3befdd4bd2",\n',
        "",
    ),
    Mutation(
        "shared_repatch: a string attention_backend handed to MindSpeed as it is",
        "npu_shim/fixes/shared_repatch.py",
        '        config["attention_backend"] = _attn_backend(backend)\n',
        "        _attn_backend(backend)\n",
        "",
    ),
    Mutation(
        "megatron_critic: the pad id taken from the tokenizer's eos",
        "npu_shim/fixes/megatron_critic.py",
        "        pad_token_id=self.model_config.tokenizer.pad_token_id,\n",
        "        pad_token_id=self.model_config.tokenizer.eos_token_id,\n",
    ),
    Mutation(
        "megatron_critic: vision_model never passed as True",
        "npu_shim/fixes/megatron_critic.py",
        '        vision_model=hasattr(hf_config, "vision_config"),\n',
        "        vision_model=False,\n",
    ),
    Mutation(
        "moe_layer_offset: the stage's layer offset ignored",
        "npu_shim/fixes/moe_layer_offset.py",
        "    return sum(1 for index in range(first, first + layers) if module.is_moe_layer(config, index))\n",
        "    return sum(1 for index in range(layers) if module.is_moe_layer(config, index))\n",
    ),
    Mutation(
        "lm_engine_repatch: the mesh init's super() taken from the instance's class",
        "npu_shim/fixes/lm_engine_repatch.py",
        "        super(engine_class, self)._init_device_mesh()\n",
        "        super(type(self), self)._init_device_mesh()\n",
    ),
    Mutation(
        "report: a field written under its Python name, not its JSON key (the registry's class, the routes' names)",
        "npu_shim/doctor/report.py",
        "    return item.metadata.get(_KEY, item.name)\n",
        "    return item.name\n",
    ),
    Mutation(
        "report: the findings written as one nested object, not beside the report's own keys",
        "npu_shim/doctor/report.py",
        "                data.update(to_json(inner) if inner is not None else {})\n",
        "                data[_key(item)] = to_json(inner)\n",
    ),
    Mutation(
        "report: a section that is None written as null (a report without a probe says probe: null)",
        "npu_shim/doctor/report.py",
        "            elif not (inner is None and item.metadata.get(_SECTION)):\n",
        "            else:\n",
    ),
    Mutation(
        "report: a merged section read back as present when none of its keys is (no probe: findings of defaults)",
        "npu_shim/doctor/report.py",
        "            if not _keys(inner).isdisjoint(data):",
        "            if True:",
    ),
    Mutation(
        "report: a problem exits 0",
        "npu_shim/doctor/report.py",
        "PROBLEM: 1,",
        "PROBLEM: 0,",
    ),
    Mutation(
        "report: a probe report another npu_shim wrote (a key missing) ends the doctor in a traceback",
        "npu_shim/doctor/__init__.py",
        "    except ValueError as error:",
        "    except ZeroDivisionError as error:",
    ),
    Mutation(
        "routes: a route not set up, while another works, still told to be set up",
        "npu_shim/doctor/routes.py",
        "        if effective not in (None, name) and not route.configured\n",
        "        if False\n",
    ),
    Mutation(
        "doctor: a watched module that did not import named as the engine package",
        "npu_shim/doctor/verl_state.py",
        "                outcome = Outcome(fix.name, NOT_APPLICABLE, _not_imported(fix.watches, import_errors))\n",
        "                outcome = Outcome(fix.name, NOT_APPLICABLE, _not_imported(ENGINE_PACKAGE, import_errors))\n",
    ),
    Mutation(
        "kit: dropout's draws never move the device's generator on",
        "kit/simulated_npu/simulated/torch_npu/_rng.py",
        "        GENERATOR.set_state(cpu.get_state())\n",
        "        pass\n",
        "the unit layer has no torch; tests/kit/test_parallel_kit.py::"
        "test_the_device_refuses_what_a_device_refuses_and_saves_loads_casts_and_counts_as_one kills it",
    ),
    Mutation(
        "kit: a deep copy of an npu tensor shares the original's memory",
        "kit/simulated_npu/simulated/torch_npu/_tensor.py",
        "        copied = NpuTensor(self._inner.detach().clone(), requires_grad=self.requires_grad)\n",
        "        copied = NpuTensor(self._inner.detach(), requires_grad=self.requires_grad)\n",
        "the unit layer has no torch; tests/kit/test_parallel_kit.py::"
        "test_the_device_refuses_what_a_device_refuses_and_saves_loads_casts_and_counts_as_one kills it",
    ),
    Mutation(
        "kit: an in-place view op (t_) given back by identity, its wrapper's sizes left as they were",
        "kit/simulated_npu/simulated/torch_npu/_tensor.py",
        "        if info.is_inplace_view_op or info.read_only_alias_match_indexes:\n",
        "        if info.read_only_alias_match_indexes:\n",
        "the unit layer has no torch; tests/kit/test_parallel_kit.py::"
        "test_the_device_refuses_what_a_device_refuses_and_saves_loads_casts_and_counts_as_one kills it",
    ),
    Mutation(
        "kit: a view's result taken as fresh, its storage not made its base's",
        "kit/simulated_npu/simulated/torch_npu/_tensor.py",
        "        if info.is_inplace_view_op or info.read_only_alias_match_indexes:\n",
        "        if info.is_inplace_view_op:\n",
        "the unit layer has no torch; tests/kit/test_parallel_kit.py::"
        "test_the_device_refuses_what_a_device_refuses_and_saves_loads_casts_and_counts_as_one kills it",
    ),
    Mutation(
        "kit: resize_ of an npu tensor to another size let through to torch's metadata pass",
        "kit/simulated_npu/simulated/torch_npu/_tensor.py",
        "    if tuple(size) != tuple(self.shape):\n",
        "    if False:\n",
        "the unit layer has no torch; tests/kit/test_parallel_kit.py::"
        "test_the_device_refuses_what_a_device_refuses_and_saves_loads_casts_and_counts_as_one kills it",
    ),
    Mutation(
        "kit: MindSpeed's fusion attention delimits packed sequences by their unpadded starts",
        "kit/simulated_npu/simulated/mindspeed/compute.py",
        '        starts_q = getattr(packed_seq_params, "cu_seqlens_q_padded", None)\n'
        '        starts_kv = getattr(packed_seq_params, "cu_seqlens_kv_padded", None)\n',
        "        starts_q = starts_kv = None\n",
        "the unit layer has no torch or Megatron; tests/kit/test_compute_mode.py::"
        "test_mindspeed_fusion_attention_is_the_forward_after_repatch_and_computes kills it",
    ),
    Mutation(
        "fingerprints.py: a release whose wheel lacks the function's file read all the same",
        "scripts/fingerprints.py",
        '            text = archive.read(member).decode("utf-8") if member in members else None\n',
        '            text = archive.read(member).decode("utf-8")\n',
    ),
    Mutation(
        "fingerprint: falsy fields dropped with the empty ones (0, False and '' alike)",
        "npu_shim/fingerprint.py",
        "for name, field in fields if field not in (None, [])",
        "for name, field in fields if field",
    ),
    Mutation(
        "fingerprint: a decorated function read as no function (judged unrecognised at run time)",
        "npu_shim/fingerprint.py",
        "        function = inspect.unwrap(function)\n",
        "        pass\n",
    ),
    Mutation(
        "known_code.json: 0.7.0's code taken for 0.7.1's (#5870's critic forward)",
        "npu_shim/known_code.json",
        '      "0.7.1": "8ee2e60b0a96e80675fb1ba34df8b7db",\n',
        '      "0.7.1": "3f9eb4cb491ecc199435678ec74ef5a2",\n',
    ),
    Mutation(
        "known_code.json: a release with #5580 given the code of one without (missing and fixed overlap)",
        "npu_shim/known_code.json",
        '      "0.8.0": "12cca92592dd06acba07e964c14fc70b",\n',
        '      "0.8.0": "b9d3518c8e78a50c14f892000534509d",\n',
    ),
    Mutation(
        "npu_causal_mask: applied where verl already has #7055",
        "npu_shim/fixes/npu_causal_mask.py",
        '    missing_in=("0.8.0",),\n    fixed_in=("0.9.0", "0.9.1"),\n',
        '    missing_in=("0.8.0", "0.9.0", "0.9.1"),\n    fixed_in=(),\n',
    ),
    Mutation(
        "moe_layer_offset: #5580 applied where Megatron takes the keywords",
        "npu_shim/fixes/moe_layer_offset.py",
        "    needs_nothing=megatron_takes_the_keywords,\n",
        "",
    ),
    Mutation(
        "recognition: a second activation judges the function it replaced as verl's again (two rebindings)",
        "npu_shim/recognition.py",
        "        if originals.was_replaced(owner, self.attribute) and originals.get_original(owner, self.attribute) "
        "is not None:\n",
        "        if False:\n",
    ),
    Mutation(
        "recognition: a function known_code.json lacks raises KeyError (every fix of the module reverted)",
        "npu_shim/recognition.py",
        "        table = known_code().get(self.source)\n",
        "        table = known_code()[self.source]\n",
    ),
    Mutation(
        "recognition: a rebinding leaves the name where the function is defined as verl's (vlm_mask_on_npu's util)",
        "npu_shim/patching.py",
        "        owners = [first, *(owner for owner in others if declared.judge(owner).missing)]\n",
        "        owners = [first]\n",
    ),
    Mutation(
        "originals: reverting a module's fixes keeps verl's function as replaced (judged already applied)",
        "npu_shim/originals.py",
        "    changes.on_revert(lambda: kept.pop(attribute, None) if earlier is _UNKEPT "
        "else kept.__setitem__(attribute, earlier))\n",
        "",
    ),
    Mutation(
        "chain: an empty __pycache__ of the bootstrap left behind (npu_shim/ then outlives an uninstall)",
        "npu_shim_bootstrap/_npu_shim_chain.py",
        "            for remove, target in ((os.remove, path), (os.rmdir, os.path.dirname(path))):\n",
        "            for remove, target in ((os.remove, path),):\n",
    ),
    Mutation(
        "kit: an op mixing an npu tensor with a one-element 1-d CPU tensor accepted",
        "kit/simulated_npu/simulated/torch_npu/_device_rules.py",
        '    if tensor.dim() > 0 and tensor.device.type == "cpu" and func not in CROSS_DEVICE:\n',
        '    if tensor.numel() > 1 and tensor.device.type == "cpu" and func not in CROSS_DEVICE:\n',
        "the unit layer has no torch; tests/kit/test_device_rules.py::"
        "test_an_op_mixing_npu_and_cpu_tensors_raises_as_torch_does_for_any_two_devices kills it",
    ),
    Mutation(
        "kit: FusedAdam's step ignores a restored parameter group (the step counted on the optimizer)",
        "kit/simulated_npu/simulated/mindspeed/core/optimizer/adamw.py",
        '        count = int(group["step"]) + 1 if "step" in group else 1\n',
        '        self._count = count = getattr(self, "_count", 0) + 1\n',
        "the unit layer has no torch; tests/kit/test_device_rules.py::"
        "test_megatrons_adam_resumes_from_its_state_dict_with_the_restored_group kills it",
    ),
    Mutation(
        "kit: compute mode on any torch, untested",
        "kit/simulated_npu/simulated/torch_npu/_torch_version.py",
        "    if _major_minor(torch_version) in SUPPORTED:\n",
        "    if True:\n",
        "the unit layer has no torch; tests/kit/test_torch_version.py::"
        "test_compute_mode_refuses_a_torch_it_is_not_tested_on kills it",
    ),
    Mutation(
        "kit: the refusal raised as an Exception while torch imports (torch's autoload error is then the last line)",
        "kit/simulated_npu/simulated/torch_npu/_torch_version.py",
        "        raise SystemExit(message)",
        "        raise UnsupportedTorch(message)",
        "the unit layer has no torch; tests/kit/test_torch_version.py::"
        "test_where_torch_loads_the_kit_the_refusal_is_the_last_line_not_torchs_autoload_error kills it",
    ),
    Mutation(
        "cli: a command's unknown option told with the top-level usage",
        "npu_shim/__main__.py",
        "        (parser if before_the_command else args.command_parser).error(",
        "        parser.error(",
    ),
    Mutation(
        "cli: the bootstrap-dir example wrapped as prose",
        "npu_shim/__main__.py",
        "        formatter_class=argparse.RawDescriptionHelpFormatter,\n",
        "",
    ),
]


def copy_checkout(destination: Path) -> None:
    """The files git knows of (tracked, and untracked but not ignored), as they are in the working tree."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = ROOT / name
        if source.is_file():
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target, follow_symlinks=False)  # the checkout's sitecustomize.py stays a link


def run_unit_layer(checkout: Path) -> bool:
    """True when the unit layer passes."""
    completed = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/unit", "-x", "-q", "-p", "no:cacheprovider"],
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    return completed.returncode == 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("select", nargs="*", help="only mutations whose name contains one of these")
    chosen = parser.parse_args().select
    selected = [m for m in MUTATIONS if not chosen or any(part in m.name for part in chosen)]
    with tempfile.TemporaryDirectory(prefix="npu-shim-mutations-") as directory:
        checkout = Path(directory)
        copy_checkout(checkout)
        if not run_unit_layer(checkout):
            print("the unit layer fails without any mutation: nothing to measure")
            return 2
        verdicts = []
        for mutation in selected:
            path = checkout / mutation.path
            original = path.read_text(encoding="utf-8")
            started = time.monotonic()
            if original.count(mutation.old) != 1:
                verdict = "stale"
            else:
                path.write_text(original.replace(mutation.old, mutation.new), encoding="utf-8")
                try:
                    verdict = "survived" if run_unit_layer(checkout) else "killed"
                finally:
                    path.write_text(original, encoding="utf-8")
            if verdict == "survived" and mutation.survives_because:
                verdict = "known"
            verdicts.append(verdict)
            print(f"{verdict:<8}  {time.monotonic() - started:5.1f} s  {mutation.name}", flush=True)
            if verdict == "known":
                print(f"{'':18}{mutation.survives_because}")
    counts = ", ".join(f"{verdicts.count(v)} {v}" for v in ("killed", "known", "survived", "stale"))
    print(counts + " (known: survivors of the unit layer that another layer kills)")
    return 0 if all(verdict in ("killed", "known") for verdict in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
