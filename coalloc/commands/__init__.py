"""Sub-commands of ``coalloc``. Each module exposes ``register(subparsers)``, which
adds its parser(s) and sets ``handler`` (a callable ``(args) -> int``) as the default.
Handlers import heavy libraries (Ray, matplotlib) inside, so ``coalloc --help`` is fast.
"""
