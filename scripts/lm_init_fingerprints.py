"""Print the fingerprints of ``MindspeedEngineWithLMHead.__init__`` in released verl wheels, per Python.

For the table ``KNOWN_INITS`` in ``npu_shim/fixes/lm_engine_repatch.py``. Reads
each wheel's ``verl/workers/engine/mindspeed/transformer_impl.py`` and compiles
it (nothing is imported, no verl code is kept), once per interpreter given::

    pip download --no-deps -d wheels verl==0.6.0 ; ... verl==0.7.1
    python scripts/lm_init_fingerprints.py wheels/verl-0.*.whl --python ~/.pyenv/versions/3.1*/bin/python

Each interpreter must be Python 3.10 or later; it imports npu_shim.fingerprint from this checkout.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import zipfile
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parent.parent
MEMBER = "verl/workers/engine/mindspeed/transformer_impl.py"
COMPILE = f"""
import json, sys
sys.path.insert(0, {str(CHECKOUT)!r})
from npu_shim.fingerprint import code_fingerprint, find_code
sources = json.load(sys.stdin)
result = {{}}
for release, source in sources.items():
    module = compile(source, "transformer_impl.py", "exec", dont_inherit=True)
    init = find_code(module, "MindspeedEngineWithLMHead", "__init__")
    result[release] = None if init is None else code_fingerprint(init)
print(json.dumps([list(sys.version_info[:2]), result]))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wheels", nargs="+", type=Path)
    parser.add_argument("--python", nargs="+", default=[sys.executable])
    args = parser.parse_args()
    sources = {}
    for wheel in args.wheels:
        release = wheel.name.split("-")[1]
        with zipfile.ZipFile(wheel) as archive:
            sources[release] = archive.read(MEMBER).decode()
    for python in args.python:
        out = subprocess.run(
            [python, "-c", COMPILE], input=json.dumps(sources), capture_output=True, text=True, check=True
        ).stdout
        (major, minor), fingerprints = json.loads(out)
        by_fingerprint: dict[str, list[str]] = {}
        for release, fingerprint in fingerprints.items():
            by_fingerprint.setdefault(fingerprint, []).append(release)
        print(f"    ({major}, {minor}): {{")
        for fingerprint, releases in by_fingerprint.items():
            print(f'        "{fingerprint}": "{", ".join(releases)}",')
        print("    },")
    return 0


if __name__ == "__main__":
    sys.exit(main())
