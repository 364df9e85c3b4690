"""How a request can fail: one family, imported by both sides of the seam. A decoder (and
the HTTP clients under a server's) raises these; the Completer turns each into its
answer (requests.Source), and the language server into its reply.

    RequestError
      PositionError   the cursor lies outside the document: the request is malformed
      Cancelled       the request's cancel flag closed a call under way
      PromptTooLong   not even the smallest prompt fits: no completion can be made
      Refused         the decoder refused this request alone; the next may pass
      Unavailable     the decoder cannot serve now (the message says why)
        ServerError   a server failed, or cannot be used with these settings; one
                      that refused a request alone says so (`request_fault`), and
                      the server's decoder raises that to the Completer as a Refused

Loading the models fails with models.errors.ModelError instead: that is the setup's
fault, not a request's, and says what to run.
"""


class RequestError(Exception):
    """A request could not be answered as asked; the message says why."""


class PositionError(RequestError, ValueError):
    """A cursor outside the document."""


class Cancelled(RequestError):
    """A request's cancel flag closed a call under way (a server's connection) before it ended."""


class PromptTooLong(RequestError):
    """Not even the smallest prompt (the file's path and the format's tokens, with no
    text around the cursor) fits the room left for it: no completion can be made."""

    def __init__(self, smallest: int, room: int):
        super().__init__(f"the smallest prompt takes {smallest} tokens and {max(room, 0)} are left for it")
        self.smallest, self.room = smallest, room


class Refused(RequestError):
    """The decoder refused this request alone (a server's 4xx): the next may pass."""

    def __init__(self, reason: str, context_exceeded: bool = False):
        super().__init__(reason)
        self.context_exceeded = context_exceeded  # the prompt exceeded its context: a shorter one may pass


class Unavailable(RequestError):
    """The decoder cannot serve now (a server down, broken or too slow); the message says why."""


class ServerError(Unavailable):
    """A server could not be used for a request, or cannot be with these settings; the
    message says why, once. `request_fault`: the server, up, refused this one request
    (an HTTP 4xx), `context_exceeded` when it said the prompt and answer do not fit its
    context. To the HTTP layer, a failed call like any other; the server's decoder raises
    a request's fault to the Completer as a Refused, failing that request alone."""

    def __init__(self, reason: str, request_fault: bool = False, context_exceeded: bool = False):
        super().__init__(reason)
        self.request_fault, self.context_exceeded = request_fault, context_exceeded
