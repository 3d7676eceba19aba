"""Shared by the chemistry tests (importable: pytest puts this folder on sys.path)."""
import subprocess


def serve_pip(monkeypatch, wheel_name: str, payload: bytes, fail: bool = False) -> list:
    """Patch ``subprocess.run`` so that ``pip download`` writes ``payload`` as ``wheel_name`` into its
    ``--dest`` folder (or fails like an offline machine); returns the commands run."""
    calls, real = [], subprocess.run

    def run(command, **kwargs):
        if not (isinstance(command, list) and command[1:4] == ["-m", "pip", "download"]):
            return real(command, **kwargs)  # git, and everything else, as usual
        calls.append(command)
        if fail:
            return subprocess.CompletedProcess(command, 1, "", "ERROR: No matching distribution found\n")
        folder = command[command.index("--dest") + 1]
        with open(f"{folder}/{wheel_name}", "wb") as f:
            f.write(payload)
        return subprocess.CompletedProcess(command, 0, "", "")
    monkeypatch.setattr(subprocess, "run", run)
    return calls
