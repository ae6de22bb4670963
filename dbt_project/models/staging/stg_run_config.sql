-- One row per analysis parameter set, with the parameters the marts cross-check extracted.
with cfg as (
    select *, coalesce(json_valid(params_json), false) as params_ok
    from {{ source('qkwh', 'run_config') }}
)
select
    config_id,
    analysis,
    code_version,
    params_json,
    created_at,
    case when params_ok then json_extract_string(params_json, '$.plasticity.cov_mode') end as cov_mode,
    case when params_ok then json_extract_string(params_json, '$.plasticity.pairs') end as pairs_mode,
    case when params_ok then json_extract_string(params_json, '$.plasticity.eligibility') end as eligibility
from cfg
