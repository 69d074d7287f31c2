"""Integrations: the real SDKs against the fake provider and real ration servers."""
