"""``list``: the registries (models, optimizers, schedules, datasets) and the workloads, with
hyperparameters, defaults and a one-sentence description each."""

from __future__ import annotations

import re

import typer

from harness.cli.shared import err

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


def _check_kind(kind: str | None, valid: list[str]) -> None:
    """Exit 2, naming the valid choices, when ``kind`` is given and is none of ``valid``."""
    if kind is not None and kind not in valid:
        from harness.core.builders import did_you_mean

        err(f"unknown kind {kind!r}; valid choices: {', '.join(valid)}{did_you_mean(kind, valid)}")
        raise typer.Exit(2)


def list_(
    kind: str | None = typer.Argument(
        None, help="models | optimizers | schedules | datasets | workloads (default: all, one line "
        "each)."),
    name: str | None = typer.Argument(None, help="One entry of KIND: every hyperparameter with its "
                                      "default and the whole description."),
    optax: bool = typer.Option(
        False, "--optax", help="List every Optax and optax.contrib optimizer instead, as the "
        "`source:` that runs it (optax:NAME) with its hyperparameters (learning_rate is step_size)."),
    config: str | None = typer.Option(
        None, "--config", metavar="FILE", help="Also the workloads a sweep config defines "
        "(define_workloads:, inline or in the file it names), checked as `sweep` checks them."),
) -> None:
    """Registered models, optimizers, schedules, datasets and workloads with their hyperparameters
    and defaults (a workload: dataset, model, loss, validation target, steps × batch size).

    `list` alone: one line per entry; `list KIND`: each entry's defaults and description;
    `list KIND NAME`: one entry in full. Your own optimizer needs no registration: name it in a
    config entry's `source:` (docs/your-optimizer.md); `list optimizers --optax` shows what
    `source: optax:NAME` reaches. `list workloads --config FILE` adds the workloads FILE
    defines (`define_workloads:`), after the same checks `sweep FILE` makes."""
    from harness.config.registries import default_registries
    from harness.orchestrate.tables import stdout_console

    reg = default_registries()
    kinds = {"models": ("model", reg.models), "optimizers": ("optimizer", reg.optimizers),
             "schedules": ("schedule", reg.schedules), "datasets": ("dataset", reg.datasets)}
    _check_kind(kind, [*kinds, "workloads"])
    console = stdout_console()
    if optax:
        if kind not in (None, "optimizers"):
            err(f"--optax lists optimizers; drop {kind!r} (python -m harness list optimizers --optax)")
            raise typer.Exit(2)
        _print_optax(console, name)
        return
    if kind is None:
        _print_short(console, kinds)
        _print_workloads(console, short=True)
        console.print("each entry's defaults and description: python -m harness list KIND [NAME]")
        return
    known = _config_workloads(config) if config is not None else None
    if kind == "workloads":
        _print_workloads(console, name=name, known=known)
        return
    if config is not None:
        err("--config adds a config's workloads: python -m harness list workloads --config FILE")
        raise typer.Exit(2)
    single, registry = kinds[kind]
    _print_kind(console, kind, single, registry, name)


def _print_kind(console, kind: str, single: str, registry, name: str | None) -> None:
    """``list KIND [NAME]``: each entry of ``registry`` (datasets: with the dataset kinds' patterns)
    with its defaults and description, or entry ``name`` in full. Exits 2 on an unknown ``name``."""
    entries = dict(registry)
    if kind == "datasets":
        from harness.data.kinds import KINDS

        entries.update({k.pattern: k for k in KINDS.values()})
    if name is not None:
        if name not in entries:
            from harness.core.builders import did_you_mean

            err(f"no {single} {name!r}; {kind}: {', '.join(sorted(entries))}"
                f"{did_you_mean(name, list(entries))}")
            raise typer.Exit(2)
        entries = {name: entries[name]}
    if name is None:
        console.print(f"[bold]{kind}[/] ({len(entries)})")
    for n in sorted(entries):
        _print_entry(console, kind, single, n, entries[n], full=name is not None)
    if kind == "models":
        console.print(_INPUTS_NOTE)


_INPUTS_NOTE = ("inputs: the example shapes a model builds on — (L,): 1-D data such as mnist1d or "
                "synthetic; (H, W, C): images such as digits; tokens (T,): int sequences")


def _hparams_text(single: str, builder, names_only: bool = False) -> str:
    """``step_size, b1=0.9, ...`` (required ones bare; defaults as :func:`default_text`);
    ``names_only``: ``step_size, b1, ...``."""
    from harness.config.registries import builder_hparams

    hps = builder_hparams(single, builder).values()
    return ", ".join(h.name if h.required or names_only else f"{h.name}={default_text(h.default)}"
                     for h in hps)


def default_text(value) -> str:
    """A default as a reader can use it: ``repr`` for numbers, strings, ``None`` and containers of
    them; a class or an importable function by its dotted name (``jax.numpy.float32``,
    ``optax.safe_norm``); a lambda as its code (``lambda x: x ** 0.25``, else ``a function
    (lambda)``); a function made inside another as ``a function (made by f)``; any other object
    whose ``repr`` shows an address by its type (``GradientTransformation(...)``); never as
    ``<function <lambda> at 0x7f...>``."""
    import inspect

    if inspect.isclass(value):
        return _dotted(value)
    if inspect.isfunction(value) or inspect.isbuiltin(value) or inspect.ismethod(value):
        qual = getattr(value, "__qualname__", getattr(value, "__name__", "?"))
        if qual == "<lambda>":
            return _lambda_text(value) or "a function (lambda)"
        if "<locals>" in qual:
            return f"a function (made by {qual.split('.<locals>')[0]})"
        return _dotted(value)
    text = repr(value)
    if " at 0x" in text or (text.startswith("<") and text.endswith(">")):
        return f"{type(value).__name__}(...)"
    return text


def _lambda_text(fn) -> str:
    """The code of a lambda (``lambda x: x + 1``) read from its module's source, or ``""`` when it
    cannot be told apart (no source, or two lambdas on its line)."""
    import ast
    import inspect

    try:
        tree = ast.parse(inspect.getsource(inspect.getmodule(fn)))
    except (OSError, TypeError, SyntaxError, ValueError):
        return ""
    line = fn.__code__.co_firstlineno
    found = [n for n in ast.walk(tree) if isinstance(n, ast.Lambda) and n.lineno == line]
    return ast.unparse(found[0]) if len(found) == 1 else ""


def _dotted(obj) -> str:
    """``module.qualname`` of a class or function, the module left out for builtins."""
    module = getattr(obj, "__module__", "") or ""
    name = getattr(obj, "__qualname__", getattr(obj, "__name__", repr(obj)))
    return name if module in ("builtins", "") else f"{module}.{name}"


def _print_entry(console, kind: str, single: str, name: str, builder, full: bool) -> None:
    """One entry, stacked so that nothing is cut at any width: its name and hyperparameters with
    their defaults on one line (wrapped), then its description (and a model's inputs) indented;
    ``full``: one hyperparameter a line and the builder's whole docstring."""
    import inspect

    from rich.markup import escape
    from rich.padding import Padding
    from rich.table import Table

    from optimizers.registry import NOTES

    note = NOTES.get(kind, {}).get(name)
    from harness.data.kinds import DatasetKind

    if isinstance(builder, DatasetKind):  # a dataset kind: tfds:NAME, tokens:PATH
        hp, desc = _hparams_text(single, builder.hparams_builder("")), builder.summary
        doc = _plain(inspect.getdoc(builder.load) or "") if full else ""
    else:
        hp = _hparams_text(single, builder)
        desc = describe(builder, note)
        doc = _plain(inspect.getdoc(builder) or "")
    if not full:  # a grid: the hyperparameters wrap under themselves, not under the name
        g = Table.grid(padding=(0, 2))
        g.add_column(no_wrap=True)
        g.add_column(overflow="fold")
        g.add_row(f"[bold]{escape(name)}[/]", escape(hp or "—"))
        console.print(g)
        lines = [desc]
    else:
        console.print(f"[bold]{escape(name)}[/]")
        console.print(Padding("hyperparameters (default):", (0, 0, 0, 2)))
        for h in hp.split(", ") if hp else ["—"]:
            console.print(Padding(escape(h), (0, 0, 0, 4)), overflow="fold")
        lines = [doc or desc, *([f"note: {_plain(note)}"] if note else [])]
    if kind == "models" and builder is not None:
        lines.append(f"inputs: {input_kinds(builder)}")
    for indent, text in (entry for line in lines for entry in reflowed(line)):
        console.print(Padding(escape(text), (0, 0, 0, 2 + indent)), overflow="fold")


def reflowed(text: str) -> list[tuple[int, str]]:
    """``(indent, text)`` per logical line of a docstring: a line indented deeper than the one
    before continues it (an ``Args:`` entry's wrapped lines, not the entries under ``Args:``), so
    the console wraps each entry at its own width instead of every source line on its own."""
    out: list[tuple[int, str]] = []
    for line in text.splitlines():
        indent, body = len(line) - len(line.lstrip()), line.strip()
        if body and out and out[-1][1] and not out[-1][1].endswith(":") and indent > out[-1][0]:
            out[-1] = (out[-1][0], f"{out[-1][1]} {body}")
        else:
            out.append((indent, body))
    return out


def _print_short(console, kinds: dict) -> None:
    """``list`` alone: per kind one line per entry, its name and hyperparameter names."""
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    for k, (single, registry) in kinds.items():
        t = Table(title=f"{k} ({len(registry)})", title_justify="left", box=box.SIMPLE_HEAD,
                  show_header=False, pad_edge=False)
        t.add_column("name", no_wrap=True)
        t.add_column("hyperparameters", overflow="fold")
        for n in sorted(registry):
            t.add_row(escape(n), escape(_hparams_text(single, registry[n], names_only=True) or "—"))
        if k == "datasets":
            from harness.data.kinds import KINDS

            for dk in KINDS.values():
                t.add_row(escape(dk.pattern), escape(_hparams_text(single, dk.hparams_builder(""), True)))
        console.print(t)


def _print_optax(console, name: str | None = None) -> None:
    """``list optimizers --optax [NAME]``: each Optax optimizer as the ``source:`` that runs it,
    with its hyperparameters and first docstring sentence (stacked: nothing cut at 80 columns)."""
    from harness.config.optimizer_sources import optax_optimizers

    try:
        found = optax_optimizers()
    except ImportError as e:
        err(str(e))
        raise typer.Exit(2) from None
    if name is not None:
        hits = {k: b for k, b in found.items() if name in (k, k.split(":", 1)[1])}
        if not hits:
            from harness.core.builders import did_you_mean

            short = [k.split(":", 1)[1] for k in found]
            err(f"no Optax optimizer {name!r}{did_you_mean(name, short)} "
                f"(python -m harness list optimizers --optax lists them)")
            raise typer.Exit(2)
        found = hits
    if name is None:
        console.print(f"[bold]Optax optimizers ({len(found)})[/]: use as  source: \"optax:NAME\"")
    for text, b in found.items():
        _print_entry(console, "optax", "optimizer", text, b, full=name is not None)
    console.print("learning_rate is the harness's step_size (a float, a search distribution, or a schedule)")


def _config_workloads(path: str) -> dict:
    """The built-in workloads and those config ``path`` defines; exits 2 with the config's error
    lines when it does not load."""
    from harness.config.errors import ConfigError
    from harness.config.load import load_config
    from harness.config.workloads import workload_registry

    try:
        return workload_registry(load_config(path))
    except ConfigError as e:
        for line in e.errors:
            err(line)
        raise typer.Exit(2) from None


def _budget_text(w) -> str:
    """A workload's budget: ``steps x batch``, or a defined one's token budget ``x batch``."""
    b = w.budget
    if b is None or b.steps is not None:
        return f"{w.steps} x {w.batch_size}"
    what = next(f"{getattr(b, k):g} {k.replace('_', ' ')}" for k in ("epochs", "tokens", "tokens_per_param")
                if getattr(b, k) is not None)
    return f"{what} x {w.batch_size}"


def _print_workloads(console, short: bool = False, name: str | None = None, known: dict | None = None
                     ) -> None:
    """The :data:`harness.config.workloads.WORKLOADS` table for ``list`` (``short``: one line each,
    without steps × batch); ``name``: that workload in full (:func:`_print_workload`); ``known``:
    another registry (a config's, :func:`_config_workloads`)."""
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    from harness.config.workloads import WORKLOADS as BUILT_IN
    from harness.orchestrate.tables import print_table

    WORKLOADS = known if known is not None else BUILT_IN  # the registry shown

    names = sorted(WORKLOADS)
    if name is not None:
        if name not in WORKLOADS:
            from harness.core.builders import did_you_mean

            err(f"no workload {name!r}; workloads: {', '.join(names)}{did_you_mean(name, names)}")
            raise typer.Exit(2)
        _print_workload(console, WORKLOADS[name])
        return
    t = Table(title=f"workloads ({len(names)}, validation targets)", title_justify="left",
              **({"box": box.SIMPLE_HEAD, "pad_edge": False} if short else {}))
    t.add_column("name", no_wrap=True)
    for col in ("dataset / model", "target", *(() if short else ("budget x batch",))):
        t.add_column(col, overflow="fold")
    for n in names:
        w = WORKLOADS[n]
        op = ">=" if w.target_mode == "max" else "<="
        data = f"{w.dataset}{' (data_dir)' if w.needs_data_dir else ''} / {w.model}"
        t.add_row(escape(n), escape(data), escape(f"{w.metric} {op} {w.target:g}"),
                  *(() if short else (_budget_text(w),)))
    if short:  # one line each where it fits; a long cell wraps within its column
        console.print(t)
    else:
        print_table(console, t)


#: What a model's loss is, per its task (:class:`models.zoo.ModelDef`).
_LOSS_OF_TASK = {
    "classification": "softmax cross-entropy of the logits against the labels, mean over the batch",
    "sequence": "next-token softmax cross-entropy, mean over the tokens (padding excluded)",
    "reconstruction": "mean squared error against the inputs",
}


def loss_text(builder, hparams) -> str:
    """The loss of the model ``builder(**hparams)`` builds: its function's name and what it is
    (``softmax_cross_entropy: softmax cross-entropy of the logits ...``), probed on the example
    shapes :func:`input_kinds` uses; ``"—"`` when it builds on none."""
    for shape in _PROBE_SHAPES.values():
        try:
            md = builder(input_shape=shape, num_classes=10, **hparams)
        except Exception:  # the builder refuses the shape
            continue
        what = _LOSS_OF_TASK.get(md.task, md.task)
        return f"{getattr(md.loss, '__name__', 'loss')}: {what}"
    return "—"


def _print_workload(console, w) -> None:
    """``list workloads NAME``: one workload in full, stacked (nothing cut at 80 columns): its
    description, dataset, model with every hyperparameter (the workload's values, then the model's
    defaults), loss, validation target, steps × batch, evaluation interval, augmentation."""
    from rich.markup import escape
    from rich.padding import Padding

    from harness.config.registries import builder_hparams, default_registries

    reg = default_registries()
    builder = reg.models.get(w.model)
    hps = builder_hparams("model", builder) if builder is not None else {}
    fixed = dict(w.model_hparams)
    lines = [f"  {w.description}"]
    data_hp = ", ".join(f"{k}={default_text(v)}" for k, v in w.dataset_hparams.items())
    lines.append(f"  dataset: {w.dataset}{f' ({data_hp})' if data_hp else ''}"
                 f"{' from a prepared TFDS data_dir' if w.needs_data_dir else ''}")
    lines.append(f"  model: {w.model}, hyperparameters:")
    for k, v in fixed.items():
        lines.append(f"    {k}={default_text(v)}")
    for h in hps.values():
        if h.name not in fixed:
            lines.append(f"    {h.name}={default_text(h.default)} (the model's default)"
                         if not h.required else f"    {h.name} (required)")
    if w.loss is not None:
        lines.append(f"  loss: {w.loss}")
    elif builder is not None:
        lines.append(f"  loss: {loss_text(builder, fixed)}")
    op = ">=" if w.target_mode == "max" else "<="
    lines.append(f"  target: {w.metric} {op} {w.target:g} ({w.target_source})")
    lines.append(f"  budget x batch: {_budget_text(w)}, evaluated every {w.eval_every} steps")
    aug = ", ".join(f"{k}={default_text(v)}" for k, v in w.augment.items())
    lines.append(f"  augment: {aug or 'none'}")
    console.print(f"[bold]{escape(w.name)}[/]")
    for line in lines:
        indent = len(line) - len(line.lstrip(" "))
        console.print(Padding(escape(line.strip()), (0, 0, 0, indent)), overflow="fold")
