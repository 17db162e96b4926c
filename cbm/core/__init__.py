"""The ground floor, torch-free: validation, safe paths, target resolution, names and paths, atomic
files and tables, concurrency and signals, progress, run locks, lifelines, the fork server and the
command-line front. Every other part of ``cbm`` and ``synthetic`` may import it; it imports none of
them (``lint-imports`` checks both)."""
