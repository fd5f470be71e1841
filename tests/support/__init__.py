"""Helpers shared by tests: real servers that stand in for the outside world."""
