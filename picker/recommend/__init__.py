"""From a workload profile (and measurements) to a Recommendation, in one pipeline (``pipeline``):
the evidence index (``evidence_index``) and the cost source (``costs``) feed the scored table
(``scoring``), the decision and its batch schedule (``decide``, ``schedule``) read it, and every
rendering -- markdown, JSON (``render``), ``--explain`` (``explain``), the report page (``report``)
-- reads the one ``result.Result``. Runs no model: it reads ``policies`` through its public API and
never imports the decode loop or a backend.
"""
