-- name: relations
-- The tables and views of the database (docs/reference/tables.md).
SELECT table_name FROM information_schema.tables WHERE table_schema = 'main';

-- name: kind
-- Whether a relation is a table ('BASE TABLE') or a view ('VIEW').
SELECT table_type FROM information_schema.tables WHERE table_name = $name;

-- name: columns
-- A relation's columns in order, with their types and whether they may be NULL.
SELECT column_name, data_type, is_nullable
FROM information_schema.columns
WHERE table_name = $name
ORDER BY ordinal_position;

-- name: keys
-- The columns of a table's primary key.
SELECT constraint_column_names
FROM duckdb_constraints()
WHERE table_name = $name AND constraint_type = 'PRIMARY KEY';

-- name: tables
-- The projection's tables (not its views), by name.
SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main' ORDER BY table_name;
