"""Generated code for skiff.admin.v1 (scripts/gen-protos); do not edit."""
