"""From a workload profile (and measurements) to a Recommendation: the contract (``contract``),
scoring every feasible configuration (``scoring``), the decision (``decide``), its explanation
(``explain``), rendering (``render``) and the engines' configs (``engine_configs``). Runs no model:
it reads ``policies`` through its public API and never imports the decode loop or a backend.
"""
