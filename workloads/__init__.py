"""Job and node model, job-spec files and workload generators (SQ core issue)."""
