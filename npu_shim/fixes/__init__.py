"""One module per upstream verl change that npu_shim backports (:mod:`npu_shim.catalogue` lists them in order).

Each module says which verl change it mirrors, how it tells that the change is missing, and what it does,
and declares ``FIX``, a :class:`~npu_shim.patching.Fix` record: the module it watches (default
``verl.workers.engine``), its judgement of that module once imported, and the edits it makes where the
change is missing, which :mod:`npu_shim.patching` writes. A fix that replaces one verl function is a
:class:`~npu_shim.recognition.Rebinding` (the function, the releases with and without the change, the
replacement, what its outcome says) made a fix by :func:`~npu_shim.patching.rebinding`. The others judge
by what they check instead of a fingerprint, and say so in their ``judge``. The hook applies them right
after the watched module is imported, with a :class:`~npu_shim.changes.ChangeSet` shared by the fixes of
that module, so that a failure in any of them reverts all of their edits.
"""
