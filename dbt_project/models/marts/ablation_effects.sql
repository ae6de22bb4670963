-- Head ablation (qkwh ablate, docs/ablation.md): per run, selection, k and prompt length, the
-- mean key log-probability and passkey accuracy with 95 % intervals (Wilson for accuracy, a
-- bootstrap over the run's prompts for the log-probability), and the paired differences against
-- the unablated model (none) and against the random selections of the same k.
-- The bootstrap resamples prompts (the (depth, trial) pairs of a length) with a hash of
-- (run, length, draw, slot), so every selection of a run sees the same resampled prompts
-- (paired) and a rebuild gives the same bounds.
{% set draws = var('ablation_bootstrap_draws', 1000) %}
{% set z = 1.959963984540054 %}
with runs as (
    select run_id, model_id, metric, rank_order, method, task
    from {{ source('qkwh', 'ablation_runs') }}
),

trials as (
    select
        run_id, selection, k, length, depth, trial, logprob,
        cast(correct as integer) as hit,
        case
            when selection = 'none' then 'none'
            when selection like 'random:%' then 'random'
            else 'metric'
        end as selection_kind
    from {{ source('qkwh', 'ablation_trials') }}
),

units as (
    select
        run_id, length, depth, trial,
        row_number() over (partition by run_id, length order by depth, trial) - 1 as unit,
        count(*) over (partition by run_id, length) as n_units
    from (select distinct run_id, length, depth, trial from trials)
),

unablated as (
    select run_id, length, depth, trial, logprob as lp_none, hit as hit_none
    from trials where selection_kind = 'none'
),

random_mean as (
    select run_id, k, length, depth, trial, avg(logprob) as lp_random, avg(hit) as hit_random
    from trials where selection_kind = 'random'
    group by run_id, k, length, depth, trial
),

paired as (
    select
        t.run_id, t.selection, t.selection_kind, t.k, t.length, u.unit, u.n_units,
        t.logprob, t.hit,
        t.logprob - n.lp_none as d_none,
        t.hit - n.hit_none as d_none_hit,
        case when t.selection_kind = 'metric' then t.logprob - r.lp_random end as d_random,
        case when t.selection_kind = 'metric' then t.hit - r.hit_random end as d_random_hit
    from trials t
    join units u using (run_id, length, depth, trial)
    left join unablated n using (run_id, length, depth, trial)
    left join random_mean r
        on r.run_id = t.run_id and r.k = t.k and r.length = t.length
        and r.depth = t.depth and r.trial = t.trial
),

point as (
    select
        run_id, selection, selection_kind, k, length,
        count(*) as n_trials,
        sum(hit) as n_correct,
        avg(hit) as accuracy,
        avg(logprob) as mean_logprob,
        avg(d_none) as diff_none_logprob,
        avg(d_none_hit) as diff_none_accuracy,
        avg(d_random) as diff_random_logprob,
        avg(d_random_hit) as diff_random_accuracy
    from paired
    group by run_id, selection, selection_kind, k, length
),

resamples as (
    select g.run_id, g.length, d.draw, hash(g.run_id, g.length, d.draw, s.slot) % g.n_units as unit
    from (select distinct run_id, length, n_units from units) g
    cross join range({{ draws }}) d(draw)
    cross join lateral (select unnest(range(g.n_units)) as slot) s
),

boot as (
    select
        p.run_id, p.selection, p.k, p.length, r.draw,
        avg(p.logprob) as m_logprob,
        avg(p.d_none) as m_d_none,
        avg(p.d_random) as m_d_random
    from resamples r
    join paired p on p.run_id = r.run_id and p.length = r.length and p.unit = r.unit
    group by p.run_id, p.selection, p.k, p.length, r.draw
),

bounds as (
    select
        run_id, selection, k, length,
        quantile_cont(m_logprob, 0.025) as logprob_lo,
        quantile_cont(m_logprob, 0.975) as logprob_hi,
        quantile_cont(m_d_none, 0.025) as diff_none_logprob_lo,
        quantile_cont(m_d_none, 0.975) as diff_none_logprob_hi,
        quantile_cont(m_d_random, 0.025) as diff_random_logprob_lo,
        quantile_cont(m_d_random, 0.975) as diff_random_logprob_hi,
        count(*) as n_bootstrap
    from boot
    group by run_id, selection, k, length
)

select
    r.model_id, p.run_id, r.metric, r.rank_order, r.method, r.task,
    p.selection, p.selection_kind, p.k, p.length, p.n_trials, p.n_correct,
    p.accuracy,
    ((p.accuracy + {{ z }}^2 / (2 * p.n_trials))
        - {{ z }} * sqrt(p.accuracy * (1 - p.accuracy) / p.n_trials + {{ z }}^2 / (4 * p.n_trials^2)))
        / (1 + {{ z }}^2 / p.n_trials) as accuracy_lo,
    ((p.accuracy + {{ z }}^2 / (2 * p.n_trials))
        + {{ z }} * sqrt(p.accuracy * (1 - p.accuracy) / p.n_trials + {{ z }}^2 / (4 * p.n_trials^2)))
        / (1 + {{ z }}^2 / p.n_trials) as accuracy_hi,
    p.mean_logprob, b.logprob_lo, b.logprob_hi,
    p.diff_none_logprob, b.diff_none_logprob_lo, b.diff_none_logprob_hi, p.diff_none_accuracy,
    p.diff_random_logprob, b.diff_random_logprob_lo, b.diff_random_logprob_hi,
    p.diff_random_accuracy,
    case when p.selection_kind = 'none' then null
        else b.diff_none_logprob_lo > 0 or b.diff_none_logprob_hi < 0 end as differs_from_none,
    case when p.selection_kind = 'metric'
        then b.diff_random_logprob_lo > 0 or b.diff_random_logprob_hi < 0 end as distinguishable,
    b.n_bootstrap
from point p
join runs r using (run_id)
join bounds b using (run_id, selection, k, length)
-- a stable row order for readers that select without ORDER BY
order by r.model_id, p.run_id, p.selection, p.k, p.length
