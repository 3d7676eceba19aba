"""Judging generated molecules: every metric, by the definitions of MOSES and GuacaMol.

* ``evaluation`` - every metric of a sample set into one dict, from a registry (start here).
* ``metrics``, ``distribution``, ``fragments``, ``filters``, ``similarity``, ``failures`` - the formulas.
* ``scoring``, ``moses_report``, ``generator_report`` - the tables that lay the numbers out.
* ``draw`` - molecules as a PNG grid.
"""
