import pathlib
import sys

# conformance.py is both a script and the module the test imports.
sys.path.insert(0, str(pathlib.Path(__file__).parent))
