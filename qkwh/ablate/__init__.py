"""Head ablation (``qkwh ablate``): knock out the heads a warehouse metric flags and measure
long-context retrieval against the same number of random heads (docs/ablation.md).

* :mod:`qkwh.ablate.tables` -- the declarations of ``ablation_runs``, ``ablation_prompts`` and
  ``ablation_trials`` (pure data; the store creates them)
* :mod:`qkwh.ablate.passkey` -- the passkey task: deterministic prompts from the shipped filler
* :mod:`qkwh.ablate.hooks` -- the ablation itself, a forward pre-hook on each attention output
  projection
* :mod:`qkwh.ablate.selection` -- the metric, its heads and the random controls, read from the
  warehouse
* :mod:`qkwh.ablate.run` -- :func:`~qkwh.ablate.run.ablate`, which ties them together

torch and transformers (the ``capture`` extra) are imported only when an ablation runs.
"""
