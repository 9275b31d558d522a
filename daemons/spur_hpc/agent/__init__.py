"""spurd: the node agent (registration, heartbeats, job launch through spurstepd, restart reconciliation)."""
