"""reference_impl: the small, tested package that the handbook's pages run against.

It grows chapter by chapter. Each module explains one concept of veRL's
``single_controller`` layer and keeps veRL's public names, so that a snippet
written against ``verl.single_controller`` ports by changing its imports.

The handbook: ``docs/`` in this repository (built with ``nox -s serve``).
"""

__version__ = "0.1.0"
