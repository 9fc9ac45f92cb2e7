"""``python -m harness data tokenize|info``: make token shards from text files, and describe a folder."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from harness.cli.shared import err, one_of

__all__ = ["app"]

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Token shards: make them from text (tokenize), describe a folder (info).")


@app.command()
def tokenize(
    texts: list[Path] = typer.Argument(..., help="UTF-8 text files, one document each (training)."),
    out: Path = typer.Option(..., "-o", "--out", help="A new or empty folder for the shards, tokens.json."),
    tokenizer: str = typer.Option("bytes", parser=one_of("bytes", "cl100k_base", "o200k_base"),
                                  help="bytes (always), or a BPE vocabulary shipped by bpe-openai."),
    fmt: str = typer.Option("gpt2", "--format", parser=one_of("gpt2", "llama3", "nanogpt"),
                            help="gpt2/llama3: llm.c's headers; nanogpt: headerless train.bin/val.bin."),
    valid: list[Path] = typer.Option([], "--valid", help="A validation text file (repeat the option for "
                                     "more); without one, --valid-fraction of the stream's tail."),
    test: list[Path] = typer.Option([], "--test", help="A test text file (repeat for more); without one, a "
                                    "sweep holds out the end of training as test."),
    valid_fraction: float = typer.Option(None, help="Tail of the token stream written as validation "
                                         "(default 0.1; not with --valid)."),
    shard_tokens: int = typer.Option(100_000_000, help="Tokens per shard (gpt2/llama3)."),
    license: str = typer.Option("", help="The texts' licence, recorded in tokens.json."),
) -> None:
    """Write llm.c-format shards and tokens.json to OUT, atomically.

    Each document (file) is preceded by the end-of-text token, as in llm.c. Shards are numbered as
    llm.c numbers them, one counter over the splits: text_val_000000.bin, then test, then
    text_train_*.bin. The shards are written into a hidden sibling folder renamed to OUT when whole
    (a killed run leaves no OUT); tokens.json, written last, records the token counts per split and
    the shards' full-content digest. A second tokenize into the same OUT at once is refused."""
    from harness.data.tokenize import tokenize_files

    missing = [t for t in [*texts, *valid, *test] if not t.is_file()]
    if missing:
        what = "is a folder, not a text file" if missing[0].is_dir() else "no such file"
        err(f"tokenize: {missing[0]}: {what}")
        raise typer.Exit(2)
    if valid and valid_fraction is not None:
        err("tokenize: give --valid files or --valid-fraction, not both")
        raise typer.Exit(2)
    try:
        meta = tokenize_files(texts, out, tokenizer, fmt, 0.1 if valid_fraction is None else valid_fraction,
                              shard_tokens, license=license, valid=valid, test=test)
    except ValueError as e:
        err(f"tokenize: {e}")
        raise typer.Exit(2) from None
    typer.echo(f"{out}: {meta['tokens']:,} tokens: {meta['train_tokens']:,} train, {meta['valid_tokens']:,} "
               f"validation, {meta['test_tokens']:,} test ({meta['tokenizer']}, {meta['format']}, "
               f"{meta['bytes_per_token']:.3f} bytes/token, largest id {meta['max_token_id']})")


@app.command()
def info(path: Path = typer.Argument(..., help="A folder of token shards."),
         as_json: bool = typer.Option(False, "--json", help="One JSON object."),
         digest: str = typer.Option("auto", parser=one_of("auto", "full", "sampled"),
                                    help="The digest's coverage: auto (full where tokens.json records "
                                         "one, up to 2 GiB), full (every byte) or sampled (blocks)."),
         ) -> None:
    """Format, tokens per split, vocabulary bound and digest of a folder of token shards.

    Refuses (exit 2, one line) an unfinished data tokenize output, a shard that is a dangling link
    or unreadable, and a corpus whose shards differ from what its tokens.json records."""
    from harness.data.tokenize import info as folder_info
    from harness.data.tokens import TokensError

    try:
        d = folder_info(path, digest)
    except TokensError as e:
        err(f"info: {e}")
        raise typer.Exit(2) from None
    if as_json:
        typer.echo(json.dumps(d))
        return
    for k, v in d.items():
        typer.echo(f"{k:16}{', '.join(v) if isinstance(v, list) else v}")
