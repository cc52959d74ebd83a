"""Authentication settings of a broker process."""

from __future__ import annotations

import dataclasses

from .model import parse_user_spec
from .signature import DEFAULT_MAX_SKEW_S


@dataclasses.dataclass(slots=True)
class AuthConfig:
    # Off: every request is served as before, signed or not; users and ACLs are still kept.
    enabled: bool = False
    # ACCESS_KEY:SECRET_KEY of a super user (re)applied at every start.
    init_user: str = ""
    # How far a request's signing time may be from the broker's clock.
    max_clock_skew_s: float = DEFAULT_MAX_SKEW_S

    def validate(self) -> None:
        if self.init_user:
            try:
                parse_user_spec(self.init_user)
            except ValueError as exc:
                raise ValueError(f"--auth-init-user: {exc}") from None
        if self.max_clock_skew_s <= 0:
            raise ValueError("--auth-clock-skew must be positive")
