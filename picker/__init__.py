"""specpicker: measure speculative decoding, pick a strategy, emit deployable engine configs.

    >>> from picker.inputs.workload import load_profile                      # doctest: +SKIP
    >>> from picker.recommend.pipeline import recommend                        # doctest: +SKIP
    >>> rec = recommend(load_profile("profiles/chat-70b-h100.yaml")).recommendation  # doctest: +SKIP
    >>> rec.decision.strategy                                                         # doctest: +SKIP
    'eagle3'

Heavy libraries (torch, transformers, scikit-learn) are imported lazily, so the CLI starts fast.
"""

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    """Lazy exports: ``from picker import Controller`` loads the SDK only when asked for."""
    if name == "Controller":
        from picker.sdk.controller import Controller

        return Controller
    raise AttributeError(f"module 'picker' has no attribute {name!r}")
