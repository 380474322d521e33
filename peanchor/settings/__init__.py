"""What a user asks for, as text, before anything is built: the ``--set`` items, each read once
(:mod:`~peanchor.settings.set_items`), the condition syntax of a grid (:mod:`~peanchor.settings.conditions`)
and the analysis plan's settings (:mod:`~peanchor.settings.plan`).

Imports: nothing at import time.
"""
