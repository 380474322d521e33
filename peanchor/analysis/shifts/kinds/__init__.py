"""The shift kinds, one module each. :mod:`peanchor.analysis.shifts.registry` imports every module here, and each
registers its kind with ``@register``: adding a kind is adding a module (docs/ARCHITECTURE.md, "How to add a shift").

Imports: nothing.
"""
