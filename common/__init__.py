"""Non-algorithmic plumbing shared by every algorithm file (CLI, run files, evaluation)."""
