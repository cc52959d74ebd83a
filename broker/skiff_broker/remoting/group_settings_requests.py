"""The subscription-group admin requests: create or update, delete, one group's, every group's.

They read and write the broker's ``GroupSettingsTable`` (``metadata/group_settings.py``),
the settings both doors apply (retries, whether a group may consume, and broadcast).

Invariants:
- A change is stored (written to its file) before it is answered SUCCESS; a replica
  takes none, its master's are the group's.
- A group a broker knows without an entry (it committed offsets) is listed with
  RocketMQ's defaults, as RocketMQ's broker lists the groups it auto-created.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from ..runtime import Broker
from ..wire.resource_names import group_name_problem
from .codes import RequestCode, ResponseCode
from .connection import RemotingConnection
from .frames import RemotingCommand
from .name_server import json_body
from .service import Handler, HeaderError, Refused, text_field


def _group(name: str) -> str:
    problem = group_name_problem(name)
    if problem is not None:
        raise HeaderError(problem)
    return name


class GroupSettingsRequests:
    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self._changes = 0

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: self.update_group,
            RequestCode.DELETE_SUBSCRIPTIONGROUP: self.delete_group,
            RequestCode.GET_SUBSCRIPTIONGROUP_CONFIG: self.group_config,
            RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: self.all_group_configs,
        }

    def _require_master(self) -> None:
        if self._broker.is_replica:
            raise Refused(
                ResponseCode.SERVICE_NOT_AVAILABLE,
                f"{self._broker.store.read_only_reason}; change groups on the master",
            )

    async def update_group(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        try:
            config = json.loads(request.body or b"{}")
            name = str(config["groupName"])
        except (ValueError, TypeError, KeyError) as exc:
            raise HeaderError(
                f"the body is not RocketMQ's SubscriptionGroupConfig (it needs groupName): {exc}"
            ) from None
        _group(name)
        self._require_master()
        try:
            # Writing the file: not on the event loop.
            await asyncio.to_thread(self._broker.group_settings.put, config)
        except ValueError as exc:
            raise Refused(
                ResponseCode.SYSTEM_ERROR, f"group {name} was not changed: {exc}"
            ) from None
        self._changes += 1
        return request.response(ResponseCode.SUCCESS)

    async def delete_group(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        group = _group(text_field(request, "groupName"))
        self._require_master()
        await asyncio.to_thread(self._broker.group_settings.delete, group)
        if request.ext_fields.get("cleanOffset", "").lower() == "true":
            self._broker.offsets.remove_group(group)
        self._changes += 1
        return request.response(ResponseCode.SUCCESS)

    def group_config(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        group = _group(text_field(request, "group"))
        known = self._known()
        if group not in known:
            return request.response(
                ResponseCode.SYSTEM_ERROR,
                f"No group in this broker: {group} has no settings and no offsets here; "
                "create it with updateSubGroup",
            )
        response = request.response(ResponseCode.SUCCESS)
        response.body = json_body(known[group])
        return response

    def all_group_configs(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand:
        response = request.response(ResponseCode.SUCCESS)
        response.body = json_body(
            {
                "subscriptionGroupTable": self._known(),
                "forbiddenTable": {},
                "dataVersion": {
                    "timestamp": int(time.time() * 1000),
                    "counter": self._changes,
                    "stateVersion": 0,
                },
            }
        )
        return response

    def _known(self) -> dict[str, dict[str, Any]]:
        settings = self._broker.group_settings
        known = {group: settings.effective(group) for group in self._broker.offsets.groups()}
        known.update(settings.all())
        return known
