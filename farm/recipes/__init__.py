"""Quantization recipes as data (recipes/*.yaml; see base.py), each rule's treatment one
registered mode (modes/); this package's face."""

from farm.recipes.base import RECIPES_DIR, Calibration, FloatException, Recipe, Rule, Weights, list_recipes, load_recipe
from farm.recipes.modes.registry import MODES

__all__ = ["MODES", "RECIPES_DIR", "Calibration", "FloatException", "Recipe", "Rule", "Weights", "list_recipes",
           "load_recipe"]
