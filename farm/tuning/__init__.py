"""Recipes found by measurement: what quantizing each op group costs (sensitivity), a recipe
search to a quality target (tune), and their charts. Prefect-free plain functions; the CLI and
the flows call them."""
