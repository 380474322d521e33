"""Result files and what reads them: the typed records of an analysis and of a grid
(:mod:`~peanchor.results.records`, re-exported here), their JSON schema (:mod:`~peanchor.results.schema`), their
rows and summaries (:mod:`~peanchor.results.frames`), tables across models (:mod:`~peanchor.results.tables`), dose
sweeps (:mod:`~peanchor.results.doses`) and top-1 at other resolutions (:mod:`~peanchor.results.resolution`).

Imports: :mod:`peanchor.results.records` (its public names).
"""

__all__ = ['ANALYSIS_CSV', 'ANALYSIS_JSON', 'ANALYSIS_SCHEMA_VERSION', 'RESULTS_JSON', 'RESULTS_SCHEMA_VERSION',
    'SCHEMA_VERSION', 'AnalysisResult', 'AlphaTrend', 'AnalysisSettings', 'AttentionDistanceLayers', 'FailedCell',
    'HeadLayers', 'LayerPair', 'Measures', 'ModelInfo', 'ModelResult', 'PositionProbeLayers', 'Results',
    'SSDCLayers', 'SweepPoint', 'SweepRow', 'TrainSummary', 'analysis_rows', 'read_analysis', 'read_results',
    'results_from_dict', 'to_json_dict', 'write_analysis', 'write_results']  # fmt: skip

from peanchor.results.records import (ANALYSIS_CSV, ANALYSIS_JSON, ANALYSIS_SCHEMA_VERSION, RESULTS_JSON,
    RESULTS_SCHEMA_VERSION, SCHEMA_VERSION, AnalysisResult, AlphaTrend, AnalysisSettings, AttentionDistanceLayers,
    FailedCell, HeadLayers, LayerPair, Measures, ModelInfo, ModelResult, PositionProbeLayers, Results, SSDCLayers,
    SweepPoint, SweepRow, TrainSummary, analysis_rows, read_analysis, read_results, results_from_dict, to_json_dict,
    write_analysis, write_results)  # noqa: E402
