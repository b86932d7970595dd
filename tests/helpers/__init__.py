"""Shared test helpers: tiny models, worker processes, every registered drafter, trained-head checks, the
sampling test's statistics and a scripted drafter. Test modules import these, never each other."""
