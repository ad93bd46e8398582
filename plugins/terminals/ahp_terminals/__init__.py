"""ahp-terminals: real pseudoterminals for the ahp host (the terminals port)."""
