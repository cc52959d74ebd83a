"""Authentication settings of a broker process."""

from __future__ import annotations

import dataclasses

from ..wire.setting import option
from .model import parse_user_spec
from .signature import DEFAULT_MAX_SKEW_S


@dataclasses.dataclass(slots=True)
class AuthConfig:
    # Off: every request is served as before, signed or not; users and ACLs are still kept.
    enabled: bool = option(
        False,
        "--auth",
        "SKIFF_AUTH",
        "enabled: every request must be signed by a known user (RocketMQ's MQv2-HMAC-SHA1) "
        "and allowed by its ACL; disabled: requests are served unchecked.",
        words=("enabled", "disabled"),
    )
    init_user: str = option(
        "",
        "--auth-init-user",
        "SKIFF_AUTH_INIT_USER",
        "ACCESS_KEY:SECRET_KEY of a super user created (or reset) at every start, to "
        "bootstrap users and ACLs (env SKIFF_AUTH_INIT_USER, which keeps it out of `ps`).",
    )
    init_user_file: str = option(
        "",
        "--auth-init-user-file",
        "SKIFF_AUTH_INIT_USER_FILE",
        "A file holding ACCESS_KEY:SECRET_KEY of the bootstrap super user, instead of "
        "--auth-init-user (surrounding whitespace ignored; keep the file 0600).",
        kind="file",
    )
    max_clock_skew_s: float = option(
        float(DEFAULT_MAX_SKEW_S),
        "--auth-clock-skew",
        "SKIFF_AUTH_CLOCK_SKEW",
        "Seconds a request's signing time may be from the broker's clock.",
    )

    def validate(self) -> None:
        if self.init_user:
            try:
                parse_user_spec(self.init_user)
            except ValueError as exc:
                raise ValueError(f"--auth-init-user: {exc}") from None
        if self.max_clock_skew_s <= 0:
            raise ValueError("--auth-clock-skew must be positive")
