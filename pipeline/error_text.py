"""One-line descriptions of exceptions for log lines and error messages.

Many exceptions carry no message -- a ZooKeeper ConnectionLoss or a timeout from kazoo, asyncio's TimeoutError
-- and ``exc or type(exc).__name__`` does not help, since an exception is always true: such lines read
"failed ()". :func:`describe_error` always names the type.
"""

from __future__ import annotations


def describe_error(exc: BaseException) -> str:
    """``Type: message``, or the type alone when the message is empty."""
    text = str(exc)
    name = type(exc).__name__
    return f"{name}: {text}" if text else name
