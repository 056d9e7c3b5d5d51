"""``npu-shim doctor``: will new interpreters and Ray workers started from here get the shim? Its parts: docs/design.md
(The doctor); its statuses and exit codes: docs/usage.md; the JSON's keys: ``report``."""
