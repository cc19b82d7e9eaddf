"""The GPU check's CPU dry run: `scripts/gpu_bench.py --device cpu --shape tiny`, so it never rots.

The same code as on a GPU at a shape a CPU runs in seconds: every backend that can run here
and TRL's GRPOTrainer (TRL is in the dev extra) make a full round after the same warm-up
(the random model never stops, so every completion has the shape's length), vLLM is listed
as not run with its reason, the goals are judged only from what was measured, and the
bench's bounds are the card's published peaks. The 4-node swarm of
`join` processes runs in the slow suite.
"""

import importlib.util
import json
from pathlib import Path

import pytest

from lab import gpu_bench
from lab.gpu_report import goals, table
from lab.gpu_shapes import SHAPES, card_of, decode_bound, training_bound

ROOT = Path(__file__).resolve().parents[3]


def _script():
    spec = importlib.util.spec_from_file_location("gpu_bench", ROOT / "scripts" / "gpu_bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_dry_run_makes_a_round_per_backend_and_writes_its_json(tmp_path, capsys):
    out = tmp_path / "tiny.json"
    args = ["--device", "cpu", "--shape", "tiny", "--no-swarm", "--out", str(out)]
    assert _script().main(args) == 0
    result = json.loads(out.read_text())
    shape = SHAPES["tiny"]
    arms = {a["backend"]: a for a in result["arms"]}
    assert {"transformers", "continuous", "trl"} <= set(arms)  # TRL is in the dev extra
    assert result["skipped"]["vllm"] == "vLLM needs CUDA"
    assert not [why for why in result["skipped"].values() if why.startswith("failed")]
    batch = shape.questions * shape.group
    for name in ("transformers", "continuous"):
        arm = arms[name]
        assert arm["generated_tokens"] == batch * shape.max_new_tokens
        assert (
            arm["trained_tokens"]
            == shape.questions * shape.prompt_tokens + batch * shape.max_new_tokens
        )
        assert arm["round_s"] >= arm["generate_s"] > 0 and not arm["skipped_update"]
    assert arms["continuous"]["importance_cap"] == 3.0  # its log-probs can differ
    assert arms["continuous"]["decode_plan"]["attention"] == "paged"  # its engine on a CPU
    assert arms["transformers"]["importance_cap"] == 0.0  # same module, same precision on a CPU
    assert arms["trl"]["generated_tokens"] == batch * shape.max_new_tokens
    assert arms["trl"]["round_s"] >= arms["trl"]["generate_s"] > 0
    # every arm, TRL's too, made the same warm-up round before its timed one
    assert all(arm["warm_up_s"] > 0 for arm in arms.values())
    assert "continuous_over_generate_5x" in result["goals"]
    assert "training_mfu_30pct" not in result["goals"]  # no card peak on a CPU: not measured
    assert "GPU bench: tiny" in capsys.readouterr().out


def test_the_warm_up_round_is_small_and_the_same_for_every_arm(monkeypatch):
    shape = SHAPES["qwen2.5-0.5b"]
    warm = gpu_bench.warm_up_shape(shape)
    assert (warm.questions, warm.group, warm.max_new_tokens) == (2, 2, 16)
    assert (warm.prompt_tokens, warm.vocab, warm.micro_batch_size) == (300, shape.vocab, 4)
    seen = []  # TRL's warm-up: a trainer of the warm-up shape, trained before the timed one
    made = gpu_bench.trl_trainer

    def trainer(model, tokenizer, shape, device, prompts, callbacks=()):
        seen.append((shape, len(prompts), bool(callbacks)))
        return made(model, tokenizer, shape, device, prompts, callbacks)

    monkeypatch.setattr(gpu_bench, "trl_trainer", trainer)
    tiny = SHAPES["tiny"]
    base, tokenizer = gpu_bench.random_model(tiny), gpu_bench.word_tokenizer(tiny.vocab)
    figures = gpu_bench.trl_round(base, tokenizer, tiny, "cpu")
    assert seen == [(gpu_bench.warm_up_shape(tiny), 2, False), (tiny, tiny.questions, True)]
    assert figures["warm_up_s"] > 0


def test_peak_memory_says_whether_a_vllm_engine_is_in_it(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda: 30e9)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda: 31e9)

    class Engine:
        in_process = True  # vLLM's weights and KV cache come through torch's allocator

    figures = gpu_bench.memory_figures(Engine())
    assert figures["peak_reserved_gb"] == 31.0 and figures["engine_in_peak"] is True
    assert figures["engine_memory_share"] == gpu_bench.VLLM_MEMORY_SHARE
    assert "engine_in_peak" not in gpu_bench.memory_figures(object())  # transformers' arms
    assert "not in it" not in gpu_bench.__doc__
    arm = {"backend": "vllm", "generation_tokens_per_s": 1.0, "training_tokens_per_s": 1.0,
           "round_s": 1.0, **figures}  # fmt: skip
    grid = table({"shape": "tiny", "parameters": 1, "limits": {"card": "H100"}, "arms": [arm],
                  "skipped": {}})  # fmt: skip
    assert "KV cache" in grid.caption and list(grid.columns[-1].cells) == ["31.0*"]


def test_a_bad_backend_or_a_missing_gpu_is_one_line(capsys):
    script = _script()
    assert script.main(["--device", "cpu", "--backends", "tgi", "--no-swarm"]) == 2
    assert "unknown backend(s) tgi" in capsys.readouterr().out


def test_goals_are_judged_from_what_was_measured():
    result = {
        "arms": [
            {"backend": "transformers", "generation_tokens_per_s": 100.0, "round_s": 50.0},
            {
                "backend": "continuous",
                "generation_tokens_per_s": 600.0,
                "round_s": 20.0,
                "mfu": 0.25,
                "peak_reserved_gb": 30.0,
            },
            {"backend": "trl", "generation_tokens_per_s": 90.0, "round_s": 45.0},
        ],
        "swarm": {"accepted_share": 1.0},
    }
    judged = goals(result)
    assert judged["continuous_over_generate_5x"] == {"value": 6.0, "met": True}
    assert judged["round_2x_trl"] == {"value": 2.25, "best": "continuous", "met": True}
    assert judged["training_mfu_30pct"]["met"] is False
    assert judged["peak_memory_24gb"]["met"] is False
    assert judged["swarm_verified_99pct"]["met"] is True


def test_the_bounds_are_the_cards_peaks():
    h100 = card_of("NVIDIA H100 80GB HBM3")
    assert h100.name == "H100 SXM" and card_of("NVIDIA H200").bandwidth_tbs == 4.8
    assert card_of("NVIDIA H100 PCIe").bf16_tflops == 756.0 and card_of("Tesla T4") is None
    shape = SHAPES["qwen2.5-0.5b"]
    params = 494_032_768
    assert training_bound(params, h100) == pytest.approx(989.4e12 / (6 * params))
    one = decode_bound(shape, h100, 2 * params, 1, 2)
    assert one == pytest.approx(3.35e12 / (2 * params + (300 + 512) * 12288), rel=1e-9)
    assert decode_bound(shape, h100, 2 * params, 256, 2) > 50 * one  # weights read once a step


@pytest.mark.slow
def test_the_swarm_of_four_join_processes_runs_on_a_cpu(tmp_path):
    out = tmp_path / "swarm.json"
    args = ["--device", "cpu", "--shape", "tiny", "--backends", "transformers", "--no-trl"]
    assert _script().main([*args, "--out", str(out)]) == 0
    swarm = json.loads(out.read_text())["swarm"]
    assert swarm["all_exited_cleanly"] and [n["rounds"] for n in swarm["per_node"]] == [5] * 4
    assert swarm["groups_sent"] == 4 * 5 * SHAPES["tiny"].swarm_questions  # every group announced
    assert swarm["groups_received"] > 0 and swarm["groups_accepted"] > 0
    # honest peers: every group delivered verifies; what is not accepted is a failed fetch
    # (on a CPU, mostly from a peer that already ran its 5 rounds and left)
    assert swarm["groups_accepted"] == swarm["groups_delivered"]
    reasons = {r for n in swarm["per_node"] for r in n["rejections"]}
    assert reasons <= {"pull_failed"}
