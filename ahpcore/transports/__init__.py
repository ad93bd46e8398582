"""Transports move frames; they know nothing of what the frames say."""
