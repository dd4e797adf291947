"""The conformance classification (conformance.py) against the committed
results.json: an entry that passed (natively or through the fallback) must
not regress, and a native-pass entry must stay native. Improvements are
allowed; `python tests/conformance/conformance.py --write` records them."""
import importlib.util
import json
import pathlib

import pytest

# conformance.py is both a script and this test's module (loaded by path:
# a plain import would need sys.path changes that shadow tests/conftest.py).
_spec = importlib.util.spec_from_file_location("tpu_conformance", pathlib.Path(__file__).with_name("conformance.py"))
conformance = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(conformance)

RANK = {"native-pass": 3, "fallback-pass": 2, "unsupported": 1, "mismatch": 0, "error": 0}


@pytest.fixture(scope="module")
def current():
    return conformance.run()


def committed():
    return json.loads(conformance.RESULTS.read_text())["entries"]


@pytest.mark.parametrize("dtype", list(conformance.DTYPES))
def test_no_entry_regresses(current, dtype):
    before, now = committed()[dtype], current[dtype]
    worse = {name: f"{status} -> {now.get(name, 'missing')}" for name, status in before.items()
             if status in ("native-pass", "fallback-pass") and RANK[now.get(name, "error")] < RANK[status]}
    assert not worse, f"{len(worse)} {dtype} entries regressed: {worse}"


def test_native_entries_have_no_mismatch_or_error(current):
    """An entry that runs natively must be right: every mismatch or error
    left is listed in results.json (and in the issue notes)."""
    known = committed()
    new_failures = {(d, n) for d, per in current.items() for n, s in per.items()
                    if s in ("mismatch", "error") and known[d].get(n) not in ("mismatch", "error")}
    assert not new_failures, sorted(new_failures)
