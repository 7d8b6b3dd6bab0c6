-- name: schema
-- Projector bookkeeping: stream positions, undecodable events, code/schema version, detected gaps.
CREATE TABLE IF NOT EXISTS checkpoints (
    stream VARCHAR PRIMARY KEY,
    seq BIGINT NOT NULL,
    updated_at DOUBLE NOT NULL
);
CREATE TABLE IF NOT EXISTS quarantine (
    stream VARCHAR NOT NULL,
    seq BIGINT NOT NULL,
    subject VARCHAR NOT NULL,
    reason VARCHAR NOT NULL,
    data BLOB
);
CREATE TABLE IF NOT EXISTS gaps (
    stream VARCHAR NOT NULL,
    after_seq BIGINT NOT NULL,
    next_seq BIGINT NOT NULL
);
CREATE TABLE IF NOT EXISTS projection_meta (
    key VARCHAR PRIMARY KEY,
    value VARCHAR NOT NULL
);

-- name: quarantine
-- Park events that could not be decoded or applied, with their position and the reason.
INSERT INTO quarantine BY NAME SELECT * FROM batch;

-- name: gaps
-- Record a hole in a stream's sequence (messages missing from the log).
INSERT INTO gaps BY NAME SELECT * FROM batch;

-- name: checkpoint
-- Move a stream's position, in the same transaction as the rows it covers.
INSERT OR REPLACE INTO checkpoints VALUES ($stream, $seq, $updated_at);
