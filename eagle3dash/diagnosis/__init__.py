"""One diagnosis of a draft against an endpoint: its options, its staged run, its typed result."""

from eagle3dash.diagnosis.options import DiagnoseOptions
from eagle3dash.diagnosis.result import Diagnosis

__all__ = ["DiagnoseOptions", "Diagnosis"]
