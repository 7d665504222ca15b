"""precision.py: bfloat16 is chosen where torch says the hardware has it natively, float32 elsewhere, with a reason."""

import pytest
import torch

from vanilla_transformer.precision import bf16_support, fast_attention_implementation, resolve_dtype


@pytest.mark.parametrize(
    "avx512_bf16, amx, native, word",
    [
        (True, False, True, "AVX512_BF16"),
        (False, True, True, "AMX"),
        (True, True, True, "AMX"),
        (False, False, False, "emulated"),
    ],
)
def test_cpu_bfloat16_is_native_with_avx512_bf16_or_amx(monkeypatch, avx512_bf16, amx, native, word):
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    assert bf16_support("cpu")[0] is native and word in bf16_support("cpu")[1]
    dtype, reason = resolve_dtype("auto", "cpu")
    assert dtype == (torch.bfloat16 if native else torch.float32) and word in reason


def test_this_machine_is_asked_through_torch():
    native, reason = bf16_support("cpu")
    assert native == (torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())
    assert torch.backends.cpu.get_cpu_capability() in reason


def test_explicit_dtypes_and_bad_names():
    assert resolve_dtype("float32", "cpu") == (torch.float32, "asked for")
    assert resolve_dtype("bfloat16", "cpu")[0] == torch.bfloat16
    with pytest.raises(ValueError, match="'int8'.*auto, float32, bfloat16"):
        resolve_dtype("int8", "cpu")
    with pytest.raises(ValueError, match="'float64x'"):
        resolve_dtype("float64x", "cpu")


def test_eager_attention_only_for_bfloat16_on_a_cpu():
    assert fast_attention_implementation("cpu", torch.bfloat16) == "eager"
    assert fast_attention_implementation("cpu", torch.float32) is None
    assert fast_attention_implementation("cuda", torch.bfloat16) is None
