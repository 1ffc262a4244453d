"""The one base class for bad input a user can fix (a wrong path, a broken file, a down endpoint).

Interfaces catch `InputError` and show its message, never a traceback. Kept torch-free so the CLI
can catch errors of any module without importing them all.
"""


class InputError(Exception):
    """Bad input the user can fix; the message names the problem and what to do."""
