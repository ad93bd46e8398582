"""Refuse a plugin name that cannot become a distribution, a package and a URI scheme."""

import re
import sys

NAME = "{{ cookiecutter.__hyphenated }}"

if not re.fullmatch(r"[a-z][a-z0-9]*(-[a-z0-9]+)*", NAME):
    sys.exit(
        f"plugin name {'{{ cookiecutter.plugin_name }}'!r} gives {NAME!r}: use letters, digits, "
        "spaces, hyphens or underscores, starting with a letter"
    )
