"""Interventions: what a pass changes at inference. The token order (RPI), the PE scale (α), and edits at the
named hook points every model implements (docs/interventions.md).

:class:`Intervention` carries all three (``model.forward_intermediates(images, intervention)`` takes it on every
backend); ``Intervention.parse("pe_zero+head_ablate:layers=3")`` builds one from the CLI's spec text. The edit kinds
are plug-ins, one module each in ``kinds/``, registered by ``@INTERVENTIONS.register``. A dose-response sweep
(:class:`SweepSpec`) varies one parameter of one kind; :func:`forward_doses` runs a batch under each dose.

Imports: its own modules.
"""

from peanchor.interventions.edit import (
    BLOCK_SITES,
    Edit,
    EditPass,
    HookPoints,
    PETable,
    Plane,
    RopeTables,
    axial_planes,
)
from peanchor.interventions.permutation import (
    identity_permutation,
    inverse_permutation,
    permute_tokens,
    random_permutation,
)
from peanchor.interventions.registry import INTERVENTIONS, edit_from_spec, names, register_intervention
from peanchor.interventions import kinds  # noqa: F401  (registers every kind)
from peanchor.interventions.intervention import NO_INTERVENTION, Intervention, fitted_edits
from peanchor.interventions.hook import FunctionName, Hook
from peanchor.interventions.kinds.head_ablate import HeadAblate
from peanchor.interventions.kinds.patch import Patch
from peanchor.interventions.kinds.pe_resample import PEResample, resample_rows
from peanchor.interventions.kinds.pe_shuffle import PEShuffle
from peanchor.interventions.kinds.pe_zero import PEZero
from peanchor.interventions.kinds.rope_planes import RopePlanes
from peanchor.interventions.record import Record
from peanchor.interventions.doses import forward_doses
from peanchor.interventions.start import Start
from peanchor.interventions.sweep_spec import SweepSpec

__all__ = [
    "BLOCK_SITES", "INTERVENTIONS", "NO_INTERVENTION", "Edit", "EditPass", "FunctionName", "HeadAblate", "Hook", "HookPoints",
    "Intervention",
    "PETable", "PEResample", "PEShuffle", "PEZero", "Patch", "Plane", "Record", "RopePlanes", "RopeTables", "Start",
    "SweepSpec",
    "axial_planes", "edit_from_spec", "identity_permutation", "inverse_permutation", "names", "permute_tokens",
    "random_permutation",
    "fitted_edits", "forward_doses", "register_intervention", "resample_rows",
]  # fmt: skip
