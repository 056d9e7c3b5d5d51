"""Print the fingerprints of one function of verl's MindSpeed engine module, per Python, for a fix's table.

Reads ``verl/workers/engine/mindspeed/transformer_impl.py`` from each wheel (or takes
a ``.py`` file as it is) and compiles it: nothing is imported, no verl code is kept.
Once per interpreter given::

    pip download --no-deps -d wheels verl==0.6.0 ; ... verl==0.8.0
    python scripts/fingerprints.py wheels/verl-0.*.whl --python ~/.pyenv/versions/3.1*/bin/python
    python scripts/fingerprints.py wheels/verl-0.8.0-*.whl --function _mindspeed_repatch
    python scripts/fingerprints.py wheels/verl-0.*.whl --member verl/models/mcore/util.py \\
        --function _build_npu_attn_mask

``--function`` defaults to ``MindspeedEngineWithLMHead.__init__`` (``KNOWN_INITS`` in
``npu_shim/fixes/lm_engine_repatch.py``); ``_mindspeed_repatch`` is ``VERL_0_8_0`` in
``npu_shim/fixes/batch_invariant_repatch.py``. ``--json`` prints
``{"major.minor": {release: fingerprint or null}}`` instead of table rows. Each
interpreter must be Python 3.10 or later; it imports npu_shim.fingerprint from this checkout.
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
request = json.load(sys.stdin)
result = {{}}
for release, source in request["sources"].items():
    module = compile(source, "transformer_impl.py", "exec", dont_inherit=True)
    code = find_code(module, *request["function"].split("."))
    result[release] = None if code is None else code_fingerprint(code)
print(json.dumps([list(sys.version_info[:2]), result]))
"""


def read_source(path: Path, member: str = MEMBER) -> tuple[str, str]:
    """(release, source) of a wheel's ``member``, or (file name, source) of a .py file."""
    if path.suffix == ".py":
        return path.name, path.read_text(encoding="utf-8")
    with zipfile.ZipFile(path) as archive:
        return path.name.split("-")[1], archive.read(member).decode()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sources", nargs="+", type=Path, help="verl wheels, or transformer_impl.py files")
    parser.add_argument("--python", nargs="+", default=[sys.executable])
    parser.add_argument("--function", default="MindspeedEngineWithLMHead.__init__")
    parser.add_argument("--member", default=MEMBER, help=f"the file in the wheel (default {MEMBER})")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    request = {"function": args.function, "sources": dict(read_source(path, args.member) for path in args.sources)}
    results = {}
    for python in args.python:
        out = subprocess.run(
            [python, "-c", COMPILE], input=json.dumps(request), capture_output=True, text=True, check=True
        ).stdout
        (major, minor), fingerprints = json.loads(out)
        results[f"{major}.{minor}"] = fingerprints
        if args.json:
            continue
        by_fingerprint: dict[str, list[str]] = {}
        for release, fingerprint in fingerprints.items():
            by_fingerprint.setdefault(fingerprint, []).append(release)
        print(f"    ({major}, {minor}): {{")
        for fingerprint, releases in by_fingerprint.items():
            print(f'        "{fingerprint}": "{", ".join(releases)}",')
        print("    },")
    if args.json:
        print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
