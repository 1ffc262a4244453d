"""eagle3dash: find out why an EAGLE-3 draft that looked good in training is slow in serving."""

__version__ = "0.1.0"
