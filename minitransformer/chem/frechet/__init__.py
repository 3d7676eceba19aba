"""The Fréchet ChemNet Distance (``docs/fcd.md``).

* ``fcd`` - the distance, its reference statistics (cached) and the judge with its floor (start here).
* ``chemnet`` - ChemNet's forward pass in NumPy; ``chemnet_weights`` and ``torch_file`` its published
  weights, read from the ``fcd_torch`` wheel without PyTorch.
Nothing here imports :mod:`minitransformer.chem.judge`, which uses it (``tests/test_structure.py``
holds that).
"""
