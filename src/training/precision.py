"""Training precision: ``float32``, ``mixed_bfloat16``, or ``auto`` (the default).

``mixed_bfloat16`` (tf-keras mixed precision: bfloat16 compute, float32 weights) is only fast
where the device computes bfloat16 natively: measured here, 1.44-1.5x faster per process on a
CPU with AVX512_BF16, and about 8x slower on one without (docs/training.md). ``auto`` therefore
picks bfloat16 only where it is native:

* GPUs visible: every one has CUDA compute capability >= 8.0 (Ampere or newer, the first
  generation with bfloat16 tensor cores);
* CPU only: the CPU advertises ``avx512_bf16`` (Cooper Lake, Sapphire Rapids, AMD Zen 4) or
  ``amx_bf16`` (Sapphire Rapids AMX) in ``/proc/cpuinfo``, the instructions oneDNN's bfloat16
  kernels use;

and float32 everywhere else (an AVX2-only CPU, an older GPU, a machine whose CPU flags cannot be
read). The trainer logs the choice and its reason at start-up.
"""

from __future__ import annotations

import os
from pathlib import Path

PRECISIONS = ("float32", "mixed_bfloat16")  # tf-keras mixed-precision policy names
PRECISION_CHOICES = ("auto", *PRECISIONS)
NATIVE_BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")
MIN_BF16_GPU_CAPABILITY = (8, 0)
CPUINFO = Path("/proc/cpuinfo")
# Flags worth naming in a benchmark: the vector extensions TensorFlow/oneDNN dispatch on.
REPORTED_CPU_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16")


def _cpuinfo_field(cpuinfo: Path, name: str) -> str:
    try:
        text = cpuinfo.read_text()
    except OSError:
        return ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == name:
            return value.strip()
    return ""


def cpu_flags(cpuinfo: Path = CPUINFO) -> set[str]:
    """The first CPU's flags from ``cpuinfo`` (Linux ``/proc/cpuinfo`` format); an empty set
    when the file cannot be read (another OS, a sandbox)."""
    return set(_cpuinfo_field(cpuinfo, "flags").split())


def cpu_description(cpuinfo: Path = CPUINFO) -> dict:
    """What a benchmark table records about the CPU: ``{"model": str, "cores": int,
    "flags": [the REPORTED_CPU_FLAGS it has], "native_bfloat16": bool}``."""
    flags = cpu_flags(cpuinfo)
    return {
        "model": _cpuinfo_field(cpuinfo, "model name") or "unknown",
        "cores": os.cpu_count() or 0,
        "flags": [f for f in REPORTED_CPU_FLAGS if f in flags],
        "native_bfloat16": any(f in flags for f in NATIVE_BF16_CPU_FLAGS),
    }


def gpu_compute_capabilities() -> list[tuple[int, int]]:
    """Compute capability ``(major, minor)`` of every GPU TensorFlow sees ([] on a CPU-only
    machine; ``(0, 0)`` for a GPU whose capability TensorFlow does not report)."""
    import tensorflow as tf

    caps = []
    for gpu in tf.config.list_physical_devices("GPU"):
        details = tf.config.experimental.get_device_details(gpu)
        caps.append(tuple(details.get("compute_capability") or (0, 0)))
    return caps


def resolve_precision(
    requested: str,
    *,
    flags: set[str] | None = None,
    gpu_capabilities: list[tuple[int, int]] | None = None,
) -> tuple[str, str]:
    """The tf-keras policy to train with, and why.

    Args:
        requested: one of :data:`PRECISION_CHOICES`; ``float32``/``mixed_bfloat16`` are kept
            as they are (an environment that pins its precision).
        flags: the CPU's flags (default: :func:`cpu_flags`).
        gpu_capabilities: the visible GPUs' compute capabilities (default:
            :func:`gpu_compute_capabilities`).

    Returns:
        ``(policy, reason)``: a name in :data:`PRECISIONS` and one line for the log.

    Raises:
        ValueError: ``requested`` is not in :data:`PRECISION_CHOICES`.
    """
    if requested not in PRECISION_CHOICES:
        raise ValueError(f"precision {requested!r} is not one of {PRECISION_CHOICES}")
    if requested != "auto":
        return requested, f"--precision {requested} (set explicitly)"
    caps = gpu_compute_capabilities() if gpu_capabilities is None else gpu_capabilities
    if caps:
        old = [c for c in caps if tuple(c) < MIN_BF16_GPU_CAPABILITY]
        if old:
            return "float32", f"auto: GPU compute capability {old[0]} < 8.0 has no bfloat16"
        return "mixed_bfloat16", f"auto: every GPU has compute capability >= 8.0 {sorted(caps)}"
    flags = cpu_flags() if flags is None else flags
    native = [f for f in NATIVE_BF16_CPU_FLAGS if f in flags]
    if native:
        return "mixed_bfloat16", f"auto: the CPU computes bfloat16 natively ({', '.join(native)})"
    return "float32", "auto: the CPU has no native bfloat16 (no avx512_bf16/amx_bf16 flag)"


def built_in_float32(build, *args, **kwargs):
    """``build(*args, **kwargs)`` (a Keras model builder) under the float32 policy, the caller's
    global policy restored afterwards (layers record the policy they were built under: a
    float32 copy for an export, or a description that must not depend on what a trainer left
    set). Used by :func:`training.torch_export.to_keras` and the training benchmark."""
    import tf_keras as keras

    policy = keras.mixed_precision.global_policy().name
    keras.mixed_precision.set_global_policy("float32")
    try:
        return build(*args, **kwargs)
    finally:
        keras.mixed_precision.set_global_policy(policy)
