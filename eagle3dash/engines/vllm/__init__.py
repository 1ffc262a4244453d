"""vLLM: its HTTP client and /metrics (`client.py`), adapter (`adapter.py`), the capture through
an extract_hidden_states server's files (`capture.py`), and its rules by release and model
runner (`rules.py`)."""
