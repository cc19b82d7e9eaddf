"""Exporting verified groups: one flat JSON record per completion, ready for `datasets` and
TRL, written atomically; and the prompt format of `policy.model` the records use.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

from swarm.core.errors import SwarmError
from swarm.ops.replay.reading import StoredGroup


def export_records(
    groups: list[StoredGroup], format_prompt: Callable[[str], str], scale_advantages: bool = True
) -> Iterator[dict]:
    """One flat record per completion of each verified group, ready for a training library:
    `prompt` (the question as `format_prompt` formats it for a model) and `completion`,
    `ground_truth`, the re-scored `reward` and the group-relative `advantage`, then where
    the completion came from. Flat columns of one type each, so `datasets.load_dataset("json")`
    reads a file of several datasets' groups; the task config is a JSON string."""
    from swarm.policy.grpo import group_advantages

    for item in groups:
        g = item.rollout
        prompt = format_prompt(g.question)
        advantages = group_advantages(item.rewards, scale_by_std=scale_advantages)
        for i, completion in enumerate(g.completions):
            yield {
                "prompt": prompt,
                "completion": completion,
                "question": g.question,
                "ground_truth": item.task.answer if item.task is not None else None,
                "reward": item.rewards[i],
                "advantage": advantages[i],
                "claimed_reward": g.rewards[i],
                "dataset": g.task.dataset,
                "task_config": g.task.config_json,
                "task_seed": g.task.seed,
                "task_index": g.task.index,
                "completion_index": i,
                "finished": g.finished[i],
                "content_hash": item.content_hash,
                "direction": item.direction,
                "sender": g.sender,
                "swarm_id": g.swarm_id,
                "model": g.model,
                "policy_version": g.policy_version,
                "round": g.round,
                "created_at": g.created_at,
            }


def write_jsonl(
    path: Path,
    groups: list[StoredGroup],
    format_prompt: Callable[[str], str],
    scale_advantages: bool = True,
) -> int:
    """Write the export atomically (temporary file, then rename); return the number of records."""
    tmp = path.with_name(path.name + ".tmp")
    count = 0
    try:
        with tmp.open("w") as f:
            for record in export_records(groups, format_prompt, scale_advantages):
                f.write(json.dumps(record, sort_keys=True) + "\n")
                count += 1
        tmp.replace(path)
    except OSError as e:
        raise SwarmError(f"cannot write {path}: {e.strerror or e}") from None
    return count


def prompt_formatter(config) -> Callable[[str], str]:
    """How `config.policy.model` is prompted with a question (its chat template, the
    config's system prompt), as the node formats its own prompts."""
    from swarm.policy.model import load_tokenizer, resolve_model_path
    from swarm.policy.prompts import build_prompt

    tokenizer = load_tokenizer(resolve_model_path(config.policy.model))
    return lambda question: build_prompt(tokenizer, question, config.policy.prompt_format())
