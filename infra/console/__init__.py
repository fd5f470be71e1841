"""The review console: web pages at /console over the one lookup (issue 15)."""
