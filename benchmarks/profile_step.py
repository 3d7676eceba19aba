"""Where a training step's time goes: every kernel's milliseconds and share, per model.

    python benchmarks/profile_step.py                      # the three models, fast kernels
    python benchmarks/profile_step.py --configs small --kernels reference

Each kernel of the selected set (``minitransformer.functional.FAST`` or
``REFERENCE``, the fast twins and the reference kernels the layers call by name)
is wrapped in a timer for the run, wherever the layers look it up (a module
global), and timed *exclusively*: a kernel that calls another kernel is charged
only for its own time. What is left of the step is "outside the kernels": the
layers' Python, reshapes, the loss's bookkeeping, allocation. The step is the one
of ``common.train_step`` (forward, cross-entropy, backward, clip, Adam), float32,
timed as the median over ``--repeats`` after ``--warmup``; the GEMM floor (every
matrix product of the step at its measured rate, ``train_speed.py``) is printed
beside it, so the table says how far the step is from it and which kernel holds
the gap. The timers cost about a microsecond a call: the wrapped step is a little
slower than the plain one, which is printed too.
"""
from __future__ import annotations

import sys

from blas_threads import configure_from_argv

if __name__ == "__main__":
    configure_from_argv(sys.argv[1:])  # before NumPy is imported (by common)

import collections  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import common  # noqa: E402
from minitransformer import functional, kernels  # noqa: E402

SHAPE = {"small": (64, 64), "tomczak": (64, 64), "medium": (32, 128)}  # (B, T), as compare_revisions.py


class KernelTimer:
    """Exclusive wall time and calls per kernel name, while :meth:`installed`.

    On a GPU a kernel returns before its work is done: give ``sync``
    (``devices.synchronize``) and each timer waits for the device before it starts
    and before it stops, so a kernel is charged for its own device work and the
    launches of what ran before it are charged to what ran before it."""

    def __init__(self, sync=None):
        self.sync = sync or (lambda: None)
        self.seconds = collections.Counter()
        self.calls = collections.Counter()
        self._stack = []  # [name, start, time spent in kernels it called]

    def wrap(self, name, fn):
        def timed(*args, **kwargs):
            self.sync()
            self._stack.append([name, time.perf_counter(), 0.0])
            try:
                return fn(*args, **kwargs)
            finally:
                self.sync()
                _, start, inner = self._stack.pop()
                spent = time.perf_counter() - start
                self.seconds[name] += spent - inner
                self.calls[name] += 1
                if self._stack:
                    self._stack[-1][2] += spent
        return timed

    def install(self, table: dict) -> list:
        """Replace every kernel of ``table`` in every module that holds it; returns how to undo it."""
        undo = []
        targets = {id(fn): name for name, fn in table.items() if callable(fn)}
        for module in [m for m in list(sys.modules.values()) if (getattr(m, "__name__", "") or "")
                       .startswith("minitransformer.")]:
            for attr, value in list(vars(module).items()):
                if callable(value) and id(value) in targets:
                    undo.append((module, attr, value))
                    setattr(module, attr, self.wrap(targets[id(value)], value))
        return undo

    @staticmethod
    def uninstall(undo: list) -> None:
        for module, attr, value in undo:
            setattr(module, attr, value)


def profile(name: str, B: int, T: int, args, sync=None) -> dict:
    """One model's per-kernel table (see :func:`markdown`); ``sync`` as :class:`KernelTimer`'s."""
    cfg = common.make_config(name, T)
    model, optimizer = common.build(cfg)
    ids = common.make_batch(B, T, cfg)

    def step_times(n):
        out = []
        return [common.time_call(lambda: common.train_step(model, optimizer, ids)) for _ in range(n)]

    step_times(args.warmup)
    plain = statistics.median(step_times(args.repeats))
    timer = KernelTimer(sync)
    undo = timer.install(functional.FAST if kernels.fast else functional.REFERENCE)
    try:
        step_times(1)  # the wrappers warm
        timer.seconds.clear()
        timer.calls.clear()
        wrapped = statistics.median(step_times(args.repeats))
    finally:
        timer.uninstall(undo)
    per_step = {k: v / args.repeats for k, v in timer.seconds.items()}
    rows = sorted(per_step.items(), key=lambda kv: -kv[1])
    return {"config": name, "B": B, "T": T, "step_s": plain, "wrapped_step_s": wrapped,
            "kernels": [{"kernel": k, "ms": 1e3 * s, "share": s / wrapped, "calls": timer.calls[k] // args.repeats}
                        for k, s in rows],
            "outside_ms": 1e3 * (wrapped - sum(per_step.values()))}


def markdown(row: dict) -> str:
    lines = [f"**{row['config']}** {row['B']}x{row['T']}: step {1e3 * row['step_s']:.1f} ms "
             f"({1e3 * row['wrapped_step_s']:.1f} ms with the timers)", "",
             "| kernel | calls | ms per step | share |", "|---|---:|---:|---:|"]
    lines += [f"| {r['kernel']} | {r['calls']} | {r['ms']:.2f} | {100 * r['share']:.1f}% |" for r in row["kernels"]]
    lines.append(f"| (outside the kernels) | | {row['outside_ms']:.2f} | "
                 f"{100 * row['outside_ms'] / (1e3 * row['wrapped_step_s']):.1f}% |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    p = common.parser(__doc__)
    common.add_config_options(p, shapes=False)
    args = common.finish_args(p, p.parse_args(argv))
    machine = common.start(args, "profile_step")
    rows = []
    for name in args.configs:
        B, T = SHAPE[name]
        row = profile(name, B, T, args)
        rows.append(row)
        print(markdown(row), flush=True)
    common.write_result(args, "profile_step", machine, {"rows": rows})


if __name__ == "__main__":
    main()
