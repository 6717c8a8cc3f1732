"""The verify corpus on inflection 0.5.1 from its sdist (tests/bench/corpus_subjects.py): honest
refactors of a library nobody here wrote, judged against its own 455 tests (test_inflection.py)
with no pins, and two honest behaviour changes those tests stay green on, which only the
base's captured calls replayed on both versions (#19) can see. Test-side code, stdlib only.

inflection is fully annotated already, so its type-hint entries annotate what is not: the rule
tables at module level and a local variable.
"""

from __future__ import annotations

from pathlib import Path

from tests.bench.corpus_model import Edit, Entry, sub, write
from tests.bench.corpus_subjects import INFLECTION

LIB = "inflection/__init__.py"
ORDINAL_DICT = '        return {\n            1: "st",\n            2: "nd",\n            3: "rd",\n        }.get(number % 10, "th")\n'
CASEINSENSITIVE = "    def caseinsensitive(string: str) -> str:\n        return ''.join('[' + char + char.upper() + ']' for char in string)\n\n"
DASHERIZE_START = "def dasherize(word: str) -> str:\n"
HUMANIZE_START = "def humanize(word: str) -> str:\n"


def _extract_helper(repo: Path) -> None:
    sub(repo, LIB, "    else:\n" + ORDINAL_DICT, "    else:\n        return _last_digit_suffix(number)\n\n\ndef _last_digit_suffix(number: int) -> str:\n" + "".join(line[4:] + "\n" for line in ORDINAL_DICT.splitlines()))


def _extract_nested(repo: Path) -> None:
    """The nested caseinsensitive() of _irregular() becomes a module-level function (it runs at
    import time: _irregular() is called by module-level statements)."""
    sub(repo, LIB, CASEINSENSITIVE, "")
    sub(repo, LIB, "\n\ndef _irregular(", "\n\ndef _caseinsensitive(string: str) -> str:\n    return ''.join('[' + char + char.upper() + ']' for char in string)\n\n\ndef _irregular(")
    sub(repo, LIB, "caseinsensitive(", "_caseinsensitive(", 0)
    sub(repo, LIB, "def __caseinsensitive(", "def _caseinsensitive(")


def _rename_local(repo: Path) -> None:
    sub(repo, LIB, "    for inflection in UNCOUNTABLES:\n        if re.search(r'(?i)\\b(%s)\\Z' % inflection, word):", "    for uncountable in UNCOUNTABLES:\n        if re.search(r'(?i)\\b(%s)\\Z' % uncountable, word):")


def _rename_local_2(repo: Path) -> None:
    sub(repo, LIB, "re_sep", "escaped", 0)


def _reorder_functions(repo: Path) -> None:
    """dasherize() and humanize(), two independent module-level definitions, swap places."""
    text = (repo / LIB).read_text(encoding="utf-8")
    first, second = text.index(DASHERIZE_START), text.index(HUMANIZE_START)
    end = text.index("\ndef ordinal(")
    swapped = text[second:end].rstrip("\n") + "\n\n\n" + text[first:second].rstrip("\n") + "\n\n"
    (repo / LIB).write_text(text[:first] + swapped + text[end:], encoding="utf-8")


def _reorder_imports(repo: Path) -> None:
    sub(repo, LIB, "import re\nimport unicodedata\n", "import unicodedata\nimport re\n")


def _comments(repo: Path) -> None:
    sub(repo, LIB, "        for rule, replacement in PLURALS:\n", "        # the first rule that matches wins: _irregular() puts its rules in front\n        for rule, replacement in PLURALS:\n")
    sub(repo, LIB, "    for rule, replacement in SINGULARS:\n", "    # as in pluralize(): first match wins, so the general rules come last\n    for rule, replacement in SINGULARS:\n")
    sub(repo, LIB, "    normalized = unicodedata.normalize('NFKD', string)\n", "    # NFKD splits accented letters into base letter + combining mark; encode drops the marks\n    normalized = unicodedata.normalize('NFKD', string)\n")


def _type_hints_tables(repo: Path) -> None:
    sub(repo, LIB, "import re\nimport unicodedata\n", "import re\nimport unicodedata\nfrom typing import List, Set, Tuple\n")
    sub(repo, LIB, "\nPLURALS = [\n", "\nPLURALS: List[Tuple[str, str]] = [\n")
    sub(repo, LIB, "\nSINGULARS = [\n", "\nSINGULARS: List[Tuple[str, str]] = [\n")
    sub(repo, LIB, "\nUNCOUNTABLES = {\n", "\nUNCOUNTABLES: Set[str] = {\n")


def _type_hint_local(repo: Path) -> None:
    sub(repo, LIB, "    normalized = unicodedata.normalize('NFKD', string)\n", "    normalized: str = unicodedata.normalize('NFKD', string)\n")


def _docstring(repo: Path) -> None:
    sub(repo, LIB, "    def caseinsensitive(string: str) -> str:\n", '    def caseinsensitive(string: str) -> str:\n        """A regex matching string in either case, letter by letter ("ab" -> "[aA][bB]")."""\n')


def _private_rename(repo: Path) -> None:
    sub(repo, LIB, "_irregular(", "_add_irregular(", 0)


NEW_TEST = '''import inflection


def test_ordinalize_and_ordinal_agree():
    for number in range(-30, 130):
        assert inflection.ordinalize(number) == str(number) + inflection.ordinal(number)
'''


def _folded_case(repo: Path) -> None:
    """transliterate() now folds case. Its only caller, parameterize(), lowercases afterwards,
    and no test calls transliterate() itself: the 455 tests stay green."""
    sub(repo, LIB, "    return normalized.encode('ascii', 'ignore').decode('ascii')\n", "    return normalized.encode('ascii', 'ignore').decode('ascii').lower()\n")


def _spaces_to_underscores(repo: Path) -> None:
    """underscore() now turns spaces into underscores too. The tests call it directly only on
    CamelCase words; titleize() calls it on phrases with spaces, and turns the underscores
    back into spaces (humanize): the 455 tests stay green."""
    sub(repo, LIB, '    word = word.replace("-", "_")\n', '    word = word.replace("-", "_").replace(" ", "_")\n')


def _e(name: str, what: str, edit: Edit) -> Entry:
    return Entry(name, INFLECTION, "ACCEPT", "honest", what, edit=edit)


def _b(name: str, what: str, edit: Edit, reason: str) -> Entry:
    return Entry(name, INFLECTION, "REJECT", "behaviour", what, edit=edit, gate="Behaviour", reason=reason)


ENTRIES = [
    _e("inf-extract-helper", "extract _last_digit_suffix() from ordinal()", _extract_helper),
    _e("inf-extract-nested", "_irregular()'s nested caseinsensitive() moved to module level", _extract_nested),
    _e("inf-rename-local", "singularize(): inflection -> uncountable", _rename_local),
    _e("inf-rename-local-2", "parameterize(): re_sep -> escaped", _rename_local_2),
    _e("inf-reorder-functions", "dasherize() and humanize() swap places", _reorder_functions),
    _e("inf-reorder-imports", "imports reordered", _reorder_imports),
    _e("inf-comments", "comments in pluralize(), singularize(), transliterate()", _comments),
    _e("inf-type-hints-tables", "PLURALS, SINGULARS, UNCOUNTABLES annotated", _type_hints_tables),
    _e("inf-type-hint-local", "transliterate(): normalized: str", _type_hint_local),
    _e("inf-docstring", "a docstring on _irregular()'s caseinsensitive()", _docstring),
    _e("inf-private-rename", "_irregular -> _add_irregular, with its eight callers", _private_rename),
    _e("inf-new-passing-test", "test_ordinal_agrees.py", lambda r: write(r, "test_ordinal_agrees.py", NEW_TEST)),
    _b("inf-transliterate-folds-case", "transliterate() lowercases", _folded_case, "transliterate("),
    _b("inf-underscore-spaces", "underscore() turns spaces into underscores", _spaces_to_underscores, "underscore("),
]
