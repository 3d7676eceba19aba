"""The book's copy of MathJax, taken once, at install time, from a wheel on the package
registry that ships it whole with its web fonts (``sphinx-mathjax-offline``: MathJax
3.2.2, the last of the 3 series, as its authors build it: the TeX input, the CommonHTML
output and its TeX fonts). The wheel is fetched with ``pip download NAME==VERSION
--no-deps``, its SHA-256 checked, and only its ``static/mathjax/`` folder is unpacked
(no code of it is installed or run)::

    python docs/book/mathjax.py            # into <venv>/share/minitransformer-book/mathjax
    python docs/book/mathjax.py --check    # exit 1 when it is missing

The built pages load it from the site itself (``site/mathjax/``), never from the
network. ``formulas.py`` reads its tables of TeX commands to check formulas at build
time.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path

from minitransformer.chem.datasets.download import pip_download, sha256_of_file

WHEEL = "sphinx-mathjax-offline"
VERSION = "0.0.2"
SHA256 = "206418155b2ff2f57496fb8501fdccae3da978e53031ff296c73729ba16062c4"
MATHJAX_VERSION = "3.2.2"
PREFIX = "sphinx-mathjax-offline/static/mathjax/"
#: the component the pages load: TeX in, CommonHTML out (its fonts in output/chtml/fonts/)
SCRIPT = "tex-chtml.js"


def default_dir() -> Path:
    """Where the copy lives: ``$MINITRANSFORMER_MATHJAX``, else the running environment's
    ``share/minitransformer-book/mathjax``."""
    where = os.environ.get("MINITRANSFORMER_MATHJAX")
    return Path(where) if where else Path(sys.prefix) / "share" / "minitransformer-book" / "mathjax"


def present(dest: Path) -> bool:
    """True when ``dest`` holds the unpacked copy of this version."""
    stamp = dest / ".source"
    return (dest / SCRIPT).is_file() and stamp.is_file() and stamp.read_text().strip() == f"{WHEEL}=={VERSION}"


def fetch(dest: Path, log=print) -> Path:
    """Download the wheel, check its SHA-256, unpack its static files into ``dest``
    (atomically: a folder beside it, then renamed). Returns ``dest``."""
    if present(dest):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest.parent) as tmp:
        log(f"fetching {WHEEL}=={VERSION} (MathJax {MATHJAX_VERSION}) with pip download")
        wheel_name = f"{WHEEL.replace('-', '_')}-{VERSION}-py3-none-any.whl"
        try:
            wheel = pip_download(f"{WHEEL}=={VERSION}", wheel_name, Path(tmp), timeout=600)
        except OSError as err:
            raise SystemExit(f"error: {err}") from None
        digest = sha256_of_file(wheel)
        if digest != SHA256:
            raise SystemExit(f"error: {wheel.name} has SHA-256 {digest}, expected {SHA256}; not used")
        unpacked = Path(tmp) / "mathjax"
        with zipfile.ZipFile(wheel) as z:
            for name in z.namelist():
                if not name.startswith(PREFIX) or name.endswith("/"):
                    continue
                target = unpacked / name[len(PREFIX):]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(z.read(name))
        (unpacked / ".source").write_text(f"{WHEEL}=={VERSION}\n")
        if dest.exists():
            shutil.rmtree(dest)
        unpacked.rename(dest)
    log(f"MathJax {MATHJAX_VERSION} in {dest}")
    return dest


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dest", nargs="?", type=Path, default=None, help="where to unpack it (default: %(default)s)")
    p.add_argument("--check", action="store_true", help="only say whether it is there (exit 1 if not)")
    args = p.parse_args(argv)
    dest = args.dest or default_dir()
    if args.check:
        ok = present(dest)
        print(f"MathJax {MATHJAX_VERSION}: {'present' if ok else 'missing'} in {dest}")
        return 0 if ok else 1
    fetch(dest)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
