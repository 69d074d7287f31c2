"""ration_client."""
