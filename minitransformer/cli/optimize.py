"""``minitransformer optimize``: steer a trained generator toward a score (REINVENT).

The prior is a ``train lm`` checkpoint; the score is a few component names
(``qed,sa``) or a JSON/TOML file (:mod:`minitransformer.molecules.objective_spec`,
components and transforms defined in :mod:`minitransformer.chem.objectives`). Each
step samples ``--batch-size`` molecules from the agent, scores them, and takes one
step on REINVENT's augmented likelihood (:mod:`minitransformer.molecules.steering`).

The run folder holds ``scored.csv`` (every molecule: step, SMILES, canonical SMILES,
score, each component's desirability), ``best.csv`` (the best distinct molecules),
``history.json`` and ``curves.png`` (mean and top-10 score, validity, rewarded
scaffolds by step), ``molecules.png`` (the best molecules), ``config.json``,
``provenance.json``, and ``last.npz`` (agent, optimizer and the steering state:
``--resume`` continues exactly). Every file is written atomically after each step.
"""
from __future__ import annotations

import csv
import io
from pathlib import Path

SETTINGS = ("steps", "batch_size", "sigma", "lr", "replay", "replay_k", "scaffold_limit", "temperature", "seed",
            "grammar", "score_repeats")


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
    p.add_argument("--steps", type=cli.int_at_least(1), default=100, help="steering steps (default: 100)")
    p.add_argument("--batch-size", type=cli.int_at_least(1, 4096, "they are scored every step"), default=64,
                   help="molecules sampled per step (default: 64)")
    p.add_argument("--sigma", type=cli.number(0, lo_open=True), default=60.0,
                   help="the score's weight in the augmented likelihood (default: 60)")
    p.add_argument("--lr", type=cli.number(0, lo_open=True), default=1e-4, help="Adam's learning rate (default: 1e-4)")
    p.add_argument("--replay", type=cli.int_at_least(0), default=100,
                   help="memory of the best molecules replayed each step (default: 100; 0: off)")
    p.add_argument("--replay-k", type=cli.int_at_least(0), default=10, help="molecules replayed a step (default: 10)")
    p.add_argument("--scaffold-limit", type=cli.int_at_least(0), default=25,
                   help="rewards per Bemis-Murcko scaffold before it scores 0 (default: 25; 0: no diversity filter)")
    p.add_argument("--score-repeats", action="store_true",
                   help="a molecule drawn again gets its score again (PMO's REINVENT); default: it scores 0")
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


def _draw_curves(history, target: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    steps = [h["step"] for h in history]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6))
    a.plot(steps, [h["mean_score"] for h in history], label="mean score")
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


def _save(out: Path, steer, vocab, rows, header, history, run_info) -> None:
    from minitransformer import cli
    from minitransformer.checkpoint import save_checkpoint
    state = steer.state_dict()
    extra = {"run": run_info, "steering": {k: state[k] for k in ("rng", "memory", "scaffold_counts", "seen", "t")},
             # the position, in the trainer's format, where --resume and Ctrl-C's message look (a step is an epoch)
             "trainer": {"epoch": steer.t, "batch": 0, "step": steer.t, "best": None, "best_epoch": None,
                         "bad_epochs": 0, "history": []}}
    save_checkpoint(out / "last.npz", steer.agent, steer.optimizer, vocab=vocab, extra=extra)
    cli.write_text(out / "scored.csv", _csv(header, rows))
    cli.write_json(out / "history.json", history)
    best = [(s, c) for s, c, _ in steer.memory]
    cli.write_text(out / "best.csv", _csv(["score", "canonical"], [(f"{s:.4f}", c) for s, c in best]))


def _resume(path, out: Path, steer, run_info) -> tuple[list, list]:
    from minitransformer.atomic import parse_json
    from minitransformer.checkpoint import load_checkpoint
    from minitransformer.checkpoint.restoring import restore
    ckpt = load_checkpoint(path)
    saved, state = ckpt.meta.get("run"), ckpt.meta.get("steering")
    if not saved or not state:
        raise ValueError(f"{path} is not a checkpoint of `minitransformer optimize`; resume from its run folder's "
                         "last.npz, or pass --force to start afresh")
    different = [k for k in run_info if k != "steps" and saved.get(k) != run_info[k]]
    if different:
        raise ValueError(f"--resume: this run's {', '.join(different)} differ from the saved run's; give the same "
                         "prior, score and settings, or pass --force to start afresh")
    restore(steer.agent, ckpt, steer.optimizer)
    steer.load_state_dict({"agent": steer.agent.state_dict(), "optimizer": steer.optimizer.state_dict(), **state})
    with open(out / "scored.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))[1:]
    return rows, parse_json((out / "history.json").read_text(encoding="utf-8"))


def run(args) -> int:
    from minitransformer import cli
    from minitransformer.chem.draw import DrawingUnavailable, molecule_grid_png
    from minitransformer.cli.provenance import file_sha256
    from minitransformer.cli.sample import load_generator
    from minitransformer.molecules.objective_spec import objective_from_spec, read_spec
    from minitransformer.molecules.steering import Steering, SteeringConfig
    objective = objective_from_spec(args.score)  # every mistake in the score refused before any work
    prior, vocab = load_generator(args.prior)
    config = SteeringConfig(**{k: getattr(args, k) for k in SETTINGS if k != "steps"})
    out = Path(args.out)
    resume = cli.claim_run_folder(out, args.resume, args.force, resume_places=("last.npz",))
    run_info = {"prior_sha256": file_sha256(args.prior), "score": read_spec(args.score) if not
                str(args.score).lower().endswith((".json", ".toml")) else {"file": str(args.score),
                                                                         "sha256": file_sha256(args.score)},
                **{k: getattr(args, k) for k in SETTINGS}}
    steer = Steering(prior, vocab, objective, config)
    names = objective.names
    header = ["step", "smiles", "canonical", "score", *names]
    rows, history = _resume(resume, out, steer, run_info) if resume is not None else ([], [])
    out.mkdir(parents=True, exist_ok=True)
    cli.write_provenance(out, args.argv, args.seed, None)
    cli.write_json(out / "config.json", run_info)
    for _ in range(steer.t, args.steps):
        r = steer.step()
        rows += [[r["step"], s, c or "", f"{score:.4f}", *(f"{r['parts'][n][i]:.4f}" for n in names)]
                 for i, (s, c, score) in enumerate(zip(r["smiles"], r["canonical"], r["scores"]))]
        history.append({k: r[k] for k in ("step", "loss", "mean_score", "mean_raw_score", "validity", "top10",
                                          "rewarded_scaffolds")})
        _save(out, steer, vocab, rows, header, history, run_info)
        if not args.quiet:
            print(f"step {r['step']}/{args.steps}: mean score {r['mean_score']:.3f}, top-10 {r['top10']:.3f}, "
                  f"validity {r['validity']:.2f}, best {r['best'][0]:.3f} {r['best'][1]}" if r["best"] else
                  f"step {r['step']}/{args.steps}: no molecule scored above 0 yet", flush=True)
    cli.save_plot(out / "curves.png", lambda target: _draw_curves(history, target))
    try:
        png, drawn = molecule_grid_png([c for _, c, _ in steer.memory], n=24)
    except DrawingUnavailable as exc:  # the run's results stay; only the picture is missing
        png, drawn = None, 0
        print(f"molecules.png not drawn: {exc}")
    if drawn:
        cli.write_bytes(out / "molecules.png", png)
    best = steer.memory[0] if steer.memory else None
    print(f"best: {best[0]:.4f} {best[1]}" if best else "no molecule scored above 0")
    print(cli.outputs_line(out))
    return 0
