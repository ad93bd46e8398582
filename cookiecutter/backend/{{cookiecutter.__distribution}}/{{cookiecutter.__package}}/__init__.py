"""{{ cookiecutter.description }}."""

from {{ cookiecutter.__package }}.backend import PROVIDER, Backend

__version__ = "0.1.0"
__all__ = ["PROVIDER", "Backend"]
