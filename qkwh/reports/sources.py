"""The marts report figures may read: the one place the report reads this list from.

:class:`qkwh.reports.base.Marts` refuses every other relation, and the tests check the list
against the dbt project's marts.  (When the list is generated from the analyses' declarations,
this module is the one to point at it.)
"""

from __future__ import annotations

#: The relations a figure module may read (the dbt marts; tests/reports checks this list
#: against dbt_project/models/marts).  Everything else (per-head compute tables, the catalog,
#: staging and intermediate models) is off limits; the collages' raw vectors and axes are read
#: by qkwh.reports.vectors alone.
MARTS: frozenset[str] = frozenset(
    {
        "head_metrics",
        "head_taxonomy",
        "head_rotation_pairs",
        "taxonomy_fractions",
        "model_summary",
        "model_metric_ci",
        "model_comparisons",
        "dataset_comparisons",
        "plasticity_length_bins",
        "plasticity_heatmap_model",
        "plasticity_buckets_gap",
        "component_weights_model",
        "bias_decomposition",
        "training_trajectory",
        "layer_profile",
        "family_correlations",
        "benchmark_joins",
        "benchmark_correlations",
        "published_comparison",
        "taxonomy_classes",
        "depth_profile",
        "benchmark_fits",
        "head_metric_fits",
        "rope_band_energy",
        "rope_energy_spectrum",
        "rope_band_plasticity_model",
        "rope_band_logits_model",
        "ablation_effects",
    }
)
