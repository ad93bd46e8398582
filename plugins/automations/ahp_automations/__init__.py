"""Automations for ahp: definitions and runs kept in SQLite, and schedules that fire on their own."""

from ahp_automations.clock import ManualClock, SystemClock
from ahp_automations.port import SqliteAutomations

__all__ = ["ManualClock", "SqliteAutomations", "SystemClock"]
