"""Consumer groups' settings as RocketMQ's tools set them: ``config/subscriptionGroup.json``.

A group needs no entry to consume: one without keeps RocketMQ's defaults (consuming
and broadcasting allowed, the broker's retry limit). ``updateSubGroup`` (the remoting
UPDATE_AND_CREATE_SUBSCRIPTIONGROUP) stores one.

Invariants:
- The file is RocketMQ's: ``subscriptionGroupTable`` maps a group's name to its
  SubscriptionGroupConfig, so an Apache RocketMQ 5 broker's file reads and Skiff's
  reads there. Fields Skiff does not act on are kept as they were given.
- The fields Skiff acts on are checked when set (a wrong type or range is refused
  with what it must be), so a stored entry always means what it says.
- Every change is written (atomically, keeping a ``.bak``) before it is answered.
- A replica holds its master's table (``snapshot``/``replace_all``), checked as the
  file is when read, and written to its own file so it survives the replica's restart.
"""

from __future__ import annotations

import copy
import threading
from typing import Any

from .state_file import StateFile

# RocketMQ's SubscriptionGroupConfig defaults, for the fields a group without an entry has.
DEFAULTS: dict[str, Any] = {
    "consumeEnable": True,
    "consumeFromMinEnable": True,
    "consumeBroadcastEnable": True,
    "consumeMessageOrderly": False,
    "retryQueueNums": 1,
    "retryMaxTimes": 16,
    "groupRetryPolicy": {
        "type": "CUSTOMIZED",
        "customizedRetryPolicy": {
            "levels": [
                *(s * 1000 for s in (1, 5, 10, 30)),
                *(m * 60_000 for m in range(1, 11)),
                1_200_000,
                1_800_000,
                3_600_000,
                7_200_000,
            ]
        },
    },
    "brokerId": 0,
    "whichBrokerWhenConsumeSlowly": 1,
    "notifyConsumerIdsChangedEnable": True,
    "groupSysFlag": 0,
    "consumeTimeoutMinute": 15,
    "subscriptionDataSet": [],
    "attributes": {},
}
# RocketMQ's ExponentialRetryPolicy defaults (milliseconds).
EXPONENTIAL_DEFAULTS: dict[str, Any] = {"initial": 5000, "max": 7_200_000, "multiplier": 2}
_BOOLEANS = ("consumeEnable", "consumeFromMinEnable", "consumeBroadcastEnable")
_RETRY_POLICY_TYPES = ("CUSTOMIZED", "EXPONENTIAL")
# A bound that keeps a mistyped value from meaning "retry for ever".
MAX_RETRY_TIMES = 10_000


def settings_problem(config: dict[str, Any]) -> str | None:
    """Why this SubscriptionGroupConfig cannot be stored; None if it can."""
    for name in _BOOLEANS:
        if name in config and not isinstance(config[name], bool):
            return f"{name} must be true or false, not {config[name]!r}"
    retries = config.get("retryMaxTimes", 16)
    if isinstance(retries, bool) or not isinstance(retries, int):
        return f"retryMaxTimes must be an integer, not {retries!r}"
    if not 0 <= retries <= MAX_RETRY_TIMES:
        return f"retryMaxTimes must be between 0 and {MAX_RETRY_TIMES}, not {retries}"
    policy = config.get("groupRetryPolicy")
    if policy is not None:
        if not isinstance(policy, dict) or policy.get("type", "CUSTOMIZED") not in (
            _RETRY_POLICY_TYPES
        ):
            return (
                "groupRetryPolicy must be an object whose type is CUSTOMIZED or EXPONENTIAL, "
                f"not {policy!r}"
            )
        levels = (policy.get("customizedRetryPolicy") or {}).get("levels", [])
        if not isinstance(levels, list) or not all(
            isinstance(ms, int) and not isinstance(ms, bool) and ms >= 0 for ms in levels
        ):
            return "groupRetryPolicy.customizedRetryPolicy.levels must be a list of milliseconds"
    return None


class GroupSettingsTable:
    def __init__(self, path: str) -> None:
        self._file = StateFile(
            path, lost="the consumer groups' settings (groups would keep the defaults)"
        )
        # Readers (every pull and receive) take only _lock, never held across a write.
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._groups: dict[str, dict[str, Any]] = {}

    def load(self, *, discard_damaged: bool = False) -> None:
        groups = self._file.read(_parse, discard_damaged=discard_damaged)
        with self._lock:
            self._groups = groups or {}

    def put(self, config: dict[str, Any]) -> None:
        """Store a group's config (``groupName`` names it), written before this returns.

        Raises ValueError saying what is wrong with a field Skiff acts on."""
        problem = settings_problem(config)
        if problem is not None:
            raise ValueError(problem)
        with self._lock:
            self._groups[str(config["groupName"])] = copy.deepcopy(config)
        self._write()

    def delete(self, group: str) -> bool:
        with self._lock:
            if self._groups.pop(group, None) is None:
                return False
        self._write()
        return True

    def get(self, group: str) -> dict[str, Any] | None:
        """The group's full config (defaults where unset), or None if it has no entry."""
        with self._lock:
            stored = self._groups.get(group)
            return None if stored is None else _with_defaults(stored)

    def setting(self, group: str, name: str) -> Any | None:
        """One field of the group's entry (RocketMQ's default where unset), or None if
        the group has no entry; cheap enough for every delivery."""
        with self._lock:
            stored = self._groups.get(group)
            if stored is None:
                return None
            return stored.get(name, DEFAULTS.get(name))

    def effective(self, group: str) -> dict[str, Any]:
        """The config the broker applies to ``group``: its entry, else the defaults."""
        return self.get(group) or {**copy.deepcopy(DEFAULTS), "groupName": group}

    def all(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return {name: _with_defaults(config) for name, config in self._groups.items()}

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """Every stored entry as the file holds it (what a master sends its replicas)."""
        with self._lock:
            return copy.deepcopy(self._groups)

    def replace_all(self, table: dict[str, Any]) -> bool:
        """Take a master's entries in place of this table's; whether anything changed.

        Written before this returns, and only when the entries differ. Entries that do
        not pass the checks ``put`` makes raise TypeError or ValueError and change
        nothing."""
        groups = _parse({"subscriptionGroupTable": table})
        with self._lock:
            if groups == self._groups:
                return False
            self._groups = groups
        self._write()
        return True

    def _write(self) -> None:
        # The table as it is when the write starts: of two changes racing, the later
        # write holds both. Entries are replaced, never changed in place.
        with self._write_lock:
            with self._lock:
                document = {"subscriptionGroupTable": dict(self._groups)}
            self._file.write(document)


def _with_defaults(config: dict[str, Any]) -> dict[str, Any]:
    return {**copy.deepcopy(DEFAULTS), **copy.deepcopy(config)}


def _parse(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    table = document.get("subscriptionGroupTable", {})
    if not isinstance(table, dict):
        raise TypeError("subscriptionGroupTable must be an object")
    groups: dict[str, dict[str, Any]] = {}
    for name, config in table.items():
        if not isinstance(config, dict):
            raise TypeError(f"the entry for group {name} must be an object")
        problem = settings_problem(config)
        if problem is not None:
            raise ValueError(f"group {name}: {problem}")
        groups[str(name)] = {**config, "groupName": str(name)}
    return groups
