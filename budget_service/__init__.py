"""budget_service."""
