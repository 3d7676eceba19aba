"""The ``minitransformer`` command: its subcommands, and the plumbing they share.

One module per subcommand (each has ``add_parser`` and ``run``):
:mod:`~minitransformer.cli.train_lm`, :mod:`~minitransformer.cli.train_property`,
:mod:`~minitransformer.cli.train_seq2seq`, :mod:`~minitransformer.cli.sample`,
:mod:`~minitransformer.cli.translate`, :mod:`~minitransformer.cli.predict`,
:mod:`~minitransformer.cli.score`, :mod:`~minitransformer.cli.optimize`,
:mod:`~minitransformer.cli.attention` and :mod:`~minitransformer.cli.info`; :mod:`~minitransformer.cli.main` puts them
under one parser. The three ``train`` commands run one skeleton,
:func:`~minitransformer.cli.training.run_training`, each filling in only what
differs (its typed recipe, data, model, phases, evaluation and summary). Every
command takes its options the same way and fails the same way on bad input, so
that code lives here once, one concern per file:

* :mod:`~minitransformer.cli.arguments` - arguments are checked while the
  command line is parsed, before any work starts; the options every training
  command shares.
* :mod:`~minitransformer.cli.errors` - :func:`run_cli`: every failure is
  one line on stderr, with exit status 2 (usage), 1 (runtime) or 130 (Ctrl-C);
  ``MINITRANSFORMER_DEBUG=1`` shows the traceback instead.
* :mod:`~minitransformer.cli.run_state` - what the command is doing, so that
  Ctrl-C can name the epoch, the step and the last good checkpoint.
* :mod:`~minitransformer.cli.run_folders` - a run folder belongs to one run:
  :func:`claim_run_folder` with ``--resume`` (checked by :func:`check_resume`)
  or ``--force`` (the old files move to ``old-YYYYmmdd-HHMMSS/``).
* :mod:`~minitransformer.cli.outputs` - nothing is half-written:
  :func:`write_json`, :func:`write_text`, :func:`write_bytes`,
  :func:`save_curves` and :func:`save_plot` write atomically; :func:`print_table`.
* :mod:`~minitransformer.cli.provenance` - ``provenance.json``: what produced a run.
* :mod:`~minitransformer.cli.folder_lock` - one run at a time in a run folder.
* :mod:`~minitransformer.cli.launch` (``--ranks``: the command starts its own data-parallel
  ranks) and :mod:`~minitransformer.cli.ranks` (the command as one data-parallel run:
  rank 0 writes and prints).
* :mod:`~minitransformer.cli.lm_time_plan` and :mod:`~minitransformer.cli.seq2seq_time_plan` -
  ``train lm``'s and ``train seq2seq``'s default runs planned in minutes;
  :mod:`~minitransformer.cli.property_runs` - ``train property --seeds/--ensemble``;
  :mod:`~minitransformer.cli.pretrained_encoder` - ``train property --encoder``.

The commands use ``from minitransformer import cli`` and ``cli.<name>``; every
name below is importable from this package.
"""
from minitransformer.cli.arguments import (AUTO, MAX_EPOCHS, MAX_LAYERS, MAX_MINUTES, MAX_MOLECULES, MAX_SAMPLES,
                                           MAX_STEPS, MAX_WIDTH, ArgumentParser, add_command, add_common_arguments,
                                           add_resume_argument, check_phase_budget, data_source, existing_file,
                                           input_file, int_at_least, max_time, number, output_file,
                                           refuse_overwrite, run_folder, seed, smiles_text, use_backend)
from minitransformer.cli.errors import DEBUG_ENV, BackendUnavailable, WriteError, run_cli
from minitransformer.cli.outputs import (attention_example, format_duration, json_safe, outputs_line, print_table,
                                         read_history, save_curves, save_plot, write_bytes, write_json, write_text)
from minitransformer.cli.run_state import run_fit
from minitransformer.cli.provenance import write_provenance
from minitransformer.cli.run_folders import check_resume, claim_run_folder, data_fingerprint


__all__ = ["ArgumentParser", "add_command", "add_common_arguments", "add_resume_argument", "use_backend",
           "max_time", "check_phase_budget", "run_cli", "write_json", "write_text", "write_bytes", "save_curves",
           "save_plot",
           "json_safe", "outputs_line", "print_table", "read_history", "attention_example", "format_duration", "int_at_least",
           "number", "seed", "data_source", "existing_file", "input_file", "output_file", "run_folder",
           "refuse_overwrite", "claim_run_folder", "check_resume", "data_fingerprint", "run_fit",
           "write_provenance", "WriteError", "BackendUnavailable", "DEBUG_ENV", "AUTO", "MAX_SAMPLES", "MAX_EPOCHS",
           "MAX_LAYERS", "MAX_MINUTES", "MAX_MOLECULES", "MAX_STEPS", "MAX_WIDTH"]
