-- Each committed file's key range as a numrange under a GiST index, so a statement
-- through archiver serve that bounds a table's integer key finds the files holding those
-- keys by the index (a key lookup's work flat in the number of files), not by testing
-- every file of the table. A file's catalogued ends (text) that are not both integers in
-- order (a text key's, sorted as text; an empty partition's none) span everything, so
-- no file a statement may read is ever left out by them. numeric, not bigint: a file
-- archived while the key was numeric may hold keys beyond bigint's, exactly compared.
CREATE FUNCTION archiver_key_span(low text, high text) RETURNS numrange
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    -- one expression (no FROM), so that the planner inlines it, in queries and in the
    -- index alike: called as a function, it costs more than the test it replaces
    SELECT CASE WHEN low ~ '^[+-]?[0-9]{1,30}$' AND high ~ '^[+-]?[0-9]{1,30}$' THEN
        CASE WHEN low::numeric <= high::numeric THEN numrange(low::numeric, high::numeric, '[]')
        ELSE numrange(NULL, NULL) END
    ELSE numrange(NULL, NULL) END
$$;

CREATE INDEX archive_files_key_span ON archive_files
    USING gist (archiver_key_span(min_key[1], max_key[1])) WHERE state = 'committed';
-- a table's files by their first key column: those of another key than the one a
-- statement bounds (the key changed since they were archived) are read whole
CREATE INDEX archive_files_table_key ON archive_files (source_table, (key_columns[1]))
    WHERE state = 'committed';
-- a table's newest file, whose columns serve's view of it takes
CREATE INDEX archive_files_table_newest_id ON archive_files (source_table, id DESC)
    WHERE state = 'committed';
