"""What produced a run: ``provenance.json`` in every run folder.

A number in ``metrics.json`` is only worth something if the run can be traced
back: which version of this package (and which git commit, in a checkout),
which Python, NumPy, BLAS and RDKit, which seed, which command line, and which
data (the SHA-256 of the data file, and the fingerprint of the molecules in
each split). :func:`provenance` gathers that, :func:`write_provenance` writes it
atomically at the start of a training run, before any training, so that even
an interrupted run says what it was.
"""
from __future__ import annotations

import hashlib
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Sequence

from minitransformer.cli.outputs import write_json


def file_sha256(path: str | Path) -> str:
    """The SHA-256 of a file's bytes (hex), read in 1 MiB pieces."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for piece in iter(lambda: f.read(1 << 20), b""):
            h.update(piece)
    return h.hexdigest()


def data_file(data: str | None) -> Path | None:
    """The file behind ``--data`` (a named set or a path), or None when it cannot be found
    without a download (the run that reads it finds or downloads it and says so)."""
    from minitransformer.chem.datasets.data import druglike_path
    from minitransformer.chem.datasets.download import find_tox21
    try:
        if data is None or str(data).lower() == "tox21":
            return Path(find_tox21(download=False))
        if str(data).lower() == "druglike":
            return Path(druglike_path())
        if str(data).lower() == "moses":
            from minitransformer.chem.datasets.moses import find_moses
            return Path(find_moses("train", download=False))
    except (OSError, ValueError, ImportError):
        return None
    return Path(data) if Path(data).is_file() else None


def git_commit(folder: str | Path | None = None) -> str | None:
    """The commit of the git checkout holding this package (with ``+dirty`` when files
    changed since), or None for an installed copy or without git."""
    folder = Path(folder or Path(__file__).resolve().parents[2])
    if not (folder / ".git").exists():
        return None
    try:
        run = lambda *cmd: subprocess.run(["git", "-C", str(folder), *cmd], capture_output=True,  # noqa: E731
                                          text=True, timeout=5, check=True).stdout.strip()
        commit = run("rev-parse", "HEAD")
        dirty = bool(run("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        return None
    return commit + ("+dirty" if dirty else "")


def _versions() -> dict:
    import numpy as np

    from minitransformer import __version__, backend, kernels, runtime
    versions = {"minitransformer": __version__, "python": platform.python_version(), "numpy": np.__version__,
                "backend": backend.name(), "kernels": kernels.name()}
    try:
        import scipy
        versions["scipy"] = scipy.__version__
    except ImportError:
        pass
    try:
        from rdkit import rdBase
        versions["rdkit"] = rdBase.rdkitVersion
    except ImportError:
        versions["rdkit"] = None
    from minitransformer.cli import ranks
    dp = ranks.current()
    versions["runtime"] = runtime.describe(ranks=1 if dp is None else dp.size)  # ranks, compiled kernels, BLAS
    versions["blas"] = "; ".join(f"{b['library']} {b['version']}" + (f" ({b['kernel']})" if b.get("kernel") else "")
                                 for b in versions["runtime"]["blas"]) or None
    return versions


def provenance(argv: Sequence[str], seed: int, data: str | None, molecules_sha256: str | None = None) -> dict:
    """Everything needed to say what produced a run (see the module notes)."""
    path = data_file(data)
    return {
        "command": ["minitransformer", *argv],
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "seed": seed,
        "git_commit": git_commit(),
        "versions": _versions(),
        "platform": platform.platform(),
        "executable": sys.executable,
        "data": {"argument": data, "file": None if path is None else str(path),
                 "file_sha256": None if path is None else file_sha256(path),
                 "molecules_sha256": molecules_sha256},
    }


def write_provenance(out: str | Path, argv: Sequence[str], seed: int, data: str | None,
                     molecules_sha256: str | None = None) -> Path:
    """Write ``provenance.json`` into the run folder ``out`` (atomically), and print what runs
    (:func:`minitransformer.runtime.summary_line`): every training run starts here."""
    record = provenance(argv, seed, data, molecules_sha256)
    from minitransformer.runtime import summary_line
    print(summary_line(record["versions"]["runtime"]))
    return write_json(Path(out) / "provenance.json", record)
