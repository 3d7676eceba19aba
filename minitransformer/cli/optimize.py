"""``minitransformer optimize``: steer a trained generator toward a score (REINVENT).

The prior is a ``train lm`` checkpoint; the score is a few component names
(``qed,sa``) or a JSON/TOML file (:mod:`minitransformer.molecules.objective_spec`,
components and transforms defined in :mod:`minitransformer.chem.goals.objectives`). Each
step samples ``--batch-size`` molecules from the agent, scores them, and takes one
step on REINVENT's augmented likelihood (:mod:`minitransformer.molecules.steering`).

The run folder holds ``scored.csv`` (every molecule: step, SMILES, canonical SMILES,
score, each component's desirability), ``best.csv`` (the 100 best distinct molecules by the
score, those the diversity filter zeroed for the agent included), ``history.json`` and
``curves.png`` (mean and top-10 score, validity, rewarded scaffolds by step), ``molecules.png``
(the best molecules), ``config.json``, ``provenance.json``, and ``last.npz`` (agent, optimizer and
the steering state: ``--resume`` continues exactly). Every file is written atomically: the records
and ``last.npz`` after each step, the two pictures at the end.
"""
from __future__ import annotations

import csv
import io
from pathlib import Path

SETTINGS = ("steps", "batch_size", "sigma", "lr", "replay", "replay_k", "scaffold_limit", "temperature", "seed",
            "grammar", "score_repeats", "memory", "augment_rounds", "top_fraction")
#: Settings added after runs were first saved: a saved run (or a benchmarks/pmo.py results file) without one
#: ran with this value.
SETTINGS_ADDED = {"top_fraction": 1.0}
#: The defaults of the settings only some runs use: left out of the command line (None), they take these;
#: given where the run would ignore them, they are refused (:func:`_settings_used`).
DEFAULTS = {"replay_k": 10, "augment_rounds": 2}


def add_parser(commands):
    from minitransformer import cli
    p = cli.add_command(commands, "optimize", help="steer a trained generator toward a score (REINVENT)",
                        example="minitransformer optimize runs/lm/best.npz --score qed,sa --steps 100\n"
                                "minitransformer optimize runs/lm/best.npz --score score.toml --out runs/opt\n"
                                "minitransformer optimize runs/lm/best.npz --score pmo:median1 --sigma 500 --lr 5e-4")
    p.add_argument("prior", type=cli.existing_file("checkpoint"), help="best.npz of a `minitransformer train lm` run")
    p.add_argument("--score", required=True,
                   help="component names, e.g. qed,sa (each with its own transform), or a .json/.toml file "
                        "({\"mean\": ..., \"components\": [{\"name\": ...}, ...]}); components: qed, sa, mw, logp, tpsa, hbd, hba, rotb, similarity, "
                        "smarts, forbid, tox21, user, and pmo:TASK for a task of the PMO benchmark "
                        "(e.g. pmo:osimertinib_mpo; benchmarks/pmo.py lists them)")
    p.add_argument("--steps", type=cli.int_at_least(1, cli.MAX_STEPS), default=100,
                   help="steering steps (default: 100)")
    p.add_argument("--batch-size", type=cli.int_at_least(1, 4096, "they are scored every step"), default=64,
                   help="molecules sampled per step (default: 64)")
    p.add_argument("--sigma", type=cli.number(0, lo_open=True), default=60.0,
                   help="the score's weight in the augmented likelihood (default: 60)")
    p.add_argument("--lr", type=cli.number(0, lo_open=True), default=1e-4, help="Adam's learning rate (default: 1e-4)")
    p.add_argument("--replay", type=cli.int_at_least(0, 100_000, "the memory is held and rescored"), default=100,
                   help="memory of the best molecules replayed each step (default: 100; 0: off)")
    p.add_argument("--replay-k", type=cli.int_at_least(0, 100_000), default=None,
                   help=f"molecules replayed a step, at most --replay (default: {DEFAULTS['replay_k']})")
    p.add_argument("--scaffold-limit", type=cli.int_at_least(0, 1_000_000), default=25,
                   help="rewards per Bemis-Murcko scaffold before it scores 0 (default: 25; 0: no diversity filter)")
    p.add_argument("--score-repeats", action="store_true",
                   help="a molecule drawn again gets its score again (PMO's REINVENT); default: it scores 0")
    p.add_argument("--memory", choices=("replay", "augmented"), default="replay",
                   help="replay: REINVENT's experience replay (default); augmented: augmented memory, more steps on "
                        "random writings of the step's molecules and of the whole memory, and the memory purged of "
                        "closed scaffolds (Guo and Schwaller, 2024)")
    p.add_argument("--augment-rounds", type=cli.int_at_least(0, 16, "each is a step of the agent"), default=None,
                   help=f"with --memory augmented: extra steps per scoring (default: {DEFAULTS['augment_rounds']})")
    p.add_argument("--top-fraction", type=cli.number(0, 1, lo_open=True), default=1.0,
                   help="share of each batch, best-scored first, that the loss learns from (augmented hill-climb, "
                        "Thomas et al. 2022: 0.5; default: 1, all of it)")
    p.add_argument("--temperature", type=cli.number(0, lo_open=True), default=1.0, help="sampling temperature")
    p.add_argument("--seed", type=cli.seed, default=0)
    p.add_argument("--grammar", choices=("syntax", "valence"), default=None,
                   help="sample under the SMILES grammar (valence: with valence rules); default: the bare agent")
    p.add_argument("--out", default="runs/optimize", type=cli.run_folder, help="run folder (default: runs/optimize)")
    p.add_argument("--force", action="store_true", help="start afresh in a folder that holds an earlier run")
    cli.add_resume_argument(p, help="continue the run in --out from its last.npz (same prior, score and settings)")
    p.add_argument("--quiet", action="store_true", help="no line per step")
    p.set_defaults(run=run)
    return p


def _csv(header, rows) -> str:
    buf = io.StringIO(newline="")
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return buf.getvalue()


def progress_line(r: dict, steps: int) -> str:
    """One step of a run, as a user reads it: the objective's own mean score (what the molecules are
    worth), then the mean the agent learns from and what set it apart (the diversity filter and the
    repeats score 0 there), the top-10, validity and the best molecule so far."""
    zeroed = ", ".join(f"{what} {100 * r[key]:.0f} %" for what, key in (("diversity filter", "filtered"),
                                                                          ("repeats", "repeats")) if r.get(key))
    learned = f"{r['mean_score']:.3f}" + (f", zeroed: {zeroed}" if zeroed else "")
    head = f"step {r['step']}/{steps}: mean score {r['mean_raw_score']:.3f} (rewarded {learned})"
    if not r["best"]:
        return f"{head}; no molecule scored above 0 yet"
    return f"{head}, top-10 {r['top10']:.3f}, validity {r['validity']:.2f}, best {r['best'][0]:.3f} {r['best'][1]}"


def _draw_curves(history, target: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    steps = [h["step"] for h in history]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6))
    a.plot(steps, [h.get("mean_raw_score", h["mean_score"]) for h in history], label="mean score")
    a.plot(steps, [h["mean_score"] for h in history], label="mean rewarded (filter, repeats at 0)", alpha=0.6)
    a.plot(steps, [h["top10"] for h in history], label="top-10 score")
    a.plot(steps, [h["validity"] for h in history], label="validity", alpha=0.6)
    a.set_xlabel("step")
    a.set_ylim(0, 1.02)
    a.legend()
    b.plot(steps, [h["rewarded_scaffolds"] for h in history])
    b.set_xlabel("step")
    b.set_ylabel("scaffolds rewarded")
    fig.tight_layout()
    fig.savefig(target, dpi=110)
    plt.close(fig)


def _write_records(out: Path, steer, rows, header, history) -> None:
    """``scored.csv``, ``history.json`` and ``best.csv`` as they stand at the steering's step."""
    from minitransformer import cli
    cli.write_text(out / "scored.csv", _csv(header, rows))
    cli.write_json(out / "history.json", history)
    cli.write_text(out / "best.csv", _csv(["score", "canonical"], [(f"{s:.4f}", c) for s, c in steer.top]))


def _save(out: Path, steer, vocab, rows, header, history, run_info) -> None:
    """One step's records, then its checkpoint: ``last.npz`` is written last, so a run stopped
    anywhere in between (Ctrl-C, a kill, a full disk) has records that reach at least as far as
    its checkpoint, and :func:`_resume` cuts them back to it."""
    from minitransformer.checkpoint import NonFiniteCheckpoint, save_checkpoint
    from minitransformer.train import TrainingDiverged
    _write_records(out, steer, rows, header, history)
    state = steer.state_dict()
    kept = ("rng", "memory", "top", "scaffold_counts", "seen", "t")  # all but the agent and its optimizer
    extra = {"run": run_info, "steering": {k: state[k] for k in kept},
             # the position, in the trainer's format, where --resume and Ctrl-C's message look (a step is an epoch)
             "trainer": {"epoch": steer.t, "batch": 0, "step": steer.t, "best": None, "best_epoch": None,
                         "bad_epochs": 0, "history": []}}
    try:
        save_checkpoint(out / "last.npz", steer.agent, steer.optimizer, vocab=vocab, extra=extra)
    except NonFiniteCheckpoint as err:
        raise TrainingDiverged(f"the agent diverged at step {steer.t}: its {err.tensor} is not finite") from err


def _records(out: Path, t: int, batch_size: int, header: list) -> tuple[list, list]:
    """The rows of ``scored.csv`` and the entries of ``history.json`` of steps 1..``t``, the
    checkpoint's step: a step recorded past it (stopped before its checkpoint was written) is
    dropped, to be taken again exactly. Records that stop short of ``t`` or are not what the
    command writes are a one-line ValueError: the run cannot continue without losing a step."""
    from minitransformer.atomic import parse_json
    from minitransformer.chem.datasets.smiles_files import read_text, table_rows

    def refuse(what):
        raise ValueError(f"--resume: {what}, so the run in {out} cannot continue exactly (its last.npz is at step "
                         f"{t}); pass --force to start afresh (its files move aside)")
    missing = [name for name in ("history.json", "scored.csv") if not (out / name).is_file()]
    if missing:
        refuse(f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} missing")
    try:
        history = parse_json(read_text(out / "history.json"))
    except ValueError as err:
        refuse(f"history.json is not valid JSON ({err})")
    try:
        rows = [row for _, row in table_rows(read_text(out / "scored.csv"), out / "scored.csv")]
    except ValueError as err:
        refuse(str(err))
    if not isinstance(history, list) or not all(isinstance(h, dict) and isinstance(h.get("step"), int)
                                                for h in history):
        refuse("history.json is not a list of steps")
    history = [h for h in history if h["step"] <= t]
    if [h["step"] for h in history] != list(range(1, t + 1)):
        refuse(f"history.json records {len(history)} of the {t} steps saved")
    if not rows or rows[0] != header:
        refuse(f"scored.csv does not start with the header {','.join(header)}")
    steps = [row[0] for row in rows[1:]]
    if not all(s.isascii() and s.isdigit() for s in steps) or any(len(row) != len(header) for row in rows[1:]):
        refuse("scored.csv has rows that are not a step's molecules")
    kept = [row for row in rows[1:] if int(row[0]) <= t]
    if [int(row[0]) for row in kept] != [k for k in range(1, t + 1) for _ in range(batch_size)]:
        refuse(f"scored.csv holds {len(kept)} molecules of steps 1-{t}, not {t * batch_size}")
    return kept, history


def _resume(path, out: Path, steer, run_info, header) -> tuple[list, list]:
    from minitransformer.checkpoint import load_checkpoint
    from minitransformer.checkpoint.restoring import restore
    ckpt = load_checkpoint(path)
    saved, state = ckpt.meta.get("run"), ckpt.meta.get("steering")
    if not isinstance(saved, dict) or not isinstance(state, dict):
        raise ValueError(f"{path} is not a checkpoint of `minitransformer optimize`; resume from its run folder's "
                         "last.npz, or pass --force to start afresh")
    different = [k for k in run_info if k != "steps" and saved.get(k, SETTINGS_ADDED.get(k)) != run_info[k]]
    if different:
        said = {"prior_sha256": "prior", "score": "score"}  # fingerprints: named, not shown
        shown = [said.get(k) or f"--{k.replace('_', '-')} {saved.get(k, SETTINGS_ADDED.get(k))} (now {run_info[k]})"
                 for k in different]
        raise ValueError(f"--resume: the saved run had another {', '.join(shown)}; give the same prior, score and "
                         "settings (a score's files included: a property checkpoint, a user function's module), or "
                         "pass --force to start afresh")
    try:
        steer.load_state_dict({"agent": steer.agent.state_dict(), "optimizer": steer.optimizer.state_dict(),
                               **state})  # checks every field of the steering state first
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None
    restore(steer.agent, ckpt, steer.optimizer)
    return _records(out, steer.t, steer.config.batch_size, header)


def _saved_note(out: Path, t: int) -> str:
    """What a stopped run has kept and how to go on, for the Ctrl-C and divergence messages."""
    if t == 0:
        return "no step was saved yet; run the command again with --force to start afresh"
    return f"steps 1-{t} are saved in {out} (last.npz at step {t}); continue with --resume"


def prior_writes_kekule(path, vocab) -> bool:
    """Whether the prior was trained on Kekule writings (its run's ``form``; without a record, whether
    its vocabulary lacks aromatic atoms): augmented memory writes its random writings that way."""
    from minitransformer.checkpoint import load_checkpoint
    settings = (load_checkpoint(path).meta.get("run") or {}).get("settings") or {}
    if "form" in settings:
        return settings["form"] == "kekule"
    return not any(t in vocab for t in ("c", "n", "o", "s"))


def _settings_used(args) -> None:
    """Refuse in one line a setting this run would ignore, then give the ones left out their defaults."""
    if args.augment_rounds is not None and args.memory != "augmented":
        raise ValueError("--augment-rounds needs --memory augmented (replay takes no extra steps); add "
                         "--memory augmented or leave --augment-rounds out")
    if args.replay_k is not None and args.replay_k > args.replay:
        raise ValueError(f"--replay-k {args.replay_k} is more than the memory holds (--replay {args.replay}"
                         f"{': replay is off' if args.replay == 0 else ''}); give --replay-k {args.replay} or less, "
                         "or a larger --replay")
    for name, value in DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, value)


def run(args) -> int:
    from minitransformer import cli
    from minitransformer.chem.judge.draw import DrawingUnavailable, molecule_grid_png
    from minitransformer.cli.run_state import PROGRESS
    from minitransformer.cli.provenance import file_sha256
    from minitransformer.molecules.sampling import load_generator
    from minitransformer.molecules.objective_spec import check_spec, objective_from_spec, score_fingerprint
    from minitransformer.molecules.steering import Steering, SteeringConfig
    from minitransformer.chem.goals.objectives import ScoreFunctionFailed
    from minitransformer.train import TrainingDiverged
    _settings_used(args)
    spec = check_spec(args.score)  # every mistake in the score refused before any work
    objective = objective_from_spec(spec)
    prior, vocab = load_generator(args.prior)
    config = SteeringConfig(**{k: getattr(args, k) for k in SETTINGS if k != "steps"},
                            kekule=prior_writes_kekule(args.prior, vocab))
    out = Path(args.out)
    reads = [args.prior, args.score, *(e["checkpoint"] for e in spec["components"] if "checkpoint" in e)]
    resume = cli.claim_run_folder(out, args.resume, args.force, resume_places=("last.npz",), reads=reads)
    run_info = {"prior_sha256": file_sha256(args.prior), "score": score_fingerprint(spec),
                **{k: getattr(args, k) for k in SETTINGS}}
    steer = Steering(prior, vocab, objective, config)
    names = objective.names
    header = ["step", "smiles", "canonical", "score", *names]
    rows, history = _resume(resume, out, steer, run_info, header) if resume is not None else ([], [])
    if steer.t > args.steps:  # before any file is rewritten
        raise ValueError(f"--resume: the run in {out} has taken {steer.t} steps already; give --steps above "
                         f"{steer.t} to continue it")
    out.mkdir(parents=True, exist_ok=True)
    cli.write_provenance(out, args.argv, args.seed, None)
    cli.write_json(out / "config.json", run_info)
    if resume is not None:  # records of a step past the checkpoint are cut back now, whether or not a step follows
        _write_records(out, steer, rows, header, history)
    saved = steer.t
    PROGRESS.saved_note = _saved_note(out, saved)  # what Ctrl-C says was kept
    for _ in range(steer.t, args.steps):
        try:
            r = steer.step()
            rows += [[r["step"], s, c or "", f"{score:.4f}", *(f"{r['parts'][n][i]:.4f}" for n in names)]
                     for i, (s, c, score) in enumerate(zip(r["smiles"], r["canonical"], r["scores"]))]
            history.append({k: r[k] for k in ("step", "loss", "mean_score", "mean_raw_score", "validity", "top10",
                                              "rewarded_scaffolds", "filtered", "repeats")})
            _save(out, steer, vocab, rows, header, history, run_info)
        except ScoreFunctionFailed as err:  # the user's function: once it works, the run goes on
            raise ScoreFunctionFailed(f"{err}; {_saved_note(out, saved)}") from err
        except TrainingDiverged as err:  # (a resume would diverge again: it keeps the settings)
            kept = f"steps 1-{saved} stay saved in {out}" if saved else "no step was saved"
            raise TrainingDiverged(f"{err}; {kept}; start again with --force") from err
        except (OSError, cli.WriteError) as err:  # a full disk: records past last.npz are cut back on --resume
            reason = err if isinstance(err, cli.WriteError) else f"could not write {out / 'last.npz'}: {err}"
            raise cli.WriteError(f"{reason}; {_saved_note(out, saved)} once there is room") from err
        saved = steer.t
        PROGRESS.saved_note = _saved_note(out, saved)
        if not args.quiet:
            print(progress_line(r, args.steps), flush=True)
    cli.save_plot(out / "curves.png", lambda target: _draw_curves(history, target))
    try:
        png, drawn = molecule_grid_png([c for _, c in steer.top], n=24)
    except DrawingUnavailable as exc:  # the run's results stay; only the picture is missing
        png, drawn = None, 0
        print(f"molecules.png not drawn: {exc}")
    if drawn:
        cli.write_bytes(out / "molecules.png", png)
    best = steer.top[0] if steer.top else None
    print(f"best: {best[0]:.4f} {best[1]}" if best else "no molecule scored above 0")
    print(cli.outputs_line(out))
    return 0
