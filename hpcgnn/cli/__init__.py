"""Command-line entry points (``hpcgnn COMMAND``)."""
