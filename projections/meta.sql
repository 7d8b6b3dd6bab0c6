-- name: schema
-- Projector bookkeeping: stream positions, undecodable events, code/schema version, detected gaps and divergences.
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
CREATE TABLE IF NOT EXISTS divergences (
    stream VARCHAR NOT NULL,
    applied_to BIGINT NOT NULL,
    good_to BIGINT NOT NULL,
    log_end BIGINT NOT NULL,
    reason VARCHAR NOT NULL,
    action VARCHAR NOT NULL,
    detected_at DOUBLE NOT NULL
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
-- Move a stream's position, in the same transaction as the rows it covers (an UPDATE costs DuckDB a third of an
-- upsert; it changes no row before the stream's first batch, and then first_checkpoint adds the row).
UPDATE checkpoints SET seq = $seq, updated_at = $updated_at WHERE stream = $stream;

-- name: first_checkpoint
-- The position of a stream's first batch.
INSERT INTO checkpoints VALUES ($stream, $seq, $updated_at);

-- name: divergence
-- Record that the projection applied messages the log no longer holds, and what was done about it.
INSERT INTO divergences BY NAME SELECT * FROM batch;

-- name: rewind_spans
-- Take back every spans-stream row above a sequence (the attempts' activity and training rows are redone).
DELETE FROM spans WHERE seq > (SELECT seq FROM batch);
DELETE FROM model_calls WHERE seq > (SELECT seq FROM batch);
DELETE FROM rewards WHERE seq > (SELECT seq FROM batch);
DELETE FROM attempt_activity WHERE last_seq > (SELECT seq FROM batch);
DELETE FROM quarantine WHERE stream = 'spans' AND seq > (SELECT seq FROM batch);
DELETE FROM gaps WHERE stream = 'spans' AND next_seq > (SELECT seq FROM batch);
