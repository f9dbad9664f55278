"""Built-in suites."""
