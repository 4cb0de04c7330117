import sys
from pathlib import Path

# tests import their helpers (brute force, random instances) as plain modules
sys.path.insert(0, str(Path(__file__).resolve().parent))
