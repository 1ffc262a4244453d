"""SGLang: its HTTP client (`client.py`), adapter (`adapter.py`), the capture of the states it
feeds its draft (`capture.py`, `states_json.py`), and its rules by release (`rules.py`)."""
