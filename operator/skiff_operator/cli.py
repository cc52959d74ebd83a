"""``skiff-operator``: runs the operator until SIGTERM."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from . import __version__
from .config import OperatorConfig
from .metrics_access import parse_allow_from

_DEFAULTS = OperatorConfig()
_Command = TypeVar("_Command", bound=Callable[..., Any])


def _setting(flag: str, default: Any, **options: Any) -> Callable[[_Command], _Command]:
    """An option with its default shown, also read from SKIFF_OPERATOR_<FLAG>."""
    envvar = "SKIFF_OPERATOR_" + flag.removeprefix("--").replace("-", "_").upper()
    return click.option(flag, envvar=envvar, default=default, show_default=True, **options)


MISSING_KOPF = (
    "skiff-operator needs kopf and kubernetes_asyncio: install them with "
    "pip install 'skiff-broker[operator]' (or use the operator image)"
)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="skiff-operator")
@click.option(
    "--namespace",
    "namespaces",
    envvar="SKIFF_OPERATOR_NAMESPACES",
    multiple=True,
    help="Watch only this namespace (repeatable; env: comma-separated). Default: all.",
)
@_setting(
    "--broker-image",
    _DEFAULTS.default_broker_image,
    help="Broker image for Brokers that name none.",
)
@_setting("--cluster-domain", _DEFAULTS.cluster_domain)
@_setting(
    "--broker-endpoint-template",
    _DEFAULTS.broker_endpoint_template,
    help="How to reach a group's master, e.g. '{group_name}.{namespace}.svc.example:{port}'.",
)
@_setting(
    "--status-interval",
    _DEFAULTS.status_interval_s,
    type=float,
    help="Seconds between Broker status refreshes.",
)
@_setting(
    "--topic-resync-interval",
    _DEFAULTS.topic_resync_interval_s,
    type=float,
    help="Seconds between re-checks of each Topic on its brokers.",
)
@_setting(
    "--retry-delay",
    _DEFAULTS.retry_delay_s,
    type=float,
    help="Seconds before a reconcile that waits on a broker retries.",
)
@_setting(
    "--liveness",
    _DEFAULTS.liveness_endpoint,
    help="Health endpoint for the liveness probe ('' turns it off).",
)
@_setting(
    "--metrics-allow-from",
    "",
    help="JSON list of NetworkPolicy peers (namespaceSelector, podSelector) that may scrape "
    "the /metrics of Brokers naming none in spec.metrics.allowFrom. Empty: nobody; the "
    "brokers then serve /metrics on their loopback only.",
)
@_setting("--log-format", "json", type=click.Choice(["json", "plain"]))
@click.option("--verbose", "-v", is_flag=True, envvar="SKIFF_OPERATOR_VERBOSE")
def main(
    namespaces: tuple[str, ...],
    broker_image: str,
    cluster_domain: str,
    broker_endpoint_template: str,
    status_interval: float,
    topic_resync_interval: float,
    retry_delay: float,
    liveness: str,
    metrics_allow_from: str,
    log_format: str,
    verbose: bool,
) -> None:
    """Run the Skiff operator: Broker, Topic and User resources (skiff.io/v1alpha1).

    It needs Kubernetes credentials: a pod's ServiceAccount, or a kubeconfig ($KUBECONFIG,
    else ~/.kube/config).
    """
    watched = tuple(n.strip() for item in namespaces for n in item.split(",") if n.strip())
    try:
        scrapers = parse_allow_from(metrics_allow_from)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    config = OperatorConfig(
        namespaces=watched,
        default_broker_image=broker_image,
        cluster_domain=cluster_domain,
        broker_endpoint_template=broker_endpoint_template,
        status_interval_s=status_interval,
        topic_resync_interval_s=topic_resync_interval,
        retry_delay_s=retry_delay,
        liveness_endpoint=liveness,
        metrics_allow_from=scrapers,
    )
    try:
        config.validate()
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    # kopf only here, so --help and --version work without the operator extra.
    try:
        import kopf

        from .registration import cluster_connection, register
    except ImportError as exc:
        raise click.ClickException(f"{MISSING_KOPF} ({exc})") from None
    # Checked before kopf starts, which would retry a missing login forever.
    try:
        cluster_connection(kopf.OperatorSettings())
    except kopf.LoginError as exc:
        raise click.ClickException(str(exc)) from None
    kopf.configure(
        verbose=verbose,
        log_format=kopf.LogFormat.JSON if log_format == "json" else kopf.LogFormat.PLAIN,
    )
    registry = kopf.OperatorRegistry()
    register(registry, config)
    kopf.run(
        registry=registry,
        standalone=True,
        clusterwide=not watched,
        namespaces=watched,
        liveness_endpoint=liveness or None,
        memo=kopf.Memo(),
    )
