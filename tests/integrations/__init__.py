"""Framework integrations driven with the real libraries against fake providers and real servers."""
