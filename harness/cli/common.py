"""What the commands share: the ``--tracking-uri`` help, messages on stderr, and the "no such
experiment" exit."""

from __future__ import annotations

import typer

URI_HELP = "MLflow tracking URI (default: $MLFLOW_TRACKING_URI, then sqlite:///<cwd>/mlflow.db)."


def err(msg: str) -> None:
    """Print ``msg`` on stderr."""
    typer.echo(msg, err=True)


def exit_no_experiment(client, name: str, uri: str) -> None:
    """Say that the store at ``uri`` has no experiment ``name`` (naming those it has and the closest
    one) and exit 2."""
    from harness.core.registry import did_you_mean

    known = [e.name for e in client.search_experiments()]
    err(f"error: no experiment {name!r} in {uri}; experiments: {', '.join(known) or '(none)'}"
        f"{did_you_mean(name, known)}")
    raise typer.Exit(2)
