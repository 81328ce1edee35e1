"""A run's report: report.json and report.md from the engine's Results, read back for
gathering, the pytest tallies and the summary lines."""
