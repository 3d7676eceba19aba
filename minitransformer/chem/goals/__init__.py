"""What a steered generator aims at (``minitransformer optimize``, ``docs/optimize.md``).

* ``objectives`` - score components, desirability transforms and their weighted mean.
* ``pmo_tasks`` - the RDKit-only tasks of the PMO benchmark; ``oracle_budget`` - its budget and AUC top-10.

What runs a model toward them is in :mod:`minitransformer.molecules` (``objective_spec``, ``steering``).
"""
