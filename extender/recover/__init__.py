"""Gangs coming back whole after a failure: where a gang ran is recorded in the API while it runs,
and its healthy nodes are kept for it while it is recreated (extender.recover.returns)."""
