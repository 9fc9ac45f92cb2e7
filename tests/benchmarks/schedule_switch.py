"""Would one program serve every schedule of a sweep? A traced switch over schedules, checked for
bit-identity against the one-schedule program (measured; not adopted).

    python tests/benchmarks/schedule_switch.py [--model mlp] [--steps 100] [--optimizers lars adamax]

For every registered optimizer and every builtin schedule (hyperparameters below), trains the
quickstart's model on digits for ``--steps`` updates (two chunks of ``steps / 2``) twice from the
same state: with the trainer's program as it is (the schedule's formula inlined), and with a program
whose step size is ``lax.switch(k, [every schedule], i)`` with ``k`` a traced argument selecting
this schedule. Prints one line per pair: ``identical`` (every training loss and every leaf of the
optimizer state equal to the bit) or the largest loss difference; the last line counts them.
Exit status 1 when any pair differs.

The finding that kept the harness on one program per schedule (docs/decisions.md, "One
program per schedule"): on the digits MLP, 181 of 184 pairs were identical and three
were not (adamax with inverse_time_decay, lars with constant and with exponential_decay), with an
``optimization_barrier`` on the step size in both programs 182, and with a two-branch switch in the
one-schedule program too 183 (lars with constant still differs: the state, not the losses). The
switch changes what XLA fuses around the update, so a trial's curve would depend on which other
schedules its sweep holds.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from harness.config.load import load_config  # noqa: E402
from harness.config.registries import default_registries  # noqa: E402
from harness.core.builders import lookup  # noqa: E402
from harness.data.sources import load_dataset  # noqa: E402
from harness.plan.expansion import expand  # noqa: E402
from harness.train.build import as_train_optimizer, make_opt_factory  # noqa: E402
from harness.train.program import program_for  # noqa: E402

#: The schedules' hyperparameters for a run of 100 steps (``total_steps`` is filled in).
SCHEDULE_HP = {
    "constant": {}, "cosine_decay": {}, "warmup_cosine_decay": {"warmup_steps": 10},
    "exponential_decay": {"decay_steps": 30, "decay_rate": 0.5},
    "polynomial_decay": {"decay_steps": 80, "final_step_size": 0.001},
    "inverse_time_decay": {"decay_steps": 20, "decay_rate": 0.5}, "linear_warmup": {"warmup_steps": 15},
    "piecewise": {"boundaries": [30, 60], "multipliers": [1.0, 0.1, 0.01]},
}


def _run(prog, exe, state, n: int, *extra) -> tuple[list[np.ndarray], list[np.ndarray]]:
    e = prog.entry
    losses = []
    for start in (0, n):
        state, loss = exe(state, jnp.int32(start), e.x_train, e.y_train, *extra)
        losses.append(np.asarray(loss))
    return losses, [np.asarray(a) for a in jax.tree.leaves(state.opt_state)]


def _pair(prog, opt: str, names: list[str], k: int, hp, steps: int, reg) -> tuple[bool, float]:
    """``(identical, largest loss difference)`` of ``names[k]`` inlined against switched."""
    n = steps // 2
    builder = lookup(reg.optimizers, opt, "optimizer")
    single = make_opt_factory(opt, {}, names[k], SCHEDULE_HP[names[k]], steps, reg.optimizers, reg.schedules)

    def switched(lr, idx):
        fs = [reg.schedules[s](lr, **hp(s)) for s in names]
        return as_train_optimizer(builder(lambda i: jax.lax.switch(idx, fs, i)), opt, None)

    def chunk_k(s, t, x, y, idx):
        prog.make_opt = lambda lr: switched(lr, idx)
        return prog.chunk(s, t, x, y, n=n)

    e = prog.entry
    prog.make_opt = single
    state = prog.init(jax.random.PRNGKey(1), 0.01)[0]
    exe = jax.jit(lambda s, t, x, y: prog.chunk(s, t, x, y, n=n)).lower(
        state, jnp.int32(0), e.x_train, e.y_train).compile()
    ref = _run(prog, exe, state, n)
    state = prog.init(jax.random.PRNGKey(1), 0.01)[0]
    exe = jax.jit(chunk_k).lower(state, jnp.int32(0), e.x_train, e.y_train, jnp.int32(k)).compile()
    got = _run(prog, exe, state, n, jnp.int32(k))
    prog.make_opt = single
    ok = all(np.array_equal(a, b) for a, b in zip(ref[0] + ref[1], got[0] + got[1], strict=True))
    return ok, max(float(np.max(np.abs(a - b))) for a, b in zip(ref[0], got[0], strict=True))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="mlp", choices=["mlp", "cnn"])
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--optimizers", nargs="+", metavar="NAME", help="only these (default: every one)")
    args = ap.parse_args(argv)
    reg = default_registries()
    steps = args.steps
    base = next(t for t in expand(load_config(ROOT / "experiments" / "quickstart.yaml"))
                if t.model == args.model)
    ds = load_dataset(base.dataset, **base.hparams("dataset"))
    names = list(SCHEDULE_HP)

    def hp(name: str) -> dict:
        b = reg.schedules[name]
        return {**SCHEDULE_HP[name], **({"total_steps": steps} if "total_steps" in
                                         inspect.signature(b).parameters else {})}

    differ = same = 0
    for opt in args.optimizers or sorted(reg.optimizers):
        spec = dataclasses.replace(base, optimizer=opt, optimizer_hparams=(("step_size", 0.01),), steps=steps)
        prog = program_for(spec, ds)
        for k, name in enumerate(names):
            ok, gap = _pair(prog, opt, names, k, hp, steps, reg)
            same += ok
            differ += not ok
            why = f"loss by {gap:.3g}" if gap else "the state; the losses are equal"
            print(f"{opt:22s} {name:20s} {'identical' if ok else f'DIFFERS ({why})'}", flush=True)
    print(f"{same} identical, {differ} differ ({args.model}, {steps} steps)")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
