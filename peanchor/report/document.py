"""The report as a document: a title and a list of blocks (headings, paragraphs, bullet lists, tables, figures),
built once by :mod:`~peanchor.report.prose` and rendered by :mod:`~peanchor.report.markdown` and
:mod:`~peanchor.report.html`.

Imports: nothing from peanchor.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Union

__all__ = ["Block", "Bullets", "FigureBlock", "FigureFile", "Heading", "Paragraph", "Report", "Table"]


@dataclass(frozen=True)
class FigureFile:
    """One written figure: its stem, title, caption and the PNG/PDF paths."""

    key: str
    title: str
    caption: str
    png: Path
    pdf: Path


@dataclass
class Heading:
    level: int
    text: str


@dataclass
class Paragraph:
    text: str


@dataclass
class Bullets:
    items: list[str]


@dataclass
class Table:
    header: list[str]
    rows: list[list[str]]
    caption: str | None = None


@dataclass
class FigureBlock:
    figure: FigureFile
    number: int


Block = Union[Heading, Paragraph, Bullets, Table, FigureBlock]


@dataclass
class Report:
    title: str
    blocks: list[Block] = field(default_factory=list)

    def add(self, *blocks: Block) -> None:
        self.blocks.extend(blocks)
