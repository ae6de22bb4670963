-- One row per catalogued head (a q file), with its display label (L5H3).
select
    model_id,
    layer,
    q_head,
    k_head,
    {{ head_label('layer', 'q_head') }} as head_label,
    has_k_file,
    n_q,
    n_k
from {{ source('qkwh', 'heads') }}
