"""asyncio's debug-mode report of callbacks that hold the event loop, as the broker logs it.

With ``--slow-callback-report-ms`` the loop runs in debug mode with that
``slow_callback_duration``; asyncio (and uvloop) then log each callback that ran
longer. Those records are rewritten here into one recognisable shape: the message
starts ``slow callback:``, and the JSON line has ``slow_callback_ms``. Nothing else
of asyncio's logging changes.
"""

from __future__ import annotations

import asyncio
import logging
from typing import SupportsFloat, cast

log = logging.getLogger(__name__)

SLOW_CALLBACK_FIELD = "slow_callback_ms"
SLOW_CALLBACK_PREFIX = "slow callback: "
# The format asyncio's base event loop and uvloop both log a slow callback with.
_ASYNCIO_FORMAT = "Executing %s took %.3f seconds"


class _SlowCallbackRecords(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if record.msg == _ASYNCIO_FORMAT and isinstance(args, tuple) and len(args) == 2:
            handle, seconds = args
            # The format's %.3f: a number.
            milliseconds = round(float(cast(SupportsFloat, seconds)) * 1000, 1)
            record.msg = SLOW_CALLBACK_PREFIX + "%s held the event loop for %.0f ms"
            record.args = (str(handle), milliseconds)
            setattr(record, SLOW_CALLBACK_FIELD, milliseconds)
        return True


_FILTER = _SlowCallbackRecords()


def report_slow_callbacks(loop: asyncio.AbstractEventLoop, threshold_ms: float) -> None:
    """Turn on the report for ``loop``: debug mode, callbacks over ``threshold_ms`` logged."""
    if threshold_ms <= 0:
        return
    asyncio_log = logging.getLogger("asyncio")
    if _FILTER not in asyncio_log.filters:
        asyncio_log.addFilter(_FILTER)
    loop.set_debug(True)
    loop.slow_callback_duration = threshold_ms / 1000
    log.info("reporting event-loop callbacks over %.0f ms (asyncio debug mode)", threshold_ms)
