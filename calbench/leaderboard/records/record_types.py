"""The run record's shape, as types: what ``calbench.leaderboard.records.checks.validate_record`` checks.

A run record (``leaderboards/results/<name>.json``, with its stored samples beside it) is JSON;
these ``TypedDict``s name its parts so that the leaderboard's functions say what they take. They
check nothing at run time: ``validate_record`` does, on every save and load.

* ``RunRecord``: the system, its evaluations and tasks, the recipe that made it, provenance;
* ``ModelPart``: the system (backend, model and adapter, their weights' hashes);
* ``TaskEntry``: one task's metrics (overall and per family, ``[value, standard error]``
  pairs), its settings, and what the store keeps beside the record (``samples``, ``items``);
* ``EvaluationEntry``: one evaluation (one lm-eval run, or the adapter's drift) of a record;
* ``EvaluationPart``: one evaluation as ``calbench.leaderboard.records.store.evaluation_part`` builds it,
  before ``assemble_record`` joins the parts into a record;
* ``Drift``: the adapter's drift (``calbench drift``); ``CurvePart``: a learning curve's point.
"""

from __future__ import annotations

from typing import Any, Required, TypedDict

Pair = list[float | None]  # [value, standard error]; None where undefined


class ModelPart(TypedDict, total=False):
    """The system a run evaluated: every value a string or None."""

    backend: str | None
    endpoint_model: str | None  # a model behind an API: the name its server serves it under
    endpoint: str | None  # and the server's URL (base_url)
    pretrained: str | None
    revision: str | None
    weights_sha256: str | None
    adapter: str | None
    adapter_sha256: str | None
    dtype: str | None
    chat_template_sha256: str | None


class StoredPrompt(TypedDict):
    """One prompt of a numeric sampling task: its law and its valid answers in order (6 digits)."""

    family: str
    target: str
    n: int  # samples (valid or not)
    values: list[float]


class StoredItem(TypedDict):
    """One document of another task: what pairs it across runs, and its numeric scores."""

    doc_id: Any
    doc_hash: str
    filter: str
    doc: dict[str, Any]
    scores: dict[str, float]


class TaskEntry(TypedDict, total=False):
    """One task of a record."""

    evaluation: Required[str]  # the evaluation that ran it
    version: int | float | None
    samples_per_prompt: int | None
    generation: dict[str, Any] | None
    prompts: int | None
    overall: Required[dict[str, Pair]]
    families: dict[str, dict[str, Pair]]  # the numeric tasks: family -> metric -> pair
    api: dict[str, Any]  # on an API backend: what was sent, withheld (and why), and the seed per sample
    samples: list[StoredPrompt]  # numeric sampling tasks (stored beside the record)
    items: list[StoredItem]  # other tasks that logged their samples (stored beside the record)


class Drift(TypedDict, total=False):
    drift_kl: Required[float]
    drift_kl_se: float | None
    tokens: int


class EvaluationEntry(TypedDict, total=False):
    """One evaluation of a record: its tasks, and how it ran."""

    tasks: Required[list[str]]
    seeds: dict[str, Any]
    task_hashes: dict[str, str]
    recipe_sha256: str  # with calbench leaderboard run: the evaluation's settings and system
    command: str
    seconds: float


class EvaluationPart(TypedDict, total=False):
    """One evaluation before it joins a record: its system and tasks (an lm-eval run), or its drift."""

    model: ModelPart
    tasks: Required[dict[str, TaskEntry]]
    seeds: dict[str, Any]
    task_hashes: dict[str, str]
    drift: Drift
    recipe_sha256: str
    command: str
    seconds: float


class CurvePart(TypedDict, total=False):
    """A learning curve's point: which run, how far into it, and at what cost."""

    run: str
    label: str
    step: int
    examples: int
    train: dict[str, Any]
    train_loss: float | None
    wall_seconds: float
    tokens_rank0: int
    seconds_per_step: float
    tokens_per_step: float
    distribution: dict[str, int]  # examples per family over the run (runs that recorded it)
    interpolate: dict[str, Any]  # a WiSE-FT point: its source run and alpha


class RunRecord(TypedDict, total=False):
    """One system's run record (module docstring)."""

    schema: Required[int]
    name: Required[str]
    type: Required[str]  # checks.ENTRY_TYPES
    command: Required[str]
    recipe: dict[str, Any]  # the resolved recipe (calbench leaderboard run)
    recipe_sha256: str
    recipe_file: str  # the recipe that made it, as a path from the record's folder: its owner (rows.owner_of)
    model: Required[ModelPart]
    evaluations: Required[dict[str, EvaluationEntry]]
    tasks: Required[dict[str, TaskEntry]]
    drift: Drift
    calbench_commit: str | None
    rescored: dict[str, str | None]  # metric -> the commit that re-scored it from the stored answers (rescoring)
    packages: dict[str, str]
    samples_sha256: str  # in the file only: load_record takes it out once it has checked the samples
    curve: CurvePart
