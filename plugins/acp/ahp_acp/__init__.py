"""Agent Client Protocol agents as ahp backends: one provider per configured agent."""
