"""The engine: exact speculative decoding on a reference PyTorch backend.

Token trees (``tree``), warping and sampling (``sampling``), the pure verifiers (``verify``), the
drafter contract strategies implement (``drafting``), the plugin registry (``plugins``), KV-cache
bookkeeping (``rollback``), the torch backend (``backend``), THE decode loop (``loop``), and what a
local run resolves (``runtime``). It imports nothing of the project but ``picker.errors``.
"""
