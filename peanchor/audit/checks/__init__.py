"""The audit's checks, one module each, registered in the order an audit runs them (docs/audit.md).

Imports: its own modules.
"""

from peanchor.audit.checks import (  # noqa: F401  (each registers its check)
    pe_identity,
    position_reaches,
    rotary_relative,
    axes_in_order,
    resampling,
    prefix_kept,
    attention_paths,
    no_hidden_position,
    alpha_behaves,
    reference_parity,
)
