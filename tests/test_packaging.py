"""The package as a user gets it: a wheel built by ``python -m build``, installed (not
editable), gives a working ``minitransformer`` command.

The wheel is built from a copy of the tracked files (so the checkout is left as it
was) and installed with ``pip install --no-deps --target``; its dependencies come
from the test environment. The installed script then runs from an empty folder,
and the test checks that it imported the installed copy, not this checkout.
Packaging does not depend on the kernel set, so this runs in the fast-kernel pass
of ``make test`` only.
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from minitransformer import __version__

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(os.environ.get("MINITRANSFORMER_KERNELS", "fast") == "reference",
                                reason="packaging is checked once, in the fast-kernel pass")


def _tracked_files() -> list[str]:
    try:
        out = subprocess.run(["git", "-C", str(ROOT), "ls-files"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the wheel is built from the tracked files")
    return [line for line in out.stdout.splitlines() if (ROOT / line).is_file()]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    pytest.importorskip("build")
    tmp = tmp_path_factory.mktemp("packaging")
    source = tmp / "source"
    for name in _tracked_files():
        if not name.startswith(("tests/", "benchmarks/", "docs/")):
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    built = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp / "dist"),
                            str(source)], capture_output=True, text=True)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    wheels = list((tmp / "dist").glob("minitransformer-*.whl"))
    assert len(wheels) == 1, wheels
    target = tmp / "site"
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--target", str(target),
                          str(wheels[0])], capture_output=True, text=True)
    assert pip.returncode == 0, pip.stdout[-3000:] + pip.stderr[-3000:]
    return wheels[0], target


def _run(target: Path, *args, cwd: Path):
    env = dict(os.environ, PYTHONPATH=str(target))
    env.pop("MINITRANSFORMER_DEBUG", None)
    return subprocess.run([sys.executable, str(target / "bin" / "minitransformer"), *args], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=300)


def test_the_wheel_holds_the_package_and_the_script_but_no_tests(installed):
    import zipfile
    wheel, target = installed
    names = zipfile.ZipFile(wheel).namelist()
    for required in ("minitransformer/cli/main.py", "minitransformer/cli/train_lm.py", "minitransformer/viz/report.py",
                     "minitransformer/chem/judge/scoring.py", "minitransformer/fast/attention.py"):
        assert required in names, required
    assert not any(n.startswith(("tests/", "benchmarks/", "demos/")) for n in names)
    entry = next(n for n in names if n.endswith("entry_points.txt"))
    assert "minitransformer = minitransformer.console:console" in zipfile.ZipFile(wheel).read(entry).decode()
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("METADATA"))).decode()
    assert "License: MIT" in metadata or "License-Expression: MIT" in metadata
    assert any(n.endswith("LICENSE") for n in names)
    assert (target / "bin" / "minitransformer").is_file()


def test_the_installed_command_trains_and_samples(installed, tmp_path):
    _, target = installed
    version = _run(target, "--version", cwd=tmp_path)
    assert version.returncode == 0 and version.stdout.strip() == f"minitransformer {__version__}"
    where = subprocess.run([sys.executable, "-c", "import minitransformer; print(minitransformer.__file__)"],
                           capture_output=True, text=True, cwd=tmp_path, env=dict(os.environ, PYTHONPATH=str(target)))
    assert Path(where.stdout.strip()).resolve().is_relative_to(target.resolve()), where.stdout  # not the checkout
    done = _run(target, "train", "lm", "--quick", "--quiet", "--data", "druglike", "--pretrain-data", "none",
                "--samples", "20", "--out", "run", cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    for name in ("best.npz", "metrics.json", "history.csv", "provenance.json", "samples.smi"):
        assert (tmp_path / "run" / name).is_file(), name
    sampled = _run(target, "sample", "run/best.npz", "-n", "5", cwd=tmp_path)
    assert sampled.returncode == 0 and len(sampled.stdout.splitlines()) == 5
    bad = _run(target, "sample", "run/missing.npz", cwd=tmp_path)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr
