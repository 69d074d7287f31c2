"""servicekit."""
