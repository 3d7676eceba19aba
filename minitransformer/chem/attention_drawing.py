"""Moved: drawing attention on a molecule is a picture, in :mod:`minitransformer.viz`."""
raise ImportError("minitransformer.chem.attention_drawing is now minitransformer.viz.attention_drawing: "
                  "import it from there")
