"""The continuous backend's plan: precision, attention, CUDA graphs and the flash guard, as
pure functions of what the machine has (`swarm.policy.decode_plan`)."""

import pytest

from swarm.policy.continuous import batching_config
from swarm.policy.decode_plan import (
    DecodePlan,
    decode_plan,
    flash_attention_fails,
    generation_dtype,
    version_tuple,
)


def test_versions_read_as_major_minor():
    assert version_tuple("5.17.0") == (5, 17)
    assert version_tuple("5.25.0.dev0") == (5, 25)
    assert version_tuple("5.19") == (5, 19)
    with pytest.raises(ValueError):
        version_tuple("main")


@pytest.mark.parametrize(
    ("device", "module", "bf16", "want"),
    [
        ("cuda", "float32", True, "bfloat16"),  # fp32 master weights: a bf16 generation copy
        ("cuda", "float32", False, "float32"),  # a card without bf16 keeps fp32
        ("cuda", "bfloat16", True, "bfloat16"),  # already 16-bit: no copy
        ("cuda", "float16", True, "float16"),
        ("cpu", "float32", True, "float32"),  # a CPU keeps what works
        ("cpu", "bfloat16", False, "bfloat16"),
    ],
)
def test_generation_dtype(device, module, bf16, want):
    assert generation_dtype(device, module, bf16) == want


@pytest.mark.parametrize(
    ("version", "dtype", "flash", "fails"),
    [
        ("5.17.0", "float32", True, True),  # switches to flash, the kernel refuses fp32
        ("5.18.0", "float32", True, True),
        ("5.19.0", "float32", True, True),
        ("5.24.1", "float32", True, True),  # unread: treated as not checking
        ("5.25.0", "float32", True, False),  # checks the dtype before switching
        ("5.26.0", "float32", True, False),
        ("6.0.0", "float32", True, False),
        ("5.17.0", "bfloat16", True, False),  # flash runs 16-bit
        ("5.19.0", "float16", True, False),
        ("5.17.0", "float32", False, False),  # nothing to switch to
    ],
)
def test_the_flash_guard(version, dtype, flash, fails):
    assert flash_attention_fails(version, dtype, flash) is fails


def test_a_cpu_runs_the_paged_engine_in_fp32_on_the_module_itself():
    plan = decode_plan("cpu", "float32", "5.25.0")
    assert plan == DecodePlan("float32", False, "paged", False, False)


def test_a_card_without_flash_runs_the_paged_engine_on_a_bf16_copy():
    plan = decode_plan("cuda", "float32", "5.17.0", bf16_supported=True)
    assert plan == DecodePlan("bfloat16", True, "paged", False, False)


def test_a_card_with_flash_runs_transformers_flash_paths_with_cuda_graphs():
    for version in ("5.17.0", "5.19.0", "5.25.0"):
        plan = decode_plan("cuda", "float32", version, True, flash_package=True)
        assert plan == DecodePlan("bfloat16", True, "flash", True, False)


def test_fp32_on_a_card_with_flash_stays_off_flash():
    """No bf16 (an older card): the flash kernels would refuse the fp32 module."""
    for version in ("5.17.0", "5.19.0", "5.25.0"):
        auto = decode_plan("cuda", "float32", version, False, True, True)
        assert auto.attention == "paged" and auto.dtype == "float32"
    old = decode_plan("cuda", "float32", "5.17.0", False, True, True, attention="library")
    assert old == DecodePlan("float32", False, "sdpa", False, True)  # pinned to paged|sdpa
    new = decode_plan("cuda", "float32", "5.25.0", False, True, True, attention="library")
    assert new == DecodePlan("float32", False, "sdpa", False, False)


def test_the_library_path_can_be_asked_for_and_the_paged_one_forced():
    assert decode_plan("cpu", "float32", "5.25.0", attention="library").attention == "sdpa"
    forced = decode_plan("cuda", "float32", "5.25.0", True, True, True, attention="paged")
    assert forced.attention == "paged" and forced.copy
    with pytest.raises(ValueError):
        decode_plan("cpu", "float32", "5.25.0", attention="flash")


def test_transformers_config_follows_the_plan():
    flash = DecodePlan("bfloat16", True, "flash", True, False)
    sdpa = DecodePlan("float32", False, "sdpa", False, False)
    on = batching_config([[1, 2, 3]], 4, 8, 64, flash)
    off = batching_config([[1, 2, 3]], 4, 8, 64, sdpa)
    assert on.use_cuda_graph is True and off.use_cuda_graph is False
    if hasattr(off, "auto_switch_to_flash"):  # 5.25 has the switch; 5.17-5.19 are pinned
        assert off.auto_switch_to_flash is False and on.auto_switch_to_flash is True


def test_the_memory_plan_counts_the_bf16_copy_and_cache_on_cuda_only():
    from swarm.policy.memory import Generator, ModelShape, Setup, Workload, estimate

    shape = ModelShape(494_000_000, 24, 896, 4864, 14, 2, 64, 151_936)
    work = Workload(32, 8, 300, 1024, 32, 256, 16)
    cuda = estimate(shape, work, Setup(cuda=True, generator=Generator.CONTINUOUS))
    cpu = estimate(shape, work, Setup(cuda=False, generator=Generator.CONTINUOUS))
    copy = [p for p in cuda.parts if p.name == "bf16 generation copy"]
    assert len(copy) == 1 and copy[0].bytes == 2 * shape.parameters
    assert not any(p.name == "bf16 generation copy" for p in cpu.parts)
    cache = 256 * (300 + 1024) * 2 * shape.kv_width * shape.layers
    generation = [p for p in cuda.parts if p.name.startswith("generation")][0]
    assert cache * 2 <= generation.bytes < cache * 2 + 2 << 30  # bf16 cache plus logits
