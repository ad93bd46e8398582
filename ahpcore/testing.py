"""pytest plugin shipped with ahpcore (placeholder until the host fixtures land)."""
