{#
  The model has at least one row whenever `source_relation` has at least one row satisfying
  `source_where` (e.g. model_summary is not empty once models are ingested).  Keeps "0 rows is
  fine on empty inputs" from hiding a broken join on non-empty inputs.
#}
{% test not_empty_when(model, source_relation, source_where='true') %}
select 1 as failure
where exists (select 1 from {{ source_relation }} where {{ source_where }})
  and not exists (select 1 from {{ model }})
{% endtest %}
