r"""What a steered generator is steered toward: scoring components, desirability transforms, and
their weighted mean.

A **component** turns each molecule into a raw number (QED, a molecular weight,
a Tanimoto similarity, whether a SMARTS matches ...); a **transform** maps the
raw number into a desirability in [0, 1]; the **score** of a molecule is the
weighted mean of its components' desirabilities, arithmetic or geometric. An
invalid molecule (``None``) scores 0 in every component. Each component is
defined where it is registered, in :data:`COMPONENTS`.

Transforms, for a raw value :math:`x` (``low < high``; ``k`` the steepness, 0.25 by default):

``none``
    :math:`x` itself, which must already lie in [0, 1] (QED, similarity).
``step``
    1 when :math:`\text{low} \le x \le \text{high}`, else 0.
``sigmoid``
    :math:`1 / (1 + 10^{-10k\,(x - m)/(\text{high} - \text{low})})`, :math:`m = (\text{low} + \text{high})/2`:
    near 0 below ``low``, 0.5 at the middle, near 1 above ``high``.
``reverse_sigmoid``
    :math:`1 - \text{sigmoid}`: high values are bad (synthetic accessibility, toxicity).
``double_sigmoid``
    a plateau: :math:`\text{sigmoid}(x; \text{low} - w, \text{low}) \cdot \text{reverse\_sigmoid}(x; \text{high},
    \text{high} + w)`, :math:`w` = ``width`` (default :math:`(\text{high} - \text{low})/2`): near 1 inside
    [low, high], falling off over ``width`` on either side.

The geometric mean :math:`\prod_i d_i^{w_i / \sum w}` is 0 as soon as one component is 0 (every
requirement must hold); the arithmetic mean :math:`\sum_i w_i d_i / \sum_i w_i` trades them off.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from minitransformer.chem._rdkit import mol_from_smiles, quiet_rdkit, require_rdkit
from minitransformer.checks import is_finite_number

__all__ = ["Component", "Objective", "COMPONENTS", "TRANSFORMS", "UNIT_RANGE", "FINGERPRINT_RANGES", "transform",
           "sa_score", "ScoreFunctionFailed"]


class ScoreFunctionFailed(RuntimeError):
    """A user's scoring function (or the property model behind ``tox21``) raised while scoring: a
    runtime failure of the run, reported in one line, with everything scored before it kept."""


# --------------------------------------------------------------------------- transforms
def _sigmoid(x, low, high, k):
    mid = (low + high) / 2.0
    return 1.0 / (1.0 + np.power(10.0, np.clip(-10.0 * k * (x - mid) / (high - low), -300, 300)))


TRANSFORMS = ("none", "step", "sigmoid", "reverse_sigmoid", "double_sigmoid")


def transform(x: np.ndarray, kind: str = "none", low: float | None = None, high: float | None = None,
              k: float = 0.25, width: float | None = None) -> np.ndarray:
    """The desirability in [0, 1] of raw values ``x`` (a float array; NaN, from an invalid molecule, gives 0)."""
    x = np.asarray(x, dtype=np.float64)
    if kind == "none":
        out = x
    elif kind == "step":
        out = ((x >= low) & (x <= high)).astype(np.float64)
    elif kind == "sigmoid":
        out = _sigmoid(x, low, high, k)
    elif kind == "reverse_sigmoid":
        out = 1.0 - _sigmoid(x, low, high, k)
    elif kind == "double_sigmoid":
        w = (high - low) / 2.0 if width is None else width
        out = _sigmoid(x, low - w, low, k) * (1.0 - _sigmoid(x, high, high + w, k))
    else:
        raise ValueError(f"unknown transform {kind!r}; choose from {', '.join(TRANSFORMS)}")
    return np.clip(np.nan_to_num(out, nan=0.0), 0.0, 1.0)


# --------------------------------------------------------------------------- raw values
@functools.lru_cache(maxsize=1)
def _sascorer():
    """RDKit's Contrib implementation of the SA score (Ertl & Schuffenhauer, J. Cheminf. 2009)."""
    import os
    import sys
    from rdkit.Chem import RDConfig
    folder = os.path.join(RDConfig.RDContribDir, "SA_Score")
    if not os.path.isfile(os.path.join(folder, "sascorer.py")):
        raise ValueError(f"RDKit's SA score (Contrib/SA_Score) is not in this RDKit installation ({folder}); "
                         "install RDKit from PyPI (pip install rdkit), which ships it")
    if folder not in sys.path:
        sys.path.append(folder)
    import sascorer
    return sascorer


def sa_score(mol) -> float:
    """Synthetic accessibility, 1 (easy) to 10 (hard), by RDKit's Contrib ``sascorer``."""
    return float(_sascorer().calculateScore(mol))


_DESCRIPTORS = ("qed", "sa", "mw", "logp", "tpsa", "hbd", "hba", "rotb")


def _descriptor(name: str) -> Callable:
    from rdkit.Chem import Crippen, Descriptors, Lipinski, QED, rdMolDescriptors
    return {"qed": QED.qed, "sa": sa_score, "mw": Descriptors.MolWt, "logp": Crippen.MolLogP,
            "tpsa": rdMolDescriptors.CalcTPSA, "hbd": Lipinski.NumHDonors, "hba": Lipinski.NumHAcceptors,
            "rotb": rdMolDescriptors.CalcNumRotatableBonds}[name]


#: name -> (one-line definition, the transform it gets unless one is given, and that transform's low, high)
COMPONENTS = {
    "qed": ("RDKit's QED, quantitative estimate of drug-likeness (Bickerton et al. 2012), in [0, 1]",
            "none", None, None),
    "sa": ("synthetic accessibility, 1 easy .. 10 hard (Ertl & Schuffenhauer 2009, RDKit Contrib)",
           "reverse_sigmoid", 2.5, 4.5),
    "mw": ("molecular weight in daltons (RDKit Descriptors.MolWt)", "double_sigmoid", 250.0, 500.0),
    "logp": ("Crippen logP (RDKit Crippen.MolLogP)", "double_sigmoid", 1.0, 4.0),
    "tpsa": ("topological polar surface area, square angstroms (RDKit CalcTPSA)", "double_sigmoid", 40.0, 120.0),
    "hbd": ("hydrogen-bond donors (RDKit Lipinski.NumHDonors)", "step", 0.0, 5.0),
    "hba": ("hydrogen-bond acceptors (RDKit Lipinski.NumHAcceptors)", "step", 0.0, 10.0),
    "rotb": ("rotatable bonds (RDKit CalcNumRotatableBonds)", "step", 0.0, 10.0),
    "similarity": ("Tanimoto similarity to a query molecule, Morgan fingerprints (radius, bits as given; "
                   "default 2 and 2048)", "none", None, None),
    "smarts": ("1 if the molecule contains the SMARTS pattern, else 0 (a required substructure)", "none", None, None),
    "forbid": ("1 if the molecule does NOT contain the SMARTS pattern (a forbidden substructure)", "none", None, None),
    "user": ("a user's function module:function, list of SMILES -> scores in [0, 1]", "none", None, None),
    "pmo": ("a task of the PMO benchmark, by name (rediscovery, similarity, isomer, median, MPO, hop tasks and "
            "QED; GuacaMol's published definitions, minitransformer.chem.goals.pmo_tasks), in [0, 1]",
            "none", None, None),
    "tox21": ("1 - the largest predicted probability of activity over the chosen Tox21 assays of a `train "
              "property` model (1: predicted inactive everywhere; a model's opinion, not a measurement)",
              "none", None, None),
}


#: The whole-number ranges of a similarity's Morgan fingerprint: radius and bits (inclusive).
FINGERPRINT_RANGES = {"radius": (0, 10), "bits": (64, 2**20)}
#: The components whose raw values already lie in [0, 1], the only ones the ``none`` transform may take.
UNIT_RANGE = ("qed", "similarity", "smarts", "forbid", "user", "pmo", "tox21")


@dataclass
class Component:
    """One term of an :class:`Objective`: ``name`` (a key of :data:`COMPONENTS`), its ``weight``,
    its transform (``kind``, ``low``, ``high``, ``k``, ``width``) and its own parameters
    (``query``, ``radius``, ``bits`` for similarity; ``pattern`` for smarts and forbid; ``function``
    for user; ``task`` for pmo). Checked when made: an unknown name, a SMARTS or query that does not parse, a
    transform without its bounds raise a one-line ValueError before any work."""
    name: str
    weight: float = 1.0
    kind: str | None = None
    low: float | None = None
    high: float | None = None
    k: float = 0.25
    width: float | None = None
    params: dict = field(default_factory=dict)

    def __post_init__(self):
        require_rdkit()
        if self.name not in COMPONENTS:
            raise ValueError(f"unknown score component {self.name!r}; choose from {', '.join(COMPONENTS)}")
        if not (is_finite_number(self.weight) and self.weight >= np.finfo(np.float64).tiny):
            raise ValueError(f"component {self.name}: weight must be a finite number > 0, got {self.weight!r}")
        if self.kind is None:  # the component's own transform, with its bounds unless given
            _, self.kind, low, high = COMPONENTS[self.name]
            self.low = low if self.low is None else self.low
            self.high = high if self.high is None else self.high
        if self.kind not in TRANSFORMS:
            raise ValueError(f"component {self.name}: unknown transform {self.kind!r}; choose from "
                             f"{', '.join(TRANSFORMS)}")
        if self.kind == "none" and self.name not in UNIT_RANGE:
            raise ValueError(f"component {self.name}: its values are not in [0, 1], so the none transform cannot "
                             "make them a desirability; give a step or sigmoid transform with low and high")
        if self.kind != "none":
            self._check_bounds()
        self._check_params()
        self._prepare()

    def _check_bounds(self) -> None:
        """low < high, finite, with a finite span; k and width finite and > 0 (a one-line ValueError)."""
        where = f"component {self.name}: the {self.kind} transform"
        if not (is_finite_number(self.low) and is_finite_number(self.high) and self.low < self.high
                and math.isfinite(float(self.high) - float(self.low))):
            raise ValueError(f"{where} needs low < high, both finite (and a finite high - low), got "
                             f"low={self.low!r}, high={self.high!r}")
        if not (is_finite_number(self.k) and self.k > 0):
            raise ValueError(f"{where} needs a steepness k that is a finite number > 0, got k={self.k!r}")
        if self.width is not None:
            if not (is_finite_number(self.width) and self.width > 0 and math.isfinite(self.low - self.width)
                    and math.isfinite(self.high + self.width)):
                raise ValueError(f"{where} needs a width that is a finite number > 0, got width={self.width!r}")

    def _check_params(self) -> None:
        """radius and bits of a similarity: whole numbers in range (2.7 bits is no fingerprint)."""
        for key, (low, high) in FINGERPRINT_RANGES.items():
            value = self.params.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or not low <= value <= high):
                raise ValueError(f"component {self.name}: {key} must be a whole number from {low:,} to {high:,}, "
                                 f"got {value!r}")

    def _prepare(self) -> None:
        from rdkit import Chem
        if self.name == "similarity":
            query = self.params.get("query")
            mol = mol_from_smiles(query) if isinstance(query, str) else None
            if mol is None:
                raise ValueError(f"component similarity: query {query!r} is not a valid SMILES")
            from rdkit.Chem import rdFingerprintGenerator
            self._gen = rdFingerprintGenerator.GetMorganGenerator(radius=self.params.get("radius", 2),
                                                                  fpSize=self.params.get("bits", 2048))
            self._query = self._gen.GetFingerprint(mol)
        elif self.name in ("smarts", "forbid"):
            pattern = self.params.get("pattern")
            self._pattern = Chem.MolFromSmarts(pattern) if isinstance(pattern, str) else None
            if self._pattern is None:
                raise ValueError(f"component {self.name}: pattern {pattern!r} is not a valid SMARTS")
        elif self.name == "pmo":
            from minitransformer.chem.goals.pmo_tasks import get_task
            self._task = get_task(self.params.get("task"))  # an unknown name: a one-line ValueError
        elif self.name in ("user", "tox21"):
            self._fn = self.params.get("function")
            if not callable(self._fn):
                raise ValueError(f"component {self.name}: give a callable (the command builds it from "
                                 + ("module:function)" if self.name == "user" else "a property checkpoint)"))

    def raw(self, smiles: Sequence[str], mols: Sequence) -> np.ndarray:
        """The raw value of each molecule; NaN for an invalid one (``mols[i]`` None). A function
        (``user``, ``tox21``) is given the SMILES of the valid molecules only, in order."""
        from rdkit import DataStructs
        if self.name in ("user", "tox21"):
            valid = [i for i, m in enumerate(mols) if m is not None]
            out = np.full(len(mols), np.nan)
            if valid:
                out[valid] = self._function_values([smiles[i] for i in valid])
            return out
        out = np.full(len(mols), np.nan)
        descriptor = _descriptor(self.name) if self.name in _DESCRIPTORS else None
        for i, mol in enumerate(mols):
            if mol is None:
                continue
            if self.name == "similarity":
                out[i] = DataStructs.TanimotoSimilarity(self._query, self._gen.GetFingerprint(mol))
            elif self.name == "smarts":
                out[i] = float(mol.HasSubstructMatch(self._pattern))
            elif self.name == "forbid":
                out[i] = float(not mol.HasSubstructMatch(self._pattern))
            elif self.name == "pmo":
                out[i] = self._task.score_mol(mol)
            else:
                out[i] = float(descriptor(mol))
        return out

    def _function_values(self, smiles: list) -> np.ndarray:
        """``(N,)`` the function's scores of ``smiles``, each finite and in [0, 1], or one line
        saying what it returned instead (a runtime failure, like the function raising)."""
        try:
            values = np.asarray(self._fn(list(smiles)), dtype=np.float64)  # (N,)
        except SystemExit as exc:  # sys.exit() in the user's code: a failure of the function, not the program's end
            raise ScoreFunctionFailed(f"component {self.name}: the scoring function called sys.exit({exc.code!r}); "
                                      "a scoring function must return its scores") from None
        except Exception as exc:  # the user's code: say whose it is, not "a bug"
            raise ScoreFunctionFailed(f"component {self.name}: the scoring function failed "
                                      f"({type(exc).__name__}: {exc})") from exc
        if self.name == "tox21":  # the predictor gives NaN for a molecule it cannot read: scores 0
            values = np.nan_to_num(values, nan=0.0)
        if values.shape != (len(smiles),):
            wrong = f"shape {values.shape}"
        elif not np.all(np.isfinite(values)):
            bad = int(np.sum(~np.isfinite(values)))
            wrong = f"NaN or infinity for {bad} of them (first: {smiles[int(np.argmin(np.isfinite(values)))]})"
        elif values.size and (values.min() < 0 or values.max() > 1):
            i = int(np.argmax((values < 0) | (values > 1)))
            wrong = f"{values[i]:g} for {smiles[i]}"
        else:
            return values
        raise ScoreFunctionFailed(f"component {self.name}: the function must return {len(smiles)} finite scores "
                                  f"in [0, 1], one per valid molecule; it returned {wrong}")

    def desirability(self, smiles: Sequence[str], mols: Sequence) -> np.ndarray:
        return transform(self.raw(smiles, mols), self.kind, self.low, self.high, self.k, self.width)


@dataclass
class Objective:
    """The weighted mean (``mean``: ``"arithmetic"`` or ``"geometric"``) of its components'
    desirabilities. ``objective(smiles)`` returns ``(scores (N,), {component name: desirabilities (N,)})``;
    an invalid SMILES scores 0."""
    components: list
    mean: str = "geometric"

    def __post_init__(self):
        if not self.components:
            raise ValueError("a score needs at least one component")
        if self.mean not in ("arithmetic", "geometric"):
            raise ValueError(f"mean must be 'arithmetic' or 'geometric', got {self.mean!r}")
        if not math.isfinite(sum(float(c.weight) for c in self.components)):
            raise ValueError("score: the weights add up to more than a float holds; scale them down (only their "
                             "ratios matter)")

    @property
    def names(self) -> list[str]:
        """Each component's name, numbered (``similarity0``, ``similarity2``) where a name repeats."""
        all_names = [c.name for c in self.components]
        return [n if all_names.count(n) == 1 else f"{n}{i}" for i, n in enumerate(all_names)]

    def __call__(self, smiles: Sequence[str]) -> tuple[np.ndarray, dict]:
        with quiet_rdkit():
            mols = [mol_from_smiles(s) if isinstance(s, str) and s else None for s in smiles]
        parts = {name: c.desirability(smiles, mols) for name, c in zip(self.names, self.components)}
        w = np.array([c.weight for c in self.components], dtype=np.float64)  # (C,)
        w = w / w.sum()  # (C,), the shares (finite: the sum was checked when the objective was made)
        d = np.stack(list(parts.values()))  # (C, N)
        if self.mean == "arithmetic":
            score = (w[:, None] * d).sum(0)  # (N,)
        else:
            with np.errstate(divide="ignore"):
                score = np.exp((w[:, None] * np.log(d)).sum(0))  # (N,), 0 if any d is 0
        valid = np.array([m is not None for m in mols])
        return np.where(valid, np.nan_to_num(score, nan=0.0), 0.0), parts
