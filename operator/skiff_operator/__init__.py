"""The Skiff operator: runs Broker and Topic resources (skiff.io/v1alpha1) with kopf."""

GROUP = "skiff.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
