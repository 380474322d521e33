"""What was run, for the report's opening table: each model's architecture, its data, its training budget and
seeds, how it was analysed, and where (versions, commit, kernels).

Read from the result files only: each model's record in ``results.json`` / ``analysis.json`` (its ``source``:
model arguments and data; its analysis settings; its environment) and, for a model with a run directory, that
run's ``config.yaml`` (the training budget), parsed as plain YAML. A fact the files do not hold reads "not
recorded". When the models differ in a fact, the row lists each value with the models that have it.

Imports: :mod:`peanchor.results.records`, :mod:`peanchor.report.document`, :mod:`peanchor.report.summary`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from peanchor.report.document import Table
from peanchor.report.summary import models_by_condition
from peanchor.results.records import ModelResult, Results

__all__ = ["data_text", "interventions_text", "provenance_table", "run_config", "setting_text"]

NOT_RECORDED = "not recorded"


@functools.lru_cache(maxsize=256)
def _read_config(path: str) -> dict[str, Any]:
    try:
        doc = yaml.safe_load(Path(path).read_text(encoding="utf-8"))  # safe_load: data only, never code
    except (OSError, yaml.YAMLError):
        return {}
    return doc if isinstance(doc, dict) else {}


def run_config(m: ModelResult) -> dict[str, Any]:
    """The model's run's ``config.yaml`` as plain data (empty when it has none or it does not read)."""
    run = m.run_dir or (m.source or {}).get("run_dir")
    return _read_config(str(Path(run) / "config.yaml")) if run else {}


def _model_args(m: ModelResult) -> dict[str, Any]:
    args = dict((m.source or {}).get("model_args") or {})
    if not args:  # an older results.json: the run's config says what was built
        model = run_config(m).get("model") or {}
        args = {**(model.get("overrides") or {}), **{k: v for k, v in model.items() if k != "overrides"}}
    return args


def _architecture(m: ModelResult) -> str:
    a = _model_args(m)
    if not a:
        return NOT_RECORDED
    parts = [str(a.get("name") or "model")]
    parts += [f"{key} {a[key]}" for key in ("depth", "embed_dim", "num_heads", "patch_size") if a.get(key) is not None]
    size, patch = a.get("img_size"), a.get("patch_size")
    if isinstance(size, int) and isinstance(patch, int) and patch:
        parts.append(f"grid {size // patch}x{size // patch}")
    return ", ".join(parts).replace("embed_dim", "width").replace("num_heads", "heads").replace("patch_size", "patch")


def _data(m: ModelResult, results: Results) -> dict[str, Any]:
    data = dict((m.source or {}).get("data") or {})
    if isinstance(data.get("data"), dict):  # peanchor.analyze on a named dataset: the spec under "data"
        data = {**data.pop("data"), **data}
    if not data.get("name"):
        data = {**(run_config(m).get("data") or {}), **data}
    data.setdefault("name", results.dataset)
    data.setdefault("img_size", results.img_size)
    return data


def data_text(m: ModelResult, results: Results) -> str:
    """``scenes, 32 px, 1000 evaluation images`` of one model."""
    d = _data(m, results)
    name = d.get("name") or d.get("kind") or "unknown data"
    text = str(name) + (f", {d['img_size']} px" if d.get("img_size") else "")
    return text + (f", {m.num_images} evaluation images" if m.num_images else "")


def interventions_text(m: ModelResult, results: Results) -> str:
    """The edits every pass of the model's analysis ran under, or ``none``."""
    settings = m.analysis_settings or results.analysis or {}
    edits = settings.get("interventions") or []
    return " + ".join(str(e) for e in edits) if edits else "none"


def setting_text(results: Results) -> str:
    """What the whole report is measured on, for its title: ``scenes, 32 px, 1000 evaluation images`` (each
    distinct data, joined), and ``under pe_zero`` when the models ran under interventions."""
    data = list(dict.fromkeys(data_text(m, results) for m in results.models))
    if not data:
        name = results.dataset or "unknown data"
        data = [str(name) + (f", {results.img_size} px" if results.img_size else "")]
    edits: dict[str, list[str]] = {}
    for m in results.models:
        who = edits.setdefault(interventions_text(m, results), [])
        if m.condition not in who:
            who.append(m.condition)
    shown = [e if len(edits) == 1 else f"{e} ({', '.join(who)})" for e, who in edits.items() if e != "none"]
    return "; ".join(data) + (f"; under {', '.join(shown)}" if shown else "")


def _budget(m: ModelResult) -> str:
    train = run_config(m).get("train") or {}
    parts = []
    epochs = train.get("epochs", m.train.epochs)
    if epochs is not None:
        parts.append(f"{epochs} epochs")
    if train.get("batch_size"):
        parts.append(f"batch {train['batch_size']}")
    size = (run_config(m).get("data") or {}).get("train_size")
    if size:
        parts.append(f"{size} training images")
    return ", ".join(parts) or NOT_RECORDED


def _analysis(m: ModelResult, results: Results) -> str:
    s = m.analysis_settings or results.analysis or {}
    if not s:
        return NOT_RECORDED
    mode = s.get("rpi_mode") or "per_call (one permutation per forward call; older peanchor)"
    perms = getattr(m.ssdc, "rpi_permutations", None)
    parts = [f"RPI {mode}", f"{s.get('rpi_draws', '?')} draw(s)", f"seed {s.get('seed', '?')}",
             f"batch {s.get('batch_size', '?')}"]  # fmt: skip
    if perms:
        parts.append(f"{perms} permutations per RPI value")
    alphas = s.get("alphas") or []
    parts.append(f"{len(alphas)} α points" if alphas else "no α sweep")
    if s.get("bootstrap"):
        parts.append(f"bootstrap {s['bootstrap']}")
    if s.get("ssdc_mode"):
        parts.append(f"SSDC {s['ssdc_mode']}")
    return ", ".join(parts)


def _env(key: str) -> Callable[[ModelResult, Results], str]:
    def get(m: ModelResult, results: Results) -> str:
        env = m.environment or {}
        if key == "kernels":
            value = env.get("gpu") or env.get("cpu_capability")
            return f"{value} ({env.get('device', '?')})" if value else NOT_RECORDED
        if key == "versions":
            if not env:
                v = results.versions
                return ", ".join(f"{k} {v[k]}" for k in sorted(v)) if v else NOT_RECORDED
            return ", ".join(f"{k} {env[k]}" for k in ("peanchor", "torch", "python") if k in env)
        return str(env.get(key) or NOT_RECORDED)

    return get


_ROWS: list[tuple[str, Callable[[ModelResult, Results], str]]] = [
    ("model", lambda m, r: _architecture(m)),
    ("positional encoding", lambda m, r: f"{m.pe or 'none'}" + (" with RPT" if m.rpt else "")),
    ("data", data_text),
    ("interventions", interventions_text),
    ("training budget", lambda m, r: _budget(m)),
    ("analysis", _analysis),
    ("versions", _env("versions")),
    ("commit", _env("git_commit")),
    ("kernels", _env("kernels")),
]


def _cell(values: dict[str, list[str]]) -> str:
    if len(values) == 1:
        return next(iter(values))
    return "; ".join(f"{', '.join(names)}: {v}" for v, names in values.items())


def provenance_table(results: Results) -> Table:
    """The report's opening table: one row per fact; where the models differ in it, each value with the
    conditions (or models) that have it."""
    groups = models_by_condition(results)
    rows = [["seeds", _cell({", ".join(str(m.seed) for m in ms): [c] for c, ms in groups.items()})
                      if len({tuple(m.seed for m in ms) for ms in groups.values()}) > 1
                      else ", ".join(str(m.seed) for m in next(iter(groups.values())))]]  # fmt: skip
    for name, get in _ROWS:
        values: dict[str, list[str]] = {}
        for c, ms in groups.items():
            per_model = {get(m, results) for m in ms}
            for m in ms:  # a condition whose seeds agree is named once, else each model
                who = c if len(per_model) == 1 else m.name
                if who not in values.setdefault(get(m, results), []):
                    values[get(m, results)].append(who)
        rows.append([name, _cell(values)])
    return Table(["", "value"], rows, "Read from the result files (each model's record and its run's "
                 "config.yaml); the report never loads a model.")  # fmt: skip
