"""Tasks from a file (docs/task-files.md): `tasks.source` names a JSONL or Parquet file of rows (id, prompt,
answer, family, level, split or the split rule, a checker), pinned by `tasks.source_sha256`.

`pin.py` resolves the file and checks its digest when the profile loads; `source.py` answers where a profile's
tasks come from (the builders or the file) for every reader: the catalog, the train task ids and each task's
answer check; `rows.py` reads and checks rows one by one; `catalog.py` places them in the profile's cells;
`checkers.py` judges an answer; `export.py` writes a profile's tasks as a file; `names.py` lets a split name the
file's own families and levels; `probe.py` takes the deployment probe's prompts from the file's probe rows.
Nothing here is the embedded model's build code (core/tasks/ is): a change here never moves its cache key.
"""
