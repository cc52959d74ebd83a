"""Generated code for skiff.records.v1 (scripts/gen-protos); do not edit."""
