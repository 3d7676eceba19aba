"""Shared by the command-line tests (importable: pytest puts this folder on sys.path)."""


def one_line_error(capsys) -> str:
    """The single line the command wrote on stderr; fails on a traceback or more lines."""
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got:\n{err}"
    return lines[0]
