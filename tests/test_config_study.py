"""The `study:` section (issue 56 item 1, the sweep's side): parsed into SweepConfig.study,
refused in one line naming the field and the fix before anything is computed, no part of the
store's fingerprint, and recorded in the store by a real sweep when it starts — a changed
declaration after the data appended to the history and marked so."""
from __future__ import annotations

import pytest
import yaml
import zarr
from conftest import local_client

from sweep.cli import main
from sweep.config.identity import fingerprint
from sweep.config.load import ConfigError, config_from_dict
from sweep.format.study import HISTORY, STUDY, Study
from sweep.plan.make import plan_from_dict
from sweep.run import run_sweep

STUDY_DOC = {"layers": [1], "observables": ["beta", "density"], "against": ["random_init"]}


def _doc(ck, store, study=STUDY_DOC, **more) -> dict:
    doc = {"model": {"path": str(ck["gpt2"]), "name": "gpt2",
                     "nulls": {"random_init": 2, "sequences": 1}},
           "inputs": {"sequences": 1, "length": 4, "seed": 0}, "layers": [0, 1],
           "store": str(store), "compute": {"token_block": 4, "live_every": 0}, **more}
    if study is not None:
        doc["study"] = study
    return doc


def test_the_section_is_parsed_into_a_study(tiny_checkpoints, tmp_path):
    cfg = config_from_dict(_doc(tiny_checkpoints, tmp_path / "s.zarr",
                                study={**STUDY_DOC, "against": {"beta": ["random_init"],
                                                                "density": "random_init"},
                                       "level": 0.9}))
    assert cfg.study == Study(layers=(1,), observables=("beta", "density"),
                              against={"beta": ["random_init"], "density": ["random_init"]},
                              level=0.9)
    assert cfg.study.tests() == [("beta", 1, "random_init"), ("density", 1, "random_init")]
    assert config_from_dict(_doc(tiny_checkpoints, tmp_path / "s.zarr", study=None)).study is None


def test_the_study_is_not_part_of_the_fingerprint(tiny_checkpoints, tmp_path):
    declared = config_from_dict(_doc(tiny_checkpoints, tmp_path / "s.zarr"))
    other = config_from_dict(_doc(tiny_checkpoints, tmp_path / "s.zarr",
                                  study={**STUDY_DOC, "level": 0.99}))
    none = config_from_dict(_doc(tiny_checkpoints, tmp_path / "s.zarr", study=None))
    assert fingerprint(declared) == fingerprint(other) == fingerprint(none)


BAD = {
    "unknown field": ({**STUDY_DOC, "layer": [1]},
                      "study.layer: unknown field — did you mean 'layers'? (known: layers, "
                      "observables, against, level)"),
    "unknown observable": ({**STUDY_DOC, "observables": ["beta", "density", "betta"]},
                           "study.observables: unknown 'betta' — choose from beta, density, "
                           "tail_width, log_frobenius, nonnormality, alignment, kernel_nonnormality "
                           "(docs/analysis.md)"),
    "no density": ({**STUDY_DOC, "observables": ["beta"]},
                   "study.observables: 'density' is missing — every study declares beta and density"),
    "level": ({**STUDY_DOC, "level": 1.5},
              "study.level: must lie strictly between 0 and 1, got 1.5 — e.g. 0.95"),
    "level type": ({**STUDY_DOC, "level": "high"},
                   "study.level: expected a number, got 'high' (str) — fix the value "
                   "(docs/config.md lists every field)"),
    "layers type": ({**STUDY_DOC, "layers": 1},
                    "study.layers: expected a list, got 1 (int) — fix the value (docs/config.md "
                    "lists every field)"),
    "a kind not swept": ({**STUDY_DOC, "against": ["random_init", "shuffled"]},
                         "study.against: gpt2 sweeps no shuffled nulls (its nulls: random_init 2) "
                         "— add `shuffled: 8` under model.nulls, or remove shuffled from "
                         "study.against"),
    "one seed": ({**STUDY_DOC, "against": ["random_init"]},
                 "study.against: model.nulls.random_init is 1, and a test against random_init "
                 "needs at least 2 seeds — raise it to 2 or more, or remove random_init from "
                 "study.against"),
    "alignment without depth": ({**STUDY_DOC, "observables": ["beta", "density", "alignment"]},
                                "study.observables: 'alignment' is measured on stacked blocks, "
                                "which only a sweep with `depth:` computes — add e.g. `depth: "
                                "{spans: [2]}`, or remove 'alignment'"),
    "a layer not swept": ({**STUDY_DOC, "layers": [1, 5]},
                          "study.layers: layer 5 is not swept for gpt2 (swept: 0, 1) — add it to "
                          "layers, or remove it from study.layers"),
    "stray observable": ({**STUDY_DOC, "against": {"beta": ["random_init"],
                                                   "density": ["random_init"],
                                                   "tail_width": ["random_init"]}},
                         "study.against.tail_width: is not a declared observable — declare it "
                         "under study.observables or remove it"),
}


@pytest.mark.parametrize("kind", sorted(BAD))
def test_a_bad_declaration_is_one_line_before_anything_runs(tiny_checkpoints, tmp_path, kind):
    study, message = BAD[kind]
    doc = _doc(tiny_checkpoints, tmp_path / "s.zarr", study=study)
    if kind == "one seed":
        doc["model"]["nulls"]["random_init"] = 1
    with pytest.raises(ConfigError) as e:
        plan_from_dict(doc)                  # the config, then what the checkpoint says
    assert str(e.value) == message
    assert not (tmp_path / "s.zarr").exists()


def test_the_cli_refuses_a_bad_declaration_in_one_line(tiny_checkpoints, tmp_path, capsys):
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(_doc(tiny_checkpoints, tmp_path / "s.zarr",
                                        study={**STUDY_DOC, "layers": [7]})))
    assert main(["sweep", str(path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tdos: error: study.layers: layer 7 is not swept for gpt2") and err.count("\n") == 1


def test_a_sweep_records_the_study_and_a_changed_one_after_the_data(tiny_checkpoints, tmp_path,
                                                                     capsys):
    store = tmp_path / "s.zarr"
    first = config_from_dict(_doc(tiny_checkpoints, store))
    with local_client(1) as client:
        res = run_sweep(first, client=client, progress=False)
        assert res.exit_code == 0
        attrs = zarr.open_group(str(store), mode="r").attrs
        rec = attrs[STUDY]
        assert {k: rec[k] for k in ("level", "layers", "observables", "against")} == {
            "level": 0.95, "layers": [1], "observables": ["beta", "density"],
            "against": ["random_init"]}
        assert rec["id"] == first.study.id and rec["after_data"] is False
        assert rec["declared"].endswith("Z") and attrs[HISTORY] == [rec]
        assert "study declared: beta, density against random_init at layers 1" in capsys.readouterr().out

        again = run_sweep(first, client=client, progress=False)        # the same declaration
        assert again.exit_code == 0 and again.planned == 0
        assert zarr.open_group(str(store), mode="r").attrs[HISTORY] == [rec]

        changed = config_from_dict(_doc(tiny_checkpoints, store, study={**STUDY_DOC, "level": 0.9}))
        assert run_sweep(changed, client=client, progress=False).exit_code == 0
    attrs = zarr.open_group(str(store), mode="r").attrs
    now = attrs[STUDY]
    assert now["id"] == changed.study.id != rec["id"]
    assert now["level"] == 0.9 and now["after_data"] is True        # layer 1's blocks were there
    assert attrs[HISTORY] == [rec, now]
    assert Study.from_record(now) == changed.study
    capsys.readouterr()
    assert main(["status", str(store)]) == 0
    lines = [x for x in capsys.readouterr().out.splitlines() if x.startswith("study:")]
    assert lines == [f"study: beta, density against random_init at layers 1, family-wise level 0.9 "
                     f"(Holm); declared {now['declared']}, after the data (1 earlier declaration "
                     f"in study_history)"]
