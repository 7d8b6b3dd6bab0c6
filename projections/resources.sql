-- name: schema
-- Every published resources version (immutable); resources_id is the pinned "<bundle>:<version>" id.
CREATE TABLE IF NOT EXISTS resources (
    seq BIGINT NOT NULL,
    resources_id VARCHAR PRIMARY KEY,
    name VARCHAR NOT NULL,
    version INTEGER NOT NULL,
    resources JSON NOT NULL,
    created_at DOUBLE NOT NULL
);

-- name: ResourcesPublished
-- Append each new version.
INSERT OR REPLACE INTO resources BY NAME SELECT * FROM batch;
