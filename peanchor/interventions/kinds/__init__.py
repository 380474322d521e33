"""The edit kinds, one module each; every module of this folder is imported here, in name order, so that a kind
decorated with ``@INTERVENTIONS.register`` in a new file is registered without editing anything else.

Imports: its own modules.
"""

import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):  # sorted by name: the registry's order is stable
    importlib.import_module(f"{__name__}.{_module.name}")
