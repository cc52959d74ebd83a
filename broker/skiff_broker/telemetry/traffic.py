"""What the messaging and record services report about the messages they take in and
hand out.

Reports are made once per request (a batch), never once per message, so that an
observer's cost does not grow with the batch. The base class ignores everything:
the service calls it unconditionally, and a broker without metrics pays one call.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class TrafficObserver:
    def received(self, topic: str, message_type: str, sizes: Sequence[int] | np.ndarray) -> None:
        """Messages of one send request were stored; ``sizes`` are their body sizes.

        ``message_type`` is RocketMQ's metric label value: normal, fifo, delay or
        transaction.
        """

    def delivered(self, topic: str, group: str, count: int, size: int) -> None:
        """``count`` messages of ``size`` bytes in all went out to ``group``.

        ``size`` is body bytes for the messaging service, whole records for a record
        fetch; ``group`` is ``conventions.NO_CONSUMER_GROUP`` for a fetch, which names none.
        """


NO_TRAFFIC = TrafficObserver()
