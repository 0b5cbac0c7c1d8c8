"""Does TF Serving X.Y.Z load this project's SavedModel and answer as this project's TensorFlow?

TF Serving X.Y.Z is built on TensorFlow X.Y.Z (its release notes name the TensorFlow version),
so this check installs ``tensorflow-cpu==X.Y.Z`` into a separate virtual environment under the
user's cache directory (``$XDG_CACHE_HOME/fashion-mnist-gitops/tf-X.Y.Z``, never the repository),
loads the exported SavedModel there with ``tf.saved_model.load`` and calls ``serving_default``
on a string tensor, as TF Serving runs it, and compares the probabilities with the ones this
project's TensorFlow computes in-process.

    python bench/tf_serving_compat.py [--tf-serving-version 2.20.0] [--model-dir DIR]

Default version: the ``runtimeVersion`` pinned in ``base/ml/serving/inferenceservice.yaml``.
Default model: the highest version published under ``work/models/fashion-mnist`` (``make
demo``), else a
``--model-type`` (``batch_norm``) exported on the fly, trained briefly when ``$TFDS_DATA_DIR``
holds the dataset.
Inputs: real test images when the dataset is there (else synthetic ones) in every JPEG/PNG kind
the signature accepts (grey/RGB/CMYK/progressive JPEG; grey/16-bit/palette/grey+alpha/RGBA PNG),
at 28x28 and resized. Writes ``bench/results/tf_serving_compat.{json,md}``; exit 0 when every
probability agrees within ``--atol`` (1e-5) and every predicted class is the same. Needs PyPI
access for the first run (about 250 MB); a benchmark-style check, not part of ``make test``.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from fmnist_common import INPUT_NAME, MODEL_NAME, MODEL_TYPES, OUTPUT_NAME, SIGNATURE_KEY
from fmnist_common.cli import ConfigError, run_cli

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
log = logging.getLogger("bench")
ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
ISVC = ROOT / "base" / "ml" / "serving" / "inferenceservice.yaml"

# Runs inside the other environment: load, call the signature as TF Serving does, save.
CHILD = """
import sys, numpy as np, tensorflow as tf
model_dir, inputs, out = sys.argv[1:4]
data = np.load(inputs, allow_pickle=False)
ends = data["ends"].tolist()
blob = data["blob"].tobytes()
images = [blob[a:b] for a, b in zip([0] + ends[:-1], ends)]
sig = tf.saved_model.load(model_dir).signatures[{key!r}]
probs = sig(**{{{name!r}: tf.constant(images, dtype=tf.string)}})[{output!r}].numpy()
np.savez(out, probs=probs, tf_version=np.array(tf.__version__))
"""


def pinned_version() -> str:
    """``runtimeVersion`` of the InferenceService (the TF Serving image tag), without ``-gpu``.

    Raises:
        ConfigError: the manifest has no ``runtimeVersion``.
    """
    found = re.search(r'runtimeVersion:\s*"?([0-9][^"\s]*)"?', ISVC.read_text())
    if not found:
        raise ConfigError(f"no runtimeVersion in {ISVC}; pass --tf-serving-version")
    return found.group(1).removesuffix("-gpu")


def cache_root() -> Path:
    """``$XDG_CACHE_HOME/fashion-mnist-gitops`` (default ``~/.cache/...``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base) / "fashion-mnist-gitops"


def ensure_venv(tf_version: str) -> Path:
    """A virtual environment with ``tensorflow-cpu==tf_version``; returns its python.

    Raises:
        ConfigError: the environment cannot be created or the wheel not installed.
    """
    venv = cache_root() / f"tf-{tf_version}"
    python = venv / "bin" / "python"
    if python.exists():
        probe = [str(python), "-c", "import tensorflow as tf; print(tf.__version__)"]
        found = subprocess.run(probe, capture_output=True, text=True).stdout.strip()
        if found.splitlines()[-1:] == [tf_version]:
            return python
    log.info("creating %s with tensorflow-cpu==%s (first run only)", venv, tf_version)
    steps = [
        [sys.executable, "-m", "venv", "--clear", str(venv)],
        [str(python), "-m", "pip", "install", "-q", f"tensorflow-cpu=={tf_version}", "numpy"],
    ]
    for cmd in steps:
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["?"]
            raise ConfigError(f"{' '.join(cmd[:4])} ... failed: {tail[0]}")
    return python


def find_or_export_model(model_dir: str | None, model_type: str, work: Path) -> tuple[Path, str]:
    """The SavedModel to check and where it came from."""
    if model_dir:
        path = Path(model_dir)
        if not (path / "saved_model.pb").is_file():
            raise ConfigError(f"{path} holds no saved_model.pb")
        return path, str(path)
    from serving.versions import ModelVersionNotFoundError, find_latest_version, latest_published

    try:
        base = latest_published(ROOT / "work" / "models" / MODEL_NAME)[1]
        return find_latest_version(base)[1], "make demo"
    except ModelVersionNotFoundError:
        pass
    import training  # noqa: F401  (tf-keras)
    from training.export import export_saved_model
    from training.models import build_model

    model = build_model(model_type, seed=0)
    try:
        import tf_keras as keras

        from training.data import load_numpy

        x, y = load_numpy("train", limit=2048)
        model.compile(
            optimizer=keras.optimizers.Adam(1e-3),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
        model.fit(x.astype("float32"), y, batch_size=64, epochs=1, verbose=0)
        origin = f"{model_type}, 1 epoch on 2,048 training images"
    except FileNotFoundError:
        origin = f"{model_type}, random weights (no dataset)"
    path = work / "model"
    export_saved_model(model, path)
    return path, origin


def make_inputs(count: int) -> tuple[list[bytes], list[str]]:
    """Encoded images of every accepted kind, from real test images when available."""
    from PIL import Image

    try:
        from training.data import load_numpy

        greys = load_numpy("test", limit=count)[0][..., 0]
    except FileNotFoundError:
        greys = np.random.default_rng(0).integers(0, 255, (count, 28, 28), np.uint8)

    def save(img, fmt, **kw) -> bytes:
        buf = io.BytesIO()
        img.save(buf, format=fmt, **kw)
        return buf.getvalue()

    images, kinds = [], []
    for grey in greys:
        g = Image.fromarray(grey)
        rgb = Image.fromarray(np.stack([grey, grey // 2, 255 - grey], axis=-1))
        for kind, data in {
            "jpeg-grey": save(g, "JPEG", quality=95),
            "jpeg-rgb-56x56": save(rgb.resize((56, 56)), "JPEG"),
            "jpeg-cmyk": save(rgb.convert("CMYK"), "JPEG"),
            "jpeg-progressive": save(g, "JPEG", progressive=True),
            "png-grey": save(g, "PNG"),
            "png-16bit": save(Image.fromarray(grey.astype(np.uint16) * 257), "PNG"),
            "png-palette": save(rgb.convert("P"), "PNG"),
            "png-grey-alpha-40x30": save(g.convert("LA").resize((40, 30)), "PNG"),
            "png-rgba": save(rgb.convert("RGBA"), "PNG"),
        }.items():
            images.append(data)
            kinds.append(kind)
    return images, kinds


def build_parser() -> argparse.ArgumentParser:
    """The command line (see the module docstring)."""
    p = argparse.ArgumentParser(
        prog="python bench/tf_serving_compat.py",
        description="Load the SavedModel under TF Serving's TensorFlow and compare predictions.",
    )
    p.add_argument("--tf-serving-version", default=None, help="default: the manifest's pin")
    p.add_argument("--model-dir", default=None, help="a SavedModel version directory")
    p.add_argument(
        "--model-type",
        default="batch_norm",
        choices=MODEL_TYPES,
        help="variant exported on the fly when there is no published model",
    )
    p.add_argument("--images", type=int, default=50, help="test images (x 9 kinds)")
    p.add_argument("--atol", type=float, default=1e-5, help="largest allowed difference")
    return p


def main(args: argparse.Namespace) -> int:
    """Run the comparison; 0 when compatible, 1 when not (after writing the results)."""
    import tensorflow as tf

    version = args.tf_serving_version or pinned_version()
    python = ensure_venv(version)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model_dir, origin = find_or_export_model(args.model_dir, args.model_type, work)
        images, kinds = make_inputs(args.images)
        blob = np.frombuffer(b"".join(images), np.uint8)
        np.savez(work / "inputs.npz", blob=blob, ends=np.cumsum([len(b) for b in images]))
        sig = tf.saved_model.load(str(model_dir)).signatures[SIGNATURE_KEY]
        ours = sig(**{INPUT_NAME: tf.constant(images)})[OUTPUT_NAME].numpy()
        child = CHILD.format(key=SIGNATURE_KEY, name=INPUT_NAME, output=OUTPUT_NAME)
        t0 = time.perf_counter()
        proc = subprocess.run(
            [str(python), "-c", child, str(model_dir), str(work / "inputs.npz"), str(work / "o")],
            capture_output=True,
            text=True,
        )
        seconds = time.perf_counter() - t0
        if proc.returncode != 0:
            lines = [ln for ln in proc.stderr.strip().splitlines() if ln.strip()]
            loaded, error = False, (lines[-1] if lines else f"exit {proc.returncode}")[:500]
            theirs, their_tf = None, version
        else:
            out = np.load(work / "o.npz")
            loaded, error = True, None
            theirs, their_tf = out["probs"], str(out["tf_version"])
    result = {
        "tf_serving_version": version,
        "their_tensorflow": their_tf,
        "our_tensorflow": tf.__version__,
        "model": origin,
        "images": len(images),
        "kinds": sorted(set(kinds)),
        "loaded": loaded,
        "error": error,
        "seconds_in_other_env": round(seconds, 1),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
    }
    if loaded:
        diff = np.abs(theirs - ours)
        per_kind = {k: float(diff[[i for i, x in enumerate(kinds) if x == k]].max()) for k in kinds}
        result.update(
            max_abs_diff=float(diff.max()),
            max_abs_diff_per_kind=per_kind,
            same_class=int((theirs.argmax(1) == ours.argmax(1)).sum()),
        )
    result["compatible"] = bool(
        loaded and result["max_abs_diff"] <= args.atol and result["same_class"] == len(images)
    )
    write_results(result, args.atol)
    print(json.dumps({k: v for k, v in result.items() if k != "max_abs_diff_per_kind"}, indent=2))
    return 0 if result["compatible"] else 1


def write_results(result: dict, atol: float) -> None:
    """``bench/results/tf_serving_compat.{json,md}``."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "tf_serving_compat.json").write_text(json.dumps(result, indent=2) + "\n")
    verdict = "compatible" if result["compatible"] else "NOT compatible"
    rows = [
        "| TF Serving | its TensorFlow | ours | loads | images | max abs diff | same class |",
        "|---|---|---|---|---|---|---|",
        f"| {result['tf_serving_version']} | {result['their_tensorflow']} | "
        f"{result['our_tensorflow']} | {'yes' if result['loaded'] else 'no'} | "
        f"{result['images']} | {result.get('max_abs_diff', '-')} | "
        f"{result.get('same_class', '-')} |",
        "",
        f"Model: {result['model']}. Kinds: {', '.join(result['kinds'])}. "
        f"Verdict (atol {atol:g}): **{verdict}**"
        + (f". Error: `{result['error']}`" if result["error"] else "")
        + f". {result['machine']}, {time.strftime('%Y-%m-%d')}.",
    ]
    (RESULTS / "tf_serving_compat.md").write_text("\n".join(rows) + "\n")


def cli(argv: list[str] | None = None) -> int:
    """Console entry point."""
    return run_cli(main, build_parser(), (), argv)


if __name__ == "__main__":
    sys.exit(cli())
