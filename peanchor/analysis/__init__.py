"""Analyses on trained models: corruptions, geometry (SSDC), robustness (Fragility Score), α sweeps.

Each analysis returns plain dicts and writes its result files through :mod:`peanchor.fileio`.
"""
