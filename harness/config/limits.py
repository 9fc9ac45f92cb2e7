"""Bounds on what a sweep config may ask for, checked while it is loaded (before any expansion, any
dataset load and any MLflow call).

- **Plan size.** :func:`plan_size` computes the number of trials a config would expand to from its
  axis sizes alone (a ``log_grid`` of 10^9 points counts as 10^9 without building it; ``seeds:
  1000000`` as 10^6 without a list); :func:`harness.config.load.check_plan_size` rejects more
  than ``max_trials`` (default :data:`DEFAULT_MAX_TRIALS` = 10,000; ``python -m harness sweep
  --max-trials N`` raises it), naming the count and the key that multiplied it most. The count is
  the grid's product before ``exclude`` rules and de-duplication (an upper bound on the trials that run),
  times the ``dtype`` list's length; a ``ladder:`` counts every rung and data budget's part.
- **Numbers.** :data:`MAX_STEPS` (the trainer counts steps in int32), :data:`MAX_EPOCHS`,
  :data:`MAX_STEPS_PER_DISPATCH` (one dispatch holds ``K × batch`` indices in memory),
  :data:`MAX_BATCH_SIZE`, :data:`MAX_JOBS`, seeds in ``[0, 2**32)`` (``jax.random.PRNGKey`` takes a
  uint32 seed on a default, 32-bit JAX).
- **Names and strings** against MLflow's limits (``mlflow/utils/validation.py`` in mlflow 3.17:
  experiment names ≤ 500 characters, param values ≤ 6,000, tag values ≤ 8,000) and the file
  system's: the sweep ``name`` is the experiment's name, a tag value and, made file-safe, the
  experiment's artifact directory (one path component: ≤ 255 bytes), so :func:`name_problem`
  allows at most :data:`MAX_NAME_CHARS` characters, 255 UTF-8 bytes, and no control or format
  characters.
- **Tracking URIs**: :func:`tracking_uri_problem` accepts the schemes the harness can use
  (``sqlite:///PATH``, ``http(s)://HOST[:PORT]``, ``postgresql``/``mysql``/``mssql`` database URIs,
  ``databricks``) and explains anything else before MLflow sees it.

No jax or MLflow import; counts come from :func:`harness.config.values.hparam_count`.
"""

from __future__ import annotations

import types
import unicodedata
from typing import Any
from urllib.parse import urlsplit

from harness.config.search import is_distribution, resolve_search
from harness.config.values import hparam_count

#: Default ``--max-trials``: the largest plan a sweep may expand to.
DEFAULT_MAX_TRIALS = 10_000
#: Largest step budget (``budget.steps``, ``eval_every``, and steps derived from ``epochs``).
MAX_STEPS = 1_000_000_000
#: Largest ``budget.epochs``.
MAX_EPOCHS = 1_000_000
#: Largest ``steps_per_dispatch``.
MAX_STEPS_PER_DISPATCH = 10_000
#: Largest batch size.
MAX_BATCH_SIZE = 10_000_000
#: Largest ``jobs``.
MAX_JOBS = 1024
#: Seeds are in ``[0, SEED_LIMIT)``.
SEED_LIMIT = 2**32
#: Longest sweep ``name`` (characters; MLflow allows 500 for an experiment name, but the name also
#: becomes the experiment's artifact directory name, at most 255 bytes).
MAX_NAME_CHARS = 200
#: Longest ``description``, ``address`` and ``tracking_uri`` (characters).
MAX_TEXT_CHARS = 8000
#: MLflow's limit on a param value (characters): every hyperparameter value is logged as one.
MAX_PARAM_VALUE_CHARS = 6000

_DB_SCHEMES = ("postgresql", "mysql", "mssql")
_URI_HELP = ("use sqlite:///PATH/mlflow.db (a local store), http://HOST:PORT or https://... (an "
             "MLflow server), or a database URI (postgresql://, mysql://, mssql://)")


# --------------------------------------------------------------------------- plan size


def _component_count(comp: Any, path: str, factors: list[tuple[int, str]]) -> int:
    counts = {k: hparam_count(v) for k, v in (comp.hparams or {}).items()}
    for k, n in counts.items():
        factors.append((n, f"{path}.hparams.{k}"))
    zipped = {a: i for i, g in enumerate(comp.zip or []) for a in g}
    total, seen = 1, set()
    for k, n in counts.items():
        gi = zipped.get(k)
        if gi is None:
            total *= n
        elif gi not in seen:
            seen.add(gi)
            total *= n
    return total


def _has_dist(comp: Any) -> bool:
    return any(is_distribution(v) for v in (comp.hparams or {}).values())


def _trials(cfg: Any, comp: Any) -> int:
    """Sampled configurations per cell for optimizer entry ``comp`` (1 when it does not sample)."""
    t = resolve_search(getattr(cfg, "search", None), getattr(comp, "search", None)).trials
    return t if isinstance(t, int) and not isinstance(t, bool) and t >= 1 else 1


def plan_size(cfg: Any) -> tuple[int, list[tuple[int, str]]]:
    """``(trials, factors)``: the number of trials ``cfg`` (a parsed ``SweepConfig``) expands to
    before ``exclude`` and de-duplication, and ``(count, key path)`` for every axis,
    hyperparameter and ``search.trials``, so a message can name the biggest. Arithmetic only:
    nothing is expanded or sampled.

    A (model, optimizer, schedule) cell with a distribution in any of the three becomes
    ``search.trials`` cells (the optimizer entry's search, else the top level's), as
    :func:`harness.plan.expansion.expand` does; when a top-level ``zip`` pairs one of those axes with
    another, the count is the upper bound that multiplies every cell by the largest ``trials``.

    A ``dtype`` list multiplies the count (one part per dtype). A ``ladder:`` counts its rungs
    (:func:`_ladder_size`)."""
    if getattr(cfg, "ladder", None) is not None:
        return _ladder_size(cfg)
    factors: list[tuple[int, str]] = []
    grids: list[tuple[str, Any]] = [("", cfg)] + [(f"include[{i}].", g)
                                                 for i, g in enumerate(getattr(cfg, "include", []))]
    total = sum(_grid_size(cfg, prefix, grid, factors) for prefix, grid in grids)
    dtypes = cfg.dtypes() if hasattr(cfg, "dtypes") else [None]
    if len(dtypes) > 1:
        factors.append((len(dtypes), "dtype"))
    return total * len(dtypes), factors


_AXES = ("models", "optimizers", "schedules", "datasets", "seeds", "batch_size")


def _axis_sizes(cfg: Any, prefix: str, grid: Any, factors: list[tuple[int, str]]
                ) -> tuple[dict[str, int], dict[str, list[tuple[int, bool, Any]]]]:
    """Each axis's size in one grid (the top level, ``prefix`` ``""``, or an ``include`` entry,
    its axes defaulting to the top level's), and per component axis its entries' ``(count, samples,
    entry)``; the axes the grid sets itself, and their hyperparameters, appended to ``factors``."""
    sizes: dict[str, int] = {}
    entries: dict[str, list[tuple[int, bool, Any]]] = {}
    for axis in _AXES:
        val = getattr(grid, axis, None)
        own = val is not None
        if val is None:
            val = getattr(cfg, axis)
        if val is None and axis == "datasets":  # workloads: one (dataset, model, budget) each
            val = [types.SimpleNamespace(hparams={}, zip=[])
                   for _ in getattr(cfg, "workloads", None) or []]
        elif val is None and axis not in ("seeds", "batch_size"):  # set by the workloads
            val = [types.SimpleNamespace(hparams={}, zip=[])]
        if axis in ("seeds", "batch_size"):
            n = len(val)
        else:
            sink = factors if own or not prefix else []
            entries[axis] = [(_component_count(c, f"{prefix if own else ''}{axis}[{j}]", sink),
                              axis != "datasets" and _has_dist(c), c) for j, c in enumerate(val)]
            n = sum(e[0] for e in entries[axis])
        sizes[axis] = n
        if own or not prefix:
            factors.append((n, f"{prefix if own else ''}{axis}"))
    return sizes, entries


def _grid_size(cfg: Any, prefix: str, grid: Any, factors: list[tuple[int, str]]) -> int:
    """The trials of one grid (:func:`_axis_sizes`), its factors appended to ``factors``."""
    sizes, entries = _axis_sizes(cfg, prefix, grid, factors)
    opt_prefix = prefix if getattr(grid, "optimizers", None) is not None else ""
    trials = [_trials(cfg, c) for _, _, c in entries["optimizers"]]
    for j, t in enumerate(trials):
        own_search = getattr(entries["optimizers"][j][2], "search", None)
        if t > 1:
            factors.append((t, f"{opt_prefix}optimizers[{j}].search.trials"
                            if own_search is not None and own_search.trials is not None
                            else "search.trials"))
    zip_groups = getattr(cfg, "zip", []) if not prefix else []
    grouped = {a: i for i, g in enumerate(zip_groups) for a in g}
    cell_axes = ("models", "optimizers", "schedules")
    any_dist = any(d for a in cell_axes for _, d, _ in entries[a])
    if any(a in grouped for a in cell_axes):
        mult = max(trials, default=1) if any_dist else 1
        rest = _AXES
    else:  # exact: sum over optimizer entries of its cells, sampled ones times its trials
        m_all, s_all = sizes["models"], sizes["schedules"]
        m_plain = sum(n for n, d, _ in entries["models"] if not d)
        s_plain = sum(n for n, d, _ in entries["schedules"] if not d)
        mult = 0
        for (n_o, d_o, _), t in zip(entries["optimizers"], trials, strict=True):
            if d_o:
                mult += n_o * t * m_all * s_all
            else:
                mult += n_o * (t * (m_all * s_all - m_plain * s_plain) + m_plain * s_plain)
        rest = ("datasets", "seeds", "batch_size")
    prod, seen = mult, set()
    for axis in rest:
        gi = grouped.get(axis)
        if gi is None:
            prod *= sizes[axis]
        elif gi not in seen:
            seen.add(gi)
            prod *= sizes[axis]
    return prod


def _ladder_size(cfg: Any) -> tuple[int, list[tuple[int, str]]]:
    """:func:`plan_size` of a config with a ``ladder:``, as
    :func:`harness.config.ladder_parts.ladder_parts` expands it, without loading a model or dataset: every
    size × every ``tokens_per_param`` ratio is one part holding every optimizer entry, every
    ``baseline_tokens_per_param`` ratio not among those one part holding the baseline's entries
    alone; each part one model, one dataset, one batch size, no ``include``; × ``dtype``.
    ``transfer`` does not change a part's count (``fixed``/``mup`` need one value per
    hyperparameter; ``per_rung`` keeps the entry's grid or search)."""
    lad = cfg.ladder
    one = [types.SimpleNamespace(hparams={}, zip=[])]
    part = cfg.model_copy(update={
        "ladder": None, "workloads": None, "models": one, "datasets": one, "batch_size": [0],
        "include": [], "zip": [g for g in cfg.zip if not {"models", "datasets", "batch_size"} & set(g)]})
    every, factors = plan_size(part)
    base = [c for c in cfg.optimizers if c.name == lad.baseline]
    alone = plan_size(part.model_copy(update={"optimizers": base}))[0] if base else 0
    budgets = lad.ratios()
    shared = sum(1 for _, baseline_only in budgets if not baseline_only)
    total = len(lad.sizes) * (shared * every + (len(budgets) - shared) * alone)
    factors = [f for f in factors if f[1] not in ("models", "datasets", "batch_size")]
    factors += [(len(lad.sizes), "ladder.sizes"), (shared, "ladder.tokens_per_param")]
    if len(budgets) > shared:
        factors.append((len(budgets) - shared, "ladder.baseline_tokens_per_param"))
    return total, factors


def plan_size_problem(cfg: Any, max_trials: int) -> tuple[str, str] | None:
    """``(key path, message)`` when ``cfg`` would expand to more than ``max_trials`` trials, else
    ``None``. The key path is the axis or hyperparameter with the most values (the deepest such
    key on a tie)."""
    total, factors = plan_size(cfg)
    if total <= max_trials:
        return None
    n, path = max(factors, key=lambda f: (f[0], f[1].count(".") + f[1].count("[")))
    lad = getattr(cfg, "ladder", None)
    rungs = "" if lad is None else (f" ({len(lad.sizes)} ladder sizes x {len(lad.ratios())} data "
                                    f"budgets, each a part of the grid)")
    return path, (f"the sweep would expand to {total:,} trials{rungs}, more than the limit of "
                  f"{max_trials:,}; this key gives {n:,} values. Shrink the grid, or raise the "
                  f"limit with `python -m harness sweep --max-trials N`")


# --------------------------------------------------------------------------- names and URIs


def name_problem(name: str, limit: int = MAX_NAME_CHARS) -> str | None:
    """Why ``name`` cannot be a sweep (experiment) name, or ``None``: empty or blank, longer than
    ``limit`` characters or 255 UTF-8 bytes, or holding control/format characters (newlines, NUL,
    bidi overrides)."""
    if not name.strip():
        return "must not be empty or blank"
    if len(name) > limit:
        return (f"{len(name):,} characters; at most {limit} (it names the MLflow experiment and its "
                f"artifact directory)")
    if len(name.encode("utf-8", "surrogatepass")) > 255:
        return f"{len(name.encode('utf-8', 'surrogatepass'))} bytes in UTF-8; at most 255"
    return control_problem(name)


def control_problem(name: str) -> str | None:
    """Why ``name`` (a sweep's, an entry's) cannot be shown on one line, or ``None``: it holds a
    control or format character (a newline, NUL, a bidi override)."""
    bad = [c for c in name if unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl", "Zp")]
    if bad:
        return (f"contains the control or format character U+{ord(bad[0]):04X}; use printable "
                f"characters")
    return None


def text_problem(text: str, limit: int = MAX_TEXT_CHARS) -> str | None:
    """Why free text (``description``) is too long, or ``None``."""
    if len(text) > limit:
        return f"{len(text):,} characters; at most {limit:,}"
    return None


#: MLflow's Databricks tracking URIs (``databricks``, ``databricks://PROFILE``, ``databricks-uc``).
_DATABRICKS = ("databricks", "databricks-uc", "uc")


def tracking_uri_problem(uri: str) -> str | None:
    """Why the harness cannot use ``uri`` as an MLflow tracking URI, or ``None``."""
    if len(uri) > MAX_TEXT_CHARS:
        return f"{len(uri):,} characters; at most {MAX_TEXT_CHARS:,}"
    if any(unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") for c in uri) or uri != uri.strip():
        return f"contains whitespace or control characters; {_URI_HELP}"
    try:
        parts = urlsplit(uri)
    except ValueError as e:
        return f"not a URI ({e}); {_URI_HELP}"
    scheme = parts.scheme.lower()
    if scheme == "sqlite":
        if not uri.startswith("sqlite:///") or len(uri) <= len("sqlite:///"):
            return "a SQLite URI needs a file path: sqlite:///relative.db or sqlite:////abs/path.db"
        path = uri[len("sqlite:///"):]
        if path.split("?")[0] == ":memory:" or "mode=memory" in parts.query:
            return ("an in-memory SQLite store keeps nothing once the process ends (every result "
                    "would be lost); give a file: sqlite:///mlflow.db")
        return None
    if scheme in ("http", "https"):
        if not parts.hostname:
            return f"no host in {uri!r}; e.g. http://127.0.0.1:5000"
        try:
            parts.port  # noqa: B018  (raises on a malformed port)
        except ValueError:
            return f"malformed port in {uri!r}; e.g. http://127.0.0.1:5000"
        return None
    if scheme.split("+", 1)[0] in _DB_SCHEMES or scheme in _DATABRICKS or uri in _DATABRICKS:
        return None
    if scheme in ("", "file"):
        return (f"a file store ({uri!r}) is not supported (MLflow keeps it in maintenance mode); "
                f"{_URI_HELP}")
    return f"unsupported scheme {scheme!r}; {_URI_HELP}"
