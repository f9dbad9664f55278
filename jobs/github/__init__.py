"""GitHub: the REST client, webhook events to runs, the status reporter, comment rendering."""
