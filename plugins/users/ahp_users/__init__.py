"""ahp-users: people, their tokens and roles, for an ahp host."""
