"""Pure allocation policies from the source papers (no I/O, no clocks).

Filled by the foundation issue: weighted max-min (FMMF), proportional fairness,
utility max-min, DRF and weighted DRF (indivisible progressive filling and the
divisible fluid form), the online ``DrfAllocator``, asset fairness, CEEI and the
dynamic DMFA-SRQ allocator.
"""
