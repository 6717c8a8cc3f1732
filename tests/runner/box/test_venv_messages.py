"""What a failed setup or prepare command's one-line reason shows: the exception that made it
fail, even when pip ends with hints of its own; never pip's advice about itself."""

from __future__ import annotations

from charpin_runner.box.venv import failure_tail

PIP_HIDES_THE_CAUSE = b"""\
Obtaining file:///work/pkg
  Checking if build backend supports build_editable: started
Traceback (most recent call last):
  File "<string>", line 1, in <module>
ModuleNotFoundError: No module named 'setuptools'
  error: subprocess-exited-with-error
  x Preparing editable metadata (pyproject.toml) did not run successfully.
  | exit code: 1
  note: This error originates from a subprocess, and is likely not a problem with pip.
error: metadata-generation-failed
x Encountered error while generating package metadata.
note: This is an issue with the package mentioned above, not pip.
hint: See above for details.

[notice] A new release of pip is available: 23.2.1 -> 26.3
[notice] To update, run: pip install --upgrade pip
"""


def test_the_exception_further_up_comes_first_and_pips_notices_are_left_out() -> None:
    line = failure_tail(PIP_HIDES_THE_CAUSE)
    assert line.startswith("ModuleNotFoundError: No module named 'setuptools' | ... | ")
    assert line.endswith("hint: See above for details.")
    assert "[notice]" not in line


def test_an_exception_already_in_the_tail_is_not_repeated() -> None:
    line = failure_tail(b"one\ntwo\nValueError: bad value\n")
    assert line == "one | two | ValueError: bad value"


def test_no_output_says_so() -> None:
    assert failure_tail(b"") == failure_tail(None) == "(no output)"
