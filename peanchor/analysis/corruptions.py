"""The former home of the shifts, kept so that ``from peanchor.analysis.corruptions import Shift`` still works: the
shifts are :mod:`peanchor.analysis.shifts` (one module per kind under ``shifts/kinds/``).

Imports: :mod:`peanchor.analysis.shifts`.
"""

from peanchor.analysis.shifts import *
from peanchor.analysis.shifts import __all__
