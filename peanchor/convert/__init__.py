"""Converters that turn other projects' checkpoints into peanchor run directories.

* :mod:`peanchor.convert.paper`: the paper's released checkpoints → models, and
  :mod:`peanchor.convert.paper_run`: → run directories (``peanchor import paper``).

Imports: :mod:`peanchor.convert.paper`, :mod:`peanchor.convert.paper_run`.
"""

from peanchor.convert.paper import CONDITIONS, convert_paper_state_dict, load_paper_state_dict
from peanchor.convert.paper_run import import_paper

__all__ = ["CONDITIONS", "convert_paper_state_dict", "import_paper", "load_paper_state_dict"]
