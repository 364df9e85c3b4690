"""The one error the model layer raises. Its message always says what to run."""


class ModelError(Exception):
    """A model could not be resolved, downloaded, validated or loaded.

    The message names the file or preset and ends with the command that fixes it,
    so the CLI and the language server can show it to the user unchanged.
    """
