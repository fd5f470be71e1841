"""Configuration: the settings as declared (settings), how their text is read (values), the cores a process may use."""
