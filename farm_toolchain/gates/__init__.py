"""Gate measurements, one module per gate (see registry.py); the helpers are common.py and
degeneration.py."""
