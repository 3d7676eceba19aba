"""Locate the Tox21 table on disk, or fetch it once into a user cache and verify it.

Search order of :func:`find_tox21` for a file named ``tox21.csv.gz``:

1. the ``data_dir`` argument (a directory, or the file itself);
2. the directory in the environment variable ``MINITRANSFORMER_DATA``;
3. the user cache, ``$XDG_CACHE_HOME/minitransformer`` or else
   ``~/.cache/minitransformer``.

Only if all three miss and ``download=True`` is the file fetched, from the
DeepChem/MoleculeNet bucket by default, into the cache.

Verification
------------
The same table circulates in several gzip encodings (a different compressor or
header changes every byte of the ``.gz`` but none of the CSV), so the file is
checked by the SHA-256 of its *decompressed* content. The MD5 of the official
S3 ``.gz`` is accepted too, as a second fingerprint of the same data. A
download is written to a temporary file in the cache directory
(:func:`~minitransformer.atomic.atomic_write`, whose ``check`` verifies it) and
renamed into place only after it verifies, so an interrupted or corrupted download
never leaves a file that a later run would trust; on a mismatch the temporary
file is deleted and :class:`ChecksumError` is raised.
"""
from __future__ import annotations

import gzip
import hashlib
import os
import urllib.error
import urllib.request
from pathlib import Path

__all__ = [
    "TOX21_URL", "TOX21_FILENAME", "TOX21_CSV_SHA256", "TOX21_GZ_MD5",
    "ChecksumError", "DownloadError", "cache_dir", "where_to_put", "find_tox21", "download_file",
    "verify_gzip_csv", "sha256_of_file", "hashing_copy", "pip_download",
]

TOX21_URL = "https://deepchemdata.s3-us-west-1.amazonaws.com/datasets/tox21.csv.gz"
TOX21_FILENAME = "tox21.csv.gz"
#: SHA-256 of the decompressed Tox21 CSV (7831 rows). This is what is verified.
TOX21_CSV_SHA256 = "43153161f07230d2b5cd791574ca897f917a55c7a584aa33831ace2907297dd8"
#: MD5 of the official S3 ``tox21.csv.gz`` itself (re-compressed copies differ).
TOX21_GZ_MD5 = "2882d69e70bba0fec14995f26787cc25"


class ChecksumError(ValueError):
    """A data file's content does not match its pinned checksum."""


class DownloadError(RuntimeError):
    """A download failed (network unreachable, timeout, HTTP error)."""


def sha256_of_file(path: str | os.PathLike) -> str:
    """The SHA-256 of a file's bytes, read in 1 MB pieces."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def hashing_copy(source, sha256: str, what: str):
    """A writer for :func:`~minitransformer.atomic.atomic_write` that copies the open binary
    file ``source`` and checks its SHA-256 before the file is put in place (a mismatch raises
    :class:`ChecksumError` naming ``what``, and atomic_write deletes the temporary file)."""
    def write(out):
        digest = hashlib.sha256()
        for chunk in iter(lambda: source.read(1 << 20), b""):
            digest.update(chunk)
            out.write(chunk)
        if digest.hexdigest() != sha256:
            raise ChecksumError(f"checksum mismatch for {what}: sha256 {digest.hexdigest()}, expected {sha256}; "
                                "it is damaged or another version")
    return write


def pip_download(requirement: str, wheel_name: str, folder: Path, timeout: float) -> Path:
    """``pip download REQUIREMENT --no-deps`` into ``folder``: the path of ``wheel_name`` there, or an
    OSError saying why not. pip finds the package by its name and version in the index it is set
    up to use; no address is written in this package. The caller checks the wheel's SHA-256."""
    import subprocess
    import sys
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--no-input",
               "--disable-pip-version-check", "--quiet", "--dest", str(folder), requirement]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise OSError(f"pip download took over {timeout:.0f} s") from None
    wheel = Path(folder) / wheel_name
    if done.returncode != 0 or not wheel.is_file():
        last = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise OSError(f"pip download {requirement} failed: {last}")
    return wheel


def cache_dir() -> Path:
    """The per-user cache directory, ``$XDG_CACHE_HOME/minitransformer`` or ``~/.cache/minitransformer``."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "minitransformer"


def _digests(path: Path, name: str) -> tuple[str, str]:
    """Return (md5 of the file as stored, sha256 of its gzip-decompressed content)."""
    md5 = hashlib.md5(path.read_bytes()).hexdigest()
    sha = hashlib.sha256()
    try:
        with gzip.open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 16), b""):
                sha.update(chunk)
    except (OSError, EOFError) as exc:  # not gzip, or truncated
        raise ChecksumError(f"{name} is not a readable gzip file ({exc})") from exc
    return md5, sha.hexdigest()


def verify_gzip_csv(path: str | os.PathLike, sha256: str | None = TOX21_CSV_SHA256,
                    md5: str | None = TOX21_GZ_MD5, name: str | None = None) -> None:
    """Check a ``.csv.gz`` against pinned checksums; raise :class:`ChecksumError` if neither matches.

    The file passes when the SHA-256 of its decompressed content equals
    ``sha256`` or the MD5 of the compressed file equals ``md5``. With both set
    to None nothing is checked. ``name`` is what the error calls the file (default: its path).
    """
    if sha256 is None and md5 is None:
        return
    path = Path(path)
    got_md5, got_sha = _digests(path, name or str(path))
    if (sha256 is not None and got_sha == sha256) or (md5 is not None and got_md5 == md5):
        return
    raise ChecksumError(
        f"checksum mismatch for {name or path}: decompressed sha256 {got_sha} (expected {sha256}), "
        f"gzip md5 {got_md5} (expected {md5}). The file is corrupted or a different version; "
        "delete it and try again."
    )


def download_file(url: str, dest: str | os.PathLike, sha256: str | None = TOX21_CSV_SHA256,
                  md5: str | None = TOX21_GZ_MD5, timeout: float = 10.0) -> Path:
    """Download ``url`` to ``dest`` atomically and verify it with :func:`verify_gzip_csv`.

    The bytes go to a temporary file next to ``dest``; only a verified file is
    renamed to ``dest``. Network problems raise :class:`DownloadError`, a bad
    checksum :class:`ChecksumError`; either way no partial file is left behind.
    """
    from minitransformer.atomic import atomic_write
    dest = Path(dest)

    def fetch(out):
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                for chunk in iter(lambda: response.read(1 << 16), b""):
                    out.write(chunk)
        except (urllib.error.URLError, OSError) as exc:  # includes HTTPError and timeouts
            reason = " ".join(str(getattr(exc, "reason", None) or exc).split())
            raise DownloadError(
                f"could not download {dest.name} from {url} ({reason}). Offline? Put the file "
                f"{where_to_put(dest)}"
            ) from exc

    return atomic_write(dest, fetch, check=lambda tmp: verify_gzip_csv(tmp, sha256=sha256, md5=md5,
                                                                        name=f"{dest.name} from {url}"))


def where_to_put(dest: Path) -> str:
    """Where a user may place ``dest.name`` by hand, as the end of a sentence."""
    env = os.environ.get("MINITRANSFORMER_DATA")
    named = (f"at {Path(env) / dest.name} ($MINITRANSFORMER_DATA)" if env else
             "in a folder named by $MINITRANSFORMER_DATA (not set now)")
    return f"{named} or at {dest} (the user cache), or use the offline drug-like set (--data druglike)."


def _candidates(data_dir: str | os.PathLike | None) -> list[Path]:
    places = []
    if data_dir is not None:
        data_dir = Path(data_dir)
        places.append(data_dir if data_dir.suffix == ".gz" else data_dir / TOX21_FILENAME)
    if os.environ.get("MINITRANSFORMER_DATA"):
        places.append(Path(os.environ["MINITRANSFORMER_DATA"]) / TOX21_FILENAME)
    places.append(cache_dir() / TOX21_FILENAME)
    return places


def find_tox21(data_dir: str | os.PathLike | None = None, download: bool = False,
               url: str = TOX21_URL, sha256: str | None = TOX21_CSV_SHA256,
               md5: str | None = TOX21_GZ_MD5, timeout: float = 10.0,
               verify: bool = True) -> Path:
    """Return the path of ``tox21.csv.gz``, downloading it into the cache if allowed.

    Looks in ``data_dir``, then ``$MINITRANSFORMER_DATA``, then :func:`cache_dir`.
    A file found there is verified too (a fast hash of ~0.7 MB) unless
    ``verify=False``. When nothing is found: with ``download=True`` the file
    is fetched from ``url`` into the cache (see :func:`download_file`);
    otherwise FileNotFoundError lists the places searched. ``url``,
    ``sha256`` and ``md5`` are parameters so that tests can serve a small
    stand-in file from a local server.
    """
    places = _candidates(data_dir)
    for place in places:
        if place.is_file():
            if verify:
                verify_gzip_csv(place, sha256=sha256, md5=md5)
            return place
    if not download:
        searched = ", ".join(str(p) for p in places)
        raise FileNotFoundError(
            f"{TOX21_FILENAME} not found (searched: {searched}). "
            "Set MINITRANSFORMER_DATA to the directory holding it, or allow the download "
            f"(download=True) from {url}."
        )
    return download_file(url, cache_dir() / TOX21_FILENAME, sha256=sha256, md5=md5, timeout=timeout)
