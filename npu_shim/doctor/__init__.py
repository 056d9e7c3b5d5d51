"""``npu-shim doctor``: will new interpreters and Ray workers started from here get the shim?

It judges the environment it was started in, not the one ``import npu_shim`` made. ``command`` (this process) starts
``probe`` in a fresh interpreter with that environment as given (``--ray``: ``ray_probe``, a task in a worker of a
running cluster); there ``verl_state`` gathers the facts, judges them (with ``mindspeed_state``, ``bridge_state``,
``routes``) and ``render`` writes them; ``command`` prints what came back. Nothing of the probe's side imports
``command``. The statuses and exit codes: docs/usage.md; the JSON's keys: ``report``.
"""
