"""Converters that turn other projects' checkpoints into peanchor run directories.

* :mod:`peanchor.convert.paper`: the paper's released checkpoints (``peanchor import paper``).
"""

from peanchor.convert.paper import CONDITIONS, convert_paper_state_dict, import_paper, load_paper_state_dict

__all__ = ["CONDITIONS", "convert_paper_state_dict", "import_paper", "load_paper_state_dict"]
