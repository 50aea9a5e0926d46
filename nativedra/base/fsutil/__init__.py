"""Crash-safe file writes shared by the CDI writer and the plugin's checkpoint."""
