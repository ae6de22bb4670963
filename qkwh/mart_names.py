"""The dbt marts: the relations a report or another reader of built results may read.

Generated from the analysis declarations (qkwh.analyses.registry) by `python -m qkwh.generate`; do not edit.
"""

MARTS: frozenset[str] = frozenset(
    {
        "ablation_effects",
        "benchmark_correlations",
        "benchmark_fits",
        "benchmark_joins",
        "bias_decomposition",
        "component_weights_model",
        "dataset_comparisons",
        "depth_profile",
        "family_correlations",
        "head_metric_fits",
        "head_metrics",
        "head_rotation_pairs",
        "head_taxonomy",
        "layer_profile",
        "model_comparisons",
        "model_metric_ci",
        "model_reach_limits",
        "model_summary",
        "plasticity_buckets_gap",
        "plasticity_heatmap_model",
        "plasticity_length_bins",
        "published_comparison",
        "reach_head_metrics",
        "reach_mass_by_distance",
        "rope_band_energy",
        "rope_band_logits_model",
        "rope_band_plasticity_model",
        "rope_energy_spectrum",
        "taxonomy_classes",
        "taxonomy_fractions",
        "training_trajectory",
    }
)
