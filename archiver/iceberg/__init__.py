"""An Iceberg (v2) table beside each Delta table, from the same files (ARCHIVER_ICEBERG).

The Delta log is derived from the catalog (archiver.delta.publish); the Iceberg table
mirrors the Delta log: after each publication, in the same publisher run and under the
same lock, its current snapshot is made to hold exactly the files the Delta log holds
(`catalog`: the SQL catalog in the JDBC catalog's layout and the storage's file URIs;
`publish`: the one commit that makes it so, its housekeeping, and the record of it).
"""
