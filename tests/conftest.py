"""Having this file here puts tests/ on sys.path, so test modules can import ``helpers``."""
