"""One broker per test module: ``broker = module_broker("name", *args, topics=...)``.

The fixture it returns starts a real broker (``broker_process.running_broker``) in a
fresh folder named after ``name``, with ``topics`` written before it starts, and stops
it cleanly after the module's last test. Modules whose broker needs more set-up than
topics, options and environment (users, stored data) write their own fixture.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping

import pytest
from tests.support.broker_process import BrokerProcess, create_topics, data_dir_of, running_broker

from skiff_broker.metadata.topic_table import TopicConfig

BrokerFixture = Callable[[pytest.TempPathFactory], Iterator[BrokerProcess]]


def module_broker(
    name: str,
    *args: str,
    topics: Iterable[TopicConfig] = (),
    env: Mapping[str, str] | None = None,
) -> BrokerFixture:
    """A module-scoped fixture yielding a running broker started with ``args``."""
    wanted = tuple(topics)

    @pytest.fixture(scope="module")
    def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
        tmp_path = tmp_path_factory.mktemp(name)
        if wanted:
            create_topics(data_dir_of(tmp_path), *wanted)
        with running_broker(tmp_path, *args, env=env) as process:
            yield process

    return broker
