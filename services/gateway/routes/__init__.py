"""The HTTP routes, one module per endpoint family."""
