"""Model selection: the best of known candidates, corrupt ones skipped, atomic publishing."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from training import select as selection
from training.export import INPUT_NAME, OUTPUT_NAME, SIGNATURE_KEY

N = 300


def export_constant_classifier(path: Path, cls: int) -> None:
    """A SavedModel with the serving signature that always answers ``cls`` (p=0.91)."""

    class Const(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name=INPUT_NAME)])
        def serve(self, image_bytes):
            n = tf.shape(image_bytes)[0]
            probs = tf.one_hot(tf.fill([n], cls), 10, on_value=0.91, off_value=0.01)
            return {OUTPUT_NAME: probs}

    m = Const()
    tf.saved_model.save(m, str(path), signatures={SIGNATURE_KEY: m.serve})


@pytest.fixture()
def candidates(tmp_path, test_slice, exported_model):
    """cnn = a trained model; dropout/batch_norm = constant classifiers with known accuracy."""
    _, labels = test_slice
    labels = labels[:N]
    counts = np.bincount(labels, minlength=10)
    common, rare = int(np.argmax(counts)), int(np.argmin(counts))
    root = tmp_path / "candidates"
    shutil.copytree(exported_model, root / "cnn")
    export_constant_classifier(root / "dropout", common)
    export_constant_classifier(root / "batch_norm", rare)
    known = {"dropout": counts[common] / N, "batch_norm": counts[rare] / N}
    return root, known


def run(tmp_path, root, *extra):
    argv = [
        "--candidates-dir", str(root),
        "--serving-base-path", str(tmp_path / "models" / "fashion-mnist"),
        "--report", str(tmp_path / "reports" / "selection.json"),
        "--test-examples", str(N),
        *extra,
    ]  # fmt: skip
    return selection.main(selection.build_parser().parse_args(argv))


def test_picks_the_best_and_reports_every_candidate(tmp_path, candidates):
    root, known = candidates
    report = run(tmp_path, root)
    c = report["candidates"]
    for name, acc in known.items():
        assert c[name]["accuracy"] == pytest.approx(acc)
    assert c["cnn"]["accuracy"] > max(known.values())
    assert report["chosen_model"] == "cnn"
    assert report["version"] == 1 and report["published"]
    assert report["model_path"] == str(tmp_path / "models/fashion-mnist/1")
    assert (tmp_path / "models/fashion-mnist/1/1/saved_model.pb").is_file()
    record = json.loads((tmp_path / "models/fashion-mnist/1/selection.json").read_text())
    assert (record["version"], record["model"]) == (1, "cnn")
    assert record["accuracy"] == pytest.approx(c["cnn"]["accuracy"])
    assert sorted(p.name for p in (tmp_path / "models/fashion-mnist/1").iterdir()) == [
        "1",
        "selection.json",
    ]  # nothing else: no lock file, no staging leftovers
    on_disk = json.loads((tmp_path / "reports/selection.json").read_text())
    assert on_disk["chosen_model"] == "cnn" and on_disk["candidates"]["dropout"]["loss"] > 0


def test_next_run_publishes_the_next_integer_version(tmp_path, candidates):
    root, _ = candidates
    base = tmp_path / "models" / "fashion-mnist"
    (base / ".staging-7-deadbeef").mkdir(parents=True)  # leftovers are not versions
    (base / "notes").mkdir()
    assert run(tmp_path, root)["version"] == 1
    assert run(tmp_path, root)["version"] == 2
    assert sorted(p.name for p in base.iterdir() if p.name.isdigit()) == ["1", "2"]


def test_an_empty_version_directory_is_published_into(tmp_path, candidates):
    """The kubelet makes an empty directory for a storageUri subPath that names a version not
    published yet (a promotion ahead of its run): it does not take its number, and the next
    publication of that number replaces it; an empty directory further on stays as it is."""
    root, _ = candidates
    base = tmp_path / "models" / "fashion-mnist"
    (base / "1").mkdir(parents=True)
    (base / "3").mkdir()
    report = run(tmp_path, root)
    assert report["version"] == 1 and (base / "1" / "1" / "saved_model.pb").is_file()
    assert run(tmp_path, root)["version"] == 2
    assert not any((base / "3").iterdir())
    shutil.rmtree(base / "2" / "2")  # a version directory that is not empty keeps its number
    assert run(tmp_path, root)["version"] == 3 and (base / "3" / "3" / "saved_model.pb").is_file()


def test_corrupt_and_missing_candidates_are_reported_and_skipped(tmp_path, candidates):
    root, known = candidates
    (root / "cnn" / "saved_model.pb").write_bytes(b"\x00garbage")
    shutil.rmtree(root / "batch_norm")
    report = run(tmp_path, root)
    assert report["candidates"]["cnn"]["status"] == "invalid"
    assert report["candidates"]["batch_norm"]["status"] == "invalid"
    assert "no saved_model.pb" in report["candidates"]["batch_norm"]["error"]
    assert report["chosen_model"] == "dropout"
    assert report["candidates"]["dropout"]["accuracy"] == pytest.approx(known["dropout"])


def test_no_valid_candidate_publishes_nothing_and_exits_1(tmp_path):
    root = tmp_path / "candidates"
    (root / "cnn").mkdir(parents=True)
    (root / "cnn" / "saved_model.pb").write_bytes(b"junk")
    argv = [
        "--candidates-dir", str(root),
        "--serving-base-path", str(tmp_path / "models"),
        "--report", str(tmp_path / "selection.json"),
        "--test-examples", "50",
    ]  # fmt: skip
    assert selection.cli(argv) == 1
    assert not (tmp_path / "models").exists() or not any((tmp_path / "models").iterdir())
    report = json.loads((tmp_path / "selection.json").read_text())
    assert report["published"] is False and "no valid candidate" in report["error"]


def test_min_accuracy_gate(tmp_path, candidates):
    root, _ = candidates
    with pytest.raises(selection.SelectionError, match="min-accuracy"):
        run(tmp_path, root, "--min-accuracy", "0.999")
    assert not (tmp_path / "models/fashion-mnist/1").exists()


@pytest.mark.parametrize(
    ("option", "bad", "message"),
    [
        ("--min-accuracy", "nan", "must be in [0, 1]"),
        ("--min-accuracy", "1.5", "must be in [0, 1]"),
        ("--min-accuracy", "-0.1", "must be in [0, 1]"),
        ("--test-examples", "-9990", "must be"),  # once published a model scored on 10 images
        ("--batch-size", "0", "must be"),
        ("--jpeg-quality", "500", "must be in [1, 95]"),
    ],
)
def test_out_of_range_options_are_usage_errors(option, bad, message, capsys):
    with pytest.raises(SystemExit) as exc:
        selection.build_parser().parse_args([option, bad, "--candidates-dir", "c"])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_crash_while_copying_leaves_no_loadable_version(tmp_path, candidates, monkeypatch):
    root, _ = candidates
    real_copytree = shutil.copytree

    def copy_then_crash(src, dst, *a, **kw):
        real_copytree(src, dst, *a, **kw)  # everything is written to the staging dir...
        raise OSError("disk full")  # ...and then the copy fails

    monkeypatch.setattr(selection.shutil, "copytree", copy_then_crash)
    with pytest.raises(OSError, match="disk full"):
        run(tmp_path, root)
    base = tmp_path / "models" / "fashion-mnist"
    assert [p.name for p in base.iterdir()] == [], "no version dir and no staging dir left"
    monkeypatch.undo()
    assert run(tmp_path, root)["version"] == 1


def test_stale_candidates_of_another_run_are_skipped(tmp_path, candidates):
    root, _ = candidates
    (root / "dropout" / "training_history.json").write_text(json.dumps({"run_id": "run-7"}))
    (root / "cnn" / "training_history.json").write_text(json.dumps({"run_id": "run-6"}))
    report = run(tmp_path, root, "--run-id", "run-7")
    assert report["chosen_model"] == "dropout"
    assert "stale candidate" in report["candidates"]["cnn"]["error"]
    assert "cannot tell which run" in report["candidates"]["batch_norm"]["error"]


def test_candidates_of_the_runs_named_are_accepted(tmp_path, candidates):
    """A select alone (the pipeline's `--run-id <own run>,<candidates-runs>`): candidates of
    any run named are ranked; one of a run not named is still stale."""
    root, _ = candidates
    for model_type, run_id in (("cnn", "train-a"), ("dropout", "train-b"), ("batch_norm", "x")):
        (root / model_type / "training_history.json").write_text(json.dumps({"run_id": run_id}))
    report = run(tmp_path, root, "--run-id", "select-wf, train-a,,train-b")
    assert {m for m, r in report["candidates"].items() if r["status"] == "ok"} == {"cnn", "dropout"}
    error = report["candidates"]["batch_norm"]["error"]
    assert "trained by run 'x', not one of ['select-wf', 'train-a', 'train-b']" in error
    assert report["published"] and report["version"] == 1


def test_a_run_id_list_without_a_run_is_a_usage_error(tmp_path, candidates, capsys):
    root, _ = candidates
    with pytest.raises(SystemExit) as exc:
        run(tmp_path, root, "--run-id", " , ")
    assert exc.value.code == 2 and "no run id in ' , '" in capsys.readouterr().err


def test_outputs_that_are_not_probabilities_are_rejected(tmp_path):
    class Fives(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name=INPUT_NAME)])
        def serve(self, image_bytes):
            return {OUTPUT_NAME: tf.fill([tf.shape(image_bytes)[0], 10], 5.0)}

    m = Fives()
    tf.saved_model.save(m, str(tmp_path / "c" / "cnn"), signatures={SIGNATURE_KEY: m.serve})
    report_path = tmp_path / "r.json"
    argv = [
        "--candidates-dir", str(tmp_path / "c"), "--model-types", "cnn",
        "--serving-base-path", str(tmp_path / "m"), "--report", str(report_path),
        "--test-examples", "20",
    ]  # fmt: skip
    assert selection.cli(argv) == 1
    assert "not probabilities" in json.loads(report_path.read_text())["candidates"]["cnn"]["error"]


def test_version_numbering_ignores_junk_and_counts_integer_files(tmp_path):
    base = tmp_path / "base"
    base.mkdir()
    (base / "4").mkdir()
    (base / "4" / "x").write_text("")
    (base / "5").write_text("not a model, but version 5 is taken")
    (base / "8").mkdir()  # empty: not taken (test_an_empty_version_directory_is_published_into)
    (base / "\u00b2").mkdir()  # a unicode digit: not a version
    (base / ".staging-9-abc").mkdir()
    assert selection.next_version(base) == 6
    (base / str(2**63 - 1)).write_text("")
    with pytest.raises(selection.SelectionError, match="int64"):
        selection.next_version(base)


def test_unwritable_report_fails_before_publishing(tmp_path, candidates):
    root, _ = candidates
    blocker = tmp_path / "reports"
    blocker.write_text("a file where the report directory should be")
    with pytest.raises(OSError):
        run(tmp_path, root)
    assert not (tmp_path / "models" / "fashion-mnist" / "1").exists()
