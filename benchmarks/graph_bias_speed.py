"""What the graph bias costs the property model: its fine-tuning and its pretraining step with and
without it, side by side in one run, and the time to compute an epoch's graphs.

    python benchmarks/graph_bias_speed.py              # 1 thread, unpinned (a fine-tuning's layout)
    python benchmarks/graph_bias_speed.py --quick

The model is ``train property``'s encoder (its preset: D = 128, 4 pre-LN layers, a linear head,
no descriptors) on batches of 32 random writings of Tox21's molecules (RDKit's drug-like set when
Tox21 is not found), one step = forward, masked BCE, backward, clipping, AdamW, timed in turns:
without the graph bias, then with it (``--graph``, distances clipped at 8 bonds; the relations of
each batch spread from its molecules' graphs, as the task's collate does, inside the step). The
same for the masked-token pretraining step on 32 random writings of MOSES molecules (the drug-like
set without MOSES). Then the graphs of every training molecule's writing, as an epoch computes them
(on one process, and on the workers a run uses), per molecule, beside the epoch's training time.
"""
from __future__ import annotations

import sys

from blas_threads import configure_from_argv

if __name__ == "__main__":
    if "--threads" not in sys.argv[1:]:
        sys.argv[1:1] = ["--threads", "1"]
    configure_from_argv(sys.argv[1:])  # before NumPy is imported (by common)

import dataclasses  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

import common  # noqa: E402
from minitransformer.chem.graph import MAX_DISTANCE  # noqa: E402

B = 32


def molecules(n: int) -> tuple[list, str]:
    """Up to ``n`` cleaned molecules: Tox21's (``MINITRANSFORMER_DATA``), else RDKit's drug-like set."""
    from minitransformer.chem.datasets.data import druglike_path, read_smiles
    root = os.environ.get("MINITRANSFORMER_DATA")
    if root and (Path(root) / "tox21.csv.gz").is_file():
        from minitransformer.chem.datasets.properties import load_labelled
        return load_labelled("tox21").smiles[:n], "Tox21"
    return read_smiles(druglike_path(), header=False)[:n], "RDKit's drug-like set"


def pretraining_molecules(n: int) -> tuple[list, str]:
    """Up to ``n`` MOSES molecules drawn at random (``MINITRANSFORMER_DATA``), else the drug-like set's."""
    from minitransformer.chem.datasets.data import druglike_path, read_smiles
    root = os.environ.get("MINITRANSFORMER_DATA")
    if root and (Path(root) / "moses" / "train.csv.gz").is_file():
        from minitransformer.chem.datasets.lm_data import pretraining_smiles
        return pretraining_smiles("moses", limit=n, log=lambda line: None), "MOSES"
    return read_smiles(druglike_path(), header=False)[:n], "RDKit's drug-like set"


def pretraining_run(smiles, graph: int):
    """A masked language model around the preset's encoder (with the graph bias when ``graph``),
    an AdamW, the task and one epoch's examples."""
    from minitransformer.chem import Vocab
    from minitransformer.chem.datasets.lm_data import RandomizedEpochs
    from minitransformer.cli.train_property import PRESET
    from minitransformer.models import MaskedLM
    from minitransformer.optim import AdamW
    from minitransformer.train.recipe import sized
    from minitransformer.train.tasks import MLMTask
    vocab = Vocab.build(smiles, extras=(Vocab.CLS, Vocab.MASK))
    model = MaskedLM(sized(dataclasses.replace(PRESET.model, graph_max_distance=graph), vocab, 0))
    examples = RandomizedEpochs(smiles, vocab, seed=1, max_tokens=PRESET.max_len, encode=dict(cls=True),
                                graph=graph)(0)
    task = MLMTask(mask_id=vocab.mask_id, vocab_size=len(vocab), pad_id=vocab.pad_id, special_ids=vocab.special_ids)
    return model, AdamW(model, lr=1e-4), task, examples


def model_and_batches(smiles, graph: int, n_batches: int):
    """A property model of the preset (with the graph bias when ``graph``), an AdamW, and
    ``n_batches`` collated batches of random writings."""
    from minitransformer.chem import Vocab
    from minitransformer.chem.datasets.lm_data import LabelledEpochs
    from minitransformer.cli.train_property import PRESET
    from minitransformer.models import PropertyModel, PropertyModelConfig
    from minitransformer.optim import AdamW
    from minitransformer.train.recipe import sized
    from minitransformer.train.tasks import PropertyTask
    vocab = Vocab.build(smiles, extras=(Vocab.CLS, Vocab.MASK))
    body = sized(dataclasses.replace(PRESET.model, graph_max_distance=graph), vocab, 0)
    model = PropertyModel(PropertyModelConfig.from_dict({**body.to_dict(), "n_outputs": 12}))
    labels = (np.random.default_rng(0).random((len(smiles), 12)) < 0.1).astype(np.float64)  # (N, 12)
    examples = LabelledEpochs(smiles, labels, vocab, 0, 1.0, PRESET.max_len, graph=graph)(0)
    task = PropertyTask(vocab.pad_id)
    return model, AdamW(model, lr=1e-4), task, examples


def step(model, optimizer, task, examples, rng):
    """One training step on a batch collated here (as the trainer does)."""
    from minitransformer.optim import clip_grad_norm
    batch = task.collate([examples[i] for i in rng.choice(len(examples), B, replace=False)])
    loss, _ = task.loss(model, batch, rng)
    model.zero_grad()
    task.backward(model)
    clip_grad_norm(model, 1.0)
    optimizer.step()
    float(loss)


def main(argv=None) -> int:
    p = common.parser(__doc__)
    p.add_argument("--molecules", type=int, default=None, help="molecules whose graphs are timed (default 6000)")
    args = common.finish_args(p, p.parse_args(argv))
    machine = common.start(args, "graph bias speed")
    n = args.molecules or (600 if args.quick else 6000)
    smiles, source = molecules(n)
    rng = {"without": np.random.default_rng(1), "with": np.random.default_rng(1)}
    runs = {name: model_and_batches(smiles, graph, 4) for name, graph in (("without", 0), ("with", MAX_DISTANCE))}
    tasks = {name: (lambda name=name: step(*runs[name], rng[name])) for name in runs}
    times = common.interleaved_times(tasks, args.repeats * 4, args.warmup)
    median = {name: statistics.median(t) for name, t in times.items()}
    print(f"fine-tuning step, batch {B} of {source}: without the graph bias {1e3 * median['without']:.1f} ms, with "
          f"it {1e3 * median['with']:.1f} ms: {median['with'] / median['without']:.3f}x", flush=True)
    pre_smiles, pre_source = pretraining_molecules(n)
    pre_rng = {"without": np.random.default_rng(2), "with": np.random.default_rng(2)}
    pre_runs = {name: pretraining_run(pre_smiles, graph) for name, graph in (("without", 0), ("with", MAX_DISTANCE))}
    pre_tasks = {name: (lambda name=name: step(*pre_runs[name], pre_rng[name])) for name in pre_runs}
    pre_times = common.interleaved_times(pre_tasks, args.repeats * 4, args.warmup)
    pre_median = {name: statistics.median(t) for name, t in pre_times.items()}
    print(f"pretraining step, batch {B} of {pre_source}: without {1e3 * pre_median['without']:.1f} ms, with "
          f"{1e3 * pre_median['with']:.1f} ms: {pre_median['with'] / pre_median['without']:.3f}x", flush=True)

    from minitransformer.chem.datasets.lm_data import _writing_graphs
    from minitransformer.chem.workers import map_chunks, worker_count
    t0 = time.perf_counter()
    _writing_graphs((smiles, MAX_DISTANCE))
    one = time.perf_counter() - t0
    chunks = [(smiles[i:i + 1000], MAX_DISTANCE) for i in range(0, len(smiles), 1000)]
    map_chunks(_writing_graphs, chunks, len(smiles))  # the workers start
    t0 = time.perf_counter()
    map_chunks(_writing_graphs, chunks, len(smiles))
    workers = time.perf_counter() - t0
    epoch_steps = len(smiles) / B * median["with"]
    print(f"graphs of {len(smiles):,} writings: {one:.2f} s on one process ({1e6 * one / len(smiles):.0f} us a "
          f"molecule), {workers:.2f} s on {worker_count()} workers; the epoch's steps take about {epoch_steps:.1f} s "
          f"(graphs: {100 * workers / epoch_steps:.1f} % of it)")
    common.write_result(args, "graph_bias_speed", machine, {
        "source": source, "batch": B, "step_s": median, "step_ratio": median["with"] / median["without"],
        "pretraining_source": pre_source, "pretraining_step_s": pre_median,
        "pretraining_step_ratio": pre_median["with"] / pre_median["without"],
        "graph_s_one_process": one, "graph_s_workers": workers, "workers": worker_count(), "molecules": len(smiles),
        "epoch_steps_s": epoch_steps})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
