"""Heavier drug-like molecules, made by joining halves of real ones at BRICS bonds.

MOSES molecules weigh 250-350 Da (1st to 99th percentile: 252-349), RDKit's drug-like set
175-399 Da; many goal-directed targets weigh 400-550 Da (osimertinib 500, fexofenadine 502,
thiothixene 444, troglitazone 442, ranolazine 428). A generator trained on MOSES alone
rarely writes a molecule that large, and a steered generator moves little beyond its
prior. This module makes molecules of the targets' size from the chemistry we can read:

1. **Cut.** Each source molecule is cut at one of its BRICS bonds (Degen et al., 2008:
   the bonds between chemical environments a chemist would form in a synthesis step,
   16 environment labels), once per bond, giving two *halves*, each with one open end
   marked by its environment label (a dummy atom ``[L*]``).
2. **Join.** Two halves of different molecules are joined by a single bond between
   their open ends when BRICS allows a bond between their two labels. The partner is
   drawn among the halves whose weight brings the sum into the window
   ``[min_weight, max_weight]`` (a dummy atom weighs nothing, so the product weighs
   exactly the sum of its halves).
3. **Keep** a product when RDKit sanitizes it and it is drug-like by the usual rules:
   Crippen logP at most ``max_logp``, at most 5 hydrogen-bond donors and 10 acceptors,
   at most ``max_rotatable`` rotatable bonds, QED at least ``min_qed``; each molecule
   once, none that is a source molecule.

Both halves of every product are real drug-like fragments, so the products keep the
source's atoms (MOSES: C, N, O, S, F, Cl, Br; no charges) and ring systems; only the one
new bond is made up. The set is a pure function of its settings and source molecules
(one NumPy generator draws every choice; the RDKit work is spread over worker processes
in chunks whose results do not depend on how many workers ran them).
"""
from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from minitransformer.chem._rdkit import mol_from_smiles, quiet_rdkit, require_rdkit

__all__ = ["RecombineSettings", "cut_halves", "join_halves", "recombine", "compatible_labels"]

#: Halves this light add little but a substituent; the lighter half of a cut is usually a methyl or a halogen.
MIN_HALF_WEIGHT = 60.0
#: Rounds of drawing pairs before :func:`recombine` gives up short of ``n`` (each draws 1.5x what is missing).
MAX_ROUNDS = 8
CHUNK = 2_000


@dataclass(frozen=True)
class RecombineSettings:
    """What :func:`recombine` makes: ``n`` molecules in ``[min_weight, max_weight]`` Da from
    halves of ``sources`` source molecules (drawn at random from those given), with the
    drug-likeness limits below; ``seed`` fixes every choice."""

    n: int = 300_000
    sources: int = 200_000
    min_weight: float = 400.0
    max_weight: float = 550.0
    max_logp: float = 6.5
    max_donors: int = 5
    max_acceptors: int = 10
    max_rotatable: int = 12
    min_qed: float = 0.25
    seed: int = 0

    def __post_init__(self):
        if self.n < 1 or self.sources < 2:
            raise ValueError(f"RecombineSettings: n must be >= 1 and sources >= 2, got {self.n} and {self.sources}")
        if not 0 < self.min_weight < self.max_weight:
            raise ValueError(f"RecombineSettings: need 0 < min_weight < max_weight, got {self.min_weight} and "
                             f"{self.max_weight}")
        if not 0 <= self.min_qed <= 1:
            raise ValueError(f"RecombineSettings: min_qed is a QED in [0, 1], got {self.min_qed}")

    def key(self) -> str:
        """The settings as one short string (names a cached set)."""
        return "-".join(f"{k}{v:g}" if isinstance(v, float) else f"{k}{v}"
                        for k, v in dataclasses.asdict(self).items())


def compatible_labels() -> dict[int, frozenset]:
    """BRICS's bond rules as label -> the labels it may bond to (single bonds only: the one
    double-bond rule, between the two kinds of label 7, is left out)."""
    require_rdkit()
    from rdkit.Chem import BRICS
    pairs: dict[int, set] = {}
    for group in BRICS.reactionDefs:
        for a, b, bond in group:
            if bond != "-":
                continue
            pairs.setdefault(int(a), set()).add(int(b))
            pairs.setdefault(int(b), set()).add(int(a))
    return {k: frozenset(v) for k, v in pairs.items()}


# --------------------------------------------------------------------------- cut
def _cut_chunk(smiles: Sequence[str]) -> list[tuple[str, int, float]]:
    """Every half of every single-bond BRICS cut of ``smiles``: (SMILES with its dummy, label, weight)."""
    from rdkit import Chem
    from rdkit.Chem import BRICS, Descriptors
    out = []
    with quiet_rdkit():
        for s in smiles:
            mol = mol_from_smiles(s)
            if mol is None:
                continue
            for bond in BRICS.FindBRICSBonds(mol):
                if "7" in (bond[1][0].rstrip("ab"), bond[1][1].rstrip("ab")):
                    continue  # the double-bond rule
                for half in Chem.GetMolFrags(BRICS.BreakBRICSBonds(mol, bonds=[bond]), asMols=True):
                    ends = [a.GetIsotope() for a in half.GetAtoms() if a.GetAtomicNum() == 0]
                    weight = Descriptors.MolWt(half)
                    if len(ends) == 1 and weight >= MIN_HALF_WEIGHT:  # (a salt's counter-ion has no open end)
                        out.append((Chem.MolToSmiles(half), ends[0], weight))
    return out


def cut_halves(smiles: Sequence[str]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The distinct halves of ``smiles``'s BRICS cuts, in first-seen order:
    (SMILES with one ``[L*]``, label (H,), weight in Da (H,))."""
    from minitransformer.chem.workers import map_chunks
    chunks = [list(smiles[i:i + CHUNK]) for i in range(0, len(smiles), CHUNK)]
    seen: dict[str, tuple[int, float]] = {}
    for part in map_chunks(_cut_chunk, chunks, len(smiles)):
        for s, label, weight in part:
            seen.setdefault(s, (label, weight))
    halves = list(seen)
    labels = np.array([seen[s][0] for s in halves], dtype=np.int64)  # (H,)
    weights = np.array([seen[s][1] for s in halves], dtype=np.float64)  # (H,)
    return halves, labels, weights


# --------------------------------------------------------------------------- join
def join_halves(a: str, b: str):
    """The molecule made by bonding the open ends of halves ``a`` and ``b`` (one dummy atom
    each): a sanitized RDKit molecule, or None when RDKit refuses it."""
    from rdkit import Chem
    ma, mb = mol_from_smiles(a), mol_from_smiles(b)
    if ma is None or mb is None:
        return None
    mol = Chem.RWMol(Chem.CombineMols(ma, mb))
    dummies = [atom.GetIdx() for atom in mol.GetAtoms() if atom.GetAtomicNum() == 0]
    if len(dummies) != 2:
        return None
    ends = [mol.GetAtomWithIdx(d).GetNeighbors()[0].GetIdx() for d in dummies]
    mol.AddBond(ends[0], ends[1], Chem.BondType.SINGLE)
    for d in sorted(dummies, reverse=True):
        mol.RemoveAtom(d)
    try:
        out = mol.GetMol()
        Chem.SanitizeMol(out)
        return out
    except Exception:  # RDKit raises several kinds for a molecule it cannot make sense of
        return None


def _drug_like(mol, s: RecombineSettings) -> bool:
    from rdkit.Chem import QED, Crippen, Lipinski
    return (Crippen.MolLogP(mol) <= s.max_logp and Lipinski.NumHDonors(mol) <= s.max_donors
            and Lipinski.NumHAcceptors(mol) <= s.max_acceptors
            and Lipinski.NumRotatableBonds(mol) <= s.max_rotatable and QED.qed(mol) >= s.min_qed)


def _join_chunk(args) -> list:
    """Canonical SMILES of the kept products of ``pairs`` (None where a product is refused)."""
    from rdkit import Chem
    pairs, settings = args
    out = []
    with quiet_rdkit():
        for a, b in pairs:
            mol = join_halves(a, b)
            out.append(Chem.MolToSmiles(mol) if mol is not None and _drug_like(mol, settings) else None)
    return out


def _draw_pairs(rng: np.random.Generator, labels: np.ndarray, weights: np.ndarray, count: int,
                s: RecombineSettings) -> list[tuple[int, int]]:
    """``count`` pairs of half indices whose labels BRICS lets bond and whose weights sum into the window."""
    partners = compatible_labels()
    by_label = {}  # label -> (indices sorted by weight, their weights)
    for label in np.unique(labels):
        idx = np.flatnonzero(labels == label)  # (H_label,)
        idx = idx[np.argsort(weights[idx], kind="stable")]
        by_label[int(label)] = (idx, weights[idx])
    pairs = []
    for _ in range(count * 4):  # a half with no partner in the window is drawn again
        if len(pairs) == count:
            break
        i = int(rng.integers(len(labels)))
        choices = [by_label[p] for p in sorted(partners.get(int(labels[i]), ())) if p in by_label]
        lo, hi = s.min_weight - weights[i], s.max_weight - weights[i]
        spans = [(idx, np.searchsorted(w, lo, "left"), np.searchsorted(w, hi, "right")) for idx, w in choices]
        total = sum(b - a for _, a, b in spans)
        if total == 0:
            continue
        k = int(rng.integers(total))
        for idx, a, b in spans:
            if k < b - a:
                pairs.append((i, int(idx[a + k])))
                break
            k -= b - a
    return pairs


def recombine(smiles: Sequence[str], settings: RecombineSettings = RecombineSettings(), log=print) -> list[str]:
    """Up to ``settings.n`` distinct drug-like molecules (canonical SMILES) made by joining
    halves of ``settings.sources`` molecules drawn from ``smiles`` (see the module's text).
    Fewer come back, said in one line, when the halves cannot make that many."""
    from rdkit import Chem

    from minitransformer.chem.workers import map_chunks
    require_rdkit()
    rng = np.random.default_rng(settings.seed)
    chosen = rng.permutation(len(smiles))[:settings.sources]  # (S,)
    sources = [smiles[i] for i in np.sort(chosen)]
    halves, labels, weights = cut_halves(sources)
    log(f"recombining: {len(halves):,} distinct halves of {len(sources):,} molecules")
    with quiet_rdkit():
        known = {Chem.MolToSmiles(m) for m in map(mol_from_smiles, sources) if m is not None}
    kept: dict[str, None] = {}
    for _ in range(MAX_ROUNDS):
        missing = settings.n - len(kept)
        if missing <= 0:
            break
        pairs = _draw_pairs(rng, labels, weights, int(missing * 1.5) + 10, settings)
        chunks = [([(halves[i], halves[j]) for i, j in pairs[k:k + CHUNK]], settings)
                  for k in range(0, len(pairs), CHUNK)]
        for part in map_chunks(_join_chunk, chunks, len(pairs)):
            for s in part:
                if s is not None and s not in known and len(kept) < settings.n:
                    kept[s] = None
    if len(kept) < settings.n:
        log(f"recombining: {len(kept):,} molecules of the {settings.n:,} asked for (the halves make no more)")
    return list(kept)


# --------------------------------------------------------------------------- the cached set
#: The cache file's format: its first line, then one SMILES a line. The header carries the count and
#: the SHA-256 of the lines that follow, so a truncated, edited or foreign file under the cache's
#: name is never read as the set (it is made again, said in one line).
CACHE_FORMAT = "minitransformer-recombined-v1"


def _digest(smiles: Sequence[str]) -> str:
    return hashlib.sha256("".join(s + "\n" for s in smiles).encode("utf-8")).hexdigest()


def cache_header(smiles: Sequence[str], settings: RecombineSettings) -> str:
    """The first line of a cache file holding ``smiles``, made with ``settings``."""
    return f"# {CACHE_FORMAT} settings={settings.key()} count={len(smiles)} sha256={_digest(smiles)}"


def read_cache(path, settings: RecombineSettings) -> tuple[list[str] | None, str]:
    """(the cached SMILES, "") when ``path`` holds this set whole, else (None, why not)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        return None, f"unreadable ({type(err).__name__})"
    head, _, body = text.partition("\n")
    fields = dict(f.split("=", 1) for f in head.split()[2:] if "=" in f) if head.startswith("# ") else {}
    if not head.startswith(f"# {CACHE_FORMAT} "):
        return None, "not a cache file of this version (no header)"
    smiles = body.splitlines()
    if fields.get("settings") != settings.key():
        return None, "made with other settings"
    if fields.get("count") != str(len(smiles)):
        return None, f"{len(smiles):,} molecules where its header says {fields.get('count')}: truncated or edited"
    if fields.get("sha256") != _digest(smiles):
        return None, "its molecules do not match its header's checksum: damaged or edited"
    return smiles, ""


def recombined_moses(settings: RecombineSettings = RecombineSettings(), data_dir=None, download: bool = True,
                     timeout: float = 10.0, log=print) -> tuple[list[str], str]:
    """:func:`recombine` over the MOSES training molecules, made once and kept in the user
    cache (``recombined-<settings>.smi``, written atomically, with a header giving its format,
    count and checksum; about 30 minutes on 2 cores for the default 300,000): (SMILES, the cache
    file's path). A cache file that does not check out is made again."""
    from minitransformer.atomic import atomic_write
    from minitransformer.chem.datasets.download import cache_dir
    from minitransformer.chem.datasets.moses import find_moses, read_moses_file
    path = cache_dir() / f"recombined-{settings.key()}.smi"
    if path.is_file():
        smiles, why = read_cache(path, settings)
        if smiles is not None:
            return smiles, str(path)
        log(f"the cached recombined set {path} is {why}; making it again")
    source = find_moses("train", data_dir=data_dir, download=download, timeout=timeout)
    log(f"recombining MOSES molecules into {settings.n:,} of {settings.min_weight:g}-{settings.max_weight:g} Da, "
        f"once (kept in {path})")
    smiles = recombine(read_moses_file(source), settings, log=log)
    text = cache_header(smiles, settings) + "\n" + "".join(s + "\n" for s in smiles)
    atomic_write(path, lambda f: f.write(text), binary=False)
    return smiles, str(path)
