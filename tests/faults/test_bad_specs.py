"""Mutated task and sweep YAMLs: every shipped file, broken in ways that are invalid by
construction, must give one `error:` line naming the file (and the field), exit code 2, no
traceback, and (for `run`) no output folder."""

from __future__ import annotations

import copy
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from suite.commands.cli import main
from suite.config.sweep import HParams, PrunerSpec, SamplerSpec, SeedSpec, SweepSpec
from suite.config.task import DataSpec, FailureSpec, MetricSpec, QASpec, Reported, TaggingSpec, TaskSpec

REPO = Path(__file__).resolve().parents[2]
TASKS = sorted((REPO / "tasks").glob("*.yaml"))
SWEEPS = sorted((REPO / "sweeps").glob("*.yaml"))
FILES = TASKS + SWEEPS
RAW = {path: yaml.safe_load(path.read_text()) for path in FILES}

FAST = settings(
    max_examples=50,
    deadline=None,
    database=None,  # no example database in the checkout (failures print their example)
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# The kind of every field a mutation may break ("str", "int", ...); dotted = nested.
TASK_FIELDS = {
    "name": "str",
    "version": "int",
    "head": "literal",
    "data": "mapping",
    "labels": "strlist",
    "regression": "bool",
    "tagging": "mapping",
    "qa": "mapping",
    "eval_split": "literal",
    "metric": "mapping",
    "max_length": "int",
    "sizes": "sizes",
    "model": "str",
    "sweep": "str",
    "failure": "mapping",
    "eval_limit": "int",
    "reported": "list",
    "data.local": "str",
    "data.format": "literal",
    "data.train": "str",
    "data.validation": "str",
    "data.test": "str",
    "data.header": "bool",
    "data.columns": "strlist",
    "data.text": "strlist",
    "data.label": "str",
    "data.token_column": "int",
    "data.tag_column": "int",
    "data.tag_scheme": "literal",
    "data.hub": "mapping",
    "metric.main": "str",
    "metric.extra": "list",
    "metric.higher_is_better": "bool",
    "failure.rule": "literal",
    "failure.margin": "float",
    "failure.threshold": "float",
    "tagging.crf": "bool",
    "tagging.label_all_subtokens": "bool",
    "qa.train_sizes": "intlist",
    "qa.split_seeds": "intlist",
    "qa.eval_pool": "strlist",
    "qa.eval_seed": "int",
    "qa.doc_stride": "int",
    "qa.n_best": "int",
    "qa.max_answer_length": "int",
}
SWEEP_FIELDS = {
    "name": "str",
    "description": "str",
    "hparams": "mapping",
    "space": "mapping",
    "sampler": "mapping",
    "budget": "int",
    "seeds": "mapping",
    "pruner": "mapping",
    "sampler.type": "literal",
    "sampler.seed": "int",
    "sampler.n_startup_trials": "int",
    "pruner.type": "literal",
    "seeds.master": "int",
    "seeds.design": "literal",
    "seeds.repeats": "int",
    "seeds.init": "int",
    "seeds.order": "int",
    "seeds.subsample": "int",
    "seeds.subsample_seeds": "intlist",
    "hparams.lr": "float",
    "hparams.batch_size": "int",
    "hparams.epochs": "int",
    "hparams.warmup_ratio": "float",
    "hparams.weight_decay": "float",
    "hparams.bias_correction": "bool",
    "hparams.max_grad_norm": "float",
    "hparams.group_by_length": "bool",
    "hparams.min_steps": "int",
}
# The values a literal field allows (a mutation must not pick one of them).
LITERALS = {
    "head": {"classification", "tagging", "span"},
    "eval_split": {"validation", "test"},
    "data.format": {"tsv", "csv", "jsonl", "conll", "mrqa", "squad"},
    "data.tag_scheme": {"iob1", "iob2", "iobes"},
    "failure.rule": {"trivial_baseline", "threshold"},
    "sampler.type": {"grid", "random", "tpe", "qmc"},
    "pruner.type": {"none", "median", "wilcoxon"},
    "seeds.design": {"independent", "crossed"},
}
# Values out of range for a field of the right type.
OUT_OF_RANGE: dict[str, list[Any]] = {
    "sizes": [[-5], [0], [1], [64, 64], [-1000, "full"]],
    "max_length": [7, 0, -128, 8193],
    "eval_limit": [0, -3],
    "qa.doc_stride": [7, 0, -1, 4096],
    "qa.n_best": [0, -1],
    "qa.max_answer_length": [0],
    "qa.train_sizes": [[0], [-16], [16, 16]],
    "qa.split_seeds": [[42, 42]],
    "hparams.lr": [0, 0.0, -1.0e-5, -3, 1, 1.5],
    "hparams.batch_size": [0, -16],
    "hparams.epochs": [0, -1],
    "hparams.warmup_ratio": [-0.1, 1.0, 2],
    "hparams.weight_decay": [-0.01],
    "hparams.max_grad_norm": [0, -1.0],
    "hparams.min_steps": [-1],
    "budget": [0, -5],
    "seeds.master": [-1, 2**32, 10**30],
    "sampler.seed": [-1, 2**32],
    "seeds.repeats": [0, -2],
    "seeds.init": [0],
    "seeds.order": [0],
    "seeds.subsample": [0],
    "seeds.subsample_seeds": [[-1], [42, 42]],
    "sampler.n_startup_trials": [0],
}
# Lists that must not be empty.
NON_EMPTY = {
    "sizes",
    "labels",
    "data.text",
    "data.columns",
    "qa.train_sizes",
    "qa.split_seeds",
    "qa.eval_pool",
}
MODELS = {
    "": TaskSpec,
    "data": DataSpec,
    "metric": MetricSpec,
    "failure": FailureSpec,
    "tagging": TaggingSpec,
    "qa": QASpec,
    "reported.0": Reported,
}
SWEEP_MODELS = {"": SweepSpec, "sampler": SamplerSpec, "seeds": SeedSpec, "pruner": PrunerSpec}

identifiers = st.from_regex(r"[a-z][a-z0-9_]{1,14}", fullmatch=True)
# Any text (line breaks, quotes, non-ASCII) that survives a YAML round trip as a plain key.
odd_text = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12).filter(
    lambda k: yaml.safe_load(yaml.safe_dump({k: 1}, allow_unicode=True)) == {k: 1}
)
mappings = st.dictionaries(identifiers, st.integers(), min_size=1, max_size=2)


def wrong_values(kind: str) -> st.SearchStrategy[Any]:
    """Values of the wrong type for a field of this kind (never valid, in lax or strict mode)."""
    lists = st.lists(st.integers(), min_size=1, max_size=3)
    texts = identifiers.filter(lambda s: s != "full")
    fractions = st.floats(-1e6, 1e6).filter(lambda f: not f.is_integer())
    return {
        "str": st.one_of(lists, mappings, st.integers(), st.booleans(), st.floats(allow_nan=False)),
        "int": st.one_of(texts, st.booleans(), lists, mappings, fractions),
        "float": st.one_of(
            texts, st.booleans(), lists, mappings, st.sampled_from([float("nan"), float("inf")])
        ),
        "bool": st.one_of(texts, st.integers(), lists, mappings, st.floats(allow_nan=False)),
        "literal": texts,  # the caller filters out the allowed values
        "mapping": st.one_of(lists, st.integers(), texts, st.booleans()),
        "list": st.one_of(st.integers(), texts, mappings, st.booleans()),
        "strlist": st.one_of(st.integers(), texts, mappings, st.lists(lists, min_size=1, max_size=2)),
        "intlist": st.one_of(st.integers(), texts, mappings, st.lists(texts, min_size=1, max_size=2)),
        "sizes": st.one_of(st.integers(), texts, mappings, st.lists(texts, min_size=1, max_size=2)),
    }[kind]


@dataclass
class Mutant:
    source: Path
    text: str
    field: str | None  # the field the error must name; None for errors before the schema
    profile: str | None = None  # the profile the broken value sits in


def dump(raw: Any) -> str:
    return yaml.safe_dump(raw, sort_keys=False, allow_unicode=True)


def get_path(raw: dict, dotted: str) -> Any:
    node: Any = raw
    for part in dotted.split("."):
        node = node[int(part)] if isinstance(node, list) else node.get(part)
        if node is None:
            return None
    return node


def set_path(raw: dict, dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    node: Any = raw
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
    node[last] = value


def nested(dotted: str, value: Any) -> dict:
    """{"a": {"b": value}} for "a.b": a profile's partial override."""
    out: Any = value
    for part in reversed(dotted.split(".")):
        out = {part: out}
    return out


def fields_of(path: Path) -> dict[str, str]:
    table = TASK_FIELDS if path.parent.name == "tasks" else SWEEP_FIELDS
    raw = RAW[path]
    searched = {n for r in [raw, *(raw.get("profiles") or {}).values()] for n in (r or {}).get("space", {})}
    # A searched hyperparameter set in `hparams` is a different error ("both fixed and searched").
    return {
        f: k
        for f, k in table.items()
        if get_path(raw, f) is not None and not (f.startswith("hparams.") and f[8:] in searched)
    }


@st.composite
def broken_field(draw: st.DrawFn, files: list[Path] = FILES) -> Mutant:
    """A present field set to a wrong type, an out-of-range value or an empty list; in the base
    or in one of the file's profiles."""
    path = draw(st.sampled_from(files))
    fields = fields_of(path)
    field = draw(st.sampled_from(sorted(fields)))
    options = [wrong_values(fields[field]).filter(lambda v: v not in LITERALS.get(field, ()))]
    if field in OUT_OF_RANGE:
        options.append(st.sampled_from(OUT_OF_RANGE[field]))
    if field in NON_EMPTY:
        options.append(st.just([]))
    value = draw(st.one_of(options))
    raw = copy.deepcopy(RAW[path])
    profiles = sorted(raw.get("profiles") or {})
    profile = draw(st.sampled_from([None, *profiles]))
    if profile is None:
        set_path(raw, field, value)
    else:
        raw["profiles"][profile] = deep_merge(raw["profiles"][profile] or {}, nested(field, value))
    return Mutant(path, dump(raw), field, profile)


def deep_merge(base: dict, override: dict) -> dict:
    out = dict(base)
    for key, value in override.items():
        both = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = deep_merge(out[key], value) if both else value
    return out


# Required fields (`head` is left out: `suite validate` tells a task from a sweep by it).
REQUIRED = {
    "tasks": ["name", "version", "data", "metric", "sizes", "metric.main", "data.train"],
    "sweeps": ["name", "hparams.lr", "hparams.batch_size", "hparams.epochs"],
}


@st.composite
def missing_field(draw: st.DrawFn) -> Mutant:
    """A required field deleted from a file that has it (a fixed hyperparameter in `hparams`)."""
    path = draw(st.sampled_from(FILES))
    raw = copy.deepcopy(RAW[path])
    field = draw(st.sampled_from([f for f in REQUIRED[path.parent.name] if f in fields_of(path)]))
    *parents, last = field.split(".")
    del (get_path(raw, ".".join(parents)) if parents else raw)[last]
    return Mutant(path, dump(raw), field)


@st.composite
def unknown_key(draw: st.DrawFn) -> Mutant:
    """A key the schema does not know, at the top level, in a nested block, in a profile, or as
    a hyperparameter name."""
    path = draw(st.sampled_from(FILES))
    raw = copy.deepcopy(RAW[path])
    models = MODELS if path.parent.name == "tasks" else SWEEP_MODELS
    blocks = [b for b in models if b == "" or isinstance(get_path(raw, b), dict)]
    if path.parent.name == "sweeps":  # a hyperparameter name the schema does not know
        blocks += [b for b in ("hparams", "space") if isinstance(raw.get(b), dict)]
    block = draw(st.sampled_from(blocks))
    known = set(models.get(block, HParams).model_fields) | {"profiles"}
    plain = draw(st.booleans())
    key = draw((identifiers if plain else odd_text).filter(lambda k: k not in known))
    value = {"type": "categorical", "choices": [1]} if block == "space" else 1
    field = f"{block}.{key}".lstrip(".")
    profiles = sorted(raw.get("profiles") or {})
    profile = draw(st.sampled_from([None, *profiles]))
    if profile is None:
        target = get_path(raw, block) if block else raw
        target[key] = value
    else:
        override = nested(block, {key: value}) if block and block != "reported.0" else {key: value}
        field = key if block == "reported.0" else field
        raw["profiles"][profile] = deep_merge(raw["profiles"][profile] or {}, override)
    return Mutant(path, dump(raw), field if plain else None, profile)


@st.composite
def broken_structure(draw: st.DrawFn) -> Mutant:
    """Not a mapping at the top level, a Python tag, or a `profiles` block / profile that is not
    a mapping."""
    path = draw(st.sampled_from(FILES))
    raw = copy.deepcopy(RAW[path])
    scalars = st.one_of(st.integers(), st.floats(allow_nan=False), identifiers, st.booleans())
    case = draw(st.sampled_from(["top", "profiles", "profile", "profile-name"]))
    if case == "top":
        top = draw(st.one_of(st.lists(scalars, max_size=3), scalars, st.none()))
        return Mutant(path, "" if top is None else dump(top), None)
    if case == "profiles":
        raw["profiles"] = draw(st.one_of(st.lists(scalars, min_size=1, max_size=3), scalars))
        return Mutant(path, dump(raw), "profiles")
    if case == "profile-name":
        raw["profiles"][draw(st.integers())] = {}
        return Mutant(path, dump(raw), "profiles")
    name = draw(st.sampled_from(sorted(raw["profiles"])))
    raw["profiles"][name] = draw(st.one_of(st.lists(scalars, min_size=1, max_size=3), scalars))
    return Mutant(path, dump(raw), f"profiles.{name}")


PYTHON_TAGS = [
    '!!python/object/apply:os.system ["touch {marker}"]',
    '!!python/object/new:os.system ["touch {marker}"]',
    "!!python/object/apply:subprocess.check_output [[touch, {marker}]]",
    "!!python/name:os.system",
    "!!python/module:os",
]


@st.composite
def python_tag(draw: st.DrawFn) -> tuple[Mutant, str]:
    """A Python tag (which `yaml.load` would execute) as the document, a field's value, or
    inside a profile; returns the mutant and its tag template."""
    path = draw(st.sampled_from(FILES))
    raw = copy.deepcopy(RAW[path])
    tag = draw(st.sampled_from(PYTHON_TAGS))
    where = draw(st.sampled_from(["document", "field", "profile"]))
    if where == "document":
        return Mutant(path, tag, None), tag
    if where == "field":
        raw[draw(st.sampled_from(sorted(raw)))] = "__TAG__"
    else:
        name = draw(st.sampled_from(sorted(raw["profiles"])))
        raw["profiles"][name] = {"name": "__TAG__"}
    return Mutant(path, dump(raw).replace("'__TAG__'", tag).replace("__TAG__", tag), None), tag


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tasks/ and sweeps/ side by side, as a task's relative `sweep:` expects."""
    root = tmp_path_factory.mktemp("specs")
    (root / "tasks").mkdir()
    shutil.copytree(REPO / "sweeps", root / "sweeps")
    return root


def write(workdir: Path, mutant: Mutant) -> Path:
    target = workdir / mutant.source.parent.name / f"mutant-{mutant.source.name}"
    target.write_text(mutant.text, encoding="utf-8")
    return target


def check_one_line_error(capsys: pytest.CaptureFixture, code: int, path: Path, mutant: Mutant) -> str:
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    assert code == 2, f"exit {code} for {mutant}"
    assert captured.err.count("\n") == 1 and captured.err.endswith("\n"), captured.err
    (line,) = captured.err.splitlines()
    assert line.startswith("error: ") and len(line) > len("error: "), line
    assert str(path) in line, line
    if mutant.field is not None:
        assert f"field '{mutant.field}" in line, (mutant.field, line)
    if mutant.profile not in (None, "default"):
        assert f"(profile {mutant.profile})" in line, line
    return line


def validate(capsys: pytest.CaptureFixture, workdir: Path, mutant: Mutant) -> str:
    path = write(workdir, mutant)
    code = main(["validate", str(path)])
    line = check_one_line_error(capsys, code, path, mutant)
    assert "ok" not in capsys.readouterr().out  # nothing printed as valid
    return line


def run(capsys: pytest.CaptureFixture, workdir: Path, mutant: Mutant, shared_data: Path) -> None:
    """`suite run` stops at the spec: exit 2, one line, and no output folder. Each example gets
    an output path of its own: a folder one failing example left must not fail the next."""
    path = write(workdir, mutant)
    out = Path(tempfile.mkdtemp(dir=workdir)) / "out"
    profile = ["--profile", mutant.profile] if mutant.profile else []
    if path.parent.name == "tasks":
        args = ["run", str(path), *profile]
    else:  # a shipped task with the mutated sweep
        args = ["run", str(REPO / "tasks/rte.yaml"), "--sweep", str(path), *profile]
    code = main([*args, "--out", str(out), "--quiet", "--data-dir", str(shared_data)])
    check_one_line_error(capsys, code, path, mutant)
    assert not out.exists()


@FAST
@given(mutant=broken_field())
def test_a_field_of_the_wrong_type_or_range_is_named(mutant: Mutant, workdir: Path, capsys) -> None:  # noqa: ANN001
    validate(capsys, workdir, mutant)


@FAST
@given(mutant=missing_field())
def test_a_missing_required_field_is_named(mutant: Mutant, workdir: Path, capsys) -> None:  # noqa: ANN001
    validate(capsys, workdir, mutant)


@FAST
@given(mutant=unknown_key())
def test_an_unknown_key_anywhere_is_named(mutant: Mutant, workdir: Path, capsys) -> None:  # noqa: ANN001
    line = validate(capsys, workdir, mutant)
    if mutant.field is None:  # an odd key (line breaks, quotes): still one line, a field named
        assert "field '" in line


@FAST
@given(mutant=broken_structure())
def test_a_file_or_profile_that_is_not_a_mapping(mutant: Mutant, workdir: Path, capsys) -> None:  # noqa: ANN001
    validate(capsys, workdir, mutant)


@settings(FAST, max_examples=25)
@given(case=python_tag())
def test_python_tags_are_refused_and_never_run(case: tuple[Mutant, str], workdir: Path, capsys) -> None:  # noqa: ANN001
    mutant, tag = case
    marker = workdir / "pwned"
    mutant.text = mutant.text.replace("{marker}", str(marker))
    line = validate(capsys, workdir, mutant)
    assert "not valid YAML" in line and "python/" in line
    assert not marker.exists()


def mutant_of(source: Path, field: str, value: Any, profile: str | None = None) -> Mutant:
    """An explicit example: `field` set to `value` in the base (or in `profile`)."""
    raw = copy.deepcopy(RAW[source])
    if profile is None:
        set_path(raw, field, value)
    else:
        raw["profiles"][profile] = deep_merge(raw["profiles"][profile] or {}, nested(field, value))
    return Mutant(source, dump(raw), field, profile)


# Found by fresh draws: the base's `seeds` a list, which every profile's `seeds` mapping replaced
# before anything checked it, so the run trained.
SEEDS_A_LIST = mutant_of(REPO / "sweeps/seeds.yaml", "seeds", [0])


@settings(FAST, max_examples=40)
@example(mutant=SEEDS_A_LIST)
@given(mutant=st.one_of(broken_field(), missing_field(), broken_structure()))
def test_run_stops_before_writing_anything(mutant: Mutant, workdir: Path, capsys, shared_data: Path) -> None:  # noqa: ANN001
    run(capsys, workdir, mutant, shared_data)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_shipped_file_has_fields_to_break(path: Path) -> None:
    """The mutations above reach every shipped file: each has known fields and profiles."""
    assert len(fields_of(path)) >= 5 and RAW[path].get("profiles")


@st.composite
def flipped_direction(draw: st.DrawFn) -> Mutant:
    """A metric direction that disagrees with the metric (every shipped metric is higher-is-better),
    in the base or in a profile."""
    path = draw(st.sampled_from(TASKS))
    raw = copy.deepcopy(RAW[path])
    profile = draw(st.sampled_from([None, *sorted(raw.get("profiles") or {})]))
    if profile is None:
        raw["metric"]["higher_is_better"] = False
    else:
        raw["profiles"][profile] = deep_merge(
            raw["profiles"][profile] or {}, nested("metric.higher_is_better", False)
        )
    return Mutant(path, dump(raw), "metric.higher_is_better", profile)


@settings(FAST, max_examples=20)
@given(mutant=flipped_direction())
def test_a_direction_that_disagrees_with_the_metric_is_named(mutant: Mutant, workdir: Path, capsys) -> None:  # noqa: ANN001
    line = validate(capsys, workdir, mutant)
    assert "disagrees with" in line and "the direction is the metric's" in line


@settings(FAST, max_examples=10)
# Found by fresh draws: it met the output folder the `seeds: [0]` run above had left.
@example(mutant=mutant_of(REPO / "tasks/boolq.yaml", "metric.higher_is_better", False))
@given(mutant=flipped_direction())
def test_run_stops_at_a_disagreeing_direction(
    mutant: Mutant, workdir: Path, capsys, shared_data: Path
) -> None:  # noqa: ANN001
    run(capsys, workdir, mutant, shared_data)


@pytest.mark.parametrize("profile", [None, *sorted(RAW[REPO / "sweeps/seeds.yaml"]["profiles"])])
def test_run_and_plan_refuse_what_validate_refuses_under_every_profile(
    profile: str | None, workdir: Path, capsys: pytest.CaptureFixture, shared_data: Path
) -> None:
    """The line `validate` gives for the file, from `plan` and `run` whatever the profile."""
    line = validate(capsys, workdir, SEEDS_A_LIST)
    path = write(workdir, SEEDS_A_LIST)
    chosen = ["--profile", profile] if profile else []
    out = Path(tempfile.mkdtemp(dir=workdir)) / "out"
    common = ["rte", "--sweep", str(path), *chosen, "--data-dir", str(shared_data)]
    for args in (["plan", *common], ["run", *common, "--out", str(out), "--quiet"]):
        assert main(args) == 2
        assert capsys.readouterr().err.splitlines() == [line], args
    assert not out.exists()
