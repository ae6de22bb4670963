{# Shared SQL fragments of the qkwh marts.  Each one is a single definition used everywhere. #}

{# A DOUBLE that compute may have written as NaN/±Inf becomes NULL, so aggregates skip it. #}
{% macro finite(expr) -%}
    case when isfinite({{ expr }}) then {{ expr }} end
{%- endmacro %}

{# A SQL string literal of a project setting (single quotes doubled). #}
{% macro sql_string(text) -%}
    '{{ text | string | replace("'", "''") }}'
{%- endmacro %}

{# Head label used in reports and exports: layer 5, query head 3 -> 'L5H3'. #}
{% macro head_label(layer, q_head) -%}
    ('L' || cast({{ layer }} as varchar) || 'H' || cast({{ q_head }} as varchar))
{%- endmacro %}

{# Pearson r and its intervals live in qkwh/bootstrap.py (family_correlations, benchmark_correlations). #}

{# The names of the head classes in display order (var taxonomy_classes: the one list). #}
{% macro taxonomy_class_names() -%}
    {%- set names = [] -%}
    {%- for c in var('taxonomy_classes') -%}
        {%- if not modules.re.match('^[a-z][a-z0-9_]*$', c['taxonomy']) -%}
            {%- do exceptions.raise_compiler_error('taxonomy_classes: a class name must be a lower-case identifier: ' ~ c['taxonomy']) -%}
        {%- endif -%}
        {%- do names.append(c['taxonomy']) -%}
    {%- endfor -%}
    {%- do return(names) -%}
{%- endmacro %}

{#
  Five-class head taxonomy (docs/metrics/pca.md#head-taxonomy) on the canonicalised PC0 correlations: signed r_q and |r_k|,
  strict inequalities evaluated in order; ties at the thresholds fall through to 'mixed'.
#}
{% macro taxonomy_class(r_q, r_k, high=none, low=none) -%}
    {%- set high = high if high is not none else var('taxonomy_high') -%}
    {%- set low = low if low is not none else var('taxonomy_low') -%}
    case
        when {{ r_q }} is null or {{ r_k }} is null then null
        when {{ r_q }} > {{ high }} and abs({{ r_k }}) > {{ high }} then 'position_dominated'
        when {{ r_q }} > {{ high }} and abs({{ r_k }}) < {{ low }} then 'q_positional'
        when {{ r_q }} < {{ low }} and abs({{ r_k }}) > {{ high }} then 'k_positional'
        when {{ r_q }} < {{ low }} and abs({{ r_k }}) < {{ low }} then 'content_focused'
        else 'mixed'
    end
{%- endmacro %}

{#
  Thesis 4-class variant (docs/metrics/pca.md#head-taxonomy): |r_q| and |r_k|; Q-positional = |r_q| > high and
  |r_k| <= high; no K-positional class.
#}
{% macro taxonomy_class_th4(r_q, r_k, high=none, low=none) -%}
    {%- set high = high if high is not none else var('taxonomy_high') -%}
    {%- set low = low if low is not none else var('taxonomy_low') -%}
    case
        when {{ r_q }} is null or {{ r_k }} is null then null
        when abs({{ r_q }}) > {{ high }} and abs({{ r_k }}) > {{ high }} then 'position_dominated'
        when abs({{ r_q }}) > {{ high }} then 'q_positional'
        when abs({{ r_q }}) < {{ low }} and abs({{ r_k }}) < {{ low }} then 'content_focused'
        else 'mixed'
    end
{%- endmacro %}

{# ';'-separated 0-based layer list (registry/catalog format) -> INTEGER[] ('' / NULL -> []). #}
{% macro layer_list(expr) -%}
    coalesce(
        list_transform(
            list_filter(string_split(coalesce({{ expr }}, ''), ';'), lambda s: trim(s) <> ''),
            lambda s: cast(trim(s) as integer)
        ),
        cast([] as integer[])
    )
{%- endmacro %}

{# Mean of the non-null arguments (NULL when one is missing: first/last 20 % are defined on both deciles). #}
{% macro mean2(a, b) -%}
    (({{ a }}) + ({{ b }})) / 2.0
{%- endmacro %}

{# Relative depth of a layer, layer / (num_layers - 1), and its tenth (0..9); NULL for 1 layer. #}
{% macro depth(layer, num_layers) -%}
    case when {{ num_layers }} > 1 then {{ layer }} / ({{ num_layers }} - 1.0) end
{%- endmacro %}

{% macro depth_bin(layer, num_layers) -%}
    case when {{ num_layers }} > 1
         then cast(least(floor(10 * {{ layer }} / ({{ num_layers }} - 1.0)), 9) as integer) end
{%- endmacro %}
