"""Commands for running the host day to day: ``ahp sessions`` and ``ahp doctor``.

Imported only when the ``ahp`` command builds its typer application: nothing
here is on ``ahp serve``'s path.
"""
