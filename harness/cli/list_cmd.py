"""``list``: the registries (models, optimizers, schedules, datasets) and the workloads, with
hyperparameters, defaults and a one-sentence description each."""

from __future__ import annotations

import re

import typer

from harness.cli.common import err

_ROLE = re.compile(r":\w+:`~?([^`]+)`")


def _first_sentence(text: str) -> str:
    para = " ".join(text.strip().split("\n\n")[0].split())
    m = re.search(r"(?<!\bal)(?<!\be\.g)(?<!\bi\.e)\.\s", para)  # not at "et al. ", "e.g. "
    return para if m is None else para[: m.start() + 1]


def describe(builder, note: str | None = None) -> str:
    """One line for ``list``: the first sentence of the builder's docstring, reST roles and literal
    markup removed; a docstring that only points at another function (``:func:`optimizers.core.adam```)
    is replaced by that function's first sentence. ``note`` (the registry's remark on the entry,
    :data:`optimizers.registry.NOTES`) is added after the sentence."""
    import importlib
    import inspect

    text = _first_sentence(inspect.getdoc(builder) or "")
    m = re.match(r":\w+:`~?([\w.]+)`(.*)$", text)
    if m and "." in m.group(1):
        module, _, attr = m.group(1).rpartition(".")
        try:
            target = getattr(importlib.import_module(module), attr)
            rest = _plain(m.group(2).strip().lstrip(":").strip().rstrip("."))
            text = _first_sentence(inspect.getdoc(target) or "").rstrip(".")
            text += f"; {rest}." if rest and not _says_again(rest, text) else "."
        except (ImportError, AttributeError):
            pass
    if note:
        text = f"{text.rstrip('.')}; {note}."
    return _plain(text)


def _plain(text: str) -> str:
    return _ROLE.sub(r"\1", text).replace("``", "")


def _norm(text: str) -> str:
    return re.sub(r"[\s\-_()]+", " ", _plain(text).lower()).strip()


def _says_again(rest: str, text: str) -> bool:
    """Whether the registry's remark ``rest`` only repeats the target's sentence ``text`` (its
    formula, its words) or a default the hyperparameter column already shows."""
    rest = re.sub(r"\bwith \w+ defaulting to [^;,]+", "", rest).strip(" ;,")
    rest = re.sub(r"^\w+\(i\)\s*=\s*", "", rest)  # "lr(i) = f" repeats "schedule(i) = f"
    return not _norm(rest) or _norm(rest) in _norm(text)


_PROBE_SHAPES = {"(L,)": (40,), "(H, W, C)": (8, 8, 1)}


def input_kinds(builder) -> str:
    """Which example shapes a model builder accepts, probed with its defaults on a 1-D input
    (40,) and an image (8, 8, 1): e.g. ``(L,) · (H, W, C)``; ``—`` when neither builds."""
    ok = []
    for kind, shape in _PROBE_SHAPES.items():
        try:
            md = builder(input_shape=shape, num_classes=10)
        except Exception:  # the builder refuses the shape (a 2-D CNN on (L,), ...)
            continue
        ok.append("tokens (T,)" if str(getattr(md, "input_dtype", "float32")).startswith("int") else kind)
    return " · ".join(dict.fromkeys(ok)) or "—"


def list_(
    kind: str | None = typer.Argument(
        None, help="models | optimizers | schedules | datasets | workloads (default all)."),
    optax: bool = typer.Option(
        False, "--optax", help="List every Optax and optax.contrib optimizer instead, as the "
        "`source:` that runs it (optax:NAME) with its hyperparameters (learning_rate is step_size)."),
) -> None:
    """Registered models, optimizers, schedules, datasets and workloads with their hyperparameters
    and defaults (a workload: dataset, model, loss, validation target, steps × batch size).

    Your own optimizer needs no registration: name it in a config entry's `source:`
    (docs/your-optimizer.md); `list optimizers --optax` shows what `source: optax:NAME` reaches."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from harness.config.registries import builder_hparams, default_registries
    from optimizers.registry import NOTES

    reg = default_registries()
    kinds = {"models": ("model", reg.models), "optimizers": ("optimizer", reg.optimizers),
             "schedules": ("schedule", reg.schedules), "datasets": ("dataset", reg.datasets)}
    if kind is not None and kind not in (*kinds, "workloads"):
        from harness.core.registry import did_you_mean

        valid = [*kinds, "workloads"]
        err(f"unknown kind {kind!r}; valid choices: {', '.join(valid)}{did_you_mean(kind, valid)}")
        raise typer.Exit(2)
    console = Console()
    if optax:
        if kind not in (None, "optimizers"):
            err(f"--optax lists optimizers; drop {kind!r} (python -m harness list optimizers --optax)")
            raise typer.Exit(2)
        _print_optax(console)
        return
    for k, (single, registry) in kinds.items():
        if kind and k != kind:
            continue
        t = Table(title=k)
        t.add_column("name")
        t.add_column("hyperparameters (default)")
        if k == "models":
            t.add_column("inputs", no_wrap=True)
        t.add_column("description", overflow="fold")
        for name in sorted(registry):
            b = registry[name]
            hps = builder_hparams(single, b)
            hp = ", ".join(f"{h.name}" if h.required else f"{h.name}={h.default!r}" for h in hps.values())
            extra = [input_kinds(b)] if k == "models" else []
            note = NOTES.get(k, {}).get(name)
            t.add_row(escape(name), escape(hp or "—"), *extra, escape(describe(b, note)))
        if k == "datasets":
            t.add_row("tfds:NAME", "data_dir, ...", "a TFDS dataset prepared in a data_dir (array_record)")
        if k == "models":
            t.caption = ("inputs: the example shapes a model builds on — (L,): 1-D data such as mnist1d "
                         "or synthetic; (H, W, C): images such as digits; tokens (T,): int sequences")
        console.print(t)
    if kind in (None, "workloads"):
        _print_workloads(console)


def _print_optax(console) -> None:
    """The table of ``list optimizers --optax``: each Optax optimizer as the ``source:`` that runs
    it, with its hyperparameters and first docstring sentence."""
    from rich.markup import escape
    from rich.table import Table

    from harness.config.optimizer_sources import optax_optimizers
    from harness.config.registries import builder_hparams

    try:
        found = optax_optimizers()
    except ImportError as e:
        err(str(e))
        raise typer.Exit(2) from None
    t = Table(title=f"Optax optimizers ({len(found)}): use as  source: \"optax:NAME\"")
    t.add_column("source", no_wrap=True)
    t.add_column("hyperparameters (default)")
    t.add_column("description", overflow="fold")
    for text, b in found.items():
        hps = builder_hparams("optimizer", b)
        hp = ", ".join(h.name if h.required else f"{h.name}={h.default!r}" for h in hps.values())
        t.add_row(escape(text), escape(hp or "—"), escape(describe(b)))
    t.caption = "learning_rate is the harness's step_size (a float, a search distribution, or a schedule)"
    console.print(t)


def _print_workloads(console) -> None:
    """The :data:`harness.config.workloads.WORKLOADS` table for ``list``."""
    from rich.markup import escape
    from rich.table import Table

    from harness.config.workloads import WORKLOADS

    t = Table(title="workloads (validation targets)")
    t.add_column("name", no_wrap=True)
    for col in ("dataset / model", "target", "steps x batch"):
        t.add_column(col, overflow="fold")
    for name in sorted(WORKLOADS):
        w = WORKLOADS[name]
        op = ">=" if w.target_mode == "max" else "<="
        data = f"{w.dataset}{' (data_dir)' if w.needs_data_dir else ''} / {w.model}"
        t.add_row(escape(name), escape(data), escape(f"{w.metric} {op} {w.target:g}"),
                  f"{w.steps} x {w.batch_size}")
    console.print(t)
