"""Reading SMILES files: one reader for every file of molecules the project takes.

:func:`read_smiles_file` reads a file (or standard input, ``-``) into a
:class:`SmilesFile`: the SMILES, the molecules' names, and for a CSV its header
and rows, so a caller can read label columns beside the SMILES (see
:func:`~minitransformer.chem.datasets.properties.read_labelled`). Three callers, three
policies, one reader:

* data sets (:func:`~minitransformer.chem.datasets.data.read_smiles`): ``every_line=False``,
  blank lines and ``#`` comments of a ``.smi`` file are no molecules;
* samples to judge or predict (:func:`~minitransformer.chem.datasets.user_files.read_user_file`):
  ``every_line=True``, **every line is a sample**, a blank one too (a generator
  that wrote nothing wrote an empty sample, and MOSES counts it as invalid), and so
  is a line starting with ``#`` (a broken sample can start with a triple bond);
* labelled tables (:func:`~minitransformer.chem.datasets.properties.read_labelled`): a CSV's rows.

``.csv`` / ``.csv.gz``
    Parsed with the :mod:`csv` module. The SMILES column is ``column`` (a name,
    or a 0-based index) or else found by name: ``smiles`` in any case, or failing
    that the first column whose name contains it (``canonical_smiles``). Without
    one, ValueError lists the columns. ``header=False``: a file without a header
    row (``column`` is then an index, default 0). An identifier column (``id``,
    ``name``, ``mol_id``, ``compound_id``, any case) gives the names. A row with no
    cell at all (a blank line) holds no molecule and is counted in ``blank_rows``.
``.smi`` / ``.txt`` (optionally ``.gz``)
    One molecule per line: the SMILES, then optionally white space and a name. A
    first line whose first field is ``smiles`` (any case) is a header some tools
    write, and is skipped (``header_line``).
``-``
    Standard input: a CSV when its first line has a ``smiles`` field among
    comma-separated fields, else line by line.

A cell's SMILES is its first white-space separated field (a SMILES has no white
space; RDKit reads the rest as a name); empty cells are kept as ``""``. Files
are read as UTF-8, a byte-order mark dropped, ``.gz`` decompressed; cells may be
of any length (the csv module's 131,072-character limit is lifted while
reading: a SMILES too long for RDKit is an invalid molecule, judged by
:func:`~minitransformer.chem._rdkit.smiles_problem`, not refused here). A missing
file, a folder, a FIFO or device, a file larger than :data:`MAX_TEXT_BYTES`, an
unknown suffix, a damaged ``.gz``, a NUL byte, text that is not UTF-8, a CSV quote
left open (a row spanning lines, :func:`table_rows`) and a CSV without a SMILES
column each raise an error with a one-line message naming the file (and the line).
The size and the first bytes are checked before a file is read whole.
"""
from __future__ import annotations

import codecs
import contextlib
import csv
import gzip
import io
import os
import sys
import zlib
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["read_smiles_file", "SmilesFile", "ID_COLUMNS", "CSV_SUFFIXES", "LINE_SUFFIXES", "csv_rows",
           "table_rows", "read_text", "check_file", "MAX_TEXT_BYTES"]

CSV_SUFFIXES = (".csv", ".csv.gz")
LINE_SUFFIXES = (".smi", ".smi.gz", ".txt", ".txt.gz")
ID_COLUMNS = ("id", "name", "mol_id", "compound_id")


@dataclass
class SmilesFile:
    """What a file of molecules holds: ``ids`` and ``smiles`` (same length, file order; an id is
    ``""`` where the file gives none), what was skipped (``header``: a header line or row;
    ``blank_rows``: CSV rows with no cell), and for a CSV its ``columns`` (the header row) and
    ``rows`` (the data rows that hold a cell, as lists of cells, in the order of ``smiles``), and
    ``smiles_column`` (the SMILES column's index; None for a line file)."""
    ids: list
    smiles: list
    header: bool = False
    blank_rows: int = 0
    columns: list = field(default_factory=list)
    rows: list = field(default_factory=list)
    smiles_column: int | None = None

    def skipped(self) -> str:
        """The skipped lines in words, "" when none (for a report)."""
        parts = (["a header line"] if self.header else []) + \
            ([f"{self.blank_rows} blank CSV row{'s' * (self.blank_rows != 1)}"] if self.blank_rows else [])
        return " and ".join(parts)


@contextlib.contextmanager
def csv_rows(f):
    """``csv.reader(f, strict=True)`` with the csv module's field limit (131,072 characters) lifted for
    the block. Strict: a quote left open at the end of the file, or text after a closing quote, is a
    ``csv.Error`` rather than a cell that swallows the rest of the file (see :func:`table_rows`)."""
    old = csv.field_size_limit()
    csv.field_size_limit(2**31 - 1)
    try:
        yield csv.reader(f, strict=True)
    finally:
        csv.field_size_limit(old)


def table_rows(text: str, where):
    """The rows of a CSV ``text`` as ``(line, row)``, ``line`` the 1-based line the row starts on.

    A table of molecules has no cell that spans lines: a row that does is a quote left open (one
    stray ``"`` merges every later line into one cell), and so is a quote still open at the end.
    Either is a ValueError naming ``where`` and the line, never a silently shorter table."""
    with csv_rows(io.StringIO(text, newline="")) as reader:
        end = 0
        while True:
            start = end + 1
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:
                raise ValueError(f"{where}, line {start}: not a well-formed CSV row ({exc}); a quote (\") is left "
                                 "open or misplaced. Close or remove it, or give a .smi file") from None
            end = reader.line_num
            if end > start:
                raise ValueError(f"{where}, line {start}: a quoted cell runs on to line {end}, which merges lines "
                                 "into one cell (a quote, \", left open); close or remove that quote, or give "
                                 "a .smi file") from None
            yield start, row


#: The most text a file of molecules may hold, uncompressed (1 GiB: about 20 million SMILES); a larger
#: file, or a ``.gz`` that inflates past it, is refused before it fills the memory. Raise it here for
#: a genuine larger file, or split the file.
MAX_TEXT_BYTES = 2**30
_PROBE_BYTES = 1 << 16  # the first bytes looked at for NUL bytes before a file is read whole


def check_file(path: Path, what: str = "SMILES file", hint: str = "use data='tox21' or data='druglike'") -> None:
    """FileNotFoundError for a missing path, IsADirectoryError for a folder, ValueError for
    anything else that is not a regular file (a FIFO, a device: reading one could wait for
    ever) or is larger than :data:`MAX_TEXT_BYTES`; each names the path."""
    if path.is_dir():
        raise IsADirectoryError(f"{what} {path} is a folder, not a file; give the path of the file inside it")
    if not path.exists():
        raise FileNotFoundError(f"{what} not found: {path} (resolved: {path.resolve()}). Check the path, or {hint}.")
    if not path.is_file():
        raise ValueError(f"{what} {path} is not a regular file (a FIFO, a socket or a device); give a file "
                         "saved on disk")
    size = path.stat().st_size
    if size > MAX_TEXT_BYTES:
        raise ValueError(f"{what} {path} holds {size:,} bytes, above the {MAX_TEXT_BYTES:,} one file may hold "
                         "(minitransformer.chem.datasets.smiles_files.MAX_TEXT_BYTES); split it into smaller files")


def _refuse_nul(raw: bytes, where) -> None:
    """A ValueError naming the line of the first NUL byte in ``raw``: text has none (a binary file,
    or one filled with zeros by a crash)."""
    at = raw.find(b"\x00")
    if at >= 0:
        line = raw.count(b"\n", 0, at) + 1
        raise ValueError(f"{where}, line {line}: a NUL byte (byte {at:,}); this is not UTF-8 text but a binary "
                         "file, UTF-16 text, or zeros a crash left. Give the SMILES as UTF-8 text")


def _gunzip(path: Path) -> bytes:
    """The decompressed bytes of ``path``, refused past :data:`MAX_TEXT_BYTES` (a gzip bomb) or at a
    NUL byte in its first bytes, before it is inflated whole."""
    out = []
    total = 0
    with gzip.open(path, "rb") as f:
        while True:
            chunk = f.read(1 << 20)
            if not chunk:
                break
            if total == 0:
                _refuse_nul(chunk[:_PROBE_BYTES], path)
            total += len(chunk)
            if total > MAX_TEXT_BYTES:
                raise ValueError(f"{path} inflates to more than {MAX_TEXT_BYTES:,} bytes (minitransformer.chem."
                                 "datasets.smiles_files.MAX_TEXT_BYTES); split it into smaller files")
            out.append(chunk)
    return b"".join(out)


def read_text(path: Path, what: str = "file") -> str:
    """The whole text of ``path`` (gunzipped when it ends in ``.gz``), decoded as UTF-8 (a byte-order
    mark dropped); a damaged gzip file, a NUL byte or text that is not UTF-8 is a ValueError naming
    the file (and the line). Checked by :func:`check_file` first; the first bytes are looked at for
    NUL bytes before the file is read whole. ``what`` names the file in a message."""
    check_file(path, what)
    if path.name.lower().endswith(".gz"):
        try:
            raw = _gunzip(path)
        except (OSError, EOFError, zlib.error) as exc:  # BadGzipFile is an OSError; EOFError: truncated
            raise ValueError(f"{path} is not a readable gzip file ({type(exc).__name__}: {exc}); it may be "
                             "truncated or not compressed at all. Download it again, or remove the .gz "
                             "suffix if it is plain text") from None
    else:
        with open(path, "rb") as f:
            _refuse_nul(f.read(_PROBE_BYTES), path)
            f.seek(0)
            raw = f.read()
    _refuse_nul(raw, path)
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        bom = 3 if raw.startswith(codecs.BOM_UTF8) else 0
        start = exc.start + bom  # the position in ``raw``
        line = raw.count(b"\n", 0, start) + 1
        column = start - (raw.rfind(b"\n", 0, start) + 1) + 1
        raise ValueError(f"{path}, line {line}: not UTF-8 text (byte 0x{raw[start]:02x} at column {column}); "
                         "save the file as UTF-8") from None


def stdin_text() -> str:
    """Standard input as UTF-8 text; binary, UTF-16 or gzipped input is a one-line ValueError."""
    raw = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read().encode("utf-8", "replace")
    if raw[:2] == b"\x1f\x8b":
        raise ValueError("standard input is gzip-compressed; decompress it first (zcat FILE | ...) or give the "
                         ".gz file's name instead of -")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise ValueError(f"standard input is not UTF-8 text (byte {exc.start}, line {line}); give SMILES as "
                         "plain text, one per line") from None
    _refuse_nul(raw, "standard input")
    return text


def first_field(cell: str) -> str:
    """The SMILES of a cell or line: its first white-space separated field ("" if none)."""
    fields = cell.split()
    return fields[0] if fields else ""


def smiles_column(header: list[str], where) -> int:
    """Index of the SMILES column: the one named 'smiles', else the one whose name contains it (any
    case). Two candidates of one kind are refused (a ValueError naming them): which one holds the
    molecules is the user's to say, not the first one's to win."""
    names = [h.strip().lower() for h in header]
    for matches in ([i for i, name in enumerate(names) if name == "smiles"],
                    [i for i, name in enumerate(names) if "smiles" in name]):
        if len(matches) > 1:
            shown = ", ".join(f"{header[i].strip()!r} (column {i + 1})" for i in matches)
            raise ValueError(f"{where}: {len(matches)} columns could hold the SMILES ({shown}); keep one of them, "
                             "or rename the others so that only the SMILES column's name contains 'smiles'")
        if matches and names[matches[0]] != "smiles":
            print(f"{where}: no column is named 'smiles'; using column {header[matches[0]].strip()!r} as the SMILES",
                  file=sys.stderr)
        if matches:
            return matches[0]
    shown = ", ".join(repr(h.strip()) for h in header[:8]) + (", ..." if len(header) > 8 else "")
    raise ValueError(f"{where}: no SMILES column (the columns are {shown}); rename the SMILES column to "
                     "'smiles' (any case), or give a .smi file with one SMILES per line")


def _column_index(head: list[str], column, where) -> int:
    if column is None:
        return smiles_column(head, where)
    if isinstance(column, int):
        return column
    lowered = [h.strip().lower() for h in head]
    if column.lower() not in lowered:
        raise ValueError(f"{where}: no column {column!r}; the columns are {head}")
    if lowered.count(column.lower()) > 1:
        raise ValueError(f"{where}: {lowered.count(column.lower())} columns are named {column!r} (any case); keep "
                         "one of them")
    return lowered.index(column.lower())


def _from_csv(text: str, where, column=None, header: bool = True) -> SmilesFile:
    rows = table_rows(text, where)
    if header:
        head = next(rows, (0, None))[1]
        if head is None:
            return SmilesFile([], [])
        col = _column_index(head, column, where)
    else:
        if isinstance(column, str):
            raise ValueError("a file without a header needs column as an index")
        head, col = [], 0 if column is None else column
    names = [h.strip().lower() for h in head]
    id_col = next((names.index(n) for n in ID_COLUMNS if n in names), None)
    out = SmilesFile([], [], header=header, columns=head, smiles_column=col)
    for _, row in rows:
        if not row:
            out.blank_rows += 1  # a blank line: no cell, no molecule
            continue
        out.rows.append(row)
        out.smiles.append(first_field(row[col]) if col < len(row) else "")
        out.ids.append(row[id_col].strip() if id_col is not None and id_col < len(row) else "")
    return out


def _from_lines(text: str, every_line: bool) -> SmilesFile:
    lines = text.splitlines()
    first = lines[0].split(maxsplit=1) if lines else []
    header = bool(first) and first[0].lower() == "smiles"
    out = SmilesFile([], [], header=header)
    for line in lines[1:] if header else lines:
        fields = line.split(maxsplit=1)
        if not every_line and (not fields or fields[0].startswith("#")):
            continue  # a data set's blank line or comment
        out.smiles.append(fields[0] if fields else "")  # (every_line: a blank line is an empty sample)
        out.ids.append(fields[1].strip() if len(fields) > 1 else "")
    return out


def _looks_like_csv(text: str) -> bool:
    first = text.lstrip("\ufeff").split("\n", 1)[0]
    return "," in first and any("smiles" in f.strip().lower() for f in first.split(","))


def read_smiles_file(path_or_dash: str | os.PathLike, *, every_line: bool = True, column: str | int | None = None,
                     header: bool = True, what: str = "SMILES file",
                     hint: str = "use data='tox21' or data='druglike'") -> SmilesFile:
    """A file of molecules (``"-"``: standard input) as a :class:`SmilesFile` (see the module docstring).

    ``every_line``: every line of a ``.smi`` file is a molecule, a blank one too (samples);
    False skips blank lines and ``#`` comments (data sets). ``column`` and ``header``: the
    SMILES column of a CSV, and whether it has a header row. ``what`` and ``hint`` word the
    message of a missing file.
    """
    if str(path_or_dash) == "-":
        text = stdin_text()
        return _from_csv(text, "<stdin>", column, header) if _looks_like_csv(text) else _from_lines(text, every_line)
    path = Path(path_or_dash)
    check_file(path, what, hint)
    name = path.name.lower()
    if name.endswith(CSV_SUFFIXES):
        return _from_csv(read_text(path), path, column, header)
    if name.endswith(LINE_SUFFIXES):
        return _from_lines(read_text(path), every_line)
    raise ValueError(f"{path}: unknown file type; expected one of {', '.join(CSV_SUFFIXES + LINE_SUFFIXES)}"
                     + (" or '-' for standard input" if every_line else ""))
