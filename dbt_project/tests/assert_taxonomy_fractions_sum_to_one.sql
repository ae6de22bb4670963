-- Every scope's class fractions sum to 1 and its counts to its total.
select scope_kind, scope, sum(fraction) as total_fraction, sum(n_heads) as n, any_value(n_total) as n_total
from {{ ref('taxonomy_fractions') }}
group by scope_kind, scope
having abs(sum(fraction) - 1) > 1e-9 or sum(n_heads) <> any_value(n_total)
