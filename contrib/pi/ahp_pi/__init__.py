"""The pi coding agent as an ahp backend, spoken to in its RPC mode (JSON lines on stdio)."""
