"""The catalog description (fixtures/catalog.json), as the writer reads it."""
import pytest

from mla_ref import catalog, goldens


def test_every_described_family_has_a_writer_and_every_writer_a_family():
    assert set(goldens.WRITERS) == set(catalog.NAMES)
    assert goldens.FAMILIES == catalog.NAMES


def test_the_description_says_how_each_family_is_judged():
    for f in catalog.FAMILIES:
        assert f.file == f.name + ".h5"
        assert f.kind in catalog.KINDS and f.certify in ("none", "decode", "append", "prefill", "merge", "indexer_logits")
        if f.certify == "decode":
            assert f.kind == "attention"
        if f.kind == "attention":
            assert f.case_kind == "attn_core"
        if f.kind in ("prefill", "merge"):
            assert f.case_kind == f.kind and f.certify == f.kind
    assert len({f.seed for f in catalog.FAMILIES}) == len(catalog.FAMILIES), "each family its own seed"


def test_the_fresh_family_is_described_as_drawn_at_run_time():
    # `mla certify` draws it from the run's seed: described, never written or checked here.
    fresh = [f for f in catalog.GENERATED if f.name == "fresh"]
    assert len(fresh) == 1 and fresh[0].seed is None and fresh[0].certify == "decode"
    assert "fresh" not in catalog.NAMES and "fresh" not in goldens.FAMILIES
    with pytest.raises(KeyError):
        catalog.family("fresh")


def test_a_malformed_description_is_refused():
    head = '{"format": "mla-golden-catalog", "version": 1, "families": ['
    good = '{"name": "a", "seed": 1, "kind": "attention", "case_kind": "attn_core", "certify": "none", "about": "x"}'
    assert catalog.parse(head + good + "]}")[0].name == "a"
    drawn = catalog.parse(head + good.replace('"seed": 1', '"generated": true') + "]}")[0]
    assert drawn.generated and drawn.seed is None
    for bad in (head + "]}", head + good + "," + good + "]}",
                head + good.replace('"attention"', '"tensor"') + "]}",
                head + good.replace('"certify": "none"', '"certify": "De code"') + "]}",
                head + good.replace('"seed": 1', '"generated": true, "seed": 1') + "]}",
                head + good.replace('"seed": 1', '"generated": "yes"') + "]}",
                head + good.replace('"seed": 1, ', '') + "]}",
                '{"format": "other", "version": 1, "families": []}'):
        with pytest.raises(ValueError):
            catalog.parse(bad)


def test_an_undescribed_family_cannot_register_a_writer():
    with pytest.raises(KeyError):
        goldens.family_writer("no_such_family")(lambda root, seed0: None)
