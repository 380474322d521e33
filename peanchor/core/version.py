"""The package's version, in the core so that any stage can record it without importing the package's front
(``peanchor/__init__.py``, the last stage).

Imports: nothing.
"""

__all__ = ["__version__"]

__version__ = "0.1.0"
