"""Clocks: the clock interface the core reads time from, per-subtask virtual clocks
(eqs. 3-5 of the SQ paper) and the NTP-disciplined real clock of the live runtime."""
