"""coalloc: grid co-allocation middleware (synchronous queuing on Ray).

The command line lives in :mod:`coalloc.cli`. This package stays light to import:
nothing here imports Ray, ZeroMQ or plotting libraries at module level.
"""

__version__ = "0.1.0"


def __getattr__(name: str):  # PEP 562: ``coalloc.connect`` without importing Ray up front
    if name in ("connect", "Client"):
        from coalloc import client

        return getattr(client, name)
    if name == "job":  # ``coalloc.job.put(...)`` after a bare ``import coalloc``
        import importlib

        return importlib.import_module("coalloc.job")
    raise AttributeError(f"module 'coalloc' has no attribute {name!r}")
