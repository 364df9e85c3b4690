"""`python -m completer`: the CLI, for editors that start the server through an interpreter."""

from completer.cli import main

main(prog_name="completer")
