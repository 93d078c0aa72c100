"""Delta Lake: each archived table is also a Delta table at the folder that holds its
files (`<prefix>/<schema>.<table>/_delta_log/`), derived from the catalog, which stays
the truth. `facts` reads what a file brings to the table (its columns as Delta types,
its statistics) when the file is written; `publish` adds the catalogued files to the
Delta log exactly once; `location` says where the table is and how to reach it."""
