"""Analyses on trained models: geometry (SSDC, ΔSSDC), robustness (Fragility Score), α sweeps.

* :mod:`~peanchor.analysis.shifts`: the shifts (one plug-in module per kind: JPEG, blur, ImageNet-C's others) and their
  severity tables;
* :mod:`~peanchor.analysis.shift_specs`: ``--shift KIND:key=value`` and the one rule for which shifts a model is
  measured under;
* :mod:`~peanchor.analysis.corrupted_sets`: whole evaluation sets corrupted once, and cached;
* :mod:`~peanchor.analysis.evalset`: the evaluation images, loaded once;
* :mod:`~peanchor.analysis.passes`: forward passes with accuracy and SSDC probes from the same call;
* :mod:`~peanchor.analysis.evaluate`: the suite, returning a :class:`peanchor.results.records.AnalysisResult`.

Imports: nothing (each of its modules says what it imports).
"""
