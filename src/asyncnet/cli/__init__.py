"""The ``asyncnet`` command line: one module per subcommand, wired together in :mod:`main`."""
