"""coalloc: grid co-allocation middleware (synchronous queuing on Ray).

The command line lives in :mod:`coalloc.cli`. This package stays light to import:
nothing here imports Ray, ZeroMQ or plotting libraries at module level.
"""

__version__ = "0.1.0"
