"""An example peanchor plug-in package: a shift kind (:mod:`.brightness`), a lens (:mod:`.attention_entropy`) and a
positional encoding (:mod:`.rowcol`), each a module that registers itself when imported. peanchor imports them
through the entry points in this package's ``pyproject.toml`` once it is installed, or by name with
``--plugin peanchor_example.brightness`` / ``PEANCHOR_PLUGINS=...`` when it is only on the path.
"""
