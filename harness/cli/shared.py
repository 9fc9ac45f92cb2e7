"""What the commands share: the ``--tracking-uri`` help, messages on stderr (any password in them
masked by :func:`harness.core.redact.mask_text`), the "no such experiment" exit, and the process's
start (:data:`PROCESS_START`)."""

from __future__ import annotations

import typer

#: ``time.perf_counter()`` at the process start when the command line is the process's entry point
#: (:func:`harness.cli.main` sets it to :data:`harness.PROCESS_START`); ``None`` when a command is
#: invoked inside a longer process (a test's ``CliRunner``): its sweep's time budget then starts at
#: the call, not at whatever the process did before.
PROCESS_START: float | None = None

def one_of(*valid: str):
    """A typer ``parser`` for an option whose value is one of ``valid``: the value itself, or click's
    usage error (exit 2) ``Invalid value for '--opt': 'bogus' is not one of 'a', 'b' (did you mean
    'a'?)``. typer's own Enum handling prefixed pydantic's "Value error," and offered no did-you-mean."""
    from harness.core.builders import did_you_mean

    def parse(value: str) -> str:
        if value in valid:
            return value
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(map(repr, valid))}"
                                 f"{did_you_mean(value, valid)}")

    parse.__name__ = "|".join(valid)  # typer shows a parser's name as the metavar's type
    return parse


URI_HELP = "MLflow tracking URI (default: $MLFLOW_TRACKING_URI, then sqlite:///<cwd>/mlflow.db)."


def err(msg: str) -> None:
    """Print ``msg`` on stderr, the password of any URI in it masked (``alice:***@``)."""
    from harness.core.redact import mask_text

    typer.echo(mask_text(msg), err=True)


def exit_no_experiment(client, name: str, uri: str) -> None:
    """Say that the store at ``uri`` has no experiment ``name`` (naming those it has and the closest
    one) and exit 2."""
    from harness.core.builders import did_you_mean

    known = [e.name for e in client.search_experiments()]
    err(f"error: no experiment {name!r} in {uri}; experiments: {', '.join(known) or '(none)'}"
        f"{did_you_mean(name, known)}")
    raise typer.Exit(2)
