"""How far a set of molecules reaches: molecular weight and Crippen logP (1st, 50th and 99th
percentile) and the share of molecules of 400-550 Da, beside the PMO targets' own values.

    python benchmarks/chemistry_span.py moses druglike tox21 recombined
    python benchmarks/chemistry_span.py runs/pmo/samples.smi runs/m3/samples.smi --limit 10000

A set is a data source of ``minitransformer`` (``moses``, ``druglike``, ``tox21``, ``recombined``) or a
SMILES file (a generator's ``samples.smi``: its invalid and empty lines are counted, not measured).
At most ``--limit`` molecules of each set are measured, drawn at random (seed 0). A steered
generator moves little beyond its prior, so a prior whose molecules never weigh 450 Da will
rarely find a 500-Da target.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # measure this checkout, installed or not

#: The targets of the PMO tasks whose scores reward being like them.
TARGETS = ("CELECOXIB", "TROGLITAZONE", "THIOTHIXENE", "ALBUTEROL", "MESTRANOL", "OSIMERTINIB", "FEXOFENADINE",
           "RANOLAZINE", "PERINDOPRIL", "AMLODIPINE", "SITAGLIPTIN", "ZALEPLON", "TADALAFIL", "SILDENAFIL",
           "HOP_START")


def weight_and_logp(smiles) -> tuple[np.ndarray, np.ndarray, int]:
    """(weights (M,), logPs (M,), unparsable count) of ``smiles``."""
    from rdkit.Chem import Crippen, Descriptors

    from minitransformer.chem._rdkit import mol_from_smiles, quiet_rdkit
    weights, logps, bad = [], [], 0
    with quiet_rdkit():
        for s in smiles:
            mol = mol_from_smiles(s) if s else None
            if mol is None:
                bad += 1
                continue
            weights.append(Descriptors.MolWt(mol))
            logps.append(Crippen.MolLogP(mol))
    return np.array(weights), np.array(logps), bad  # (M,), (M,)


def read_set(name: str) -> list[str]:
    from minitransformer.chem.datasets.data import load_source
    from minitransformer.chem.datasets.smiles_files import read_smiles_file
    if name.lower() in ("moses", "druglike", "tox21", "recombined"):
        return load_source(name.lower()).smiles
    return read_smiles_file(name, every_line=True).smiles


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("sets", nargs="+", help="moses, druglike, tox21, recombined, or SMILES files")
    p.add_argument("--limit", type=int, default=20_000, help="molecules measured per set (default 20,000)")
    args = p.parse_args()
    from minitransformer.chem.goals import pmo_tasks
    rows = []
    for name in args.sets:
        smiles = read_set(name)
        if len(smiles) > args.limit:
            keep = np.sort(np.random.default_rng(0).permutation(len(smiles))[:args.limit])
            smiles = [smiles[i] for i in keep]
        w, lp, bad = weight_and_logp(smiles)
        if not len(w):
            rows.append(f"| {name} | {len(smiles)} | no valid molecule | | |")
            continue
        share = float(((w >= 400) & (w <= 550)).mean())
        weights = " / ".join(f"{x:.0f}" for x in np.percentile(w, [1, 50, 99]))
        logps = " / ".join(f"{x:.1f}" for x in np.percentile(lp, [1, 50, 99]))
        rows.append(f"| {name} | {len(smiles):,} ({bad} invalid) | {weights} | {logps} | {share:.3f} |")
    print("| set | measured | weight, Da (1st / 50th / 99th percentile) | logP (1st / 50th / 99th) "
          "| share 400-550 Da |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))
    w, lp, _ = weight_and_logp([getattr(pmo_tasks, t) for t in TARGETS])
    print("\nPMO targets: " + ", ".join(f"{t.lower()} {a:.0f} Da, logP {b:.1f}" for t, a, b in zip(TARGETS, w, lp)))


if __name__ == "__main__":
    main()
