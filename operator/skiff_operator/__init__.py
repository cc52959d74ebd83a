"""The Skiff operator: runs Broker and Topic resources (skiff.io/v1alpha1) with kopf."""

# The operator ships in the skiff-broker distribution: one version for both commands.
from skiff_broker import __version__ as __version__

GROUP = "skiff.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
