"""Recipe rule modes, one module per mode (see registry.py)."""
