"""Judging generated molecules: every metric, by the definitions of MOSES and GuacaMol.

* ``evaluation`` - every metric of a sample set into one dict, from a registry (start here).
* ``metrics``, ``distribution``, ``fragments``, ``filters``, ``similarity``, ``failures`` - the formulas.
* ``scoring``, ``moses_report``, ``generator_report`` - the tables that lay the numbers out;
  ``moses_stats`` - the statistics MOSES ships for its test sets, seeded into the caches the FCD
  and the comparisons read.
* ``draw`` - molecules as a PNG grid.
"""
