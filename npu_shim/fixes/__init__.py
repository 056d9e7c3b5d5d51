"""One module per upstream verl change that npu_shim backports (:mod:`npu_shim.catalogue` lists them in order).

Each module says which verl change it mirrors, how it tells that the change is missing, and
what it does. A fix that replaces one verl function is a declaration: a
:class:`~npu_shim.recognition.Rebinding` (the function, the releases with and without the
change, the replacement, what its outcome says) whose ``apply`` is the fix. A fix that does
more (defines and registers an engine, drops an ``__init__``) keeps its own ``apply``, and
where it recognises verl's code its decision is the same :meth:`~npu_shim.recognition.KnownFunction.judge`.
The hook calls ``apply`` right after the module the fix ``WATCHES`` (default ``verl.workers.engine``,
whose fixes get a :class:`~npu_shim.layout.VerlLayout`) is imported, with a
:class:`~npu_shim.changes.ChangeSet` shared by the fixes of that module, so that a failure in any
of them reverts all of their edits.
"""
