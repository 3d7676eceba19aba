"""A score to steer toward, as a user writes it: a few names on the command line, or a JSON or TOML file.

Inline, ``qed,sa`` is the geometric mean of the components named, each with its
own transform and bounds (:data:`~minitransformer.chem.objectives.COMPONENTS`);
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
each). Everything is checked here, before any work: an unknown component or
key, a SMARTS or query that does not parse, a property checkpoint of the wrong
kind, an assay it does not predict, a ``module:function`` that cannot be
imported each give a one-line ValueError naming the problem.
"""
from __future__ import annotations

import importlib
import json
from pathlib import Path

import numpy as np

from minitransformer.chem.objectives import COMPONENTS, Component, Objective

__all__ = ["objective_from_spec", "read_spec"]

KEYS = {"name", "weight", "transform", "query", "radius", "bits", "pattern", "function", "checkpoint", "assays",
        "views", "task"}
TRANSFORM_KEYS = {"kind", "low", "high", "k", "width"}


def read_spec(text_or_path: str) -> dict:
    """The spec as a dict: a ``.json`` or ``.toml`` file's contents, or an inline ``name,name,...``."""
    path = Path(text_or_path)
    if path.suffix.lower() in (".json", ".toml"):
        if not path.is_file():
            raise ValueError(f"score file not found: {path}")
        text = path.read_text(encoding="utf-8")
        try:
            if path.suffix.lower() == ".json":
                return json.loads(text)
            import tomllib
            return tomllib.loads(text)
        except ValueError as exc:  # json.JSONDecodeError and tomllib.TOMLDecodeError are ValueErrors
            raise ValueError(f"{path}: not valid {path.suffix[1:].upper()} ({exc})") from None
    names = [n.strip() for n in str(text_or_path).split(",") if n.strip()]
    components = []
    for n in names:
        name, colon, task = n.partition(":")
        if colon and name != "pmo":
            raise ValueError(f"score: {n!r}: only pmo takes a value inline (pmo:TASK); give other settings in a "
                             "JSON or TOML file")
        components.append({"name": name, "task": task} if colon else {"name": n})
    return {"mean": "geometric", "components": components}


def _user_function(spec: str):
    module, _, name = str(spec).partition(":")
    if not module or not name:
        raise ValueError(f"component user: function {spec!r} must be written module:function")
    try:
        fn = getattr(importlib.import_module(module), name)
    except Exception as exc:  # any failure to import is the user's to fix: say which and why
        raise ValueError(f"component user: cannot load {spec} ({type(exc).__name__}: {exc})") from None
    if not callable(fn):
        raise ValueError(f"component user: {spec} is not a function")
    return fn


def _tox21_function(entry: dict):
    from minitransformer.molecules.predicting import PropertyPredictor
    if not entry.get("checkpoint"):
        raise ValueError("component tox21: give the checkpoint of a `train property` run (checkpoint = ...)")
    predictor = PropertyPredictor.from_checkpoint(entry["checkpoint"])
    assays = entry.get("assays") or predictor.task_names
    unknown = [a for a in assays if a not in predictor.task_names]
    if unknown:
        raise ValueError(f"component tox21: {entry['checkpoint']} does not predict {unknown}; it predicts "
                         f"{', '.join(predictor.task_names)}")
    columns = [predictor.task_names.index(a) for a in assays]
    views = int(entry.get("views", 1))

    def inactive_everywhere(smiles):
        probs, ok, _ = predictor.predict(smiles, views=views)
        return np.where(ok, 1.0 - probs[:, columns].max(axis=1, initial=0.0), np.nan)
    return inactive_everywhere


def objective_from_spec(spec) -> Objective:
    """An :class:`~minitransformer.chem.objectives.Objective` from a spec (see the module docstring):
    a dict, a file path or an inline list of names."""
    if not isinstance(spec, dict):
        spec = read_spec(spec)
    unknown = sorted(set(spec) - {"mean", "components"})
    if unknown:
        raise ValueError(f"score: unknown key(s) {unknown}; a score has 'mean' and 'components'")
    entries = spec.get("components")
    if not isinstance(entries, list) or not entries:
        raise ValueError("score: give at least one component, e.g. qed,sa or a file with [[components]]")
    components = []
    for entry in entries:
        if not isinstance(entry, dict) or "name" not in entry:
            raise ValueError(f"score: each component needs a name, got {entry!r}")
        name = entry["name"]
        if name not in COMPONENTS:
            raise ValueError(f"unknown score component {name!r}; choose from {', '.join(COMPONENTS)}")
        extra = sorted(set(entry) - KEYS)
        if extra:
            raise ValueError(f"component {name}: unknown key(s) {extra}; allowed: {', '.join(sorted(KEYS))}")
        transform = entry.get("transform") or {}
        if not isinstance(transform, dict) or set(transform) - TRANSFORM_KEYS:
            raise ValueError(f"component {name}: transform must be a table of {', '.join(sorted(TRANSFORM_KEYS))}")
        params = {k: entry[k] for k in ("query", "radius", "bits", "pattern", "task") if k in entry}
        if name == "user":
            params["function"] = _user_function(entry.get("function", ""))
        elif name == "tox21":
            params["function"] = _tox21_function(entry)
        components.append(Component(name, weight=entry.get("weight", 1.0), kind=transform.get("kind"),
                                    low=transform.get("low"), high=transform.get("high"),
                                    k=transform.get("k", 0.25), width=transform.get("width"), params=params))
    return Objective(components, mean=spec.get("mean", "geometric"))
