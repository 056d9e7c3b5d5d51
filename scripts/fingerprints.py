"""Generate ``npu_shim/known_code.json``: the fingerprints of the verl functions the fixes recognise, per release.

Each fix declares the functions it recognises (:class:`npu_shim.recognition.KnownFunction`:
a file of verl's wheel and a qualified name). This reads those files from each wheel given
and fingerprints their syntax trees (:mod:`npu_shim.fingerprint`): nothing of verl is
imported or kept, and any Python 3.10+ gives the same file::

    pip download --no-deps -d wheels verl==0.6.0 verl==0.6.1 ...   # one at a time
    python scripts/fingerprints.py wheels/verl-*.whl            # rewrites npu_shim/known_code.json
    python scripts/fingerprints.py wheels/verl-*.whl --check    # exit 1 if the file differs

A release that lacks a file or a function gets ``null`` for it. Add every release
to the command: the file is rewritten whole, from the wheels given.
"""

from __future__ import annotations

import argparse
import json
import sys
import zipfile
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(CHECKOUT))

from npu_shim.catalogue import declared_functions  # noqa: E402
from npu_shim.fingerprint import source_fingerprint  # noqa: E402
from npu_shim.recognition import DATA_FILE  # noqa: E402

OUTPUT = CHECKOUT / "npu_shim" / DATA_FILE


def declared_sources() -> list[str]:
    """Every ``file:qualname`` some fix recognises, once each, in the order of the fixes."""
    return list(dict.fromkeys(known.source for known in declared_functions()))


def release_key(release: str) -> tuple[int, ...]:
    return tuple(int(part) for part in release.split("."))


def fingerprints(wheel: Path, sources: list[str]) -> dict[str, str | None]:
    with zipfile.ZipFile(wheel) as archive:
        members = set(archive.namelist())
        result = {}
        for source in sources:
            member, _, qualname = source.partition(":")
            text = archive.read(member).decode("utf-8") if member in members else None
            result[source] = None if text is None else source_fingerprint(text, qualname)
    return result


def generate(wheels: list[Path]) -> dict:
    sources = declared_sources()
    by_release = {wheel.name.split("-")[1]: fingerprints(wheel, sources) for wheel in wheels}
    releases = sorted(by_release, key=release_key)
    functions = {source: {release: by_release[release][source] for release in releases} for source in sources}
    return {"generated_by": "scripts/fingerprints.py", "releases": releases, "functions": functions}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wheels", nargs="+", type=Path, help="verl wheels (verl-X.Y.Z-py3-none-any.whl)")
    parser.add_argument("--check", action="store_true", help=f"compare with {OUTPUT.name} instead of writing it")
    parser.add_argument("--table", type=Path, default=OUTPUT, help=f"another file than {OUTPUT.name} (tests)")
    args = parser.parse_args()
    text = json.dumps(generate(args.wheels), indent=2) + "\n"
    if args.check:
        same = args.table.read_text(encoding="utf-8") == text
        print(f"{args.table.name} is {'up to date' if same else 'out of date: run without --check'}")
        return 0 if same else 1
    args.table.write_text(text, encoding="utf-8")
    print(f"wrote {args.table}: {len(json.loads(text)['functions'])} functions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
