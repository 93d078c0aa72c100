"""The application's database: what archiver reads of its tables (columns, keys, foreign
keys, partitions, triggers), the statements that take a chunk's rows, and the manners a
move keeps there (locks, replica lag, WAL). Everything that runs SQL against the source
lives here; nothing here knows the queue."""
