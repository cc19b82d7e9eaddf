"""A stand-in for vLLM 0.32.0's offline API, with its real signatures, for CPU tests.

Taken from the vllm-0.32.0 wheel on PyPI (`pip download vllm==0.32.0 --no-deps`):
`LLM.__init__`, `LLM.generate`, `LLM.collective_rpc` and `LLM.reset_prefix_cache` as in
vllm/entrypoints/llm.py; the keywords `LLM(**kwargs)` passes on to `EngineArgs` as in
vllm/engine/arg_utils.py; `SamplingParams`' public fields and defaults as in
vllm/sampling_params.py; the GPU worker's `reload_weights` as in vllm/v1/worker/gpu_worker.py
and gpu_model_runner.py (the worker and the engine-core serialisation are in
`tests/vllm_standin_worker.py`). Behaviour the tests rely on is what vLLM does: a
`max_model_len` above the model's `max_position_embeddings` is refused (ModelConfig), an
unknown keyword is a TypeError, an in-process engine (`VLLM_ENABLE_V1_MULTIPROCESSING=0`)
seeds the process's Python, numpy, torch and CUDA generators (vllm.utils.torch_utils.
set_random_seed, at worker start and again after warm-up) and sets torch to one thread; a
multiprocess engine (the default) serialises `collective_rpc`'s arguments as its engine core
receives them; `sleep` needs `enable_sleep_mode` and an engine asleep serves no request
until `wake_up`. An in-process engine sets up the process's distributed state
(vllm.distributed.parallel_state's world group, as the GPU worker's
init_distributed_environment does); `LLM` has no shutdown of its own, and
`llm.llm_engine.engine_core.shutdown()` stops the engine (vllm/v1/engine/core_client.py):
in-process `InprocClient` runs `EngineCore.shutdown` (vllm/v1/engine/core.py: the executor
and its worker, the scheduler, then `cleanup_dist_env_and_memory`, which destroys the
distributed state, collects garbage and empties the CUDA cache while the `LLM` still holds
the model), a multiprocess client ends its core process; a stopped engine serves nothing.
Installed as `sys.modules["vllm"]` (and `vllm.distributed.parallel_state`) by `install`.
"""

import gc
import json
import os
import random
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tests.vllm_standin_worker import Worker, utility_call

VERSION = "0.32.0"

ENGINE_ARGS = frozenset(
    [
        "model",
        "enable_return_routed_experts",
        "return_sampling_mask",
        "model_weights",
        "served_model_name",
        "tokenizer",
        "hf_config_path",
        "runner",
        "convert",
        "skip_tokenizer_init",
        "enable_prompt_embeds",
        "tokenizer_mode",
        "trust_remote_code",
        "allowed_local_media_path",
        "allowed_media_domains",
        "download_dir",
        "safetensors_load_strategy",
        "safetensors_prefetch_num_threads",
        "safetensors_prefetch_block_size",
        "load_format",
        "config_format",
        "dtype",
        "kv_cache_dtype",
        "seed",
        "max_model_len",
        "cudagraph_capture_sizes",
        "max_cudagraph_capture_size",
        "ir_op_priority",
        "distributed_executor_backend",
        "pipeline_parallel_size",
        "master_addr",
        "master_port",
        "nnodes",
        "node_rank",
        "distributed_timeout_seconds",
        "cpu_distributed_timeout_seconds",
        "numa_bind",
        "numa_bind_nodes",
        "numa_bind_cpus",
        "device_ids",
        "tensor_parallel_size",
        "prefill_context_parallel_size",
        "decode_context_parallel_size",
        "dcp_comm_backend",
        "dcp_q_replicate",
        "dcp_kv_cache_interleave_size",
        "cp_kv_cache_interleave_size",
        "data_parallel_size",
        "data_parallel_rank",
        "data_parallel_start_rank",
        "data_parallel_size_local",
        "data_parallel_address",
        "data_parallel_rpc_port",
        "data_parallel_hybrid_lb",
        "data_parallel_external_lb",
        "data_parallel_multi_port_external_lb",
        "data_parallel_backend",
        "enable_hc_sp",
        "enable_expert_parallel",
        "enable_batch_sharded_sampling",
        "enable_ep_weight_filter",
        "moe_backend",
        "linear_backend",
        "sparse_indexer_topk_backend",
        "all2all_backend",
        "enable_elastic_ep",
        "elastic_ep_max_dp_size",
        "enable_dbo",
        "ubatch_size",
        "dbo_decode_token_threshold",
        "dp_sync_interval",
        "dbo_prefill_token_threshold",
        "disable_nccl_for_dp_synchronization",
        "eplb_config",
        "enable_eplb",
        "expert_placement_strategy",
        "_api_process_count",
        "_api_process_rank",
        "max_parallel_loading_workers",
        "block_size",
        "enable_prefix_caching",
        "prefix_caching_hash_algo",
        "prefix_cache_retention_interval",
        "disable_sliding_window",
        "disable_cascade_attn",
        "offload_backend",
        "cpu_offload_gb",
        "cpu_offload_params",
        "offload_group_size",
        "offload_num_in_group",
        "offload_prefetch_step",
        "offload_params",
        "gpu_memory_utilization",
        "kv_cache_memory_bytes",
        "max_num_batched_tokens",
        "max_num_scheduled_tokens",
        "long_prefill_token_threshold",
        "long_prefill_token_threshold_adaptive",
        "max_num_seqs",
        "max_num_active_seqs",
        "max_num_queued_reqs",
        "max_num_queued_tokens",
        "max_logprobs",
        "logprobs_mode",
        "use_fp64_gumbel",
        "enable_trace_replay",
        "disable_log_stats",
        "aggregate_engine_logging",
        "revision",
        "code_revision",
        "hf_token",
        "hf_overrides",
        "model_class_overrides",
        "tokenizer_revision",
        "quantization",
        "quantization_config",
        "allow_deprecated_quantization",
        "enforce_eager",
        "disable_custom_all_reduce",
        "enable_shm_tensor_arena",
        "language_model_only",
        "limit_mm_per_prompt",
        "enable_mm_embeds",
        "interleave_mm_strings",
        "media_io_kwargs",
        "mm_processor_kwargs",
        "mm_processor_cache_gb",
        "mm_processor_cache_type",
        "mm_hasher_algorithm",
        "mm_shm_cache_max_object_size_mb",
        "mm_encoder_only",
        "mm_encoder_tp_mode",
        "mm_encoder_attn_backend",
        "mm_encoder_attn_dtype",
        "mm_encoder_fp8_scale_path",
        "mm_encoder_fp8_scale_save_path",
        "mm_encoder_fp8_scale_save_margin",
        "io_processor_plugin",
        "renderer_num_workers",
        "skip_mm_profiling",
        "video_pruning_rate",
        "video_pruning_method",
        "mm_tensor_ipc",
        "mm_processor_device",
        "mm_ipc_gpu_memory_gb",
        "mm_device_do_normalize",
        "enable_lora",
        "max_loras",
        "max_lora_rank",
        "default_mm_loras",
        "fully_sharded_loras",
        "max_cpu_loras",
        "lora_dtype",
        "lora_target_modules",
        "enable_tower_connector_lora",
        "specialize_active_lora",
        "enable_mixed_moe_lora_format",
        "enable_moe_shared_loras",
        "max_lora_cls_labels",
        "ray_workers_use_nsight",
        "num_gpu_blocks_override",
        "model_loader_extra_config",
        "ignore_patterns",
        "enable_chunked_prefill",
        "disable_chunked_mm_input",
        "scheduler_reserve_full_isl",
        "prefill_schedule_interval",
        "watermark",
        "disable_hybrid_kv_cache_manager",
        "structured_outputs_config",
        "aux_output_config",
        "reasoning_parser",
        "reasoning_parser_plugin",
        "speculative_config",
        "spec_method",
        "spec_model",
        "spec_tokens",
        "watermark_config",
        "diffusion_config",
        "show_hidden_metrics_for_version",
        "otlp_traces_endpoint",
        "collect_detailed_traces",
        "per_request_spec_decode_metrics",
        "kv_cache_metrics",
        "kv_cache_metrics_sample",
        "custom_histogram_buckets",
        "cudagraph_metrics",
        "enable_layerwise_nvtx_tracing",
        "enable_mfu_metrics",
        "enable_logging_iteration_details",
        "jit_monitor_mode",
        "jit_monitor_verbose",
        "enable_mm_processor_stats",
        "scheduling_policy",
        "scheduler_cls",
        "pooler_config",
        "compilation_config",
        "attention_config",
        "engram_config",
        "mamba_config",
        "kernel_config",
        "enable_flashinfer_autotune",
        "worker_cls",
        "worker_extension_cls",
        "profiler_config",
        "logging_config",
        "log_level",
        "log_config_file",
        "kv_transfer_config",
        "kv_events_config",
        "ec_transfer_config",
        "ec_manager_config",
        "reasoning_config",
        "generation_config",
        "enable_sleep_mode",
        "sleep_mode_offload_cudagraph",
        "sleep_preserve_parameter_names",
        "enable_cumem_allocator",
        "enable_nccl_comm_suspend",
        "override_generation_config",
        "model_impl",
        "attention_backend",
        "kv_cache_dtype_skip_layers",
        "mamba_cache_dtype",
        "mamba_ssm_cache_dtype",
        "mamba_block_size",
        "prefix_match_unit",
        "mamba_cache_mode",
        "enable_mamba_shared_prefix_checkpoint",
        "replayssm_buffer_len",
        "use_replayssm",
        "mamba_backend",
        "mamba_ssu_algorithm",
        "enable_mamba_cache_stochastic_rounding",
        "mamba_cache_philox_rounds",
        "additional_config",
        "use_tqdm_on_load",
        "pt_load_map_location",
        "logits_processors",
        "async_scheduling",
        "stream_interval",
        "kv_sharing_fast_prefill",
        "swa_bounded_replay",
        "optimization_level",
        "performance_mode",
        "fault_tolerance_config",
        "enable_fault_tolerance",
        "kv_offloading_size",
        "kv_offloading_backend",
        "tokens_only",
        "shutdown_timeout",
        "weight_transfer_config",
        "fail_on_environ_validation",
        "gdn_prefill_backend",
        "kda_prefill_backend",
        "kda_decode_backend",
    ]
)

SAMPLING_DEFAULTS: dict[str, Any] = {
    "n": 1,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "repetition_penalty": 1.0,
    "temperature": 1.0,
    "watermarking": None,
    "top_p": 1.0,
    "top_k": 0,
    "min_p": 0.0,
    "seed": None,
    "stop": None,
    "stop_token_ids": None,
    "ignore_eos": False,
    "max_tokens": 16,
    "min_tokens": 0,
    "logprobs": None,
    "prompt_logprobs": None,
    "prompt_logprob_token_ids": None,
    "prompt_logprob_start": None,
    "logprob_token_ids": None,
    "flat_logprobs": False,
    "detokenize": True,
    "skip_special_tokens": True,
    "spaces_between_special_tokens": True,
    "include_stop_str_in_output": False,
    "output_kind": "cumulative",
    "stream_interval": None,
    "skip_clone": False,
    "output_text_buffer_length": 0,
    "structured_outputs": None,
    "logit_bias": None,
    "allowed_token_ids": None,
    "extra_args": None,
    "bad_words": None,
    "skip_reading_prefix_cache": None,
    "thinking_token_budget": None,
    "repetition_detection": None,
    "routed_experts_prompt_start": 0,
    "trace_decode_token_ids": None,
}


class SamplingParams:
    """vllm.SamplingParams: keyword fields only, unknown ones refused, top_k >= -1."""

    def __init__(self, **fields: Any):
        unknown = set(fields) - set(SAMPLING_DEFAULTS)
        if unknown:
            raise TypeError(f"SamplingParams got unexpected keyword arguments {sorted(unknown)}")
        for name, default in SAMPLING_DEFAULTS.items():
            setattr(self, name, fields.get(name, default))
        if self.top_k < -1:
            raise ValueError(f"top_k must be 0 (disable), or at least 1, got {self.top_k}.")
        self.given = dict(fields)


@dataclass
class Logprob:
    """vllm.logprobs.Logprob."""

    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class CompletionOutput:
    """vllm.outputs.CompletionOutput (the fields the generator reads)."""

    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None
    logprobs: list[dict[int, Logprob]] | None
    finish_reason: str | None = None
    stop_reason: int | str | None = None


@dataclass
class RequestOutput:
    """vllm.outputs.RequestOutput (the fields the generator reads)."""

    request_id: str
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput] = field(default_factory=list)


class ParallelState(types.ModuleType):
    """vllm.distributed.parallel_state: the process's world group and its cleanup."""

    def __init__(self) -> None:
        super().__init__("vllm.distributed.parallel_state")
        self.world = None  # vLLM's _WORLD: the world group
        self.cleanups = 0

    def cleanup_dist_env_and_memory(self, shutdown_ray: bool = False) -> None:
        self.world = None  # destroy_model_parallel, destroy_distributed_environment
        gc.collect()
        torch.cuda.empty_cache()
        self.cleanups += 1


STATE = ParallelState()


class EngineCore:
    """vllm.v1.engine.core.EngineCore's shutdown, in this process."""

    def __init__(self, worker) -> None:
        self.worker = worker

    def shutdown(self) -> None:
        STATE.cleanup_dist_env_and_memory()


class InprocClient:
    """The engine-core client of an in-process engine (VLLM_ENABLE_V1_MULTIPROCESSING=0)."""

    def __init__(self, worker) -> None:
        self.engine_core = EngineCore(worker)
        self.stopped = False

    def shutdown(self, timeout: float | None = None) -> None:
        if not self.stopped:
            self.stopped = True
            self.engine_core.shutdown()


class SyncMPClient:
    """The engine-core client of a multiprocess engine: shutdown ends the core process."""

    def __init__(self) -> None:
        self.stopped = False

    def shutdown(self, timeout: float | None = None) -> None:
        self.stopped = True


class LLMEngine:
    """vllm.v1.engine.llm_engine.LLMEngine: what `LLM.llm_engine` holds."""

    def __init__(self, engine_core) -> None:
        self.engine_core = engine_core


class LLM:
    """vllm.LLM with 0.32.0's constructor signature; `script` answers `generate`."""

    script: Any = None  # callable(prompts, sampling_params) -> list[RequestOutput]
    built: list["LLM"] = []

    def __init__(
        self,
        model: str,
        *,
        runner="auto",
        convert="auto",
        tokenizer=None,
        tokenizer_mode="auto",
        skip_tokenizer_init=False,
        trust_remote_code=False,
        allowed_local_media_path="",
        allowed_media_domains=None,
        tensor_parallel_size=1,
        dtype="auto",
        quantization=None,
        revision=None,
        tokenizer_revision=None,
        chat_template=None,
        seed=0,
        gpu_memory_utilization=0.92,
        cpu_offload_gb=0,
        offload_group_size=0,
        offload_num_in_group=1,
        offload_prefetch_step=1,
        offload_params=None,
        enforce_eager=False,
        enable_return_routed_experts=False,
        return_sampling_mask=False,
        disable_custom_all_reduce=False,
        hf_token=None,
        hf_overrides=None,
        mm_processor_kwargs=None,
        pooler_config=None,
        structured_outputs_config=None,
        profiler_config=None,
        attention_config=None,
        kv_cache_memory_bytes=None,
        compilation_config=None,
        quantization_config=None,
        logits_processors=None,
        spec_method=None,
        spec_model=None,
        spec_tokens=None,
        **kwargs: Any,
    ) -> None:
        unknown = set(kwargs) - ENGINE_ARGS
        if unknown:
            raise TypeError(
                f"EngineArgs.__init__() got unexpected keyword arguments {sorted(unknown)}"
            )
        positions = json.loads((Path(model) / "config.json").read_text())["max_position_embeddings"]
        wanted = kwargs.get("max_model_len")
        if wanted is not None and wanted > positions:
            raise ValueError(
                f"User-specified max_model_len ({wanted}) is greater than the derived "
                f"max_model_len (max_position_embeddings={positions} in model's config.json)."
            )
        self.model, self.dtype, self.seed = model, dtype, seed
        self.gpu_memory_utilization = gpu_memory_utilization
        self.kwargs = dict(kwargs)
        self.multiprocess = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1") != "0"
        weights_dtype = {"float16": torch.float16, "float32": torch.float32}.get(
            dtype, torch.bfloat16
        )
        self.worker = Worker(model, weights_dtype)
        self.prefix_cache_resets = 0
        self.asleep = 0  # the sleep level, 0: awake
        self.sleeps = 0
        if not self.multiprocess:  # what an in-process engine does to the process
            STATE.world = STATE.world or object()
            set_random_seed(seed)
            torch.set_num_threads(1)
        core = SyncMPClient() if self.multiprocess else InprocClient(self.worker)
        self.llm_engine = LLMEngine(core)
        LLM.built.append(self)

    def _serving(self) -> None:
        if self.llm_engine.engine_core.stopped:
            raise RuntimeError("EngineDeadError: the engine core was shut down")

    def generate(
        self,
        prompts,
        sampling_params=None,
        *,
        use_tqdm=True,
        lora_request=None,
        priority=None,
        tokenization_kwargs=None,
        mm_processor_kwargs=None,
    ) -> list[RequestOutput]:
        self._serving()
        if self.asleep:
            raise RuntimeError("the engine is asleep: wake_up() before generating")
        return LLM.script(prompts, sampling_params)

    def collective_rpc(self, method, timeout=None, args=(), kwargs=None) -> list:
        self._serving()
        if self.asleep and self.asleep > 1:
            raise RuntimeError("the engine's weights were discarded (sleep level 2)")
        if self.multiprocess:
            method, timeout, args, kwargs = utility_call(method, timeout, args, kwargs)
        if not isinstance(method, str):
            raise TypeError(
                "a callable needs VLLM_ALLOW_INSECURE_SERIALIZATION=1 with multiprocessing"
            )
        return [getattr(self.worker, method)(*args, **(kwargs or {}))]

    def reset_prefix_cache(self, reset_running_requests=False, reset_connector=False) -> bool:
        self.prefix_cache_resets += 1
        return True

    def sleep(self, level: int = 1, mode="abort") -> None:
        if not self.kwargs.get("enable_sleep_mode"):
            raise ValueError("Sleep mode is not enabled: build the LLM with enable_sleep_mode=True")
        self.asleep, self.sleeps = level, self.sleeps + 1

    def wake_up(self, tags: list[str] | None = None) -> bool:
        self.asleep = 0
        return True


def set_random_seed(seed: int) -> None:
    """vllm.utils.torch_utils.set_random_seed: every generator of the process."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)


def install(monkeypatch) -> types.ModuleType:
    """Make `import vllm` give this stand-in for the duration of a test."""
    module = types.ModuleType("vllm")
    module.__version__ = VERSION
    module.LLM = LLM
    module.SamplingParams = SamplingParams
    distributed = types.ModuleType("vllm.distributed")
    distributed.parallel_state = STATE
    module.distributed = distributed
    LLM.built = []
    STATE.world, STATE.cleanups = None, 0
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setitem(sys.modules, "vllm.distributed", distributed)
    monkeypatch.setitem(sys.modules, "vllm.distributed.parallel_state", STATE)
    return module
