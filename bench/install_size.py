"""What an install of tfrecord-prep puts in site-packages, from the installed packages' RECORD files.

    python bench/install_size.py                 # reads ./pyproject.toml; needs the test and docs extras installed

For the base install and each extra: the dependency closure (from the installed metadata),
and the sum of the sizes of the files each distribution installed (what `du` would count,
without pip's cache). Prints the largest distributions too.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import os
import re

import tomllib
from packaging.requirements import Requirement


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _size(dist) -> int:
    total = 0
    for f in dist.files or []:
        try:
            total += os.path.getsize(f.locate())
        except OSError:
            pass
    return total


def _closure(roots, dists, missing: set[str] | None = None) -> set[str]:
    seen: dict[str, set[str]] = {}
    stack = list(roots)
    while stack:
        name, extras = stack.pop()
        key = _key(name)
        if key in seen and extras <= seen[key]:
            continue
        seen[key] = seen.get(key, set()) | extras
        dist = dists.get(key)
        for text in (dist.requires or []) if dist else []:
            req = Requirement(text)
            if not req.marker or any(req.marker.evaluate({"extra": e}) for e in extras | {""}):
                stack.append((req.name, set(req.extras)))
    if missing is not None:
        missing |= {k for k in seen if k not in dists}
    return {k for k in seen if k in dists}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pyproject", default="pyproject.toml")
    args = parser.parse_args()
    with open(args.pyproject, "rb") as f:
        project = tomllib.load(f)["project"]
    dists = {_key(d.metadata["Name"]): d for d in md.distributions()}

    def roots(*extras):
        texts = list(project["dependencies"]) + [r for e in extras for r in project["optional-dependencies"][e]]
        reqs = [Requirement(t) for t in texts]
        return [(r.name, set(r.extras)) for r in reqs if not r.marker or r.marker.evaluate()]

    sizes = {k: _size(d) for k, d in dists.items()}
    base = _closure(roots(), dists)
    print(f"{'install':32s} {'packages':>8s} {'size':>9s}")
    print(f"{'pip install -e .':32s} {len(base):8d} {sum(sizes[k] for k in base) / 1e9:7.2f} GB")
    for extra in project["optional-dependencies"]:
        absent: set[str] = set()
        both = _closure(roots(extra), dists, absent)
        added = sum(sizes[k] for k in both - base)
        note = f"  ({len(absent)} not installed here: {', '.join(sorted(absent)[:4])}...)" if absent else ""
        print(f"{'  + [' + extra + ']':32s} {len(both - base):8d} +{added / 1e9:6.2f} GB{note}")
    test = _closure(roots("test"), dists)
    print("\nlargest (T: only with the test extra):")
    for k in sorted(test, key=lambda k: -sizes[k])[:12]:
        print(f"  {k:30s} {sizes[k] / 1e6:6.0f} MB {'T' if k not in base else ''}")


if __name__ == "__main__":
    main()
