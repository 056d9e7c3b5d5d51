"""Print the fingerprints of one function in a verl source file, for npu_shim's tables of known code.

    python tools/fingerprint.py path/to/transformer_impl.py _mindspeed_repatch
    python tools/fingerprint.py path/to/transformer_impl.py MindspeedEngineWithLMHead.__init__

The file is compiled, not imported (nothing of verl runs). Run it with each
Python minor version the shim supports; each prints ``(major, minor): fingerprint``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import CodeType

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from npu_shim.fingerprint import fingerprint


def find(code: CodeType, path: list[str]) -> CodeType:
    """The code object at ``path`` (class body, then function, ...) below ``code``."""
    for constant in code.co_consts:
        if isinstance(constant, CodeType) and constant.co_name == path[0]:
            return constant if len(path) == 1 else find(constant, path[1:])
    raise LookupError(".".join(path))


if __name__ == "__main__":
    source_file, qualname = sys.argv[1:3]
    module_code = compile(Path(source_file).read_text(encoding="utf-8"), source_file, "exec")
    print(f"{sys.version_info[:2]}: {fingerprint(find(module_code, qualname.split('.')))!r}")
