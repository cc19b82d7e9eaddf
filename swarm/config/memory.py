"""A config's memory plan, made before any model loads, and the check that refuses one too
large for the machine.

`config_plan` reads what the estimate (`swarm.policy.memory`) needs: the model's shape from
its config.json (a built-in model's from its recipe), the longest prompt of the task mix in
its tokenizer, the round's sizes from the config, and the memory there is: on a CPU the RAM
available (within a container's limit) plus what this process holds; on CUDA the card's
memory. `check_memory` (a preflight check) refuses a plan that does not fit, in one line
naming the key to change; `micro_batch_size` resolves `training.micro_batch_size = "auto"`
to the largest micro-batch that fits. `plan_table` is `swarm-node config --plan`'s table.

A model whose config.json is not on this machine (a hub model not yet downloaded) has no
plan: nothing is refused for it. No torch is imported (a card's memory comes from
nvidia-smi where it can say).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from swarm.config.schema import Config, longest_prompt, task_mix
from swarm.core.errors import ConfigError
from swarm.policy.memory import (
    FIT_SHARE,
    MB,
    Generator,
    MemoryPlan,
    ModelShape,
    Part,
    Phase,
    Place,
    Setup,
    Workload,
    checkpointing_on,
    estimate,
    largest_micro_batch,
    model_shape,
)
from swarm.policy.memory import fits as plan_fits

AUTO = "auto"  # training.micro_batch_size: the largest micro-batch that fits
OBSERVER = "observer"


class PlanRefused(ConfigError):
    """A config whose memory plan does not fit the machine; carries the plan."""

    def __init__(self, message: str, plan: ConfigPlan):
        super().__init__(message)
        self.plan = plan


@dataclass(frozen=True)
class ConfigPlan:
    """A config's plan with what it was made from."""

    plan: MemoryPlan
    model: str
    shape: ModelShape
    work: Workload
    setup: Setup
    device_bytes: int  # the device's memory (a CPU's: RAM available to this node)
    host_bytes: int  # RAM available to this node
    auto: bool  # the micro-batch was chosen by training.micro_batch_size = "auto"

    @property
    def fits(self) -> bool:
        return plan_fits(self.plan, self.device_bytes, self.host_bytes)


def config_plan(config: Config, micro_batch: int | None = None) -> ConfigPlan | None:
    """The plan of `config` on this machine; None for an observer or a model whose
    config.json is not here. `micro_batch` overrides the config's (or auto's) choice."""
    if config.node.role == OBSERVER:
        return None
    found = model_source(config.policy.model)
    if found is None:
        return None
    shape, tokenizer = found
    prompt = prompt_tokens(config, tokenizer())
    return plan_for(config, shape, prompt, cuda_device(config.policy.device), micro_batch)


def plan_for(
    config: Config, shape: ModelShape, prompt: int, cuda: bool, micro_batch: int | None = None
) -> ConfigPlan:
    """The plan of `config` for a model of `shape`, prompts of up to `prompt` tokens."""
    device_bytes, host_bytes = memory_there(cuda, config.policy.device)
    setup = plan_setup(config, shape, cuda, device_bytes)
    setting = config.training.micro_batch_size
    work = workload(config, prompt, 1 if micro_batch is None else micro_batch)
    auto = micro_batch is None and setting == AUTO
    if micro_batch is None:
        chosen = (
            int(setting)
            if setting != AUTO
            else largest_micro_batch(shape, work, setup, device_bytes, host_bytes) or 1
        )
        work = replace(work, micro_batch=chosen)
    plan = estimate(shape, work, setup)
    return ConfigPlan(plan, config.policy.model, shape, work, setup, device_bytes, host_bytes, auto)


def micro_batch_size(config: Config, shape: ModelShape, prompt: int, cuda: bool) -> int:
    """`training.micro_batch_size` as a number: "auto" is the largest that fits (1 if none)."""
    setting = config.training.micro_batch_size
    if setting != AUTO:
        return int(setting)
    return plan_for(config, shape, prompt, cuda).work.micro_batch


def workload(config: Config, prompt: int, micro_batch: int) -> Workload:
    """One round's sizes under `config`, with prompts of up to `prompt` tokens."""
    g, t = config.generation, config.training
    group = g.completions_per_question
    own = min(t.own_groups, g.questions_per_round)
    rows = (own + config.sharing.shared_groups) * group
    if t.minibatch_size:
        rows = min(rows, t.minibatch_size)
    return Workload(
        questions=g.questions_per_round,
        completions=group,
        prompt_tokens=prompt,
        new_tokens=g.max_new_tokens,
        generate_rows=generate_rows(config),
        update_rows=max(1, rows),
        micro_batch=micro_batch,
    )


def generate_rows(config: Config) -> int:
    """Sequences one generate call holds: whole prompts' groups of `generation.batch_size`
    rows (at least one group, at most the round), or a held-out evaluation's batch."""
    g = config.generation
    group, round_rows = (
        g.completions_per_question,
        g.questions_per_round * g.completions_per_question,
    )
    rows = min(round_rows, max(1, g.batch_size // group) * group)
    return max(rows, min(g.batch_size, config.tasks.eval_size))


def plan_setup(config: Config, shape: ModelShape, cuda: bool, card_bytes: int) -> Setup:
    """How `config` runs its round on this device, as far as memory goes."""
    p, t, g = config.policy, config.training, config.generation
    weight_bytes = {"float32": 4, "bfloat16": 2, "float16": 2}.get(p.dtype, 2 if cuda else 4)
    autocast = weight_bytes == 2 or t.precision == "bf16" or (t.precision == "auto" and cuda)
    generator = _generator(g.backend, cuda)
    return Setup(
        cuda=cuda,
        weight_bytes=weight_bytes,
        autocast=autocast,
        trainer=config.node.role != "generator",
        optimizer_states=2,
        optimizer_state_bytes=2 if t.optimizer_state == "bf16" else 4,
        reference=t.kl_coef > 0,
        checkpointing=checkpointing_on(t.gradient_checkpointing, shape.parameters),
        shared_prefix=t.shared_prefix,
        generator=generator,
        vllm_reserved=int(g.gpu_memory_utilization * card_bytes)
        if generator is Generator.VLLM
        else 0,
        vllm_sleep=g.vllm_sleep,
        worker=config.verify.worker,
        datasets=len(task_mix(config)),
    )


def _generator(backend: str, cuda: bool) -> Generator:
    if backend != AUTO:
        return Generator(backend)
    if not cuda:
        return Generator.TRANSFORMERS
    import importlib.util

    return Generator.VLLM if importlib.util.find_spec("vllm") else Generator.CONTINUOUS


# -- what the machine has --------------------------------------------------------------------


def cuda_device(device: str) -> bool:
    """Whether `policy.device` runs on CUDA. "auto": an NVIDIA device is there and torch is a
    CUDA build (read from its version file), so checking a config imports no torch."""
    if device != AUTO:
        return device.startswith("cuda")
    nvidia = Path("/proc/driver/nvidia/gpus").is_dir() or Path("/dev/nvidia0").exists()
    return nvidia and torch_cuda_build()


def torch_cuda_build() -> bool:
    """Whether the installed torch was built for CUDA, without importing it."""
    import importlib.util

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return False
    try:
        text = (Path(list(spec.submodule_search_locations)[0]) / "version.py").read_text()
    except OSError:
        return False
    return declares_cuda(text)


def declares_cuda(version_file: str) -> bool:
    """Whether torch's version.py names a CUDA version (`cuda = '12.8'`, not `None`)."""
    return re.search(r"^cuda\b[^=\n]*=\s*['\"]", version_file, re.M) is not None


def memory_there(cuda: bool, device: str) -> tuple[int, int]:
    """(device bytes, host bytes): on CUDA the card's memory and the RAM available; on a CPU
    the RAM available twice."""
    host = ram_available() + own_resident()
    if not cuda:
        return host, host
    return card_memory(int(device.partition(":")[2] or 0)), host


def card_memory(index: int) -> int:
    """The memory of CUDA device `index`: nvidia-smi's figure (no torch), else torch's."""
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v]
    physical = visible[index] if index < len(visible) else str(index)
    total = smi_memory(physical) if physical.isdigit() else None
    if total is not None:
        return total
    import torch

    return torch.cuda.get_device_properties(index).total_memory


def smi_memory(physical: str) -> int | None:
    """A device's total memory as nvidia-smi reports it, in bytes; None if it cannot say."""
    query = [
        "nvidia-smi",
        "-i",
        physical,
        "--query-gpu=memory.total",
        "--format=csv,noheader,nounits",
    ]
    try:
        done = subprocess.run(query, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    first = done.stdout.strip().splitlines()[:1]
    if done.returncode != 0 or not first or not first[0].strip().isdigit():
        return None
    return int(first[0]) * MB  # MiB


def ram_available() -> int:
    """RAM this node could take: the kernel's MemAvailable, within a cgroup's memory limit."""
    available = _meminfo_bytes("MemAvailable")
    if available is None:
        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    limit = _cgroup_room()
    return available if limit is None else min(available, limit)


def own_resident() -> int:
    """This process's resident memory: counted in the plan's runtime, not in what is left."""
    return (_status_kb("VmRSS") or 0) * 1024


def _meminfo_bytes(field: str) -> int | None:
    try:
        text = Path("/proc/meminfo").read_text(encoding="ascii")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return None


def _status_kb(field: str) -> int | None:
    try:
        text = Path("/proc/self/status").read_text(encoding="ascii")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return None


def _cgroup_room() -> int | None:
    """A cgroup v2 memory limit less its usage, if this process runs under one."""
    root = Path("/sys/fs/cgroup")
    try:
        limit = (root / "memory.max").read_text().strip()
        used = int((root / "memory.current").read_text().strip())
    except (OSError, ValueError):
        return None
    return None if limit == "max" else max(0, int(limit) - used)


# -- the model, without its weights ----------------------------------------------------------


def model_source(name: str) -> tuple[ModelShape, Callable[[], Any]] | None:
    """The shape of model `name` and a way to get its tokenizer, or None if its config.json
    is not on this machine."""
    from swarm.policy.source import context_source, is_builtin, local_folder

    source = context_source(name)
    if source is None:
        return None
    if is_builtin(name) and local_folder(name) is None:
        return builtin_shape(name), source.tokenizer
    config = model_config(name)
    return None if config is None else (model_shape(config), source.tokenizer)


def model_config(name: str) -> dict | None:
    """The config.json of model `name` (a local folder, a GGUF source's conversion or a
    cached hub model), if here."""
    from swarm.policy.gguf import cached_conversion, is_gguf_source
    from swarm.policy.source import cached_folder, local_folder, looks_like_path

    folder = cached_conversion(name) if is_gguf_source(name) else local_folder(name)
    if folder is None and not looks_like_path(name) and not is_gguf_source(name):
        folder = cached_folder(name)
    if folder is None:
        return None
    try:
        return json.loads((Path(folder) / "config.json").read_text())
    except (OSError, ValueError):
        return None


def builtin_shape(name: str) -> ModelShape:
    """A built-in model's shape, from its recipe (it may not be built yet)."""
    from swarm.policy.tiny import TINY_MODELS
    from swarm.policy.tiny_context import light_tokenizer

    recipe = TINY_MODELS[name]
    return model_shape(
        {
            "hidden_size": recipe.hidden_size,
            "intermediate_size": recipe.intermediate_size,
            "num_hidden_layers": recipe.num_layers,
            "num_attention_heads": recipe.num_heads,
            "vocab_size": light_tokenizer(recipe).core.get_vocab_size(),
            "tie_word_embeddings": True,
        }
    )


def prompt_tokens(config: Config, tokenizer) -> int:
    """Tokens of the longest prompt among a sample of the mix's questions."""
    return longest_prompt(config, tokenizer)[0]


# -- the check and the table -----------------------------------------------------------------


def check_memory(config: Config, where=lambda *keys: "config") -> None:
    """Refuse a config whose round does not fit the memory there is, in one line naming the
    key to change (`PlanRefused`, which carries the plan)."""
    planned = config_plan(config)
    if planned is None or planned.fits:
        return
    raise PlanRefused(refusal(config, planned, where), planned)


def refusal(config: Config, planned: ConfigPlan, where) -> str:
    """The one line saying why a plan does not fit and which key to change: the micro-batch
    where a smaller one fits, else the key of the largest part at one sequence a pass."""
    plan = planned.plan
    place = Place.HOST if planned.setup.cuda and _host_short(planned) else Place.DEVICE
    there = planned.host_bytes if place is Place.HOST else planned.device_bytes
    head = (
        f"the memory plan needs {_mb(plan.peak(place))} MB at peak on {_place_name(planned, place)}, "
        f"more than {FIT_SHARE:.0%} of its {_mb(there)} MB"
    )
    smaller = None
    if config.training.micro_batch_size != AUTO and place is Place.DEVICE:
        smaller = largest_micro_batch(
            planned.shape, planned.work, planned.setup, planned.device_bytes, planned.host_bytes
        )
    if smaller is not None:
        key = "training.micro_batch_size"
        return (
            f'{where(key)}: {head}: set {key} = "auto" (at most {smaller} sequences a pass fit; '
            "the update stays the same) or see each part with 'swarm-node config --plan'"
        )
    fixed = sum(p.bytes for p in plan.parts if not p.key and _counts(planned, p, place))
    if fixed > FIT_SHARE * there:
        return (
            f"{where('policy.model')}: {head}: the parts no key sizes (the runtime, the "
            f"verification worker) alone need {_mb(fixed)} MB: free memory on this machine"
        )
    # nothing a micro-batch can save: name the largest part at one sequence a pass
    part = estimate(planned.shape, replace(planned.work, micro_batch=1), planned.setup).largest(
        place
    )
    if part.key == "training.micro_batch_size":  # one sequence alone is too long
        part = replace(part, key="generation.max_new_tokens")
    return (
        f"{where(part.key)}: {head}; its largest part is {part.name} ({_mb(part.bytes)} MB): "
        f"change {part.key} (each part: 'swarm-node config --plan')"
    )


def _counts(planned: ConfigPlan, part: Part, place: Place) -> bool:
    """Whether `part` is always held in `place` (on a CPU: anywhere)."""
    here = not planned.setup.cuda or part.place is place
    return here and part.phase is Phase.ALWAYS


def _host_short(planned: ConfigPlan) -> bool:
    return planned.plan.peak(Place.HOST) > FIT_SHARE * planned.host_bytes


def plan_table(planned: ConfigPlan) -> list[str]:
    """`swarm-node config --plan`: one row per part, the peak, and what the machine has."""
    plan, work, cuda = planned.plan, planned.work, planned.setup.cuda
    chosen = " (auto)" if planned.auto else ""
    lines = [
        f"memory plan of {planned.model} on {'cuda' if cuda else 'cpu'}: "
        f"{work.questions} questions x {work.completions} completions, prompts of up to "
        f"{work.prompt_tokens} tokens + {work.new_tokens} new, {work.update_rows} sequences an "
        f"update in micro-batches of {work.micro_batch}{chosen}",
        f"{'part':<40} {'when':<11} {'memory':<6} {'MB':>10}",
    ]
    for part in plan.parts:
        where = ("card" if part.place is Place.DEVICE else "host") if cuda else "RAM"
        lines.append(f"{part.name:<40} {part.phase.value:<11} {where:<6} {_mb(part.bytes):>10}")
    places = (Place.DEVICE, Place.HOST) if cuda else (Place.DEVICE,)
    for place in places:
        there = planned.device_bytes if place is Place.DEVICE else planned.host_bytes
        label = f"peak on {_place_name(planned, place)}"
        lines.append(f"{label:<59} {_mb(plan.peak(place)):>10}")
        lines.append(f"{_there(planned, place):<59} {_mb(there):>10}")
    verdict = "fits" if planned.fits else "does not fit"
    lines.append(
        f"the plan {verdict}: its peak must stay within {FIT_SHARE:.0%} of the memory there is"
    )
    return lines


def _place_name(planned: ConfigPlan, place: Place) -> str:
    if not planned.setup.cuda:
        return "the CPU's RAM"
    return "the card" if place is Place.DEVICE else "the host's RAM"


def _there(planned: ConfigPlan, place: Place) -> str:
    if planned.setup.cuda and place is Place.DEVICE:
        return "the card's memory"
    return "RAM available to this node"


def _mb(size: int) -> str:
    return f"{size / MB:,.1f}"
