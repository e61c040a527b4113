"""pytest fixtures of the report tools' tests; the helpers are in benchfiles.py."""
from __future__ import annotations

import json

import pytest

import benchfiles  # noqa: F401  (reports/tools on sys.path)


@pytest.fixture
def write_json(tmp_path):
    counter = {"n": 0}

    def _write(doc) -> str:
        counter["n"] += 1
        p = tmp_path / f"bench{counter['n']}.json"
        p.write_text(json.dumps(doc))
        return str(p)

    return _write
