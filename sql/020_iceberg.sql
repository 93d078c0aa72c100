-- Iceberg (archiver.iceberg): each Delta table may also be an Iceberg table, from the same
-- files. Its catalog is the Iceberg JDBC catalog's two tables, in the layout Spark's,
-- Trino's and Flink's JdbcCatalog and pyiceberg's SqlCatalog read (v1: with iceberg_type),
-- made here so that no engine or worker races to make them.
CREATE TABLE IF NOT EXISTS iceberg_tables (
    catalog_name               varchar(255)  NOT NULL,
    table_namespace            varchar(255)  NOT NULL,
    table_name                 varchar(255)  NOT NULL,
    metadata_location          varchar(1000),
    previous_metadata_location varchar(1000),
    iceberg_type               varchar(5),
    PRIMARY KEY (catalog_name, table_namespace, table_name)
);
CREATE TABLE IF NOT EXISTS iceberg_namespace_properties (
    catalog_name   varchar(255)  NOT NULL,
    namespace      varchar(255)  NOT NULL,
    property_key   varchar(255)  NOT NULL,
    property_value varchar(1000) NOT NULL,
    PRIMARY KEY (catalog_name, namespace, property_key)
);

-- What a table's Iceberg table mirrors: the Delta publication whose files its current
-- snapshot holds (NULL: it has none), the snapshot, and the newest erasure whose
-- snapshots are expired. A retired file's blob waits for both tables (reapable).
ALTER TABLE delta_tables
    ADD COLUMN iceberg_published bigint,
    ADD COLUMN iceberg_snapshot bigint,
    ADD COLUMN iceberg_published_at timestamptz,
    ADD COLUMN iceberg_forgotten_through bigint NOT NULL DEFAULT 0;
