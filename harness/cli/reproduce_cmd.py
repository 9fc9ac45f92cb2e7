"""``reproduce``: train one stored trial again and say whether every logged value is the same."""

from __future__ import annotations

import typer

from harness.cli.shared import URI_HELP, err, one_of

EPILOG = """\b
Examples:
  python -m harness reproduce 3f2a9c0d1e4b5a69
  python -m harness reproduce 3f2a9c0d1e4b5a69 --scratch /tmp/repro
\b
Reads the trial's latest FINISHED run (the store is only read), trains
it again from its recorded spec (and a user's optimizer from the file
text the run kept), writes the result into a scratch store, and compares
every logged value but the clocks. A CPU trial trains on the XLA CPU
pool it recorded (tag xla_cpu_threads; a subprocess when this process's
pool differs), unless --threads here; a trial that trained vmapped
trains in its recorded batch again, unless --alone. Exit codes: 0 identical; 1 not
identical (the largest difference and the versions that differ are
printed); 2 not a trial id, no such trial, its record damaged or no
longer hashing to its id, or a scratch folder that is a store's;
3 a store cannot be opened."""


def reproduce(
    trial_id: str = typer.Argument(..., help="The trial's id (run tag harness.trial_id, 16 hex digits)."),
    tracking_uri: str | None = typer.Option(None, "--tracking-uri", help=URI_HELP),
    scratch: str | None = typer.Option(None, "--scratch", help="Folder for the scratch store (default: a "
                                       "new temporary folder, kept; its path is printed)."),
    threads: str = typer.Option("stored", "--threads", parser=one_of("stored", "here"),
                                metavar="stored|here",
                                help="XLA's CPU pool to train on: 'stored' (the stored run's "
                                "xla_cpu_threads; a subprocess where this process's differs) or "
                                "'here' (this process's; a difference is named)."),
    alone: bool = typer.Option(False, "--alone", help="Train it on its own even where it trained vmapped "
                               "in a batch (default: in its recorded batch again)."),
) -> None:
    """Re-train one stored trial and report whether its logged values are identical."""
    from harness.core.filters import BadIdError
    from harness.orchestrate.reproduce import ReproduceError, reproduce
    from harness.tracking.store_errors import TrackingUnavailableError

    try:
        answer = reproduce(trial_id, tracking_uri=tracking_uri, scratch=scratch, threads=threads, alone=alone)
    except TrackingUnavailableError as e:
        err(f"error: {e}")
        raise typer.Exit(3) from None
    except (ReproduceError, BadIdError) as e:
        err(f"error: {e}")
        raise typer.Exit(2) from None
    typer.echo(str(answer))
    if not answer.identical:
        raise typer.Exit(1)
