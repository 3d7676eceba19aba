"""The ``minitransformer`` command: one argparse parser with a subcommand per job.

    minitransformer train lm --quick                    # a molecule generator (decoder-only)
    minitransformer train property --quick              # Tox21 property model (encoder)
    minitransformer train seq2seq --quick               # SMILES canonicalizer (encoder-decoder)
    minitransformer sample runs/lm/best.npz -n 100      # new molecules from a trained generator
    minitransformer translate runs/seq2seq/best.npz 'OCC(C)c1ccccc1'
    minitransformer predict runs/property/best.npz my_molecules.csv --out predictions.csv
    minitransformer score samples.smi --reference tox21
    minitransformer optimize runs/lm/best.npz --score qed,sa --steps 100
    minitransformer attention runs/lm/best.npz 'CC(=O)Oc1ccccc1C(=O)O'
    minitransformer info runs/lm/best.npz

Each subcommand lives in its own module of this package (``train_lm``,
``sample``, ...), which adds its arguments with ``add_parser(subparsers)`` and
does its work in ``run(args)``. :func:`main` parses the command line (every
argument is checked before any work starts), and :func:`console`, the installed
script, turns every failure into one line on stderr and an exit status (see
:mod:`~minitransformer.cli.errors`).
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import Sequence

from minitransformer.cli import (attention, info, optimize, predict, sample, score, train_lm, train_property,
                                 train_seq2seq, translate)
from minitransformer.cli import launch
from minitransformer.cli import ranks as cli_ranks
from minitransformer.cli.arguments import ArgumentParser, add_command, use_backend
from minitransformer.cli.run_state import PROGRESS

#: The kinds of ``train``, and the other subcommands, in the order ``--help`` lists them.
TRAIN_KINDS = (train_lm, train_property, train_seq2seq)
SUBCOMMANDS = (sample, translate, predict, score, optimize, attention, info)
#: Every subcommand module's name (``train_lm`` ... ``info``).
COMMANDS = tuple(module.__name__.rsplit(".", 1)[1] for module in TRAIN_KINDS + SUBCOMMANDS)


def build_parser() -> ArgumentParser:
    """The whole command line: ``minitransformer [--version] COMMAND ...``."""
    from minitransformer import __version__
    parser = ArgumentParser(
        prog="minitransformer", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Train transformers on molecules (SMILES), and use what they learned. "
                    "Every command has its own --help with an example.",
        epilog="examples:\n" + "\n".join(line for line in __doc__.splitlines() if line.startswith("    minitransformer")))
    parser.add_argument("--version", action="version", version=f"minitransformer {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True,
                                     parser_class=ArgumentParser)
    train = add_command(commands, "train", help="train a model: lm, property or seq2seq",
                        description="Train a model on molecules. Each kind has its own --help.",
                        example="minitransformer train lm --quick\nminitransformer train lm --help")
    kinds = train.add_subparsers(dest="kind", metavar="KIND", required=True, parser_class=ArgumentParser)
    for module in TRAIN_KINDS:
        module.add_parser(kinds)
    for module in SUBCOMMANDS:
        module.add_parser(commands)
    return parser


def _quiet_rdkit_logs() -> None:
    """RDKit writes a log line for every SMILES it cannot parse; a command reports those itself."""
    try:
        from rdkit import RDLogger
    except ImportError:
        return
    RDLogger.DisableLog("rdApp.*")


def main(argv: Sequence[str] | None = None, start_ranks: bool = False) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``), pick the backend, run the subcommand.
    Errors propagate; :func:`console` turns them into one line and an exit status.
    ``start_ranks``: a training command may start its data-parallel ranks
    (:mod:`~minitransformer.cli.launch`; the installed command does, a program calling
    ``main`` does not, and there ``--ranks N`` needs ``mpiexec -n N``)."""
    if hasattr(signal, "pthread_sigmask"):  # a Ctrl-C held across the relaunch arrives here
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    argv = list(sys.argv[1:] if argv is None else argv)
    cli_ranks.expect(next((a for a in argv if not a.startswith("-")), None))
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    # argparse stops filling a ``nargs="*"`` positional at the first option, so in
    # ``translate CKPT --beam 2 CCO`` the SMILES arrives here; it belongs to ``smiles``.
    more = getattr(args, "more_positionals", None)
    if more and extra and not any(e.startswith("-") and len(e) > 1 for e in extra):
        setattr(args, more, list(getattr(args, more)) + extra)
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.argv = argv  # for provenance.json
    if args.command == "train":
        if start_ranks:
            launch.launch(args, argv)  # two or more ranks: this process becomes mpiexec
        launch.check_world(args)
    PROGRESS.reset(command="train" if args.command == "train" else args.command)
    _quiet_rdkit_logs()
    use_backend(args)
    if args.command == "train" and cli_ranks.start() is not None and args.kind not in launch.DATA_PARALLEL_KINDS:
        if cli_ranks.is_follower():
            raise SystemExit(0)  # rank 0 says why
        refusal = ValueError(f"train {args.kind} cannot run data-parallel (its losses are not sums over tokens): "
                             "start it without mpiexec; train lm and train seq2seq can")
        refusal.on_every_rank = True  # every rank refused here: rank 0 ends normally, no MPI_Abort
        raise refusal
    return args.run(args)


def blas_thread_timeout(argv: Sequence[str]) -> int:
    """The ``OPENBLAS_THREAD_TIMEOUT`` a command runs best with: the training commands
    that of training, every other one (sampling, beam search, scoring) that of decoding
    (:mod:`minitransformer.fast.engine.parallel` has the measurements)."""
    from minitransformer.cpus import DECODING_THREAD_TIMEOUT, TRAINING_THREAD_TIMEOUT
    command = next((a for a in argv if not a.startswith("-")), None)
    return TRAINING_THREAD_TIMEOUT if command == "train" else DECODING_THREAD_TIMEOUT


def _relaunch_with_prompt_blas_threads(argv: Sequence[str]) -> None:
    """Start this command again with ``OPENBLAS_THREAD_TIMEOUT`` set if it is not
    (:func:`blas_thread_timeout`; a value you set is kept).

    OpenBLAS reads the variable once, when NumPy loads it, and by the time an
    installed script runs, ``import minitransformer`` has loaded NumPy. Without
    it, idle BLAS threads spin and the library's CPU thread pool
    (:mod:`minitransformer.fast.engine.parallel`) must stay at one thread. The library
    itself never changes the environment; the command, as a program, may.
    """
    if os.environ.get("OPENBLAS_THREAD_TIMEOUT") is not None or os.name != "posix":
        return
    env = dict(os.environ, OPENBLAS_THREAD_TIMEOUT=str(blas_thread_timeout(argv)))
    sys.stdout.flush()
    sys.stderr.flush()
    # A Ctrl-C caught from here on would only set Python's flag, which the exec wipes out, and the
    # command would run on as if never stopped. Blocked, the signal stays pending across the exec,
    # and the new process takes it as soon as :func:`main` unblocks it: one line, status 130.
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        os.execve(sys.executable, [sys.executable, "-m", "minitransformer", *argv], env)
    finally:  # reached only when the exec failed: this process goes on, and must hear Ctrl-C
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)


#: The signals that stop a command (Ctrl-C, ``kill``): held across the relaunch, never lost.
STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


def _relaunched_main(argv: Sequence[str]) -> int:
    """:func:`main` as the installed command runs it: first started again with prompt BLAS threads
    where it must be (inside :func:`~minitransformer.cli.errors.run_cli`, so a Ctrl-C then is one line too)."""
    _relaunch_with_prompt_blas_threads(argv)
    return main(argv, start_ranks=True)


def console(argv: Sequence[str] | None = None) -> int:
    """The installed ``minitransformer`` script (and ``python -m minitransformer``)."""
    from minitransformer.cli.errors import exit_for_good, run_cli
    argv = list(sys.argv[1:] if argv is None else argv)
    exit_for_good(run_cli(_relaunched_main, argv))
