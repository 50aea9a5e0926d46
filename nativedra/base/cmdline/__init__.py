"""Command-line conventions shared by every nativedra command (flags with env-var fallbacks)."""
