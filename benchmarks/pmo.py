"""The PMO benchmark on the 20 tasks that need only RDKit: REINVENT (``Steering``) on a trained prior,
10,000 oracle calls per task, judged by the AUC of the top-10 curve, beside PMO's published rows.

    python benchmarks/pmo.py --prior runs/moses/best.npz              # all 20 tasks, seed 0
    python benchmarks/pmo.py --prior runs/moses/best.npz --tasks qed,median1 --seeds 0,1,2
    python benchmarks/pmo.py --prior runs/moses/best.npz --quick      # 2 tasks, 300 calls: a smoke test
    python benchmarks/pmo.py --prior runs/pmo/best.npz --memory augmented --lr 2e-3 --top-fraction 0.5 \\
        --seeds 0,1,2,3,4 --processes 2 --threads 1 --json pmo5.json [--resume]
                                    # docs/RESULTS.md's run: PMO's five seeds, two at once, 17 hours on 2 cores
    python benchmarks/pmo.py --prior runs/pmo/best.npz --seeds 0,1,2,3,4 --json pmo5.json \\
        --merge seed0.json seed1.json                                   # the runs made elsewhere kept

The results file is written after every run, so ``--resume`` continues a long run that stopped;
``--merge`` keeps the runs of results files made elsewhere (another machine, another process), so
one table can gather a benchmark run in parts. A results file names its prior by the weights a run
reads (``prior_weights_sha256``), not by the checkpoint's bytes: ``train lm --preset pmo`` trained
again gives the same weights in a file whose record of the run differs, and continues the file.

The protocol is PMO's (Gao et al., "Sample Efficiency Matters", NeurIPS 2022), kept by
``chem.goals.oracle_budget.OracleBudget``: only distinct valid molecules (by canonical SMILES) count
against the budget, a repeat gets its earlier score free, the top-10 mean is logged every 100
calls, and the AUC is the trapezoid area under that curve from (0, 0), held at its last value
up to the budget, over the budget. A run ends when the budget is spent, or when the agent has
found nothing new for ``--patience`` steps (its curve is then held flat; PMO's REINVENT instead
stops, after 1,000 calls, once its best 100 have not changed for its patience).

The method is ``molecules.steering.Steering`` with PMO's REINVENT hyperparameters (batch 64, sigma
500, learning rate 5e-4, experience replay of 24 molecules from a memory of the best 100, no
diversity filter); the scoring functions are ``chem.goals.pmo_tasks``, written from GuacaMol's
published definitions. The published rows (mean AUC top-10 of 5 runs, from the PMO authors'
results file ``Mol_Opt.xlsx`` in their leaderboard repository) are printed beside ours. What
differs from PMO's REINVENT: its prior is a GRU trained on ZINC 250k, ours whatever ``--prior`` is;
and its loop, where ``Steering`` follows ``optimize``: PMO's draws replayed molecules in proportion
to their score (ours uniformly), replays only once the memory holds more than 24 and before the
step's molecules join it (ours after), drops repeated sequences within a batch and scores a
molecule drawn again with its earlier score (ours: 0, unless ``--score-repeats``), and adds a
penalty on the agent's likelihood, 5,000 times the mean of -1/log-likelihood.
"""
from __future__ import annotations

import sys
from typing import NamedTuple, NoReturn

from blas_threads import configure_from_argv

if __name__ == "__main__":
    configure_from_argv(sys.argv[1:])  # before NumPy is imported (by common)

import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

import common  # noqa: E402
from minitransformer import checks  # noqa: E402
from minitransformer.chem.goals.oracle_budget import OracleBudget  # noqa: E402
from minitransformer.chem.goals.pmo_tasks import TASKS, get_task  # noqa: E402

class Published(NamedTuple):
    """PMO's published AUC top-10 of one task (Mol_Opt.xlsx, Gao et al. 2022): means over 5 runs."""

    reinvent: float
    reinvent_sd: float
    graph_ga: float
    selfies_reinvent: float
    gp_bo: float


#: task -> PMO's published rows for the four methods RESULTS compares with.
PUBLISHED = {
    "albuterol_similarity": Published(0.8828, 0.0063, 0.8387, 0.8264, 0.8985),
    "amlodipine_mpo": Published(0.6350, 0.0359, 0.6611, 0.6072, 0.5833),
    "celecoxib_rediscovery": Published(0.7136, 0.0671, 0.6300, 0.5732, 0.7236),
    "deco_hop": Published(0.6666, 0.0447, 0.6191, 0.6314, 0.6297),
    "fexofenadine_mpo": Published(0.7848, 0.0063, 0.7606, 0.7418, 0.7229),
    "isomers_c7h8n2o2": Published(0.8523, 0.0363, 0.8622, 0.8493, 0.6800),
    "isomers_c9h10n2o2pf2cl": Published(0.6427, 0.0541, 0.7192, 0.7334, 0.4699),
    "median1": Published(0.3570, 0.0099, 0.2949, 0.3552, 0.3018),
    "median2": Published(0.2769, 0.0081, 0.2738, 0.2556, 0.2970),
    "mestranol_similarity": Published(0.6189, 0.0486, 0.5792, 0.6202, 0.6272),
    "osimertinib_mpo": Published(0.8372, 0.0095, 0.8316, 0.8204, 0.7875),
    "perindopril_mpo": Published(0.5373, 0.0163, 0.5388, 0.5172, 0.4936),
    "qed": Published(0.9412, 0.0004, 0.9405, 0.9403, 0.9374),
    "ranolazine_mpo": Published(0.7601, 0.0092, 0.7281, 0.7481, 0.7360),
    "scaffold_hop": Published(0.5601, 0.0200, 0.5176, 0.5251, 0.5487),
    "sitagliptin_mpo": Published(0.0219, 0.0039, 0.4333, 0.1941, 0.1869),
    "thiothixene_rediscovery": Published(0.5342, 0.0136, 0.4790, 0.4954, 0.5598),
    "troglitazone_rediscovery": Published(0.4410, 0.0329, 0.3905, 0.3482, 0.4107),
    "valsartan_smarts": Published(0.1789, 0.3582, 0.0000, 0.0000, 0.0000),
    "zaleplon_mpo": Published(0.3582, 0.0623, 0.3466, 0.3333, 0.2217),
}


def run_task(prior, vocab, name: str, seed: int, args) -> dict:
    """One PMO run: Steering until the budget is spent (or nothing new for ``args.patience`` steps)."""
    from minitransformer.molecules.steering import Steering, SteeringConfig
    oracle = OracleBudget(get_task(name), budget=args.budget, log_every=100)
    config = SteeringConfig(batch_size=args.batch_size, sigma=args.sigma, lr=args.lr, replay=args.replay,
                            replay_k=args.replay_k, scaffold_limit=args.scaffold_limit, seed=seed,
                            grammar=args.grammar, score_repeats=args.score_repeats, memory=args.memory,
                            augment_rounds=args.augment_rounds, kekule=args.kekule,
                            top_fraction=args.top_fraction)
    steering = Steering(prior, vocab, lambda smiles: (oracle(smiles), {}), config)
    start, stale, validity = time.perf_counter(), 0, []
    while not oracle.exhausted and steering.t < args.max_steps and stale < args.patience:
        before = oracle.calls
        report = steering.step()
        validity.append(report["validity"])
        stale = stale + 1 if oracle.calls == before else 0
    wall = time.perf_counter() - start
    best = sorted(oracle.scores.items(), key=lambda kv: -kv[1])[:10]
    stop = "budget" if oracle.exhausted else ("patience" if stale >= args.patience else "max_steps")
    return {"task": name, "seed": seed, "auc_top10": oracle.auc(), "calls": oracle.calls, "steps": steering.t,
            "stop": stop, "wall_s": wall, "top1": best[0][1] if best else 0.0,
            "top10_mean": float(np.mean([s for _, s in best])) if best else 0.0,
            "mean_validity": float(np.mean(validity)) if validity else 0.0,
            "best": [[c, s] for c, s in best], "curve": oracle.curve}


def has_isomer_term(name: str) -> bool:
    """True for the four tasks scored with an isomer term, whose published rows may use an earlier
    definition of it (docs/RESULTS.md): they are reported apart from the 16 that compare fairly."""
    return any(term.what.startswith("isomer score") for term in get_task(name).terms)


def seed_sums(runs: list, names: list) -> str:
    """The sum over ``names`` of each seed's AUC, with their mean and standard deviation: one line,
    or nothing unless every task ran the same two or more seeds."""
    seeds = {n: sorted(r["seed"] for r in runs if r["task"] == n) for n in names}
    common_seeds = seeds[names[0]]
    if len(common_seeds) < 2 or any(s != common_seeds for s in seeds.values()):
        return ""
    sums = [sum(r["auc_top10"] for r in runs if r["seed"] == seed) for seed in common_seeds]
    shown = ", ".join(f"{seed}: {total:.3f}" for seed, total in zip(common_seeds, sums))
    return f"sum by seed ({shown}): {np.mean(sums):.3f} ± {np.std(sums):.3f}\n"


def table(runs: list) -> str:
    """Ours (mean ± standard deviation over seeds, ``np.std``) beside PMO's published rows
    (:data:`PUBLISHED`): the tasks without an isomer term first, then those with one, each group with
    its sums, the count of tasks at or above REINVENT's mean, and the spread of the sum over seeds; the
    wall time of one run of each task."""
    out = []
    methods = ("reinvent", "graph_ga", "selfies_reinvent", "gp_bo")
    for fair in (True, False):
        names = [n for n in TASKS if has_isomer_term(n) != fair and any(r["task"] == n for r in runs)]
        if not names:
            continue
        rows, ours_sum, sums, wins = [], 0.0, dict.fromkeys(methods, 0.0), 0
        for name in names:
            mine = [r for r in runs if r["task"] == name]
            auc = float(np.mean([r["auc_top10"] for r in mine]))
            spread = f" ± {np.std([r['auc_top10'] for r in mine]):.3f}" if len(mine) > 1 else ""
            published = PUBLISHED[name]
            ours_sum, wins = ours_sum + auc, wins + (auc >= published.reinvent)
            sums = {m: sums[m] + getattr(published, m) for m in methods}
            rows.append([name, f"{auc:.3f}{spread}", str(len(mine)),
                         f"{published.reinvent:.3f} ± {published.reinvent_sd:.3f}",
                         *(f"{getattr(published, m):.3f}" for m in methods[1:]),
                         f"{np.mean([r['top1'] for r in mine]):.3f}", f"{np.mean([r['calls'] for r in mine]):.0f}",
                         f"{np.mean([r['steps'] for r in mine]):.0f}", f"{np.mean([r['wall_s'] for r in mine]):.0f}"])
        rows.append([f"sum ({len(names)} tasks)", f"{ours_sum:.3f}", "", *(f"{sums[m]:.3f}" for m in methods),
                     "", "", "", ""])
        what = "without an isomer term (comparable)" if fair else "with an isomer term (definitions may differ)"
        header = ["task", "ours AUC top-10", "seeds", "REINVENT (PMO)", "Graph GA", "SELFIES-REINVENT", "GP BO",
                  "our top-1", "calls", "steps", "wall s"]
        out.append(f"tasks {what}\n\n" + common.format_table(header, rows)
                   + f"\n\nat or above REINVENT's published mean on {wins} of {len(names)}\n"
                   + seed_sums([r for r in runs if r["task"] in names], names))
    return "\n".join(out)


#: Settings that change what a run measures: a --resume must match them (tasks, seeds, threads, processes may differ).
MEASURED = ("budget", "batch_size", "sigma", "lr", "replay", "replay_k", "scaffold_limit", "grammar", "memory",
            "augment_rounds", "score_repeats", "max_steps", "patience", "backend", "kernels", "kekule",
            "top_fraction")
_PRIORS: dict = {}


def run_job(job) -> dict:
    """One (task, seed) run, here or in a worker process (which loads the prior once)."""
    args, name, seed = job
    if str(args.prior) not in _PRIORS:
        from minitransformer import backend, kernels
        from minitransformer.molecules.sampling import load_generator
        backend.use(args.backend)
        if args.kernels:
            kernels.use(args.kernels)
        _PRIORS[str(args.prior)] = load_generator(args.prior)
    prior, vocab = _PRIORS[str(args.prior)]
    return run_task(prior, vocab, name, seed, args)


def exit_with_parent(parent: int) -> None:
    """A worker's initializer: end the worker when the process that started it is gone (stopped by a
    signal, or killed), so that stopping the benchmark stops its runs too."""
    import os
    import threading

    def watch():
        while os.getppid() == parent:
            time.sleep(1)
        os._exit(1)
    threading.Thread(target=watch, daemon=True).start()


def refuse(message: str) -> NoReturn:
    """A usage error found after parsing (a results file that does not fit): one line, exit 2."""
    print(f"pmo.py: error: {message}", file=sys.stderr)
    raise SystemExit(2)


class Prior(NamedTuple):
    """How a results file names its prior: the file's bytes, and what a run reads of it (its
    weights, model type, configuration and vocabulary), which a retrained prior gives again
    while the file's bytes (its record of when and where it was trained) differ."""

    file_sha256: str
    weights_sha256: str


def prior_identity(path: Path) -> Prior:
    """:class:`Prior` of a checkpoint: the sha256 of the file, and of the model it holds
    (:func:`~minitransformer.checkpoint.model_sha256`: weights, model type, configuration, vocabulary)."""
    from minitransformer.checkpoint import load_checkpoint, model_sha256
    from minitransformer.cli.provenance import file_sha256
    return Prior(file_sha256(path), model_sha256(load_checkpoint(path)))


def same_prior(earlier: dict, prior: Prior) -> bool:
    """Whether a results file was measured on ``prior``: by its weights when the file names them,
    else (a file written before they were named) by the checkpoint file's bytes."""
    if "prior_weights_sha256" in earlier:
        return earlier["prior_weights_sha256"] == prior.weights_sha256
    return earlier.get("prior_sha256") == prior.file_sha256


#: The fields of a run in a results file that the table and the sums read: (name, kind, low, high).
RUN_FIELDS = (("auc_top10", float, 0.0, 1.0), ("top1", float, 0.0, 1.0), ("calls", int, 0, None),
              ("steps", int, 0, None), ("wall_s", float, 0.0, None))


def check_run(r, where: str) -> str | None:
    """Why the run ``r`` of a results file cannot enter the table (None: it can), field by field."""
    if not isinstance(r, dict):
        return f"{where} is {type(r).__name__}, not a run"
    if r.get("task") not in TASKS:
        return f"{where} has task {str(r.get('task'))[:40]!r}, not one of PMO's"
    try:
        checks.whole(f"{where} ({r['task']}): seed", r.get("seed"), 0)
        for name, kind, low, high in RUN_FIELDS:
            label = f"{where} ({r['task']} seed {r['seed']}): {name}"
            if kind is int:
                checks.whole(label, r.get(name), low)
            checks.real(label, r.get(name), low, high)  # finite too (a whole number beyond a float is not)
    except ValueError as err:
        return str(err)
    return None


def earlier_runs(path: Path, args, prior: Prior) -> list:
    """The runs in the results file ``path``, refused unless measured as this run measures and
    whole: every run's task, seed and figures checked (a NaN or a missing field never enters the table)."""
    import json
    try:
        earlier = json.loads(path.read_text())
        settings, runs = earlier["pmo_settings"], earlier["runs"]
        if not isinstance(settings, dict) or not isinstance(runs, list):
            raise TypeError("pmo_settings must be an object and runs a list")
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as e:
        refuse(f"{path} is not a results file of pmo.py ({type(e).__name__}: {str(e)[:80]}); "
               "give the --json of a run")
    for i, r in enumerate(runs):
        problem = check_run(r, f"run {i + 1}")
        if problem:
            refuse(f"{path} is damaged: {problem}; give the --json of a run as pmo.py wrote it, or run again "
                   "without it")
    from minitransformer.cli.optimize import SETTINGS_ADDED  # a file written before a setting ran with its value
    changed = [k for k in MEASURED if settings.get(k, SETTINGS_ADDED.get(k)) != getattr(args, k)]
    if not same_prior(earlier, prior):
        changed.append("prior")
    if changed:
        refuse(f"{path} was measured with other {', '.join(changed)}; give a new --json or the same settings")
    return runs


def finished_runs(args, prior: Prior) -> list:
    """The runs already made: those in --json (with --resume) and in each --merge file, one per
    (task, seed); two files holding the same run are refused."""
    if args.resume and (args.json is None or not args.json.is_file()):
        refuse(f"--resume needs the --json file of the earlier run ({args.json} not found)")
    paths = ([args.json] if args.resume else []) + list(args.merge)
    runs, source = [], {}
    for path in paths:
        if not path.is_file():
            refuse(f"--merge: {path} not found")
        for r in earlier_runs(path, args, prior):
            key = (r["task"], r["seed"])
            if key in source:
                refuse(f"{r['task']} seed {r['seed']} is in both {source[key]} and {path}; "
                       "merge files with different runs")
            source[key] = path
            runs.append(r)
    return sorted(runs, key=lambda x: (TASKS.index(x["task"]), x["seed"]))


def seed_list(text: str) -> list[int]:
    """``--seeds``: distinct whole numbers >= 0, comma-separated."""
    from argparse import ArgumentTypeError
    try:
        seeds = [int(x) for x in text.split(",")]
    except ValueError:
        raise ArgumentTypeError(f"{text!r} is not whole numbers separated by commas, e.g. 0,1,2") from None
    if len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise ArgumentTypeError(f"{text!r}: give each seed once, each >= 0")
    return seeds


def check_numbers(p, args) -> None:
    """One usage line (exit 2) for a setting no run can use, before any work."""
    from minitransformer.molecules.steering import SteeringConfig
    for name, low in (("budget", 1), ("max_steps", 1), ("patience", 1), ("processes", 1)):
        if getattr(args, name) < low:
            p.error(f"--{name.replace('_', '-')} must be at least {low}, got {getattr(args, name)}")
    try:
        SteeringConfig(batch_size=args.batch_size, sigma=args.sigma, lr=args.lr, replay=args.replay,
                       replay_k=args.replay_k, scaffold_limit=args.scaffold_limit, augment_rounds=args.augment_rounds,
                       top_fraction=args.top_fraction)
    except ValueError as err:  # "sigma must be ..." -> "--sigma must be ..."
        field, rest = str(err).split(" ", 1)
        p.error(f"--{field.replace('_', '-')} {rest}")


def main() -> None:
    p = common.parser(__doc__, timing=False)
    p.add_argument("--prior", type=Path, required=True, help="a `train lm` checkpoint (best.npz)")
    p.add_argument("--tasks", type=lambda s: s.split(","), default=None, help="comma-separated (default: all 20)")
    p.add_argument("--seeds", type=seed_list, default=[0], help="distinct seeds, comma-separated (default: 0)")
    p.add_argument("--budget", type=int, default=None, help="oracle calls per run (default 10000; --quick: 300)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--sigma", type=float, default=500.0)
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--replay", type=int, default=100, help="memory of best molecules (0: no replay)")
    p.add_argument("--replay-k", type=int, default=24, help="molecules replayed per step")
    p.add_argument("--scaffold-limit", type=int, default=0, help="diversity filter (0: off, as in PMO's REINVENT)")
    p.add_argument("--grammar", choices=("syntax", "valence"), default=None, help="a constrained sampler")
    p.add_argument("--memory", choices=("replay", "augmented"), default="replay",
                   help="REINVENT's replay (default, PMO's baseline) or augmented memory")
    p.add_argument("--augment-rounds", type=int, default=2, help="with --memory augmented: extra steps per scoring")
    p.add_argument("--top-fraction", type=float, default=1.0,
                   help="share of each batch, best first, the loss learns from (augmented hill-climb: 0.5; default 1)")
    p.add_argument("--score-repeats", action="store_true",
                   help="a molecule drawn again scores again, as in PMO's REINVENT (default: 0, as `optimize`)")
    p.add_argument("--max-steps", type=int, default=2000)
    p.add_argument("--patience", type=int, default=25, help="steps without a new molecule before a run stops")
    p.add_argument("--processes", type=int, default=1,
                   help="runs at once, each in its own process with --threads BLAS threads (e.g. --processes 2 "
                        "--threads 1 on 2 cores)")
    p.add_argument("--resume", action="store_true",
                   help="keep the runs already in --json (written after every run) and do the rest")
    p.add_argument("--merge", type=Path, nargs="+", default=[], metavar="FILE",
                   help="also keep the runs in these results files (measured with the same settings and prior)")
    p.add_argument("--markdown", type=Path, default=None, help="also write the table here")
    args = p.parse_args()
    if args.budget is None:
        args.budget = 300 if args.quick else 10_000
    args.tasks = args.tasks or (["qed", "median1"] if args.quick else list(TASKS))
    unknown = [t for t in args.tasks if t not in TASKS]
    if unknown:
        p.error(f"unknown task(s) {unknown}; choose from {', '.join(TASKS)}")
    if not args.prior.is_file():
        p.error(f"prior checkpoint not found: {args.prior} (train one with `minitransformer train lm`)")
    check_numbers(p, args)
    args.json = args.json or common.default_path("pmo")
    machine = common.start(args, "pmo")
    from minitransformer.cli.optimize import prior_writes_kekule
    from minitransformer.molecules.sampling import load_generator
    args.kekule = prior_writes_kekule(args.prior, load_generator(args.prior)[1])  # augmented memory's writings
    prior = prior_identity(args.prior)
    runs = finished_runs(args, prior)
    done = {(r["task"], r["seed"]) for r in runs}
    jobs = [(args, name, seed) for name in args.tasks for seed in args.seeds if (name, seed) not in done]
    print(f"{len(jobs)} runs to do ({len(done)} read back)" if done else f"{len(jobs)} runs", flush=True)

    def finished(r: dict) -> None:
        runs.append(r)
        runs.sort(key=lambda x: (TASKS.index(x["task"]), x["seed"]))
        print(f"{r['task']} seed {r['seed']}: AUC top-10 {r['auc_top10']:.3f} (REINVENT "
              f"{PUBLISHED[r['task']].reinvent:.3f}), top-1 {r['top1']:.3f}, {r['calls']} calls in {r['steps']} steps, "
              f"{r['wall_s']:.0f} s, stop: {r['stop']}", flush=True)
        save(runs, quiet=True)

    def save(runs: list, quiet: bool = False) -> None:
        shown = common.portable_path  # no path of this machine in a results file
        settings = {k: (shown(str(v)) if isinstance(v, Path) else [shown(str(f)) for f in v] if k == "merge" else v)
                    for k, v in vars(args).items()}
        common.write_result(args, "pmo", dict(machine), {
            "pmo_settings": settings, "prior_sha256": prior.file_sha256,
            "prior_weights_sha256": prior.weights_sha256, "runs": runs,
            "published_source": "PMO leaderboard Mol_Opt.xlsx (Gao et al. 2022)", "table": table(runs)},
            quiet=quiet)

    if args.processes == 1:
        for job in jobs:
            finished(run_job(job))
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed
        import os
        with ProcessPoolExecutor(args.processes, mp_context=multiprocessing.get_context("spawn"),
                                 initializer=exit_with_parent, initargs=(os.getpid(),)) as pool:
            for future in as_completed([pool.submit(run_job, job) for job in jobs]):
                finished(future.result())
    text = table(runs)
    print(text)
    save(runs)
    if args.markdown:
        from minitransformer.atomic import atomic_write
        atomic_write(args.markdown, lambda f: f.write(text), binary=False)


if __name__ == "__main__":
    main()
