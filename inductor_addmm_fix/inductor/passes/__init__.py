"""Post-grad graph passes (slice writes, chunk order) and the one slot they run in."""
