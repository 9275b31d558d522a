"""spurstepd: the per-job supervisor. spurd starts one per job attempt; it outlives spurd's restarts."""
