"""Judging: results against baselines, change points in history, verdict summaries."""
