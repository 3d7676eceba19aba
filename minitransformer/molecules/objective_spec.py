"""A score to steer toward, as a user writes it: a few names on the command line, or a JSON or TOML file.

Inline, ``qed,sa`` is the geometric mean of the components named, each with its
own transform and bounds (:data:`~minitransformer.chem.goals.objectives.COMPONENTS`);
``pmo:median1`` names a task of the PMO benchmark.
A file says more::

    {"mean": "geometric",
     "components": [
       {"name": "qed"},
       {"name": "sa", "weight": 0.5},
       {"name": "similarity", "query": "CC(=O)Oc1ccccc1C(=O)O", "radius": 2, "bits": 2048,
        "transform": {"kind": "step", "low": 0.4, "high": 1.0}},
       {"name": "forbid", "pattern": "[N+](=O)[O-]"},
       {"name": "tox21", "checkpoint": "runs/property/best.npz", "assays": ["SR-p53", "NR-AR"]},
       {"name": "user", "function": "my_scores:solubility"},
       {"name": "pmo", "task": "osimertinib_mpo"}]}

(the same keys in TOML: ``mean = "geometric"`` and one ``[[components]]`` table
each).

**A score file with a ``user`` component runs code**: it imports the Python
module it names and calls the function, with your rights. Trust a score file
from someone else as you would trust a script from them, and read it first.

The schema, checked by :func:`check_spec` before any work (and before a run
folder is written), each mistake a one-line ValueError naming the component and key:

* the file: a regular UTF-8 file, valid JSON or TOML, nested no deeper than a score is;
* top level: ``mean`` (``"geometric"`` or ``"arithmetic"``) and ``components``, a non-empty list;
* every component: ``name`` (a string, a key of ``COMPONENTS``), ``weight`` (a finite number
  > 0; the weights' sum finite too), ``transform`` (a table), and only the keys its kind
  takes (:data:`OWN_KEYS`), the required ones present (:data:`REQUIRED`);
* every value of its type and range: strings are non-empty strings, ``radius`` a whole
  number 0-10, ``bits`` a whole number 64-1,048,576, ``views`` 1-256, ``assays`` a list
  of names; no ``null``;
* a transform: ``kind`` one of the transforms, ``low`` and ``high`` finite with
  ``low < high``, ``k`` and ``width`` finite and > 0, no parameter the kind does not use, and
  ``"none"`` only for a component whose raw values already lie in [0, 1]
  (:data:`~minitransformer.chem.goals.objectives.UNIT_RANGE`); the numbers are checked again by
  :class:`~minitransformer.chem.goals.objectives.Component` itself.

:func:`score_fingerprint` says what a score depends on, for ``optimize --resume``: the
checked spec, with every file it names (a property checkpoint, a user function's module)
replaced by the SHA-256 of its bytes, so the same score given by another path matches and
a changed file does not.
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.util
import math
from pathlib import Path

import numpy as np

from minitransformer import checks
from minitransformer.atomic import parse_json
from minitransformer.checks import shown as _shown
from minitransformer.chem.goals.objectives import (COMPONENTS, FINGERPRINT_RANGES, TRANSFORMS, UNIT_RANGE,
                                                  Component, Objective, ScoreFunctionFailed)

__all__ = ["objective_from_spec", "read_spec", "check_spec", "score_fingerprint", "OWN_KEYS", "REQUIRED"]

COMMON_KEYS = ("name", "weight", "transform")
#: The keys each kind of component takes beside :data:`COMMON_KEYS`.
OWN_KEYS = {"similarity": ("query", "radius", "bits"), "smarts": ("pattern",), "forbid": ("pattern",),
            "user": ("function",), "tox21": ("checkpoint", "assays", "views"), "pmo": ("task",)}
#: The keys a kind of component cannot do without.
REQUIRED = {"similarity": ("query",), "smarts": ("pattern",), "forbid": ("pattern",), "user": ("function",),
            "tox21": ("checkpoint",), "pmo": ("task",)}
_WHAT = {"query": "a SMILES", "pattern": "a SMARTS", "function": '"module:function"',
         "checkpoint": "the best.npz of a `train property` run", "task": "a PMO task, e.g. median1"}
TRANSFORM_KEYS = ("kind", "low", "high", "k", "width")
#: The transform parameters each kind uses.
USES = {"none": (), "step": ("low", "high"), "sigmoid": ("low", "high", "k"),
        "reverse_sigmoid": ("low", "high", "k"), "double_sigmoid": ("low", "high", "k", "width")}
SCORE_SUFFIXES = (".json", ".toml")


# --------------------------------------------------------------------------- reading
def read_spec(text_or_path: str) -> dict:
    """The spec as a dict: a ``.json`` or ``.toml`` file's contents, or an inline ``name,name,...``
    (not yet checked: :func:`check_spec` does that)."""
    path = Path(str(text_or_path))
    if path.suffix.lower() in SCORE_SUFFIXES:
        return _read_file(path)
    if "," not in str(text_or_path) and ("/" in str(text_or_path) or path.suffix[1:].isalpha()):  # a path
        raise ValueError(f"score {text_or_path}: a score file is a {' or '.join(SCORE_SUFFIXES)} file; name the "
                         "components inline (qed,sa) or give such a file")
    names = [n.strip() for n in str(text_or_path).split(",") if n.strip()]
    components = []
    for n in names:
        name, colon, task = n.partition(":")
        if colon and name != "pmo":
            raise ValueError(f"score: {n!r}: only pmo takes a value inline (pmo:TASK); give other settings in a "
                             "JSON or TOML file")
        components.append({"name": name, "task": task} if colon else {"name": n})
    return {"mean": "geometric", "components": components}


def _read_file(path: Path) -> dict:
    """A score file's contents: a regular UTF-8 file of JSON or TOML, each failure naming the file."""
    from minitransformer.chem.datasets.smiles_files import read_text
    if not path.exists() and not path.is_dir():
        raise ValueError(f"score file not found: {path}; check the path, or name the components inline (qed,sa)")
    try:
        text = read_text(path, "score file")  # a folder, a FIFO, a NUL byte, not UTF-8: one line naming the file
    except (IsADirectoryError, FileNotFoundError) as exc:
        raise ValueError(str(exc)) from None
    kind = path.suffix[1:].upper()
    try:
        if kind == "JSON":
            spec = parse_json(text)
        else:
            import tomllib
            spec = tomllib.loads(text)
    except RecursionError:
        raise ValueError(f"{path}: not valid {kind} (nested deeper than can be read)") from None
    except ValueError as exc:  # json.JSONDecodeError and tomllib.TOMLDecodeError are ValueErrors
        raise ValueError(f"{path}: not valid {kind} ({exc})") from None
    if not isinstance(spec, dict):
        raise ValueError(f"{path}: a score file holds a table with 'components', not a {type(spec).__name__}")
    return spec


# --------------------------------------------------------------------------- the schema
def _number(where: str, value, positive: bool = False) -> float:
    return checks.real(where, value, 0 if positive else None, low_open=True)


def _whole(where: str, value, low: int, high: int) -> int:
    return checks.whole(where, value, low, high)


def _text(where: str, value) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where} must be a non-empty string, got {_shown(value)}")
    return value


def _names(where: str, value) -> list:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"{where} must be a non-empty list of assay names, got {_shown(value)}")
    return value


#: How each component key is checked: key -> checker(where, value).
CHECKS = {
    "weight": lambda where, v: _number(where, v, positive=True),
    "query": _text, "pattern": _text, "function": _text, "checkpoint": _text, "task": _text,
    "radius": lambda where, v: _whole(where, v, *FINGERPRINT_RANGES["radius"]),
    "bits": lambda where, v: _whole(where, v, *FINGERPRINT_RANGES["bits"]),
    "views": lambda where, v: _whole(where, v, 1, 256),
    "assays": _names,
}


def _check_transform(name: str, transform) -> dict:
    where = f"component {name}: transform"
    if not isinstance(transform, dict):
        raise ValueError(f"{where} must be a table of {', '.join(TRANSFORM_KEYS)}, got {_shown(transform)}")
    unknown = sorted(set(transform) - set(TRANSFORM_KEYS), key=str)
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {unknown}; allowed: {', '.join(TRANSFORM_KEYS)}")
    _, default_kind, _, _ = COMPONENTS[name]
    kind = transform.get("kind", default_kind)
    if not isinstance(kind, str) or kind not in TRANSFORMS:
        raise ValueError(f"{where}: unknown kind {_shown(kind)}; choose from {', '.join(TRANSFORMS)}")
    if kind == "none" and name not in UNIT_RANGE:
        raise ValueError(f"component {name}: its values are not in [0, 1] ({COMPONENTS[name][0]}), so kind "
                         "'none' cannot make them a desirability; give a step, sigmoid, reverse_sigmoid or "
                         "double_sigmoid transform with low and high")
    unused = [k for k in ("low", "high", "k", "width") if k in transform and k not in USES[kind]]
    if unused:
        raise ValueError(f"{where}: {', '.join(unused)} has no effect with kind {_shown(kind)} (it uses "
                         f"{', '.join(USES[kind]) or 'no parameter'}); leave it out or choose another kind")
    for key in ("low", "high"):
        if key in transform:
            _number(f"{where} {key}", transform[key])
    for key in ("k", "width"):
        if key in transform:
            _number(f"{where} {key}", transform[key], positive=True)
    return {k: transform[k] for k in TRANSFORM_KEYS if k in transform}  # (a kind left out: the component's own)


def _check_component(entry, index: int) -> dict:
    if not isinstance(entry, dict):
        raise ValueError(f"score: component {index + 1} must be a table with a name, got {_shown(entry)}")
    name = entry.get("name")
    if not isinstance(name, str) or name not in COMPONENTS:
        raise ValueError(f"unknown score component {_shown(name)}; choose from {', '.join(COMPONENTS)}")
    allowed = COMMON_KEYS + OWN_KEYS.get(name, ())
    unknown = sorted(set(entry) - set(allowed), key=str)
    if unknown:
        raise ValueError(f"component {name}: unknown key(s) {unknown}; allowed: {', '.join(allowed)}")
    for key, value in entry.items():
        if value is None:
            raise ValueError(f"component {name}: {key} is null; give it a value or leave it out")
    missing = [k for k in REQUIRED.get(name, ()) if k not in entry]
    if missing:
        raise ValueError(f"component {name}: give the {missing[0]} ({missing[0]} = {_WHAT[missing[0]]})")
    checked = {"name": name}
    for key, value in entry.items():
        if key in CHECKS:
            checked[key] = CHECKS[key](f"component {name}: {key}", value)
    if "transform" in entry:
        checked["transform"] = _check_transform(name, entry["transform"])
    return checked


def check_spec(spec) -> dict:
    """The spec (a dict, a file path or an inline list of names) checked against the schema of the
    module docstring, as a new dict holding only what was checked; a one-line ValueError otherwise.
    Builds nothing and imports nothing (a user function is imported by :func:`objective_from_spec`)."""
    if not isinstance(spec, dict):
        spec = read_spec(spec)
    unknown = sorted(set(spec) - {"mean", "components"}, key=str)
    if unknown:
        raise ValueError(f"score: unknown key(s) {unknown}; a score has 'mean' and 'components'")
    mean = spec.get("mean", "geometric")
    if mean not in ("geometric", "arithmetic"):
        raise ValueError(f"score: mean must be 'geometric' or 'arithmetic', got {_shown(mean)}")
    entries = spec.get("components")
    if not isinstance(entries, list) or not entries:
        raise ValueError("score: give at least one component, e.g. qed,sa or a file with [[components]]")
    components = [_check_component(entry, i) for i, entry in enumerate(entries)]
    total = sum(float(c.get("weight", 1.0)) for c in components)  # inf when it overflows
    if not math.isfinite(total):
        raise ValueError(f"score: the weights add up to {total} (too large to weigh with); scale them down, "
                         "only their ratios matter")
    return {"mean": mean, "components": components}


# --------------------------------------------------------------------------- building
def _user_function(spec: str):
    module, _, name = str(spec).partition(":")
    if not module or not name:
        raise ValueError(f"component user: function {spec!r} must be written module:function")
    try:
        fn = getattr(importlib.import_module(module), name)
    except SystemExit as exc:  # the user's module ended the program as it loaded: a failure of its code
        raise ScoreFunctionFailed(f"component user: loading {spec} called sys.exit({exc.code!r}); a scoring module "
                                  "must not end the program") from None
    except Exception as exc:  # any failure to import is the user's to fix: say which and why
        raise ValueError(f"component user: cannot load {spec} ({type(exc).__name__}: {exc})") from None
    if not callable(fn):
        raise ValueError(f"component user: {spec} is not a function")
    return fn


def _tox21_function(entry: dict):
    from minitransformer.molecules.predicting import PropertyPredictor
    predictor = PropertyPredictor.from_checkpoint(_existing(entry["checkpoint"]))
    assays = entry.get("assays") or predictor.task_names
    unknown = [a for a in assays if a not in predictor.task_names]
    if unknown:
        raise ValueError(f"component tox21: {entry['checkpoint']} does not predict {unknown}; it predicts "
                         f"{', '.join(predictor.task_names)}")
    columns = [predictor.task_names.index(a) for a in assays]
    views = entry.get("views", 1)

    def inactive_everywhere(smiles):
        probs, ok, _ = predictor.predict(smiles, views=views)
        return np.where(ok, 1.0 - probs[:, columns].max(axis=1, initial=0.0), np.nan)
    return inactive_everywhere


def _existing(path: str) -> Path:
    """A property checkpoint named by a score: a regular file, or a one-line ValueError."""
    p = Path(path)
    if not p.is_file():
        what = "is a folder" if p.is_dir() else "is not a regular file" if p.exists() else "not found"
        raise ValueError(f"component tox21: checkpoint {path} {what}; give the best.npz of a `train property` run")
    return p


def objective_from_spec(spec) -> Objective:
    """An :class:`~minitransformer.chem.goals.objectives.Objective` from a spec (see the module docstring):
    a dict, a file path or an inline list of names, checked by :func:`check_spec` first."""
    spec = check_spec(spec)
    components = []
    for entry in spec["components"]:
        name, transform = entry["name"], entry.get("transform") or {}
        params = {k: entry[k] for k in ("query", "radius", "bits", "pattern", "task") if k in entry}
        if name == "user":
            params["function"] = _user_function(entry["function"])
        elif name == "tox21":
            params["function"] = _tox21_function(entry)
        components.append(Component(name, weight=entry.get("weight", 1.0), kind=transform.get("kind"),
                                    low=transform.get("low"), high=transform.get("high"),
                                    k=transform.get("k", 0.25), width=transform.get("width"), params=params))
    return Objective(components, mean=spec["mean"])


# --------------------------------------------------------------------------- what a score depends on
def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _module_sha256(function: str) -> str | None:
    """SHA-256 of the source file of a user function's module (None: a module without one)."""
    module = function.partition(":")[0]
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    origin = getattr(found, "origin", None)
    return _sha256(Path(origin)) if origin and Path(origin).is_file() else None


def score_fingerprint(spec) -> dict:
    """What a score depends on, for comparing two runs: the checked spec (:func:`check_spec`), with a
    property checkpoint given by the SHA-256 of its bytes instead of its path, and a user
    function's module by the SHA-256 of its source beside its name. The same score given by
    another path (``./q.toml``, a copied file) has the same fingerprint; a changed file does not."""
    spec = check_spec(spec)
    components = []
    for entry in spec["components"]:
        entry = dict(entry)
        if "checkpoint" in entry:
            entry["checkpoint"] = {"sha256": _sha256(_existing(entry["checkpoint"]))}
        if "function" in entry:
            entry["module_sha256"] = _module_sha256(entry["function"])
        components.append(entry)
    return {"mean": spec["mean"], "components": components}
