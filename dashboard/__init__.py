"""kernelwatch.dashboard: the Streamlit dashboard (reads through kernelwatch.db only)."""
