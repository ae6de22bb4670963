-- Captures of one model on different texts: every pair of model ids (model_a < model_b) with the
-- same hf_model and checkpoint (phase and step, NULL = NULL) whose dataset differs (a NULL dataset
-- counts as its own value).  The catalog's `revision` is the Hub branch of the *capture*, which
-- differs between two captures, so the model's revision is told by its checkpoint.
with m as (
    select model_id, label, dataset, hf_model, checkpoint_phase, checkpoint_step
    from {{ ref('int_models') }}
    where hf_model is not null
)

select
    a.model_id as model_a,
    b.model_id as model_b,
    a.label as label_a,
    b.label as label_b,
    a.dataset as dataset_a,
    b.dataset as dataset_b,
    a.hf_model
from m as a
join m as b
    on b.hf_model = a.hf_model
    and b.checkpoint_phase is not distinct from a.checkpoint_phase
    and b.checkpoint_step is not distinct from a.checkpoint_step
    and b.dataset is distinct from a.dataset
    and a.model_id < b.model_id
