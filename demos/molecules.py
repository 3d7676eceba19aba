"""Molecules demo: a decoder-only transformer trained on Tox21 SMILES.

Placeholder. The real demo arrives with the molecules issue; until then this
script only reports that, so ``make demo`` runs end to end.
"""
from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    print("minitransformer: the molecules demo is not built yet "
          "(it arrives with the molecules issue).")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
