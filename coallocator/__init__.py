"""The co-allocation controller (SQ): overall error window, asynchrony window,
re-weighting through virtual subtasks, and the phase-difference log."""
