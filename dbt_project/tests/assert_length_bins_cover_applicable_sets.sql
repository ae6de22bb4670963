-- Every model has every bin of every bin set its rules assign (empty bins included), and no
-- bins of sets that do not apply.
with expected as (
    select s.model_id, b.bin_set, b.bin_index
    from {{ ref('int_model_bin_sets') }} as s
    join {{ ref('plasticity_bins') }} as b using (bin_set)
)

select coalesce(e.model_id, l.model_id) as model_id, coalesce(e.bin_set, l.bin_set) as bin_set,
       coalesce(e.bin_index, l.bin_index) as bin_index,
       case when l.model_id is null then 'missing' else 'unexpected' end as problem
from expected as e
full outer join {{ ref('plasticity_length_bins') }} as l using (model_id, bin_set, bin_index)
where e.model_id is null or l.model_id is null
