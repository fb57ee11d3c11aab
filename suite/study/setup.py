"""The one setup path of `run`, `plan` and `worker`: a `Request` resolved once into the study it
asks for (specs after every override, model, workers, threads, trainer, data, pre-flight,
fingerprint, folder, storage URL, name), checked before anything is written."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from suite.config.overrides import parse_sets
from suite.config.reading import validate
from suite.config.request import Request
from suite.config.resources import resolve, resolve_sweep_path
from suite.config.sweep import HParams, SweepSpec, load_sweep
from suite.config.task import TaskSpec, load_task, per_class_k
from suite.data.paths import data_dir
from suite.errors import SpecError

if TYPE_CHECKING:  # suite.model.devices imports torch: `run`'s waiting process imports this module
    from suite.model.devices import Capacity


def load_specs(request: Request) -> tuple[Path, TaskSpec, Path, SweepSpec]:
    """The task (a file or a name) and its sweep, with the profile, `--set` overrides, `--size`,
    `--seeds` and `--eval-split` applied and validated, the head made concrete for the model:
    what `run` and `plan` use."""
    task_path, task, sweep_path, sweep = read_specs(request)
    return task_path, with_model_head(task, request.model or task.model), sweep_path, sweep


def read_specs(request: Request) -> tuple[Path, TaskSpec, Path, SweepSpec]:
    """`load_specs` without looking at the model: no torch or transformers imported, so the CLI
    answers a spec error at once."""
    if request.task is None:
        raise SpecError("no task given")
    task_sets, sweep_sets = parse_sets(list(request.sets))
    task_path = resolve(request.task, "tasks", "task")
    task = load_task(task_path, request.profile, task_sets)
    sweep_path = (
        resolve(request.sweep, "sweeps", "--sweep")
        if request.sweep
        else resolve_sweep_path(task_path, task.sweep)
    )
    sweep = load_sweep(sweep_path, request.profile, sweep_sets)
    task, sweep = apply_overrides(task, sweep, list(request.sizes), request.seeds)
    if request.eval_split:
        task = TaskSpec.model_validate({**task.model_dump(), "eval_split": request.eval_split})
    return task_path, task, sweep_path, sweep


def with_model_head(task: TaskSpec, model: str) -> TaskSpec:
    """`classifier: model` made concrete for the model that runs, so the study's record and
    fingerprint name the head that trained (a changed default is then a changed study)."""
    from suite.model.names import default_head

    if task.classifier != "model":
        return task
    return task.model_copy(update={"classifier": default_head(model)})


def apply_overrides(
    task: TaskSpec, sweep: SweepSpec, sizes: list[str] | None, seeds: int | None
) -> tuple[TaskSpec, SweepSpec]:
    """`--size` and `--seeds` re-validated through the schema, like any other input."""
    if sizes:
        parsed = [s if s == "full" or per_class_k(s) else _int_size(s) for s in sizes]
        task = validate(TaskSpec, {**task.model_dump(), "sizes": parsed}, Path("--size"))
    if seeds is not None:
        if seeds < 1:
            raise SpecError(f"--seeds: expected a positive integer, got {seeds}")
        key = {"crossed": {"init": seeds, "order": seeds}}.get(sweep.seeds.design, {"repeats": seeds})
        sweep = sweep.model_copy(update={"seeds": sweep.seeds.model_copy(update=key)})
    return task, sweep


def _int_size(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise SpecError(
            f"--size: expected an integer, K per class (e.g. 16/class) or 'full', got {text!r}"
        ) from None
    if value < 2:
        raise SpecError(f"--size: expected at least 2 examples, got {value}")
    return value


@dataclass(frozen=True)
class Setup:
    """A study as the request asks for it, resolved once and checked before anything is written."""

    request: Request
    task: TaskSpec
    sweep: SweepSpec
    model: str
    prepared: Any  # PreparedTask
    workers: int  # local worker processes
    threads: int  # per worker: part of the study's identity
    trainer: dict[str, Any]
    fingerprint: dict[str, Any]
    stack: dict[str, Any]  # the software stack (also in the fingerprint), stamped on every trial
    url: str
    name: str
    folder: Path | None = None  # the run folder (`run`, `plan`); a joining worker writes none
    # Each fine-tuning method the sweep names: import path -> MethodCode (its hash in the fingerprint).
    methods: dict[str, Any] = field(default_factory=dict)


def setup_study(request: Request, on_workers: Callable[[Setup], None] | None = None) -> Setup:
    """`run` and `plan`: specs from files, then model, data and pre-flight of every planned trial;
    the study's fingerprint, folder, storage URL and name. Reads only (and fills the feature cache).
    `on_workers` hears the setup as soon as its workers and threads are known, before the data
    and model checks (without the prepared task, fingerprint and stack): `run` starts its other
    workers then."""
    task_path, task, sweep_path, sweep = load_specs(request)
    from suite.model.devices import resolve_trainer, resolve_workers, usable_cpus  # imports torch
    from suite.study.resume import with_stored_fields
    from suite.study.storage import check_outputs_held, stored_study

    model = request.model or task.model
    trainer = resolve_trainer(request.trainer, request.gpus_per_worker)
    folder, url, name = study_address(request, task, sweep)
    check_outputs_held(folder, url)
    study = stored_study(url, name)  # None: a new study
    task = with_stored_fields(task, study.user_attrs.get("fingerprint") if study else None)
    stored = stored_threads(study)
    fixed = study_threads(request.threads, stored, name)
    cpus, cpus_why = usable_cpus()
    # `launch` sizes its jobs itself: this machine's memory says nothing about the cluster's nodes
    local = request.gpus_per_worker is None and str(request.workers) != "1"
    per_gpu = request.workers_per_gpu
    sizing_gpus = trainer["accelerator"] == "gpu" and str(request.workers) == "auto" and per_gpu is None
    capacity = _capacity(task, sweep, study, trainer, model, sizing_gpus) if local else None
    workers, why = resolve_workers(request.workers, trainer, cpus, capacity, per_gpu, fixed or 1)
    threads = fixed or max(1, cpus // workers)  # a new study's choice, stored with it
    whose = "the study's" if stored else "--threads" if fixed else f"{cpus} / {workers} for a new study"
    left = capacity.trials if capacity is not None else None
    capped = str(request.workers) != "auto" and left is not None and left < workers
    if capped:  # no process for a trial that is not there (as `launch`); the threads stay as asked
        workers, why = max(1, left), f"--workers {workers}: {max(1, left)} ({left} trials left to run)"
    if ((capped or str(request.workers) == "auto") and not request.quiet) or "warning" in why:
        print(f"{why}; {threads} thread(s) each ({whose}; {cpus_why})", file=sys.stderr)
    early = Setup(request, task, sweep, model, None, workers, threads, trainer, {}, {}, url, name, folder)
    if on_workers is not None:
        on_workers(early)
    prepared, fingerprint, stack, methods = _checked(
        request, task, sweep, model, threads, trainer, task_path, sweep_path, new=study is None
    )
    return replace(early, prepared=prepared, fingerprint=fingerprint, stack=stack, methods=methods)


def refuse_early(request: Request) -> None:
    """The refusals that need only the specs, the run folder's outputs and the storage (an emptied
    or replaced storage, a changed spec, other threads), made by `run` before any process of its
    imports torch or reads the data; `setup_study` checks again with the data and model fields."""
    from suite.identity import study_fingerprint
    from suite.study.resume import resumption, with_stored_fields
    from suite.study.storage import check_outputs_held, stored_study

    _, task, _, sweep = load_specs(request)
    folder, url, name = study_address(request, task, sweep)
    check_outputs_held(folder, url)
    study = stored_study(url, name)
    stored = study.user_attrs.get("fingerprint") if study is not None else None
    if study is None or stored is None:  # a new study, or one killed while it was created
        return
    study_threads(request.threads, stored_threads(study), name)
    task = with_stored_fields(task, stored)
    heads = classifiers_used(task, sweep)
    spec = study_fingerprint(
        task.model_dump(mode="json"), sweep.model_dump(mode="json"), {}, {}, 0, {}, None, heads
    )

    def of_spec(fields: dict[str, Any]) -> dict[str, Any]:  # what the specs alone decide
        return {k: v for k, v in fields.items() if k == "code_version" or k.startswith(_SPEC_FIELDS)}

    info = study.user_attrs.get("run_info")
    resumption(of_spec(stored), of_spec(spec), info, task, sweep, name, str(folder))


_SPEC_FIELDS = ("task.", "sweep.", "head_code.")  # fingerprint fields of the task and sweep specs


def stored_threads(study: Any) -> int | None:
    """The threads per worker a stored study was created with (its fingerprint's, else its run
    info's); None for a new study, or one killed while it was created."""
    if study is None:
        return None
    attrs = study.user_attrs
    threads = (attrs.get("fingerprint") or {}).get("threads", (attrs.get("run_info") or {}).get("threads"))
    return int(threads) if threads is not None else None


def study_threads(asked: int | None, stored: int | None, name: str) -> int | None:
    """Threads per worker: fixed when a study is created (they change float reduction order, so
    they are part of its identity), then reused by every rerun, worker and round whatever its
    workers; only an explicit `--threads` that differs is refused. None: a new study's to choose."""
    if asked is not None and stored is not None and asked != stored:
        raise SpecError(
            f"--threads {asked}: study {name!r} runs {stored} thread(s) per worker, fixed when it was "
            f"created (threads {stored} -> {asked}); omit --threads to resume it"
        )
    return stored or asked


def _capacity(
    task: TaskSpec,
    sweep: SweepSpec,
    study: Any,
    trainer: dict[str, Any],
    model: str,
    sizing_gpus: bool = False,
) -> Capacity:
    """The trials still to run and the memory a worker needs, from the stored study if there is
    one (its ended runs; the largest peak RSS its workers recorded), against the memory free now;
    `sizing_gpus` (`--workers auto` on GPUs, no `--workers-per-gpu`): also the GPU memory a worker
    needs (recorded at the largest batch, else probed) and the GPUs' free memory."""
    from suite.study.plan import ended_runs, finished_records

    planned, ended, peak, gpu_peak, gpu_why = planned_trials(task, sweep), 0, None, None, ""
    if study is not None:
        ended = len(ended_runs(study))  # errored ones run again
        records = finished_records(study).values()
        peaks = [r["peak_rss_mb"] for r in records if r.get("peak_rss_mb")]
        peak = max(peaks) if peaks else None
        largest = largest_batch(sweep)  # a smaller batch's peak would undersize a larger one's
        gpu_peaks = [
            r["peak_gpu_mb"]
            for r in records
            if r.get("peak_gpu_mb") and r["hparams"]["batch_size"] == largest
        ]
        gpu_peak, gpu_why = (max(gpu_peaks), f"recorded peak at batch {largest}") if gpu_peaks else (None, "")
    from suite.model.devices import Capacity, available_memory_mb, gpu_free_mb

    memory, memory_why = available_memory_mb()
    gpu_free = gpu_free_mb() if sizing_gpus else None
    if gpu_free is not None and gpu_peak is None:  # a new study: one step at its largest batch
        gpu_peak, gpu_why = _probed(model, largest_batch(sweep), task.max_length, trainer["precision"])
    return Capacity(
        trials=max(0, planned - ended),
        ended=ended,
        memory_mb=memory,
        memory_why=memory_why,
        peak_mb=peak,
        gpu_free_mb=gpu_free,
        gpu_peak_mb=gpu_peak,
        gpu_peak_why=gpu_why,
    )


def _probed(model: str, batch: int, length: int, precision: str) -> tuple[float | None, str]:
    """A worker's GPU peak from one probed step; (None, why) where the probe fails (a card in
    exclusive mode or shared with other jobs, out of memory): one worker a card then."""
    from suite.model.gpu_memory import probe_peak_mb

    try:
        return probe_peak_mb(
            model, batch, length, precision
        ), f"probed peak (batch {batch} x {length} tokens)"
    except Exception as err:  # any failure only costs the sizing, never the study
        return None, f"probe failed: {type(err).__name__}"


def largest_batch(sweep: SweepSpec) -> int:
    """The largest batch size a trial of the sweep can take (searched, or its settings')."""
    if "batch_size" in sweep.space:
        return max(int(v) for v in sweep.space["batch_size"].candidates())
    return max(sweep.hparams_for(values).batch_size for values in sweep.settings())


def planned_trials(task: TaskSpec, sweep: SweepSpec) -> int:
    """Planned trials (a TPE sweep: its budget of settings x the seed grid), to cap `--workers auto`."""
    from suite.study.plan import plan_trials, replicates

    if sweep.adaptive:  # the same seeds as every planned setting, for each of the budget's settings
        return (sweep.budget or 1) * replicates(task, sweep)
    return len(plan_trials(task, sweep))


def study_address(request: Request, task: TaskSpec, sweep: SweepSpec) -> tuple[Path, str, str]:
    """Where the request's study lives: its run folder, storage URL and name."""
    from suite.study.storage import run_folder, sqlite_url

    model = request.model or task.model
    folder = run_folder(request.out, task, model)
    name = request.study or f"{task.name}|{model}|{sweep.name}|{request.profile}"
    return folder, request.storage or sqlite_url(folder), name


def join_study(request: Request, info: dict[str, Any]) -> Setup:
    """`worker`: the specs, model and trainer options stored with the study (`info`, its run
    info), this machine's data and threads; the same checks and fingerprint as `setup_study`."""
    if request.storage is None or request.study is None:
        raise SpecError("a worker needs --storage and --study")
    from suite.model.devices import resolve_trainer, usable_cpus  # imports torch
    from suite.study.resume import stored_task

    stored = Path(f"study {request.study!r}")  # a stored spec that no longer validates: one line
    task = validate(TaskSpec, stored_task(info["task"]), stored, " (its stored task)")
    sweep = validate(SweepSpec, info["sweep"], stored, " (its stored sweep)")
    trainer = resolve_trainer({**info.get("trainer", {}), **request.trainer})
    where = f"study {request.study}"
    threads = study_threads(request.threads, info.get("threads"), request.study) or usable_cpus()[0]
    prepared, fingerprint, stack, methods = _checked(
        request, task, sweep, info["model"], threads, trainer, where, where, new=False
    )
    return Setup(
        request,
        task,
        sweep,
        info["model"],
        prepared,
        1,
        threads,
        trainer,
        fingerprint,
        stack,
        request.storage,
        request.study,
        methods=methods,
    )


def _checked(
    request: Request,
    task: TaskSpec,
    sweep: SweepSpec,
    model: str,
    threads: int,
    trainer: dict[str, Any],
    task_where: Any,
    sweep_where: Any,
    new: bool = True,
) -> tuple[Any, dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The prepared task after the sweep's methods, the model, the sweep's stabilisers and every
    planned input are checked; the study's fingerprint and the software stack it names: none when
    the study is planned for workers on other machines (`launch`), whose first worker's stack
    becomes the study's; and the code of each method the sweep names (`MethodCode` by path)."""
    if request.offline:
        os.environ["HF_HUB_OFFLINE"] = "1"
    from suite.heads.registry import prepare_task
    from suite.identity import software_stack
    from suite.model.encoders import load_encoder, load_tokenizer
    from suite.model.method_checks import check_methods
    from suite.model.stabilisers import check_sweep
    from suite.study.preflight import check_planned_inputs, check_weights

    methods = check_methods(sweep, sweep_where)  # the user's code: imported from here on
    check_weights(model)
    tokenizer = load_tokenizer(model)
    # A bad model, or a stabiliser it cannot take, fails before any data work; the weights stay cached.
    encoder = load_encoder(model)
    check_sweep(encoder, sweep, sweep_where, task.head, task.classifier, task_where)
    prepared = prepare_task(task, data_dir(request.data_dir), tokenizer)
    check_planned_inputs(prepared, sweep, task_where, new)
    attention = getattr(encoder.config, "_attn_implementation", None)
    uses = stack_uses(task, sweep)
    stack = software_stack(trainer, attention, uses) if request.gpus_per_worker is None else {}
    hashes = {path: code.hash for path, code in methods.items()}
    return prepared, fingerprint_of(prepared, sweep, model, threads, trainer, stack, hashes), stack, methods


def fingerprint_of(
    prepared: Any,
    sweep: SweepSpec,
    model: str,
    threads: int,
    trainer: dict[str, Any],
    stack: dict[str, Any] | None = None,
    methods: dict[str, str] | None = None,
) -> dict[str, Any]:
    from suite.identity import study_fingerprint
    from suite.model.encoders import model_identity
    from suite.model.optim import adamw_implementation
    from suite.study.preflight import data_hashes

    task = prepared.spec.model_dump(mode="json")
    return study_fingerprint(
        task,
        sweep.model_dump(mode="json"),
        model_identity(model),
        data_hashes(prepared),
        threads,
        trainer,
        stack,
        classifiers_used(prepared.spec, sweep),
        adamw_implementation(trainer["precision"]) if uses_adamw(sweep) else "fused",
        methods,
    )


def uses_adamw(sweep: SweepSpec) -> bool:
    """Whether a trial of the sweep can train with AdamW (`bias_correction`; else BERT's Adam, the
    same at every precision): only then does how AdamW runs belong to the study's identity."""
    if "bias_correction" in sweep.space:
        return True in sweep.space["bias_correction"].candidates()
    if sweep.adaptive:  # TPE's settings do not exist yet: the fixed value decides
        return bool(sweep.hparams.get("bias_correction", True))
    return any(sweep.hparams_for(values).bias_correction for values in sweep.settings())


def classifiers_used(task: TaskSpec, sweep: SweepSpec) -> set[str]:
    """The classification heads the planned trials train (`task`: the task's own classifier)."""
    if task.head != "classification":
        return set()
    return {task.classifier if c == "task" else c for c in hparam_values(sweep, "classifier")}


def hparam_values(sweep: SweepSpec, name: str) -> set[str]:
    """Every value a trial of the sweep can take for one hyperparameter: each planned setting's,
    or (TPE) every choice its space can propose, else the fixed value."""
    if sweep.adaptive:
        searched = sweep.space.get(name)
        if searched is not None:
            return {str(v) for v in searched.candidates()}
        return {str(sweep.hparams.get(name, HParams.model_fields[name].default))}
    return {str(getattr(sweep.hparams_for(values), name)) for values in sweep.settings()}


def stack_uses(task: TaskSpec, sweep: SweepSpec) -> set[str]:
    """What of `identity.USED_WITH` a trial of the study can run: the tagging metric, the CRF,
    LoRA (a TPE space that can propose it included)."""
    uses = {"tagging"} if task.head == "tagging" else set()
    if task.head == "tagging" and task.tagging.crf:
        uses.add("crf")
    return uses | ({"lora"} if "lora" in hparam_values(sweep, "adapter") else set())
