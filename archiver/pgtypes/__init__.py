"""PostgreSQL type -> Parquet representation: the one home of per-type decisions.

`pgtypes.sql` decides the SQL side (how a column is selected, how it is restored);
`pgtypes.arrow` the Arrow side (conversions for Parquet, values found in Arrow). The
SQL side imports no pyarrow, so commands that only validate a table stay light.

Archive side: the SQL expression each column is selected as (so the ADBC driver hands
back an exact Arrow value) and, for types whose standard Parquet type cannot hold every
value (infinite dates, 24:00:00, NaN in numeric(p,s), multi-dimensional arrays), a
companion text column `<name>__pg_text` holding PostgreSQL's own text form of exactly
those values (NULL in every other row; the standard column is NULL in those rows; an
unconstrained numeric's companion also holds values whose own scale its decimal would
lose, the decimal kept: see sql.OPEN_NUMERIC).
Restore side: the SQL expression that turns a staged column back into the exact type.

Why text for some types: the ADBC driver returns inet, cidr, macaddr, bit, varbit,
timetz, ranges, xml and geometric types as opaque PostgreSQL binary, money as an
unscaled int64, flattens multi-dimensional arrays, overflows +-infinity timestamps into
wrong finite values, and caches enum types per connection (adbc-driver-postgresql 1.13).
"""
