"""A model-size ladder's rung as a record, and the run tags that carry it.

:class:`Rung` is what :mod:`harness.config.ladder_parts` computes for each (size, tokens-per-parameter)
pair of a config's ``ladder:`` section; every trial of the rung gets :meth:`Rung.tags` (plus its
optimizer's :data:`TAG_TRANSFER`) as MLflow run tags, so a report reads the parameter and token
counts of each run (:mod:`reports.scaling_report`) without importing a model. Tags never enter
the trial id: a rung's trials are ordinary trials (ids, resume, MLflow). Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TAGS", "TAG_BASELINE", "TAG_FLOPS", "TAG_PARAMS", "TAG_RATIO", "TAG_RUNG", "TAG_SIZE",
           "TAG_TOKENS", "TAG_TRANSFER", "Rung"]

TAG_RUNG = "ladder.rung"  # the size's index in ladder.sizes (0-based)
TAG_SIZE = "ladder.size"  # the size's hyperparameters, "width=32, depth=2"
TAG_PARAMS = "ladder.params"  # N: the model's parameter count (every array of its init)
TAG_RATIO = "ladder.tokens_per_param"  # the budget's ratio as configured
TAG_TOKENS = "ladder.tokens"  # D: tokens trained on = steps x batch x tokens per example
TAG_FLOPS = "ladder.flops"  # estimated training FLOPs (Rung.flops)
TAG_BASELINE = "ladder.baseline"  # the optimizer speed-ups are measured against
TAG_TRANSFER = "ladder.transfer"  # how this trial's optimizer crossed rungs (Rung.transfer_text)
TAGS = (TAG_RUNG, TAG_SIZE, TAG_PARAMS, TAG_RATIO, TAG_TOKENS, TAG_FLOPS, TAG_BASELINE, TAG_TRANSFER)


@dataclass(frozen=True)
class Rung:
    """One rung of a ladder at one data budget.

    Attributes:
      workload, family: the workload and its model's registry name.
      index: the size's index in ``ladder.sizes``. size: its hyperparameters as text.
      width: the size's ``width`` (None without one). params: ``N``, parameters (every array).
      tokens_per_param: the configured ratio. tokens_per_example: ``T`` (a window's targets).
      batch_size, steps: ``steps = max(1, round(ratio · N / (batch_size · T)))``.
      flops: estimated training FLOPs: 3 × the model's analytic forward FLOPs per example
        (``models.zoo.ModelDef.flops_per_example``; backward ≈ 2 × forward) × ``steps · batch``;
        ``6 · N · tokens`` (Kaplan et al. 2020) where the model has no analytic count.
      baseline: the baseline optimizer. transfer: optimizer name -> how it crosses rungs (text).
      train_tokens: the training split's tokens (``num_train · T``).
      baseline_only: a ``baseline_tokens_per_param`` budget, trained by the baseline alone.
    """

    workload: str
    family: str
    index: int
    size: str
    width: int | None
    params: int
    tokens_per_param: float
    tokens_per_example: int
    batch_size: int
    steps: int
    flops: float
    baseline: str
    transfer: tuple[tuple[str, str], ...] = ()
    train_tokens: int = 0
    baseline_only: bool = False

    @property
    def epochs(self) -> float:
        """Passes over the training split's tokens (``train_tokens``; 0 when unknown): above 1 the
        rung repeats data, which a Chinchilla-style law does not model."""
        return self.tokens / self.train_tokens if self.train_tokens else 0.0

    @property
    def tokens(self) -> int:
        """``D = steps · batch_size · tokens_per_example``."""
        return self.steps * self.batch_size * self.tokens_per_example

    @property
    def task(self) -> str:
        """The rung's task label: ``"markov_lm_transformer · width=32, depth=2 · 20 tokens/param"``."""
        return f"{self.workload} · {self.size} · {self.tokens_per_param:g} tokens/param"

    def transfer_text(self, optimizer: str) -> str:
        """``"per_rung"`` (tuned at every rung), ``"fixed"`` or ``"mup from width 16 (exponent 1)"``."""
        return dict(self.transfer).get(optimizer, "per_rung")

    def tags(self, optimizer: str) -> dict[str, str]:
        """The run tags of this rung's trial of ``optimizer``."""
        return {TAG_RUNG: str(self.index), TAG_SIZE: self.size, TAG_PARAMS: str(self.params),
                TAG_RATIO: f"{self.tokens_per_param:g}", TAG_TOKENS: str(self.tokens),
                TAG_FLOPS: f"{self.flops:.6g}", TAG_BASELINE: self.baseline,
                TAG_TRANSFER: self.transfer_text(optimizer)}
