"""site.yml patches an unpatched tokenizer again and restarts each node's replicas drained, without a failed request."""
