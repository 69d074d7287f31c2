"""Generated protobuf package; do not edit."""
