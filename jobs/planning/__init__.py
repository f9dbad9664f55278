"""Planning: requests to run rows and queued messages; dedup, cancel, queue routing, reconcile."""
