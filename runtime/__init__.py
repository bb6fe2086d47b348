"""The live runtime: the SQ scheduling core driven by real time on Ray and ZeroMQ.

This package is the edge where Ray, ZeroMQ, processes and the wall clock live. It wires
the same cores as :func:`global_manager.simulator.simulate` (a
:class:`~global_manager.core.GlobalManagerCore`, one
:class:`~local_manager.scheduler.LocalScheduler` per node and a
:class:`~coallocator.core.ControllerCore`), with model time read from an NTP-disciplined
:class:`~clocks.real_clock.RealClock` scaled by a time scale. See ``docs/runtime.md``.

Importing this package imports nothing heavy; the modules that need Ray import it.
"""
