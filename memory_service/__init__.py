"""memory_service."""
