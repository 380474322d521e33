"""Grids of conditions × seeds, trained, analysed and assembled (``peanchor reproduce`` / ``peanchor report``).

* :mod:`~peanchor.study.cells`: the cells and their shards;
* :mod:`~peanchor.study.options`: what an invocation asks for, and ``--list``;
* :mod:`~peanchor.study.pipeline`: one cell, trained then analysed, and when an analysis is reused;
* :mod:`~peanchor.study.executor`: cells in this process or in a pool of worker processes;
* :mod:`~peanchor.study.assemble`: ``results.json`` from the result files alone;
* :mod:`~peanchor.study.reproduce`: the whole run, then the report.

The grid sits on top of the data flow: it drives training and analysis and hands the assembled results to the
report; nothing below imports it.

Imports: its own modules; the grid may import every stage below it, and nothing imports the grid but the commands.
"""

from peanchor.study.assemble import MANIFEST, assemble_results
from peanchor.study.cells import Cell, grid_cells, parse_shard, shard_cells
from peanchor.study.options import ReproduceOptions, list_commands, split_set_items
from peanchor.study.reproduce import (
    ReproduceOutcome,
    reproduce,
    write_results_and_report,
)

__all__ = [
    "MANIFEST",
    "Cell",
    "ReproduceOptions",
    "ReproduceOutcome",
    "assemble_results",
    "grid_cells",
    "list_commands",
    "parse_shard",
    "reproduce",
    "shard_cells",
    "split_set_items",
    "write_results_and_report",
]
