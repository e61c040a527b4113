"""The catalog description: which golden families exist and how each is judged.

Read from `fixtures/catalog.json`, the one description that the C++ side (mla/golden/families.hpp,
which embeds the same file at build time) reads too; this module only parses it. A family exists
when it is listed there and the writer (goldens.py) knows how to write its cases. A family marked
`generated` is drawn at run time by `mla certify` and has no stored file: it is described so that
both languages know its name, but the writer neither writes nor checks it (FAMILIES leaves it out).
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

CATALOG_JSON = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir, os.pardir,
                            "fixtures", "catalog.json")

_NAME = re.compile(r"^[a-z0-9_]+$")
# How a family's cases are loaded: attention-core (decode), full-layer, MHA-form prefill, merge of
# partial attention states, V3.2's indexer (fixtures/SCHEMA.md, one section each).
KINDS = ("attention", "layer", "prefill", "merge", "indexer")


@dataclass(frozen=True)
class Family:
    name: str
    seed: int | None   # None for a generated family: its cases come from the run's seed
    kind: str          # one of KINDS
    case_kind: str     # the `kind` attribute every case carries
    certify: str       # the case kind of `mla certify` that certifies it ("decode", "append", "prefill", "merge"), or "none"
    certified_as: str  # the family name of its certificate rows
    about: str
    generated: bool = False  # drawn at run time, no stored file

    @property
    def file(self) -> str:
        return self.name + ".h5"


def parse(text: str) -> tuple[Family, ...]:
    """The families described by `text`; ValueError naming what is wrong."""
    j = json.loads(text)
    if j.get("format") != "mla-golden-catalog" or j.get("version") != 1:
        raise ValueError("the catalog description is not format mla-golden-catalog, version 1")
    out, seen = [], set()
    for f in j["families"]:
        name = f["name"]
        if not _NAME.match(name) or name in seen:
            raise ValueError(f"family {name!r}: a name must be [a-z0-9_]+ and described once")
        seen.add(name)
        if f["kind"] not in KINDS:
            raise ValueError(f"family {name!r}: kind {f['kind']!r} is none of {', '.join(KINDS)}")
        # Which case kinds exist is the certifier's to know (certify/include/mla/certify/case_kind.hpp
        # checks every family against its registry); here only the word's form.
        if not isinstance(f["certify"], str) or not _NAME.match(f["certify"]):
            raise ValueError(f"family {name!r}: certify {f['certify']!r} is not [a-z0-9_]+")
        generated = f.get("generated", False)
        if not isinstance(generated, bool):
            raise ValueError(f"family {name!r}: generated must be true or false")
        if generated == ("seed" in f):
            raise ValueError(f"family {name!r}: " + ("a generated family has no seed of its own (its cases come "
                                                     "from the run's seed)" if generated else "no seed"))
        out.append(Family(name=name, seed=None if generated else int(f["seed"]), kind=f["kind"],
                          case_kind=f["case_kind"], certify=f["certify"], certified_as=f.get("certified_as", name),
                          about=f["about"], generated=generated))
    if not out:
        raise ValueError("the catalog description lists no family")
    return tuple(out)


def load(path: str = CATALOG_JSON) -> tuple[Family, ...]:
    with open(path, encoding="utf-8") as f:
        return parse(f.read())


# The stored families (a file each, written and checked by goldens.py) and those drawn at run time.
_ALL = load()
FAMILIES = tuple(f for f in _ALL if not f.generated)
NAMES = tuple(f.name for f in FAMILIES)
GENERATED = tuple(f for f in _ALL if f.generated)


def family(name: str) -> Family:
    """A stored family (KeyError for a generated one: it has no file to write or read)."""
    for f in FAMILIES:
        if f.name == name:
            return f
    raise KeyError(f"unknown golden family {name!r} (known: {', '.join(NAMES)})")


def names(kind: str | None = None) -> tuple[str, ...]:
    return tuple(f.name for f in FAMILIES if kind is None or f.kind == kind)
