"""--precision auto: bfloat16 only where the device computes it natively (no test depends on
the CPU it runs on: flags and GPU capabilities are passed in)."""

from __future__ import annotations

import pytest

from training.precision import (
    PRECISION_CHOICES,
    cpu_description,
    cpu_flags,
    resolve_precision,
)
from training.train import build_parser

AVX2_EPYC = "fpu sse sse2 avx avx2 fma"
ZEN4 = AVX2_EPYC + " avx512f avx512_vnni avx512_bf16"
SAPPHIRE_RAPIDS = AVX2_EPYC + " avx512f avx512_bf16 amx_tile amx_bf16 amx_int8"


def _cpuinfo(tmp_path, flags: str, model: str = "AMD EPYC 7B13"):
    path = tmp_path / "cpuinfo"
    block = f"processor\t: 0\nmodel name\t: {model}\nflags\t\t: {flags}\n\n"
    path.write_text(block + block.replace(": 0", ": 1"))
    return path


@pytest.mark.parametrize(
    ("flags", "policy"),
    [
        (AVX2_EPYC, "float32"),
        (ZEN4, "mixed_bfloat16"),
        (SAPPHIRE_RAPIDS, "mixed_bfloat16"),
        ("avx512f amx_bf16", "mixed_bfloat16"),
        ("", "float32"),  # flags unreadable: never guess bfloat16
    ],
)
def test_auto_on_a_cpu_picks_bfloat16_only_with_native_instructions(flags, policy):
    got, why = resolve_precision("auto", flags=set(flags.split()), gpu_capabilities=[])
    assert got == policy
    assert why.startswith("auto: ")


@pytest.mark.parametrize(
    ("caps", "policy"),
    [
        ([(8, 0)], "mixed_bfloat16"),  # A100
        ([(9, 0), (9, 0)], "mixed_bfloat16"),  # H100 / H200
        ([(7, 5)], "float32"),  # T4
        ([(8, 6), (7, 0)], "float32"),  # one old GPU is enough to fall back
        ([(0, 0)], "float32"),  # capability not reported
    ],
)
def test_auto_with_gpus_looks_at_every_gpu_not_the_cpu(caps, policy):
    got, _ = resolve_precision("auto", flags=set(ZEN4.split()), gpu_capabilities=caps)
    assert got == policy


@pytest.mark.parametrize("pinned", ["float32", "mixed_bfloat16"])
def test_a_pinned_precision_is_kept_on_any_device(pinned):
    for flags, caps in [(AVX2_EPYC, []), (ZEN4, []), ("", [(7, 5)]), ("", [(9, 0)])]:
        got, why = resolve_precision(pinned, flags=set(flags.split()), gpu_capabilities=caps)
        assert (got, "set explicitly" in why) == (pinned, True)


def test_unknown_precision_is_an_error():
    with pytest.raises(ValueError, match="not one of"):
        resolve_precision("float16", flags=set(), gpu_capabilities=[])


def test_cpu_flags_and_description_come_from_cpuinfo(tmp_path):
    path = _cpuinfo(tmp_path, ZEN4)
    assert cpu_flags(path) >= {"avx2", "avx512_bf16"}
    desc = cpu_description(path)
    assert desc["model"] == "AMD EPYC 7B13"
    assert desc["flags"] == ["avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16"]
    assert desc["native_bfloat16"] is True
    assert cpu_description(_cpuinfo(tmp_path, AVX2_EPYC))["native_bfloat16"] is False
    missing = cpu_description(tmp_path / "absent")
    assert (missing["model"], missing["flags"], missing["native_bfloat16"]) == (
        "unknown",
        [],
        False,
    )


def test_trainer_defaults_to_auto_and_accepts_every_choice():
    parser = build_parser()
    base = ["--model-type", "cnn", "--saved-model-dir", "m", "--checkpoint-dir", "c"]
    assert parser.parse_args(base).precision == "auto"
    for choice in PRECISION_CHOICES:
        assert parser.parse_args([*base, "--precision", choice]).precision == choice
    with pytest.raises(SystemExit):
        parser.parse_args([*base, "--precision", "float16"])
