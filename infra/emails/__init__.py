"""The emails' templates: the defaults shipped in ``defaults/``, an operator's folder over them."""
